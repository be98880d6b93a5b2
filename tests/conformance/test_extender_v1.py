"""The scheduler extender against the upstream ``k8s.io/kube-scheduler/extender/v1`` types, on the
real server.

What kube-scheduler sends is built from the upstream types: the Pod and Nodes from the official
client's models, serialized by its ApiClient and stripped of TypeMeta as an informer's cache
holds them (k8s.io/apimachinery ``pkg/runtime/helper.go`` ``WithoutVersionDecoder`` clears it),
with the zero values Go's encoder writes that the Python client leaves out
(``metadata.creationTimestamp: null``, ``status: {}``, a NodeList's ``metadata: {}``), wrapped in
``ExtenderArgs`` by the field rules parsed from ``upstream/extender_v1_types.go``. Every answer is
decoded strictly by the same rules (`go_json`), and its effect is read the way kube-scheduler
reads it (`kube_scheduler`).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from tests.conformance.go_json import GoTypes, check_model
from tests.conformance.kube_scheduler import (
    SchedulingFailed,
    filter_outcome,
    prioritize_outcome,
)

TYPES = GoTypes.load("extender_v1_types.go")
API = k8s.ApiClient()
WEIGHT = 5  # deploy/scheduler/kube-scheduler-config.yaml

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
GFD = {
    "l4": {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "1"},
    "h100": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
}


def _informer(obj: Any) -> dict[str, Any]:
    """A client model as an informer's cache holds it and Go's encoder writes it."""
    data: dict[str, Any] = API.sanitize_for_serialization(obj)
    data.pop("kind", None)
    data.pop("apiVersion", None)
    data.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    data.setdefault("status", {})
    if "spec" in data and isinstance(obj, k8s.V1Node):
        data["spec"] = data["spec"] or {}
    return data


def pod(args: list[str], gpus: str = "2", **selector: str) -> dict[str, Any]:
    container = k8s.V1Container(
        name="vllm",
        image="vllm/vllm-openai:v0.19.0",
        args=args,
        resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": gpus}),
    )
    spec = k8s.V1PodSpec(containers=[container], node_selector=selector or None)
    meta = k8s.V1ObjectMeta(name="llama", namespace="ml", uid="0b9b5f6e-uid")
    return _informer(k8s.V1Pod(metadata=meta, spec=spec))


ISSUE_POD = [f"--model={LLAMA_70B}", "--tensor-parallel-size=2", "--max-model-len=4096"]


def nodes(labels: dict[str, dict[str, str]]) -> dict[str, Any]:
    items = [
        _informer(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels=node_labels)))
        for name, node_labels in labels.items()
    ]
    # ListMeta is a struct field with omitempty, which Go's encoder still writes: {}.
    return {"metadata": {}, "items": items}


def extender_args(pod_json: Any, labels: dict[str, dict[str, str]], *, names_only: bool) -> Any:
    """``ExtenderArgs`` as HTTPExtender builds it: NodeNames for a nodeCacheCapable extender,
    Nodes otherwise, the other nil."""
    values = {
        "Pod": pod_json,
        "Nodes": None if names_only else nodes(labels),
        "NodeNames": list(labels) if names_only else None,
    }
    body = TYPES.encode("ExtenderArgs", values)
    assert TYPES.check(body, "ExtenderArgs") == []
    return body


def call(live: httpx.Client, verb: str, body: Any) -> tuple[int, Any]:
    response = live.post(f"/v1/extender/{verb}", json=body)
    return response.status_code, response.json()


def test_the_types_are_read_from_the_upstream_source() -> None:
    assert [f.key for f in TYPES.structs["ExtenderArgs"]] == ["Pod", "Nodes", "NodeNames"]
    result = TYPES.structs["ExtenderFilterResult"]
    assert [(f.key, f.go_type, f.omitempty) for f in result] == [
        ("Nodes", "*v1.NodeList", False),
        ("NodeNames", "*[]string", False),
        ("FailedNodes", "FailedNodesMap", False),
        ("FailedAndUnresolvableNodes", "FailedNodesMap", False),
        ("Error", "string", False),
    ]
    assert TYPES.named["HostPriorityList"] == "[]HostPriority"
    assert (TYPES.consts["MinExtenderPriority"], TYPES.consts["MaxExtenderPriority"]) == (0, 10)


def _filter(live: httpx.Client, body: Any) -> Any:
    status, answer = call(live, "filter", body)
    assert status == 200, answer
    assert TYPES.check(answer, "ExtenderFilterResult") == []
    return answer


def _priorities(live: httpx.Client, body: Any) -> tuple[int, Any]:
    status, answer = call(live, "prioritize", body)
    if status == 200:
        assert TYPES.check(answer, "HostPriorityList") == []
        low, high = TYPES.consts["MinExtenderPriority"], TYPES.consts["MaxExtenderPriority"]
        assert all(low <= entry["Score"] <= high for entry in answer)
    return status, answer


def test_the_issue_pod_keeps_the_h100_and_fails_the_l4_with_its_reason(live: httpx.Client) -> None:
    body = extender_args(pod(ISSUE_POD), GFD, names_only=False)
    answer = _filter(live, body)
    outcome = filter_outcome(200, answer, list(GFD), node_cache_capable=False, ignorable=True)
    assert outcome.feasible == ("h100",) and outcome.skipped is None
    assert list(outcome.unresolvable) == ["l4"]
    assert "NVIDIA-L4" in outcome.unresolvable["l4"]
    # The nodes that pass come back as they were sent.
    assert answer["Nodes"]["items"] == [body["Nodes"]["items"][1]]
    status, scores = _priorities(live, body)
    added = prioritize_outcome(status, scores, WEIGHT)
    assert added is not None and added["l4"] == 0 and added["h100"] > 0


def test_names_only_is_answered_in_node_names(live: httpx.Client) -> None:
    pinned = pod(ISSUE_POD, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    answer = _filter(live, extender_args(pinned, GFD, names_only=True))
    outcome = filter_outcome(200, answer, list(GFD), node_cache_capable=True, ignorable=False)
    assert outcome.feasible == tuple(GFD)


def test_a_refusal_skips_an_ignorable_extender_and_fails_a_strict_one(live: httpx.Client) -> None:
    body = extender_args(pod(ISSUE_POD), GFD, names_only=True)  # unpinned, names only
    answer = _filter(live, body)
    outcome = filter_outcome(200, answer, list(GFD), node_cache_capable=True, ignorable=True)
    assert outcome.feasible == tuple(GFD) and "nodeCacheCapable: false" in (outcome.skipped or "")
    with pytest.raises(SchedulingFailed, match="names_only_unpinned"):
        filter_outcome(200, answer, list(GFD), node_cache_capable=True, ignorable=False)
    status, scores = _priorities(live, body)
    assert status == 422 and prioritize_outcome(status, scores, WEIGHT) is None


@pytest.mark.parametrize(
    "pod_json",
    [
        pod(ISSUE_POD),
        pod(["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"], gpus="1"),
        pod(["/mnt/models/llama", "--max-model-len", "4096"], gpus="1"),  # not nameable
        pod(["--model=facebook/opt-125m"], gpus="0"),  # no GPU
        _informer(
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name="web"),
                spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="web", image="nginx")]),
            )
        ),
    ],
    ids=["70b-tp2", "8b", "local-path", "zero-gpus", "no-engine"],
)
@pytest.mark.parametrize("names_only", [False, True])
def test_every_answer_decodes_strictly(live: httpx.Client, pod_json: Any, names_only: bool) -> None:
    labels = {**GFD, "cpu": {"kubernetes.io/os": "linux"}}
    body = extender_args(pod_json, labels, names_only=names_only)
    answer = _filter(live, body)
    # What the scheduler takes from it is well formed: the answer's lists name only nodes sent.
    outcome = filter_outcome(
        200, answer, list(labels), node_cache_capable=names_only, ignorable=True
    )
    assert set(outcome.feasible) <= set(labels)
    assert set(outcome.unresolvable) <= set(labels)
    if answer["Nodes"] is not None:
        for item in answer["Nodes"]["items"]:
            assert check_model(item, "V1Node") == []
    _priorities(live, body)
