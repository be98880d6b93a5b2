"""Every error's advice can be followed where it is given (issue 25): what admission warns or
denies with and what the scheduler extender fails a node or refuses a pod with is read by a
Pod's author, who can change the Pod (a flag, a resource, a node selector, an environment
variable), not a field of the service's own JSON requests. Pods are built with the official
client's models; the fields a Pod cannot set are read from the request schemas."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from kubernetes import client as k8s

from service.scheduling.admission import MODE_KEY
from service.schemas.estimates import InferenceRequestBody
from service.schemas.scheduling import PreflightRequest
from tests.api.k8s_objects import node, to_json

# Every field of the JSON requests: none is a Pod's; an advice naming one cannot be followed.
_REQUEST_FIELDS = set(PreflightRequest.model_fields) | set(InferenceRequestBody.model_fields)


def assert_followable_in_a_pod(text: str) -> None:
    """No field of the service's requests as advice: neither `backticked` nor, for the names
    no Pod word has (those with an underscore), bare; nor "in the request"."""
    assert "in the request" not in text, text
    for name in _REQUEST_FIELDS:
        assert f"`{name}`" not in text, (name, text)
        if "_" in name:
            assert name not in text, (name, text)


LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"


def _pod(
    args: list[str],
    *,
    product: str | None = "NVIDIA-L4",
    gpus: str = "1",
    memory: str | None = None,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus, **({"memory": memory} if memory else {})}
    obj = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="llm", annotations={MODE_KEY: "deny"}),
        spec=k8s.V1PodSpec(
            containers=[
                k8s.V1Container(
                    name="vllm",
                    image="vllm/vllm-openai:latest",
                    command=["vllm", "serve"],
                    args=args,
                    resources=k8s.V1ResourceRequirements(limits=limits),
                )
            ],
            node_selector={"nvidia.com/gpu.product": product} if product else None,
        ),
    )
    return to_json(obj)  # type: ignore[no-any-return]


def _admission(client: TestClient, obj: dict[str, Any]) -> list[str]:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "advice",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "object": obj,
        },
    }
    response = client.post("/v1/admission", json=review).json()["response"]
    return [*response.get("warnings", []), response.get("status", {}).get("message", "")]


def _extender(client: TestClient, obj: dict[str, Any]) -> list[str]:
    # kube-scheduler's Pod comes from its informer: no kind or apiVersion.
    nodes = to_json(k8s.V1NodeList(items=[node("l4", {"nvidia.com/gpu.product": "NVIDIA-L4"})]))
    result = client.post("/v1/extender/filter", json={"Pod": obj, "Nodes": nodes}).json()
    return [result["Error"], *result["FailedAndUnresolvableNodes"].values()]


# (Pod, what its advice must name that a Pod's author changes)
CASES = {
    "model given as a path": (_pod(["/mnt/models"]), "Hugging Face id"),
    "model in no catalog": (_pod(["acme/foo-7b"]), "GET /v1/models"),
    "GPU product in no catalog": (
        _pod([LLAMA_8B], product="ACME-X1000"),
        "k8s_product_label",
    ),
    "fewer GPUs than the layout": (
        _pod([LLAMA_8B, "--tensor-parallel-size", "2"]),
        'resources.limits["nvidia.com/gpu"] to 2',
    ),
    "too big for the GPU": (_pod([LLAMA_70B]), "resources.limits nvidia.com/gpu"),
    "not pinned": (_pod([LLAMA_70B], product=None), "nodeSelector nvidia.com/gpu.product"),
    "a TP the heads refuse": (
        _pod(["Qwen/Qwen2.5-0.5B-Instruct", "--tensor-parallel-size", "4"], gpus="4"),
        "valid sizes",
    ),
    "host memory limit": (
        _pod([LLAMA_8B, "--cpu-offload-gb", "40"], product="NVIDIA-H100-80GB-HBM3", memory="8Gi"),
        "resources.limits.memory",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_admission_advice_is_a_pod_change(client: TestClient, case: str) -> None:
    obj, names = CASES[case]
    texts = _admission(client, {**obj, "apiVersion": "v1", "kind": "Pod"})
    for text in texts:
        assert_followable_in_a_pod(text)
    assert any(names in text for text in texts), texts


@pytest.mark.parametrize("case", list(CASES))
def test_extender_errors_and_failures_are_pod_changes(client: TestClient, case: str) -> None:
    for text in _extender(client, CASES[case][0]):
        assert_followable_in_a_pod(text)


def test_the_extender_does_not_call_a_refused_flag_a_small_gpu(client: TestClient) -> None:
    obj, _ = CASES["a TP the heads refuse"]
    (failure,) = _extender(client, obj)[1:]
    assert "GPU too small" not in failure and "valid sizes: 1, 2, 14" in failure


def test_the_fewer_gpus_fix_names_the_pods_own_field(client: TestClient) -> None:
    obj, _ = CASES["fewer GPUs than the layout"]
    error = _extender(client, obj)[0]
    assert 'set spec.containers[0].resources.limits["nvidia.com/gpu"] to 2' in error
