"""POST /v1/admission: the AdmissionReview v1 exchange as the API server makes it.

Shapes follow k8s.io/api admission/v1/types.go (AdmissionReview, AdmissionRequest,
AdmissionResponse); pods are built with the official client's models. Whether a pinned pod
fits is decided independently by /v1/estimate/inference on the explicit request.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from kubernetes import client as k8s

from service.scheduling.admission import MODE_KEY
from tests.api.k8s_objects import container, pod, pod_spec, template, to_json

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
# Llama-3.1-8B at its full derived context (131072 tokens) on one L4: whether it fits is
# asked of /v1/estimate/inference below, not assumed.
TOO_BIG = ([LLAMA_8B], "NVIDIA-L4")


def review(obj: Any, operation: str = "CREATE", uid: str = "0d3f-uid") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": obj.get("kind", "Pod")},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ml",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


def admit(client: TestClient, body: Any, path: str = "/v1/admission") -> dict[str, Any]:
    raw = body if isinstance(body, bytes) else None
    response = client.post(path, content=raw) if raw is not None else client.post(path, json=body)
    assert response.status_code == 200, response.text[:600]
    answer = response.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    return answer["response"]  # type: ignore[no-any-return]


def gpu_pod(args: list[str], product: str | None, **metadata: Any) -> Any:
    return to_json(
        pod(container("vllm", args=args, gpus={"nvidia.com/gpu": "1"}), product=product, **metadata)
    )


def fits(client: TestClient, body: dict[str, Any]) -> bool:
    response = client.post("/v1/estimate/inference", json=body)
    assert response.status_code == 200, response.text[:400]
    return bool(response.json()["fit"]["fits"])


def test_the_premise_the_pinned_pod_does_not_fit(client: TestClient) -> None:
    assert not fits(client, {"model": LLAMA_8B, "engine": "vllm", "gpu": "l4"})
    assert fits(client, {"model": LLAMA_8B, "engine": "vllm", "gpu": "h100-sxm-80gb"})


def test_a_pod_without_gpus_is_allowed_untouched(client: TestClient) -> None:
    obj = to_json(pod(k8s.V1Container(name="web", image="nginx:1.27")))
    response = admit(client, review(obj, uid="abc"))
    assert response == {"uid": "abc", "allowed": True}


def test_deny_mode_denies_with_the_reason_and_the_flags_that_fit(client: TestClient) -> None:
    obj = gpu_pod(*TOO_BIG, annotations={MODE_KEY: "deny"})
    response = admit(client, review(obj))
    assert response["uid"] == "0d3f-uid" and response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert "kv_pool_below_one_sequence" in status["message"]
    assert "--max-model-len" in status["message"]
    assert response["auditAnnotations"] == {"verdict": "does_not_fit"}


def test_warn_is_the_default_and_allows_with_a_warning(client: TestClient) -> None:
    response = admit(client, review(gpu_pod(*TOO_BIG)))
    assert response["allowed"] is True and "status" not in response
    (warning,) = response["warnings"]
    assert "does not fit NVIDIA-L4" in warning and len(warning) <= 256


def test_a_label_sets_the_mode_too(client: TestClient) -> None:
    response = admit(client, review(gpu_pod(*TOO_BIG, labels={MODE_KEY: "deny"})))
    assert response["allowed"] is False


def test_off_mode_checks_nothing(client: TestClient) -> None:
    response = admit(client, review(gpu_pod(*TOO_BIG, annotations={MODE_KEY: "off"})))
    assert response == {"uid": "0d3f-uid", "allowed": True}


def test_an_unknown_mode_value_warns_and_falls_back(client: TestClient) -> None:
    response = admit(client, review(gpu_pod(*TOO_BIG, annotations={MODE_KEY: "strict"})))
    assert response["allowed"] is True
    assert any("is not deny, warn or off" in w for w in response["warnings"])


def test_the_route_sets_a_namespace_default_and_the_object_still_decides(
    client: TestClient,
) -> None:
    assert admit(client, review(gpu_pod(*TOO_BIG)), "/v1/admission/deny")["allowed"] is False
    relaxed = gpu_pod(*TOO_BIG, annotations={MODE_KEY: "warn"})
    assert admit(client, review(relaxed), "/v1/admission/deny")["allowed"] is True


def test_a_pod_that_fits_its_pinned_gpu_is_allowed_silently(client: TestClient) -> None:
    obj = gpu_pod([LLAMA_8B], "NVIDIA-H100-80GB-HBM3", annotations={MODE_KEY: "deny"})
    response = admit(client, review(obj))
    assert response["allowed"] is True and "warnings" not in response


def test_an_unpinned_pod_is_allowed_with_the_products_it_fits_on(client: TestClient) -> None:
    obj = gpu_pod([LLAMA_8B, "--max-model-len", "8192"], None, annotations={MODE_KEY: "deny"})
    response = admit(client, review(obj))
    assert response["allowed"] is True
    (warning,) = response["warnings"]
    # Said as the nodeSelector that pins them.
    assert "no GPU product pinned; fits on nodeSelector nvidia.com/gpu.product: " in warning
    named = warning.split("nvidia.com/gpu.product: ", 1)[1].split(" and ")[0].split(", ")
    for label in named:
        body = {
            "model": LLAMA_8B,
            "engine": "vllm",
            "engine_options": {"max_model_len": 8192},
            "gpu": label,
        }
        assert fits(client, body), label


def test_fewer_gpus_than_the_layout_is_denied(client: TestClient) -> None:
    obj = gpu_pod([LLAMA_8B, "-tp", "2"], "NVIDIA-H100-80GB-HBM3", annotations={MODE_KEY: "deny"})
    response = admit(client, review(obj))
    assert response["allowed"] is False and "needs 2" in response["status"]["message"]


def test_a_deployment_is_checked_like_its_pods(client: TestClient) -> None:
    deployment = k8s.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=k8s.V1ObjectMeta(name="llama", annotations={MODE_KEY: "deny"}),
        spec=k8s.V1DeploymentSpec(
            selector=k8s.V1LabelSelector(match_labels={"app": "llm"}),
            template=template(
                pod_spec(
                    container("vllm", args=[LLAMA_8B], gpus={"nvidia.com/gpu": "1"}),
                    product="NVIDIA-L4",
                )
            ),
        ),
    )
    assert admit(client, review(to_json(deployment)))["allowed"] is False


# -------------------------------------------------- never fail admission over what is unread


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "/mnt/models"],  # a path: which model is unknown
        ["acme/not-in-the-catalog-7b"],  # not in the catalog
        [LLAMA_8B, "--max-model-len", "lots"],  # a value vLLM would refuse
    ],
)
def test_what_the_estimator_cannot_read_is_allowed_with_a_warning(
    client: TestClient, args: list[str]
) -> None:
    obj = gpu_pod(args, "NVIDIA-L4", annotations={MODE_KEY: "deny"})
    response = admit(client, review(obj))
    assert response["allowed"] is True
    assert response["warnings"] and all("llm-memory" in w for w in response["warnings"])


def test_an_unknown_gpu_product_is_allowed_with_a_warning(client: TestClient) -> None:
    obj = gpu_pod([LLAMA_8B], "ACME-X1000", annotations={MODE_KEY: "deny"})
    response = admit(client, review(obj))
    assert response["allowed"] is True and "ACME-X1000" in response["warnings"][0]


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
    ],
)
def test_an_unreadable_review_is_allowed_with_a_warning(client: TestClient, body: Any) -> None:
    response = admit(client, body)
    assert response["allowed"] is True and response["warnings"]


def test_delete_and_connect_are_allowed_untouched(client: TestClient) -> None:
    body = review(gpu_pod(*TOO_BIG, annotations={MODE_KEY: "deny"}), operation="DELETE")
    body["request"]["object"] = None
    assert admit(client, body) == {"uid": "0d3f-uid", "allowed": True}


# ---------------------------------------------------------------------------- issue 25


LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"


def _gke_l4_pod(**metadata: Any) -> Any:
    """A 70B on one L4, pinned the way every GKE tutorial pins it."""
    spec = k8s.V1PodSpec(
        containers=[
            container(
                "vllm",
                args=[LLAMA_70B, "--max-model-len", "4096"],
                gpus={"nvidia.com/gpu": "1"},
            )
        ],
        node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
    )
    meta = k8s.V1ObjectMeta(name="llama", namespace="ml", **metadata)
    return to_json(k8s.V1Pod(api_version="v1", kind="Pod", metadata=meta, spec=spec))


def test_a_pod_pinned_by_gke_accelerator_is_judged_and_denied_in_deny_mode(
    client: TestClient,
) -> None:
    # The premise: 70.6e9 bf16 parameters (141 GB) do not fit one L4 (23034 MiB).
    assert not fits(client, {"model": LLAMA_70B, "engine": "vllm", "gpu": "l4"})
    response = admit(client, review(_gke_l4_pod(annotations={MODE_KEY: "deny"})))
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "NVIDIA-L4" in response["status"]["message"]
    warned = admit(client, review(_gke_l4_pod()))
    assert warned["allowed"] is True
    assert any("does not fit NVIDIA-L4" in w for w in warned["warnings"])


def test_an_object_without_typemeta_is_read_as_the_request_kind(client: TestClient) -> None:
    obj = gpu_pod(*TOO_BIG, annotations={MODE_KEY: "deny"})
    bare = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    assert admit(client, review(bare))["allowed"] is False


def _metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if (
            head.startswith(name + "{")
            and ",".join(sorted(head[len(name) + 1 : -1].split(","))) == wanted
        ):
            return float(value)
    return 0.0


def test_allows_warnings_and_denials_are_counted(client: TestClient) -> None:
    before = client.get("/metrics").text
    admit(client, review(gpu_pod(*TOO_BIG, annotations={MODE_KEY: "deny"})))
    admit(client, review(gpu_pod(*TOO_BIG)))
    admit(client, review(to_json(pod(k8s.V1Container(name="web", image="nginx:1.27")))))
    admit(client, b"{not json")
    after = client.get("/metrics").text

    def delta(name: str, **labels: str) -> float:
        return _metric(after, name, **labels) - _metric(before, name, **labels)

    reviews = "llmmem_admission_reviews_total"
    assert delta(reviews, mode="warn", decision="denied") == 1
    assert delta(reviews, mode="warn", decision="warned") == 1
    assert delta(reviews, mode="warn", decision="skipped") == 1
    assert delta(reviews, mode="warn", decision="unreadable") == 1
    assert delta("llmmem_admission_container_verdicts_total", verdict="does_not_fit") == 2


def test_a_model_read_from_its_name_is_never_denied(client: TestClient) -> None:
    # unsloth's re-upload of Llama-3.1-8B-Instruct on one L4 does not fit, as the catalog
    # model it mirrors does not (TOO_BIG); the alias rules read the name, so deny mode allows
    # it and says why.
    mirror = "unsloth/Llama-3.1-8B-Instruct"
    assert not fits(client, {"model": mirror, "engine": "vllm", "gpu": "l4"})
    obj = gpu_pod([mirror], "NVIDIA-L4", annotations={MODE_KEY: "deny"})
    response = admit(client, review(obj))
    assert response["allowed"] is True
    assert any(
        "not denied" in w and "alias rules" in w and len(w) <= 256 for w in response["warnings"]
    )
