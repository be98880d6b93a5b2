"""The validating webhook against the upstream ``admission.k8s.io/v1`` types, on the real server.

Requests are built as the API server builds them (kubernetes/apiserver
``pkg/admission/plugin/webhook/request/admissionreview.go`` ``CreateV1AdmissionReview``: kind,
resource, requestKind, requestResource, userInfo, the object, ``oldObject`` null on CREATE,
``dryRun``, the operation's options) and encoded by the field rules parsed from
``upstream/admission_v1_types.go``; the objects are the official client's models serialized by
its ApiClient. Answers are decoded strictly by the same rules and then verified as the API
server verifies them (``VerifyAdmissionResponse`` for a validating webhook: a response present,
its uid the request's, group/version/kind ``admission.k8s.io/v1, Kind=AdmissionReview``, no
patch and no patchType).

The published OpenAPI documents hold no ``admission.k8s.io`` group (AdmissionReview is a message,
not a served resource), so the schema is the Go type itself.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from tests.conformance.go_json import GoTypes

TYPES = GoTypes.load("admission_v1_types.go", "meta_v1_group_version.go", "meta_v1_type_meta.go")
API = k8s.ApiClient()
MODE_KEY = "llm-memory.io/admission-mode"
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"


def _container(args: list[str], gpus: str) -> Any:
    return k8s.V1Container(
        name="vllm",
        image="vllm/vllm-openai:v0.19.0",
        args=args,
        resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": gpus}),
    )


def gke_l4_pod(mode: str | None) -> Any:
    annotations = {MODE_KEY: mode} if mode else None
    return k8s.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=k8s.V1ObjectMeta(name="llama", namespace="ml", annotations=annotations),
        spec=k8s.V1PodSpec(
            containers=[_container([LLAMA_70B, "--max-model-len", "4096"], "1")],
            node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
        ),
    )


def deployment() -> Any:
    spec = k8s.V1PodSpec(containers=[_container(["meta-llama/Llama-3.1-8B-Instruct"], "1")])
    return k8s.V1Deployment(
        api_version="apps/v1",
        kind="Deployment",
        metadata=k8s.V1ObjectMeta(name="llama-8b", namespace="ml"),
        spec=k8s.V1DeploymentSpec(
            replicas=2,
            selector=k8s.V1LabelSelector(match_labels={"app": "llama"}),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels={"app": "llama"}), spec=spec
            ),
        ),
    )


def review(obj: Any, resource: str, operation: str = "CREATE") -> dict[str, Any]:
    """The AdmissionReview the API server sends for ``obj`` (CreateV1AdmissionReview)."""
    data = API.sanitize_for_serialization(obj)
    group, _, version = str(data["apiVersion"]).rpartition("/")
    gvk = {"group": group, "version": version, "kind": data["kind"]}
    gvr = {"group": group, "version": version, "resource": resource}
    options = {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"}
    request = TYPES.encode(
        "AdmissionRequest",
        {
            "UID": str(uuid.uuid4()),
            "Kind": gvk,
            "Resource": gvr,
            "RequestKind": gvk,
            "RequestResource": gvr,
            "Name": data["metadata"].get("name", ""),
            "Namespace": data["metadata"].get("namespace", ""),
            "Operation": operation,
            "UserInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "Object": data,
            "OldObject": None,  # RawExtension with no object: Go writes null
            "DryRun": False,
            "Options": options,
        },
    )
    body = TYPES.encode(
        "AdmissionReview",
        {
            "TypeMeta": {"Kind": "AdmissionReview", "APIVersion": "admission.k8s.io/v1"},
            "Request": request,
        },
    )
    assert body["kind"] == "AdmissionReview" and "response" not in body
    assert TYPES.check(body, "AdmissionReview") == []
    return body


def admit(live: httpx.Client, body: dict[str, Any], path: str = "/v1/admission") -> dict[str, Any]:
    response = live.post(path, json=body)
    assert response.status_code == 200
    answer = response.json()
    assert TYPES.check(answer, "AdmissionReview") == [], answer
    # VerifyAdmissionResponse (validating): present, same uid, v1 AdmissionReview, no patch.
    assert (answer.get("apiVersion"), answer.get("kind")) == (
        "admission.k8s.io/v1",
        "AdmissionReview",
    )
    result = answer.get("response")
    assert result is not None, "webhook response was absent"
    assert result["uid"] == body["request"]["uid"]
    assert "patch" not in result and "patchType" not in result
    assert "request" not in answer
    for warning in result.get("warnings", []):
        assert len(warning) <= 256  # the API server's limit for a warning it passes on whole
    return result  # type: ignore[no-any-return]


def test_the_types_are_read_from_the_upstream_source() -> None:
    fields = {f.key: f.omitempty for f in TYPES.fields("AdmissionResponse")}
    assert fields == {
        "uid": False,
        "allowed": False,
        "status": True,
        "patch": True,
        "patchType": True,
        "auditAnnotations": True,
        "warnings": True,
    }
    assert [f.key for f in TYPES.fields("AdmissionReview")] == [
        "kind",
        "apiVersion",
        "request",
        "response",
    ]


def test_a_70b_pinned_to_an_l4_by_gke_is_denied_in_deny_mode(live: httpx.Client) -> None:
    result = admit(live, review(gke_l4_pod("deny"), "pods"))
    assert result["allowed"] is False
    status = result["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    assert "NVIDIA-L4" in status["message"]


def test_warn_mode_allows_with_warnings(live: httpx.Client) -> None:
    result = admit(live, review(gke_l4_pod(None), "pods"))
    assert result["allowed"] is True and result["warnings"]


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_every_answer_to_a_deployment_decodes_strictly(live: httpx.Client, operation: str) -> None:
    body = review(deployment(), "deployments", operation)
    result = admit(live, body, "/v1/admission/deny")
    assert result["allowed"] is True


def test_an_unreadable_review_still_gets_a_conformant_answer(live: httpx.Client) -> None:
    body = review(deployment(), "deployments")
    body["request"]["object"] = {"kind": "Deployment", "spec": "not an object"}
    result = admit(live, body)
    assert result["allowed"] is True
