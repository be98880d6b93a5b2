"""Production properties of the rendered manifests, asserted so they cannot silently regress.

Each test reads what `kubectl kustomize` produces for every overlay: probes, resources, the
restricted security context, spreading, graceful termination, autoscaling, disruption budget,
network isolation, monitoring and settings. The prod overlay gets its own stricter checks.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from service.settings import Settings
from tests.deploy.support import OVERLAYS, OVERLAYS_DIR, one

CLUSTER_SCOPED = {"Namespace", "ValidatingWebhookConfiguration"}
APP_UID = 10001  # the Dockerfile's USER (tests/deploy/test_dockerfile.py pins it there)
Resources = dict[str, list[dict[str, Any]]]


def _pod(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return one(resources, "Deployment")["spec"]["template"]["spec"]


def _container(resources: list[dict[str, Any]]) -> dict[str, Any]:
    containers = _pod(resources)["containers"]
    assert len(containers) == 1, "one container per pod"
    return containers[0]


def _settings(resources: list[dict[str, Any]]) -> dict[str, str]:
    """The data of the ConfigMap the container reads its environment from."""
    refs = [e["configMapRef"]["name"] for e in _container(resources).get("envFrom", [])]
    assert len(refs) == 1, refs
    config_maps = {r["metadata"]["name"]: r for r in resources if r["kind"] == "ConfigMap"}
    assert refs[0] in config_maps, f"envFrom names a missing ConfigMap {refs[0]}"
    return config_maps[refs[0]]["data"]


def _selector(resources: list[dict[str, Any]]) -> dict[str, str]:
    deployment = one(resources, "Deployment")
    selector = deployment["spec"]["selector"]
    assert set(selector) == {"matchLabels"}, "selectors are plain matchLabels, written by hand"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector["matchLabels"].items() <= labels.items()
    return selector["matchLabels"]


def _cpu_millicores(quantity: str | int) -> int:
    text = str(quantity)
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def _memory_bytes(quantity: str | int) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9}
    match = re.fullmatch(r"(\d+)([A-Za-z]*)", str(quantity))
    assert match, quantity
    return int(match[1]) * units.get(match[2], 1) if match[2] else int(match[1])


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest, rendered: Resources) -> list[dict[str, Any]]:
    return rendered[request.param]


def test_everything_lands_in_one_namespace_that_enforces_restricted(
    overlay: list[dict[str, Any]],
) -> None:
    namespace = one(overlay, "Namespace")
    name = namespace["metadata"]["name"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for r in overlay:
        if r["kind"] not in CLUSTER_SCOPED:
            assert r["metadata"].get("namespace") == name, f"{r['kind']} outside {name}"


def test_selectors_agree(overlay: list[dict[str, Any]]) -> None:
    selector = _selector(overlay)
    deployment = one(overlay, "Deployment")
    service = one(overlay, "Service")
    assert service["spec"]["selector"] == selector
    assert one(overlay, "PodDisruptionBudget")["spec"]["selector"] == {"matchLabels": selector}
    assert one(overlay, "NetworkPolicy")["spec"]["podSelector"] == {"matchLabels": selector}
    monitor = one(overlay, "ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    target = one(overlay, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    for constraint in _pod(overlay)["topologySpreadConstraints"]:
        assert constraint["labelSelector"] == {"matchLabels": selector}


def test_probes_hit_readyz_and_healthz_on_the_serving_port(overlay: list[dict[str, Any]]) -> None:
    container = _container(overlay)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    expected = {"startupProbe": "/readyz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in expected.items():
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert ports.get(get["port"], get["port"]) == 8000, probe
    # Liveness must not kill a pod that is still starting: the startup probe gates it and
    # allows at least 30 s.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30


def test_probes_match_what_the_service_promises(overlay: list[dict[str, Any]]) -> None:
    """/healthz answers under 100 ms at p99 with the estimate pool saturated
    (tests/server/test_event_loop_free.py); the probes allow ten times that per try, and
    liveness gives up only after more than twice the longest an estimate may run."""
    container = _container(overlay)
    settings_env = _settings(overlay)
    llmmem = {k.removeprefix("LLMMEM_").lower(): v for k, v in settings_env.items()}
    settings = Settings(**{k: v for k, v in llmmem.items() if k in Settings.model_fields})
    for name in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[name]["timeoutSeconds"] * 1000 >= 10 * 100, name
    liveness = container["livenessProbe"]
    patience_s = liveness["periodSeconds"] * liveness["failureThreshold"]
    assert patience_s >= 2 * settings.estimate_deadline_s


def test_settings_configmap_drives_the_server(overlay: list[dict[str, Any]]) -> None:
    settings_env = _settings(overlay)
    fields = {f"LLMMEM_{name.upper()}" for name in Settings.model_fields}
    llmmem = {k: v for k, v in settings_env.items() if k.startswith("LLMMEM_")}
    assert set(llmmem) <= fields, f"unknown settings: {set(llmmem) - fields}"
    settings = Settings(**{k.removeprefix("LLMMEM_").lower(): v for k, v in llmmem.items()})
    assert settings.host == "0.0.0.0"
    container = _container(overlay)
    assert [p["containerPort"] for p in container["ports"]] == [settings.port]
    assert "command" not in container and "args" not in container, (
        "the image's `python -m service` reads the settings; flags would override them"
    )
    # Trust only what the deployment names: never a wildcard, never uvicorn's own variable.
    assert "FORWARDED_ALLOW_IPS" not in settings_env
    assert "*" not in settings.trusted_proxies


def test_resources_are_requested_and_limited(overlay: list[dict[str, Any]]) -> None:
    resources = _container(overlay)["resources"]
    for kind in ("cpu", "memory"):
        request, limit = resources["requests"][kind], resources["limits"][kind]
        parse = _cpu_millicores if kind == "cpu" else _memory_bytes
        assert 0 < parse(request) <= parse(limit), f"{kind}: {request} > {limit}"
    # One uvicorn worker runs Python on one core: a CPU limit above that buys nothing.
    assert _cpu_millicores(resources["limits"]["cpu"]) <= 1000


def test_restricted_security_context(overlay: list[dict[str, Any]]) -> None:
    pod = _pod(overlay)
    container = _container(overlay)
    pod_sc, sc = pod["securityContext"], container["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and sc.get("runAsNonRoot", True) is True
    assert pod_sc["runAsUser"] == APP_UID and sc.get("runAsUser", APP_UID) == APP_UID
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile")
    assert seccomp == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    account = one(overlay, "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert account["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")


def test_writable_paths_are_emptydirs(overlay: list[dict[str, Any]]) -> None:
    pod = _pod(overlay)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    container_mounts = _container(overlay).get("volumeMounts", [])
    mounts = {m["mountPath"]: m["name"] for m in container_mounts}
    assert "/tmp" in mounts, "Python's tempfile needs a writable /tmp"
    for mount in container_mounts:
        if mount.get("readOnly"):
            continue  # not a writable path: a certificate, or the model store's cache
        path, name = mount["mountPath"], mount["name"]
        assert "emptyDir" in volumes[name], f"{path} is not an emptyDir"
        assert volumes[name]["emptyDir"].get("sizeLimit"), f"{path} emptyDir has no sizeLimit"


def test_spread_across_nodes_and_zones(overlay: list[dict[str, Any]]) -> None:
    constraints = {c["topologyKey"]: c for c in _pod(overlay)["topologySpreadConstraints"]}
    assert {"kubernetes.io/hostname", "topology.kubernetes.io/zone"} <= set(constraints)
    for constraint in constraints.values():
        assert constraint["maxSkew"] == 1
        assert constraint.get("matchLabelKeys") == ["pod-template-hash"]
    node = constraints["kubernetes.io/hostname"]
    assert node["whenUnsatisfiable"] == "DoNotSchedule"
    assert node.get("nodeTaintsPolicy") == "Honor", "tainted nodes must not count as domains"


def test_termination_lets_in_flight_requests_finish(overlay: list[dict[str, Any]]) -> None:
    pod = _pod(overlay)
    pre_stop = _container(overlay)["lifecycle"]["preStop"]
    pause = pre_stop["sleep"]["seconds"]
    assert pause >= 3, "endpoints need a few seconds to drop the pod before SIGTERM"
    drain = int(_settings(overlay)["LLMMEM_GRACEFUL_SHUTDOWN_S"])
    # The kubelet's clock covers preStop and the drain; SIGKILL must not cut the drain short.
    assert pod["terminationGracePeriodSeconds"] >= pause + drain + 2
    strategy = one(overlay, "Deployment")["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0


def test_service_exposes_only_the_http_port(overlay: list[dict[str, Any]]) -> None:
    (port,) = one(overlay, "Service")["spec"]["ports"]
    tls = "LLMMEM_TLS_CERT_FILE" in _settings(overlay)
    assert port["name"] == ("https" if tls else "http") and port["targetPort"] in ("http", 8000)


def test_probes_speak_tls_where_the_server_does(overlay: list[dict[str, Any]]) -> None:
    tls = "LLMMEM_TLS_CERT_FILE" in _settings(overlay)
    container = _container(overlay)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"].get("scheme", "HTTP") == ("HTTPS" if tls else "HTTP")


def test_hpa_scales_on_cpu(overlay: list[dict[str, Any]]) -> None:
    hpa = one(overlay, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    spec = hpa["spec"]
    assert 1 <= spec["minReplicas"] <= spec["maxReplicas"]
    (metric,) = spec["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert 30 <= metric["resource"]["target"]["averageUtilization"] <= 90
    assert "cpu" in _container(overlay)["resources"]["requests"], "Utilization needs a request"


def test_pdb_allows_drains_but_not_outages(overlay: list[dict[str, Any]]) -> None:
    pdb = one(overlay, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"].get("maxUnavailable") == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow"


def test_network_policy_admits_only_labelled_namespaces_on_the_port_and_dns_out(
    overlay: list[dict[str, Any]],
) -> None:
    spec = one(overlay, "NetworkPolicy")["spec"]
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
    container_ports = {p["name"]: p["containerPort"] for p in _container(overlay)["ports"]}
    assert spec["ingress"], "an empty ingress list would deny everything, /metrics included"
    for rule in spec["ingress"]:
        ports = [container_ports.get(p["port"], p["port"]) for p in rule["ports"]]
        assert ports == [8000] and rule["ports"][0]["protocol"] == "TCP"
        assert rule["from"], "a rule without `from` admits every source"
        for peer in rule["from"]:
            assert set(peer) <= {"namespaceSelector", "podSelector"}, "no ipBlock peers"
            assert peer["namespaceSelector"].get("matchLabels"), "select namespaces by label"
    (egress,) = spec["egress"]
    assert sorted((p["protocol"], p["port"]) for p in egress["ports"]) == [("TCP", 53), ("UDP", 53)]
    for peer in egress["to"]:
        assert "ipBlock" not in peer
        assert peer["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "kube-system"
        }


def test_service_monitor_scrapes_metrics(overlay: list[dict[str, Any]]) -> None:
    monitor = one(overlay, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service_ports = {p["name"] for p in one(overlay, "Service")["spec"]["ports"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in service_ports and endpoint["path"] == "/metrics"


def test_image_is_tagged(overlay: list[dict[str, Any]]) -> None:
    image = _container(overlay)["image"]
    name, _, tag = image.rpartition(":")
    assert "/" in name and tag and tag != "latest", image


# --- production ---------------------------------------------------------------------------


def test_prod_overlay_sets_replicas_image_and_resources(rendered: Resources) -> None:
    text = "\n".join(p.read_text() for p in (OVERLAYS_DIR / "prod").glob("*.yaml"))
    for needle in ("newTag:", "replicas:", "resources:"):
        assert needle in text, f"the prod overlay must set {needle.rstrip(':')} itself"
    prod = rendered["prod"]
    deployment = one(prod, "Deployment")
    assert deployment["spec"]["replicas"] >= 3
    assert one(prod, "HorizontalPodAutoscaler")["spec"]["minReplicas"] >= 3
    tag = _container(prod)["image"].rpartition(":")[2]
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag) or tag.startswith("sha256"), (
        f"prod runs a release tag, not {tag!r}"
    )
    resources = _container(prod)["resources"]
    assert resources["requests"] == resources["limits"], "prod pods get Guaranteed QoS"


def test_prod_resource_sizes_cite_the_benchmark() -> None:
    patch = (OVERLAYS_DIR / "prod" / "deployment-patch.yaml").read_text()
    comment = "\n".join(line for line in patch.splitlines() if line.strip().startswith("#"))
    assert "bench/results.md" in comment and re.search(r"\d+\s*MiB", comment), (
        "state the measured figures the resources are sized from"
    )
