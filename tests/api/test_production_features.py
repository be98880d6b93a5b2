"""Issue 24's deployments over HTTP, as a scheduler asks: expert and data parallelism, CPU
offload with the pod's host memory, LoRA slots, a draft model, a fixed KV pool, the flag
readers pricing each feature, and admission never denying on what it did not price.

The expected figures are worked by hand from vLLM's code in
tests/estimator/engines/test_production_features.py; here each is checked end to end."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.scheduling.admission import MODE_KEY
from tests.api.k8s_objects import pod, to_json
from tests.api.test_admission import admit, review
from tests.workloads.objects import container

DEEPSEEK_V3 = "deepseek-ai/DeepSeek-V3"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"


def estimate(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/estimate/inference", json=body)
    assert response.status_code == 200, response.text[:600]
    return dict(response.json())


def preflight(client: TestClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/preflight", json=body)
    assert response.status_code == 200, response.text[:600]
    (result,) = response.json()["results"]
    return dict(result)


def deepseek_dp8_ep(client: TestClient, **options: Any) -> dict[str, Any]:
    return estimate(
        client,
        model=DEEPSEEK_V3,
        engine="vllm",
        gpu="h200",
        data_parallel_size=8,
        expert_parallel=True,
        engine_options=options,
    )


def test_deepseek_v3_dp8_ep_holds_an_eighth_of_the_experts(client: TestClient) -> None:
    answer = deepseek_dp8_ep(client, max_model_len=32768)
    assert 90e9 <= answer["per_gpu"]["breakdown"]["weights"] <= 110e9
    layout = answer["fit"]["layout"]
    assert (layout["tensor_parallel_size"], layout["data_parallel_size"]) == (1, 8)
    assert layout["expert_parallel_size"] == 8
    assert answer["fit"]["fits"] is True
    assert any("data-parallel ranks" in line for line in answer["assumptions"])
    assert "as TP 1 × DP 8, experts over EP 8" in answer["summary"]


def test_deepseek_v3_at_its_full_context_needs_a_dispatch_backend_that_does_not_gather(
    client: TestClient,
) -> None:
    """With the default allgather_reducescatter backend (0.19 line) every MoE layer of the
    profiling run works on 8 × 8192 gathered tokens (FusedMoE.use_dp_chunking is off for it),
    which leaves less KV pool than one 163,840-token sequence; DeepEP's backends dispatch
    only the rank's own tokens and it fits. A public report agrees that TP 1 × DP 8 of the
    DeepSeek-V3 architecture does not start on 8 × H200 (LMCache/LMCache#2521)."""
    gathered = deepseek_dp8_ep(client, version="0.19.0")
    assert gathered["fit"]["fits"] is False
    assert gathered["fit"]["reason"] == "kv_pool_below_one_sequence"
    assert any("tokens of all 8 DP ranks" in line for line in gathered["assumptions"])
    for backend in ("deepep_low_latency", "deepep_high_throughput"):
        answer = deepseek_dp8_ep(client, version="0.19.0", all2all_backend=backend)
        assert answer["fit"]["fits"] is True, backend
    # DeepEP low-latency holds 1 GiB of NVLink buffer and its RDMA buffer (3.55 GiB) more.
    ll = deepseek_dp8_ep(client, version="0.19.0", all2all_backend="deepep_low_latency")
    ht = deepseek_dp8_ep(client, version="0.19.0", all2all_backend="deepep_high_throughput")
    extra = ll["per_gpu"]["breakdown"]["overhead"] - ht["per_gpu"]["breakdown"]["overhead"]
    assert extra == 3_816_818_816


def test_70b_offloading_80_gib_fits_one_h100_and_reports_host_memory(client: TestClient) -> None:
    answer = estimate(
        client,
        model=LLAMA_70B,
        engine="vllm",
        gpu="h100-sxm-80gb",
        engine_options={"max_model_len": 8192, "cpu_offload_gb": 80},
    )
    assert answer["fit"]["fits"] is True
    assert 54e9 <= answer["per_gpu"]["breakdown"]["weights"] <= 57e9
    assert answer["cpu_bytes"] >= 85e9


@pytest.mark.parametrize(("limit", "denied"), [("16Gi", True), ("128Gi", False)])
def test_offloading_pod_past_its_memory_limit_is_refused(
    client: TestClient, limit: str, denied: bool
) -> None:
    args = ["--model", LLAMA_70B, "--cpu-offload-gb", "80", "--max-model-len", "8192"]
    vllm = container("vllm", image="vllm/vllm-openai:v0.19.0", args=args)
    vllm.resources.limits = {"nvidia.com/gpu": "1", "memory": limit}
    obj = to_json(pod(vllm, product=H100_PRODUCT, annotations={MODE_KEY: "deny"}))
    result = preflight(client, object=obj)
    assert result["request"]["host_memory_bytes"] == int(limit[:-2]) * 2**30
    if denied:
        assert result["verdict"] == "does_not_fit"
        assert result["estimate"]["fit"]["reason"] == "host_memory_exceeded"
    else:
        assert result["verdict"] == "fits"
    response = admit(client, review(obj))
    assert response["allowed"] is not denied
    if denied:
        assert "host_memory_exceeded" in response["status"]["message"]


def test_four_rank_64_lora_slots_lower_the_kv_pool(client: TestClient) -> None:
    plain = estimate(client, model=LLAMA_8B, engine="vllm", gpu="h100-sxm-80gb")
    lora = estimate(
        client,
        model=LLAMA_8B,
        engine="vllm",
        gpu="h100-sxm-80gb",
        engine_options={"enable_lora": True, "max_loras": 4, "max_lora_rank": 64},
    )
    drop = plain["capacity"]["kv_cache_pool_bytes"] - lora["capacity"]["kv_cache_pool_bytes"]
    assert 1.1e9 <= drop <= 1.8e9
    assert any("LoRA: 4 slots of rank 64" in line for line in lora["assumptions"])


def test_a_draft_model_adds_its_weights_and_kv_per_token(client: TestClient) -> None:
    common: dict[str, Any] = dict(
        model=LLAMA_70B,
        engine="vllm",
        gpu="h100-sxm-80gb",
        tensor_parallel_size=4,
        engine_options={"max_model_len": 8192},
    )
    target = estimate(client, **common)
    drafted = estimate(
        client,
        **common,
        speculative={"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct"},
    )
    weights = drafted["per_gpu"]["breakdown"]["weights"] - target["per_gpu"]["breakdown"]["weights"]
    assert weights == 618_008_576  # worked by hand in test_production_features.py
    per_token = "kv_cache_bytes_per_token_per_gpu"
    assert drafted["details"][per_token] - target["details"][per_token] == 8192


def test_kv_cache_memory_bytes_is_the_pool(client: TestClient) -> None:
    pool = 20 * 2**30
    answer = estimate(
        client,
        model=LLAMA_8B,
        engine="vllm",
        gpu="h100-sxm-80gb",
        engine_options={"kv_cache_memory_bytes": pool},
    )
    assert answer["capacity"]["kv_cache_pool_bytes"] == pool


FEATURE_FLAGS = (
    "--data-parallel-size 8 --enable-expert-parallel --enable-eplb --num-redundant-experts 32 "
    "--all2all-backend deepep_low_latency --enable-lora --max-loras 4 --max-lora-rank 64 "
    "--cpu-offload-gb 10 --kv-cache-memory-bytes 20000000000 --kv-offloading-size 40 "
    '--speculative-config \'{"method": "mtp", "num_speculative_tokens": 1}\' '
    '--kv-transfer-config \'{"kv_connector": "NixlConnector", "kv_role": "kv_both"}\''
)


def test_the_flag_reader_prices_every_production_feature(client: TestClient) -> None:
    result = preflight(
        client, command=f"vllm serve {DEEPSEEK_V3} {FEATURE_FLAGS}", gpu="h200", gpu_count=8
    )
    options = {o["name"]: o for o in result["options"]}
    for name in (
        "data_parallel_size",
        "enable_expert_parallel",
        "enable_eplb",
        "num_redundant_experts",
        "all2all_backend",
        "enable_lora",
        "max_loras",
        "max_lora_rank",
        "cpu_offload_gb",
        "kv_cache_memory_bytes",
        "kv_offloading_size",
        "speculative_config",
        "kv_transfer_config",
    ):
        assert options[name]["priced"] is True, name
    request = result["request"]
    assert request["data_parallel_size"] == 8 and request["expert_parallel"] is True
    assert request["speculative"] == {"method": "mtp", "num_speculative_tokens": 1}
    assert request["engine_options"]["kv_connector"] == "NixlConnector"
    assert result["fit"]["layout"]["expert_parallel_size"] == 8


def test_admission_never_denies_on_an_option_it_did_not_price(client: TestClient) -> None:
    """``--max-model-len -1`` lets vLLM pick the longest context that fits: judged at the
    model's derived maximum (not priced), the verdict is a warning, not a denial."""
    args = ["--model", LLAMA_8B, "--max-model-len", "-1"]
    obj = to_json(
        pod(
            container(
                "vllm", image="vllm/vllm-openai:v0.19.0", args=args, gpus={"nvidia.com/gpu": "1"}
            ),
            product="NVIDIA-L4",
            annotations={MODE_KEY: "deny"},
        )
    )
    assert preflight(client, object=obj)["verdict"] == "does_not_fit"
    response = admit(client, review(obj))
    assert response["allowed"] is True
    assert any("not denied: max_model_len read but not priced" in w for w in response["warnings"])


def test_sglang_dp_attention_reads_its_expert_layout(client: TestClient) -> None:
    """``--tp 8 --dp 8 --enable-dp-attention --ep-size 8`` runs on 8 GPUs: the estimate's
    TP 1 × DP 8, the experts over EP 8; a DeepEP dispatch is read but its buffers not priced."""
    command = (
        f"python -m sglang.launch_server --model-path {DEEPSEEK_V3} --tp 8 --dp 8 "
        "--enable-dp-attention --ep-size 8 --moe-a2a-backend deepep --context-length 8192"
    )
    result = preflight(client, command=command, gpu="h200", gpu_count=8)
    layout = result["fit"]["layout"]
    assert (layout["tensor_parallel_size"], layout["data_parallel_size"]) == (1, 8)
    assert layout["expert_parallel_size"] == 8
    options = {o["name"]: o for o in result["options"]}
    assert options["ep_size"]["priced"] is True
    assert options["moe_a2a_backend"]["priced"] is False
    assert "not priced" in options["moe_a2a_backend"]["note"]


def test_an_unpriced_vllm_dispatch_backend_is_reported_so(client: TestClient) -> None:
    command = f"vllm serve {DEEPSEEK_V3} -dp 8 --enable-expert-parallel --all2all-backend pplx"
    result = preflight(client, command=command, gpu="h200", gpu_count=8)
    options = {o["name"]: o for o in result["options"]}
    assert options["all2all_backend"]["priced"] is False
    assert any(
        "pplx" in line and "not priced" in line for line in result["estimate"]["assumptions"]
    )


def dynamo_graph(model: str, product: str) -> dict[str, Any]:
    """A DynamoGraphDeployment shaped like ai-dynamo/dynamo's disagg.yaml, pinned to one GPU
    product through its extraPodSpec."""

    def worker(role: str, *extra: str) -> dict[str, Any]:
        return {
            "componentType": "worker",
            "subComponentType": role,
            "replicas": 1,
            "resources": {"limits": {"gpu": "1"}},
            "extraPodSpec": {
                "nodeSelector": {"nvidia.com/gpu.product": product},
                "mainContainer": {
                    "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1",
                    "command": ["python3", "-m", "dynamo.vllm"],
                    "args": ["--model", model, "--max-model-len", "8192", *extra],
                },
            },
        }

    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "disagg", "namespace": "ml", "annotations": {MODE_KEY: "deny"}},
        "spec": {
            "services": {
                "Frontend": {
                    "componentType": "frontend",
                    "extraPodSpec": {
                        "mainContainer": {"command": ["python3", "-m", "dynamo.frontend"]}
                    },
                },
                "VllmDecodeWorker": worker("decode"),
                "VllmPrefillWorker": worker("prefill", "--is-prefill-worker"),
            }
        },
    }


@pytest.mark.parametrize(("model", "fits"), [("Qwen/Qwen3-0.6B", True), (LLAMA_70B, False)])
def test_dynamo_prefill_and_decode_are_each_judged_on_their_gpus(
    client: TestClient, model: str, fits: bool
) -> None:
    """A 70B in bf16 (141 GB of weights) cannot fit one L4 (24 GB) in either role; a 0.6B does."""
    obj = dynamo_graph(model, "NVIDIA-L4")
    response = client.post("/v1/preflight", json={"object": obj})
    assert response.status_code == 200, response.text[:600]
    results = response.json()["results"]
    assert sorted(r["role"] for r in results) == ["decode", "prefill"]
    for result in results:
        assert result["verdict"] == ("fits" if fits else "does_not_fit"), result["role"]
        assert result["request"]["gpu"] == "NVIDIA-L4"
    answer = admit(client, review(obj))
    assert answer["allowed"] is fits


def test_an_llm_d_role_label_is_the_preflight_role(client: TestClient) -> None:
    """llm-d's P/D guides label each side's pods `llm-d.ai/role`; the result names that side."""
    results = {}
    for role in ("prefill", "decode"):
        obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": role, "labels": {"llm-d.ai/role": role}},
            "spec": {
                "replicas": 1,
                "template": {
                    "spec": {
                        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                        "containers": [
                            {
                                "name": "vllm",
                                "command": ["vllm", "serve", "Qwen/Qwen3-0.6B"],
                                "args": ["--max-model-len", "8192"],
                                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                            }
                        ],
                    }
                },
            },
        }
        response = client.post("/v1/preflight", json={"object": obj})
        assert response.status_code == 200, response.text[:600]
        (result,) = response.json()["results"]
        results[role] = result
    assert {r: results[r]["role"] for r in results} == {"prefill": "prefill", "decode": "decode"}
    # a 0.6B in bf16 (1.2 GB of weights) at 8192 tokens fits one L4 (24 GB) on either side
    assert all(r["verdict"] == "fits" for r in results.values())
