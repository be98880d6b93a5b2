"""The admission-webhook overlay: what the API server needs to call POST /v1/admission.

Checked on the manifests `kubectl kustomize` renders, against the Kubernetes API's own rules
for admissionregistration.k8s.io/v1 (admissionReviewVersions, sideEffects, failurePolicy,
timeoutSeconds of 1 to 30, service references) and cert-manager's CA injection
(cert-manager.io/inject-ca-from: <namespace>/<Certificate>).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from service.scheduling.admission import MODE_KEY
from tests.deploy.support import REPO, one

Resources = list[dict[str, Any]]


@pytest.fixture(scope="module")
def webhook_overlay(rendered: dict[str, Resources]) -> Resources:
    return rendered["admission-webhook"]


def _webhooks(resources: Resources) -> list[dict[str, Any]]:
    return one(resources, "ValidatingWebhookConfiguration")["webhooks"]  # type: ignore[no-any-return]


def test_every_webhook_fails_open_and_speaks_v1(webhook_overlay: Resources) -> None:
    hooks = _webhooks(webhook_overlay)
    assert hooks
    for hook in hooks:
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["failurePolicy"] == "Ignore"
        assert 1 <= hook["timeoutSeconds"] <= 10
        assert hook["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        (condition,) = hook["matchConditions"]
        for resource in ("'nvidia.com/gpu'", "'nvidia.com/gpu.shared'", "'nvidia.com/mig-'"):
            assert resource in condition["expression"]


def test_webhooks_call_routes_the_service_has(webhook_overlay: Resources) -> None:
    service = one(webhook_overlay, "Service")
    paths = set(json.loads((REPO / "openapi" / "openapi.json").read_text())["paths"])
    for hook in _webhooks(webhook_overlay):
        ref = hook["clientConfig"]["service"]
        assert ref["name"] == service["metadata"]["name"]
        assert ref["namespace"] == service["metadata"]["namespace"]
        assert ref["port"] in {p["port"] for p in service["spec"]["ports"]}
        mode = ref["path"].removeprefix("/v1/admission").strip("/")
        assert ref["path"] == "/v1/admission" or "/v1/admission/{mode}" in paths
        assert mode in ("", "deny", "warn", "off")
        # The API server accepts only DNS-1123 path segments (no query string).
        assert all(
            re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", s) for s in ref["path"][1:].split("/")
        )
    assert "/v1/admission" in paths


def test_namespace_selectors_split_the_modes_without_overlap(webhook_overlay: Resources) -> None:
    selectors = {
        h["clientConfig"]["service"]["path"]: h["namespaceSelector"]
        for h in _webhooks(webhook_overlay)
    }
    assert selectors["/v1/admission/deny"] == {"matchLabels": {MODE_KEY: "deny"}}
    (expression,) = selectors["/v1/admission"]["matchExpressions"]
    assert expression == {"key": MODE_KEY, "operator": "NotIn", "values": ["deny", "off"]}


def test_the_ca_is_injected_from_the_certificate_the_pod_mounts(webhook_overlay: Resources) -> None:
    config = one(webhook_overlay, "ValidatingWebhookConfiguration")
    certificate = one(webhook_overlay, "Certificate")
    namespace, name = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    assert (namespace, name) == (
        certificate["metadata"]["namespace"],
        certificate["metadata"]["name"],
    )
    service = one(webhook_overlay, "Service")
    svc = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert svc in certificate["spec"]["dnsNames"]
    issuer = one(webhook_overlay, "Issuer")
    assert certificate["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
    }
    pod = one(webhook_overlay, "Deployment")["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] in secrets]
    assert secrets[mount["name"]] == certificate["spec"]["secretName"] and mount["readOnly"]
    settings = next(r for r in webhook_overlay if r["kind"] == "ConfigMap")["data"]
    for key, file in (("LLMMEM_TLS_CERT_FILE", "tls.crt"), ("LLMMEM_TLS_KEY_FILE", "tls.key")):
        assert settings[key] == f"{mount['mountPath']}/{file}"
