"""POST /v1/extender/filter and /v1/extender/prioritize: the kube-scheduler HTTP extender.

Shapes follow k8s.io/kube-scheduler extender/v1 types.go (Go field names: ExtenderArgs
``Pod``/``Nodes``/``NodeNames``; ExtenderFilterResult; HostPriorityList); pods and nodes are
built with the official client's models. Node labels follow GPU Feature Discovery
(NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md). Whether a node's GPU fits is
decided independently by /v1/estimate/inference for the same GPU.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kubernetes import client as k8s

from tests.api.k8s_objects import container, node, pod, pod_spec, product_affinity, to_json

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
QWEN_32B = "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"
ARGS_8B = [LLAMA_8B, "--max-model-len", "8192"]
ESTIMATE_8B = {"model": LLAMA_8B, "engine": "vllm", "engine_options": {"max_model_len": 8192}}

NODES = {
    "l4": {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "1"},
    "t4": {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "1"},
    "h100": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
    # A product the catalog does not know: judged by its memory label (MiB).
    "acme": {"nvidia.com/gpu.product": "ACME-X1000", "nvidia.com/gpu.memory": "49152"},
    "cpu": {"kubernetes.io/os": "linux"},
}


def args(
    pod_obj: Any, nodes: dict[str, dict[str, str]], names_only: bool = False
) -> dict[str, Any]:
    items = [node(name, labels) for name, labels in nodes.items()]
    if names_only:
        return {"Pod": to_json(pod_obj), "Nodes": None, "NodeNames": list(nodes)}
    return {"Pod": to_json(pod_obj), "Nodes": to_json(k8s.V1NodeList(items=items))}


def gpu_pod(arguments: list[str], resource: str = "nvidia.com/gpu") -> Any:
    return pod(container("vllm", args=arguments, gpus={resource: "1"}))


def filter_(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/extender/filter", json=body)
    assert response.status_code == 200, response.text[:600]
    result = response.json()
    assert set(result) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }
    return result  # type: ignore[no-any-return]


def passing(result: dict[str, Any]) -> set[str]:
    return {n["metadata"]["name"] for n in result["Nodes"]["items"]}


def scores(client: TestClient, body: dict[str, Any]) -> dict[str, int]:
    response = client.post("/v1/extender/prioritize", json=body)
    assert response.status_code == 200, response.text[:600]
    return {entry["Host"]: entry["Score"] for entry in response.json()}


def fit(client: TestClient, **gpu: Any) -> dict[str, Any]:
    response = client.post("/v1/estimate/inference", json={**ESTIMATE_8B, **gpu})
    assert response.status_code == 200, response.text[:400]
    return response.json()["fit"]  # type: ignore[no-any-return]


def test_filter_passes_exactly_the_nodes_whose_gpu_fits(client: TestClient) -> None:
    result = filter_(client, args(gpu_pod(ARGS_8B), NODES))
    expected = {
        "l4": fit(client, gpu="l4")["fits"],
        "t4": fit(client, gpu="t4")["fits"],
        "h100": fit(client, gpu="h100-sxm-80gb")["fits"],
        "acme": fit(client, gpu_memory_bytes=49152 * 2**20)["fits"],
    }
    assert True in expected.values() and False in expected.values()  # the case discriminates
    assert passing(result) == {n for n, ok in expected.items() if ok} | {"cpu"}
    unresolvable = result["FailedAndUnresolvableNodes"]
    assert set(unresolvable) == {n for n, ok in expected.items() if not ok}
    assert all(reason.startswith("GPU too small") for reason in unresolvable.values())
    assert result["FailedNodes"] == {} and result["Error"] == ""


def test_prioritize_prefers_the_tightest_fit(client: TestClient) -> None:
    got = scores(client, args(gpu_pod(ARGS_8B), NODES))
    assert set(got) == set(NODES) and all(0 <= s <= 10 for s in got.values())
    for name, gpu in (("l4", {"gpu": "l4"}), ("h100", {"gpu": "h100-sxm-80gb"})):
        f = fit(client, **gpu)
        assert got[name] == max(1, math.floor(10 * f["required_bytes"] / f["usable_bytes"]))
    assert got["l4"] > got["h100"]  # the smaller GPU leaves less memory idle
    assert got["t4"] == 0 and got["cpu"] == 0


def test_mig_single_strategy_judges_the_slice(client: TestClient) -> None:
    parent = "NVIDIA-A100-SXM4-80GB"
    nodes = {
        "small": {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.product": f"{parent}-MIG-1g.10gb",
        },
        "large": {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.product": f"{parent}-MIG-7g.80gb",
        },
    }
    result = filter_(client, args(gpu_pod(ARGS_8B), nodes))
    expected = {
        "small": fit(client, gpu="a100-sxm4-80gb/1g.10gb")["fits"],
        "large": fit(client, gpu="a100-sxm4-80gb/7g.80gb")["fits"],
    }
    assert expected == {"small": False, "large": True}
    assert passing(result) == {"large"}


def test_mig_mixed_strategy_judges_the_requested_profile(client: TestClient) -> None:
    labels = {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/mig-1g.10gb.count": "7",
        "nvidia.com/mig-3g.40gb.count": "2",
    }
    for profile, gpu in (
        ("1g.10gb", "a100-sxm4-80gb/1g.10gb"),
        ("3g.40gb", "a100-sxm4-80gb/3g.40gb"),
    ):
        result = filter_(client, args(gpu_pod(ARGS_8B, f"nvidia.com/mig-{profile}"), {"n": labels}))
        assert (passing(result) == {"n"}) is fit(client, gpu=gpu)["fits"], profile


def test_time_slicing_is_judged_on_the_whole_gpu_and_scores_lower(client: TestClient) -> None:
    shared = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    nodes = {"own": NODES["h100"], "shared": shared}
    assert passing(filter_(client, args(gpu_pod(ARGS_8B), nodes))) == {"own", "shared"}
    got = scores(client, args(gpu_pod(ARGS_8B), nodes))
    assert got["shared"] == max(1, got["own"] // 2)


def test_mps_replicas_are_judged_on_their_share(client: TestClient) -> None:
    mps = {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "2",
        "nvidia.com/gpu.sharing-strategy": "mps",
    }
    body = {"model": QWEN_32B, "engine": "vllm", "engine_options": {"max_model_len": 4096}}
    whole = client.post("/v1/estimate/inference", json={**body, "gpu": "h100-sxm-80gb"}).json()
    weights = whole["per_gpu"]["breakdown"]["weights"]
    # The premise: the weights fit the whole GPU's usable memory but not half the GPU.
    assert whole["fit"]["fits"] and weights > whole["fit"]["usable_bytes"] / 2
    arguments = [QWEN_32B, "--max-model-len", "4096"]
    result = filter_(client, args(gpu_pod(arguments), {"own": NODES["h100"], "mps": mps}))
    assert passing(result) == {"own"} and "mps" in result["FailedAndUnresolvableNodes"]


def test_node_names_only_from_an_unpinned_pod_is_an_error_naming_the_fix(
    client: TestClient,
) -> None:
    """kube-scheduler reads NodeNames when it sent them, and a missing list as "no node
    passes" (pkg/scheduler/extender.go Filter): the names come back, with Error saying why
    none was judged."""
    body = args(gpu_pod(ARGS_8B), NODES, names_only=True)
    result = filter_(client, body)
    assert result["NodeNames"] == list(NODES) and result["Nodes"] is None
    assert "names_only_unpinned" in result["Error"] and "nodeCacheCapable: false" in result["Error"]
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}
    refused = client.post("/v1/extender/prioritize", json=body)
    assert refused.status_code == 422, refused.text[:400]
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["errors"][0]["field"] == "NodeNames"


def test_a_pod_without_gpus_is_none_of_the_extenders_business_even_names_only(
    client: TestClient,
) -> None:
    web = pod(k8s.V1Container(name="web", image="nginx:1.27"))
    result = filter_(client, args(web, NODES, names_only=True))
    assert result["NodeNames"] == list(NODES) and result["Error"] == ""
    assert set(scores(client, args(web, NODES, names_only=True)).values()) == {0}


def test_a_pod_without_gpus_passes_everywhere(client: TestClient) -> None:
    web = pod(k8s.V1Container(name="web", image="nginx:1.27"))
    assert passing(filter_(client, args(web, NODES))) == set(NODES)


def test_go_decodes_field_names_case_insensitively(client: TestClient) -> None:
    body = args(gpu_pod(ARGS_8B), {"t4": NODES["t4"]})
    lower = {"pod": body["Pod"], "nodes": body["Nodes"]}
    assert "t4" in filter_(client, lower)["FailedAndUnresolvableNodes"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"Nodes": {"items": []}}, "Pod"),
        ({"Pod": {}, "Nodes": 3}, "Nodes"),
        ({"Pod": {}, "Nodes": {"items": 3}}, "Nodes.items"),
        ({"Pod": {}, "NodeNames": "a"}, "NodeNames"),
        ({"Pod": {}}, "Nodes"),
        ([], "body"),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_bad_arguments_are_problems_naming_the_field(
    client: TestClient, body: Any, field: str, verb: str
) -> None:
    response = client.post(f"/v1/extender/{verb}", json=body)
    assert response.status_code == 422, response.text[:400]
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"][0]["field"] == field


def test_a_body_that_is_not_json_is_a_400(client: TestClient) -> None:
    response = client.post("/v1/extender/filter", content=b"{not json")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"


# ---------------------------------------------------------------------------- issue 25 item 1

# The Pod of the issue, as kube-scheduler marshals it from its informer cache: no kind, no
# apiVersion (decoding into a typed struct clears them: k8s.io/apimachinery
# pkg/runtime/helper.go WithoutVersionDecoder), quantities as strings.
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
ARGS_70B = [f"--model={LLAMA_70B}", "--tensor-parallel-size=2", "--max-model-len=4096"]
ESTIMATE_70B = {
    "model": LLAMA_70B,
    "engine": "vllm",
    "tensor_parallel_size": 2,
    "gpu_count": 2,
    "engine_options": {"max_model_len": 4096, "version": "0.19.0"},
}
L4_AND_H100 = {"l4": NODES["l4"], "h100": NODES["h100"]}


def informer_pod(*containers: Any, node_selector: dict[str, str] | None = None) -> Any:
    """A V1Pod as an informer holds it: TypeMeta empty, so the client omits both keys."""
    obj = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="llama-70b", namespace="ml", uid="5f1c-uid"),
        spec=k8s.V1PodSpec(containers=list(containers), node_selector=node_selector),
    )
    serialized = to_json(obj)
    assert "kind" not in serialized and "apiVersion" not in serialized
    return obj


def llama_70b(**selector: str) -> Any:
    return informer_pod(
        container(
            "vllm", image="vllm/vllm-openai:v0.19.0", args=ARGS_70B, gpus={"nvidia.com/gpu": "2"}
        ),
        node_selector=selector or None,
    )


def fit_70b(client: TestClient, gpu: str) -> dict[str, Any]:
    response = client.post("/v1/estimate/inference", json={**ESTIMATE_70B, "gpu": gpu})
    assert response.status_code == 200, response.text[:400]
    return response.json()["fit"]  # type: ignore[no-any-return]


def test_the_issue_pod_keeps_the_h100_node_and_fails_the_l4_one_with_its_reason(
    client: TestClient,
) -> None:
    # The premise, by hand: Llama-3.3-70B holds 70.6e9 parameters (its model card), 141 GB in
    # bf16; at TP 2 each GPU holds about 70 GB: more than an L4 (23034 MiB, 24.2 GB), less
    # than an H100 (81559 MiB, 85.5 GB).
    assert 70.6e9 * 2 / 2 > 23034 * 2**20 and 70.6e9 * 2 / 2 < 81559 * 2**20
    assert not fit_70b(client, "l4")["fits"] and fit_70b(client, "h100-sxm-80gb")["fits"]
    result = filter_(client, args(llama_70b(), L4_AND_H100))
    assert passing(result) == {"h100"}
    reason = result["FailedAndUnresolvableNodes"]["l4"]
    assert reason.startswith("GPU too small for this model on NVIDIA-L4: weights_exceed_memory")
    assert result["FailedNodes"] == {} and result["Error"] == ""
    got = scores(client, args(llama_70b(), L4_AND_H100))
    fit = fit_70b(client, "h100-sxm-80gb")
    assert got == {
        "l4": 0,
        "h100": max(1, math.floor(10 * fit["required_bytes"] / fit["usable_bytes"])),
    }


def test_a_pod_that_says_another_kind_is_refused_in_error(client: TestClient) -> None:
    body = args(llama_70b(), L4_AND_H100)
    body["Pod"] = {**body["Pod"], "kind": "Deployment"}
    result = filter_(client, body)
    assert "pod_unreadable" in result["Error"] and "Deployment" in result["Error"]
    assert passing(result) == set(L4_AND_H100)  # every node handed back as it came
    assert client.post("/v1/extender/prioritize", json=body).status_code == 422


def test_a_pod_whose_model_cannot_be_named_is_refused_in_error(client: TestClient) -> None:
    unnamed = informer_pod(
        container(
            "vllm",
            args=["/mnt/models/llama", "--max-model-len", "4096"],
            gpus={"nvidia.com/gpu": "1"},
        )
    )
    result = filter_(client, args(unnamed, L4_AND_H100))
    assert "model_unresolved" in result["Error"] and "/mnt/models/llama" in result["Error"]
    assert passing(result) == set(L4_AND_H100) and result["FailedAndUnresolvableNodes"] == {}


def test_when_no_node_names_its_gpu_the_refusal_is_in_error(client: TestClient) -> None:
    result = filter_(client, args(llama_70b(), {"a": NODES["cpu"], "b": {}}))
    assert "nodes_unlabelled" in result["Error"] and passing(result) == {"a", "b"}
    assert (
        client.post("/v1/extender/prioritize", json=args(llama_70b(), {"a": {}})).status_code == 422
    )


# ---------------------------------------------------------------------------- issue 25 item 2


def test_names_only_judges_the_gpu_the_pod_pins(client: TestClient) -> None:
    """The default filters enforce the node selection before extenders run, so every
    candidate carries the pinned product: the pod is judged on it."""
    pinned_l4 = args(llama_70b(**{"nvidia.com/gpu.product": "NVIDIA-L4"}), NODES, names_only=True)
    result = filter_(client, pinned_l4)
    assert result["NodeNames"] == [] and result["Error"] == ""
    assert set(result["FailedAndUnresolvableNodes"]) == set(NODES)
    assert all("NVIDIA-L4" in r for r in result["FailedAndUnresolvableNodes"].values())
    assert set(scores(client, pinned_l4).values()) == {0}
    pinned_h100 = args(
        llama_70b(**{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}), NODES, names_only=True
    )
    result = filter_(client, pinned_h100)
    assert result["NodeNames"] == list(NODES) and result["FailedAndUnresolvableNodes"] == {}
    fit = fit_70b(client, "h100-sxm-80gb")
    tight = max(1, math.floor(10 * fit["required_bytes"] / fit["usable_bytes"]))
    assert set(scores(client, pinned_h100).values()) == {tight}


def test_names_only_with_products_it_fits_only_in_part_is_an_error(client: TestClient) -> None:
    spec = pod_spec(
        container(
            "vllm", image="vllm/vllm-openai:v0.19.0", args=ARGS_70B, gpus={"nvidia.com/gpu": "2"}
        ),
        affinity=product_affinity(["NVIDIA-L4", "NVIDIA-H100-80GB-HBM3"]),
    )
    obj = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="p"), spec=spec)
    body = args(obj, NODES, names_only=True)
    result = filter_(client, body)
    assert "names_only_several_products" in result["Error"]
    assert result["NodeNames"] == list(NODES)
    assert client.post("/v1/extender/prioritize", json=body).status_code == 422


# ---------------------------------------------------------------------------- counted


def _counter(metrics: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in metrics.splitlines():
        head, _, value = line.rpartition(" ")
        if head.startswith(name + "{"):
            got = ",".join(sorted(head[len(name) + 1 : -1].split(",")))
            if got == wanted:
                return float(value)
    return 0.0


def test_every_answer_and_refusal_is_counted(client: TestClient) -> None:
    name = "llmmem_extender_"
    before = client.get("/metrics").text
    filter_(client, args(llama_70b(), L4_AND_H100))
    filter_(client, args(gpu_pod(ARGS_8B), NODES, names_only=True))
    client.post("/v1/extender/prioritize", json=args(gpu_pod(ARGS_8B), NODES, names_only=True))
    filter_(client, args(pod(k8s.V1Container(name="web", image="nginx:1.27")), NODES))
    after = client.get("/metrics").text

    def delta(metric: str, **labels: str) -> float:
        return _counter(after, name + metric, **labels) - _counter(before, name + metric, **labels)

    assert delta("requests_total", verb="filter", outcome="judged") == 1
    assert delta("requests_total", verb="filter", outcome="refused") == 1
    assert delta("requests_total", verb="filter", outcome="not_applicable") == 1
    assert delta("requests_total", verb="prioritize", outcome="refused") == 1
    assert delta("refusals_total", verb="filter", reason="names_only_unpinned") == 1
    assert delta("refusals_total", verb="prioritize", reason="names_only_unpinned") == 1
    assert delta("nodes_total", verb="filter", verdict="fits") == 1
    assert delta("nodes_total", verb="filter", verdict="does_not_fit") == 1


# ---------------------------------------------------------------------------- issue 25 item 9


def test_nodes_named_only_by_their_cloud_labels_are_judged(client: TestClient) -> None:
    nodes = {
        "gke-l4": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
        "eks-p5": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
        "aks-a100": {"node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"},
    }
    expected = {
        "gke-l4": fit_70b(client, "l4")["fits"],
        "eks-p5": fit_70b(client, "h100-sxm-80gb")["fits"],
        "aks-a100": fit_70b(client, "a100-pcie-80gb")["fits"],
    }
    assert expected == {"gke-l4": False, "eks-p5": True, "aks-a100": True}
    result = filter_(client, args(llama_70b(), nodes))
    assert passing(result) == {"eks-p5", "aks-a100"}
    assert "NVIDIA-L4" in result["FailedAndUnresolvableNodes"]["gke-l4"]
