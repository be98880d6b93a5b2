"""AdmissionReview and scheduler-extender shapes.

Bodies follow the upstream Go types: k8s.io/api ``admission/v1/types.go`` (JSON keys from the
struct tags) and k8s.io/kube-scheduler ``extender/v1/types.go`` (no tags: Go field names). The
objects inside them come from the official client's models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from service.workloads.admission import (
    WARNING_LIMIT,
    AdmissionRequest,
    AdmissionResponse,
    admission_review,
    read_admission_response,
    read_admission_review,
)
from service.workloads.extender import (
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    filter_result_json,
    host_priority_list_json,
    read_extender_args,
    read_filter_result,
    read_host_priority_list,
)
from service.workloads.sources import ReadProblem
from tests.workloads.objects import container, pod_spec

ToJson = Callable[[object], Any]


def _pod(to_json: ToJson) -> Any:
    return to_json(
        k8s.V1Pod(
            api_version="v1",
            kind="Pod",
            metadata=k8s.V1ObjectMeta(name="llm", namespace="team-a"),
            spec=pod_spec(
                container("c", command=["vllm", "serve", "org/m"], gpus={"nvidia.com/gpu": "1"})
            ),
        )
    )


def _review(to_json: ToJson, **request: Any) -> dict[str, Any]:
    body = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": _pod(to_json),
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    body.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def test_read_admission_review(to_json: ToJson) -> None:
    request = read_admission_review(_review(to_json, dryRun=True))
    assert isinstance(request, AdmissionRequest)
    assert request.uid == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert (request.kind.kind, request.kind.version, request.operation) == ("Pod", "v1", "CREATE")
    assert request.resource == "pods" and request.namespace == "team-a"
    assert request.dry_run and request.username == "alice"
    assert request.obj is not None and request.obj["kind"] == "Pod"


def test_dry_run_defaults_to_false_and_delete_has_no_object(to_json: ToJson) -> None:
    request = read_admission_review(
        _review(to_json, operation="DELETE", object=None, oldObject=_pod(to_json))
    )
    assert isinstance(request, AdmissionRequest)
    assert not request.dry_run and request.obj is None and request.old_obj is not None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}, "apiVersion"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
            "request.uid",
        ),
    ],
)
def test_unreadable_reviews(body: object, field: str) -> None:
    problem = read_admission_review(body)
    assert isinstance(problem, ReadProblem) and problem.field == field


def test_admission_response_shape() -> None:
    body = admission_review(
        AdmissionResponse(
            uid="u-1",
            allowed=False,
            code=403,
            message="model needs 141 GB; 1 x NVIDIA-L4 has 24 GB",
            reason="Forbidden",
            warnings=("fits on NVIDIA-H100-80GB-HBM3", "x" * 300),
        )
    )
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    response = body["response"]
    assert isinstance(response, dict)
    assert set(response) == {"uid", "allowed", "status", "warnings"}
    assert response["status"] == {
        "status": "Failure",
        "message": "model needs 141 GB; 1 x NVIDIA-L4 has 24 GB",
        "reason": "Forbidden",
        "code": 403,
    }
    warnings = response["warnings"]
    assert isinstance(warnings, list) and len(warnings[1]) == WARNING_LIMIT
    assert admission_review(AdmissionResponse(uid="u-2", allowed=True))["response"] == {
        "uid": "u-2",
        "allowed": True,
    }


def test_admission_response_round_trip() -> None:
    response = AdmissionResponse(
        uid="u", allowed=True, warnings=("a", "b"), audit_annotations={"k": "v"}
    )
    assert read_admission_response(admission_review(response)) == response


def _extender_args(to_json: ToJson) -> dict[str, Any]:
    nodes = k8s.V1NodeList(
        items=[
            k8s.V1Node(
                metadata=k8s.V1ObjectMeta(
                    name=f"gpu-{i}", labels={"nvidia.com/gpu.product": "NVIDIA-L4"}
                )
            )
            for i in range(3)
        ]
    )
    return {"Pod": _pod(to_json), "Nodes": to_json(nodes), "NodeNames": None}


def test_read_extender_args_with_nodes(to_json: ToJson) -> None:
    args = read_extender_args(_extender_args(to_json))
    assert isinstance(args, ExtenderArgs)
    assert args.node_names is None and args.nodes is not None
    assert args.names == ("gpu-0", "gpu-1", "gpu-2")
    assert args.pod["kind"] == "Pod"


def test_read_extender_args_names_only_and_case_insensitive_keys(to_json: ToJson) -> None:
    # Go's decoder matches field names case-insensitively.
    args = read_extender_args({"pod": _pod(to_json), "nodenames": ["a", "b"]})
    assert isinstance(args, ExtenderArgs)
    assert args.nodes is None and args.names == ("a", "b")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("x", "body"),
        ({"Nodes": {"items": []}}, "Pod"),
        ({"Pod": {}, "Nodes": []}, "Nodes"),
        ({"Pod": {}, "Nodes": {"items": {}}}, "Nodes.items"),
        ({"Pod": {}}, "Nodes"),
        ({"Pod": {}, "NodeNames": "a"}, "NodeNames"),
    ],
)
def test_unreadable_extender_args(body: object, field: str) -> None:
    problem = read_extender_args(body)
    assert isinstance(problem, ReadProblem) and problem.field == field


def test_filter_result_shape_and_round_trip(to_json: ToJson) -> None:
    nodes = _extender_args(to_json)["Nodes"]["items"]
    result = ExtenderFilterResult(
        nodes=(nodes[0],),
        failed_and_unresolvable={"gpu-1": "GPU too small", "gpu-2": "GPU too small"},
    )
    body = filter_result_json(result)
    assert set(body) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }
    assert body["Nodes"] == {"items": [nodes[0]]}
    assert body["NodeNames"] is None and body["Error"] == ""
    assert read_filter_result(body) == result


def test_host_priority_list() -> None:
    body = host_priority_list_json([HostPriority("gpu-0", 10), HostPriority("gpu-1", 0)])
    assert body == [{"Host": "gpu-0", "Score": 10}, {"Host": "gpu-1", "Score": 0}]
    assert read_host_priority_list(body) == (HostPriority("gpu-0", 10), HostPriority("gpu-1", 0))
    with pytest.raises(ValueError, match=r"outside 0\.\.10"):
        host_priority_list_json([HostPriority("gpu-0", 11)])
    assert isinstance(read_host_priority_list([{"Host": "a"}]), ReadProblem)
