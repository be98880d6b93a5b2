"""Verdicts a scheduler can act on (issue 14), each posted over HTTP.

A verdict is one structured answer: ``fits``, the first ``reason`` that fails, the ``layout``
judged, ``min_gpu_count`` with a ``min_gpu_layout`` the engine runs, and the engine's flags;
the summary is written from those fields and never contradicts them.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.app import create_app
from service.catalog.model_catalog import load_model_catalog
from service.settings import Settings


@pytest.fixture(scope="module")
def api() -> Any:
    app = create_app(Settings(access_log=False, cache_bytes=0))
    with TestClient(app) as client:
        yield client


def infer(api: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    r = api.post("/v1/estimate/inference", json=body)
    assert r.status_code == 200, r.text[:400]
    return r.json()  # type: ignore[no-any-return]


def assert_consistent(answer: dict[str, Any]) -> None:
    fit = answer["fit"]
    assert fit["fits"] == (fit["reason"] == "fits")
    if fit["fits"]:
        assert "does not fit" not in answer["summary"] and "; fits " in answer["summary"]
        assert fit["reason_detail"] == ""
    else:
        assert "does not fit" in answer["summary"]
        assert fit["reason_detail"]
        if fit["min_gpu_count"] is None:
            assert "no GPU count fits" in answer["summary"]
        else:
            assert f"fits on {fit['min_gpu_count']}" in answer["summary"]
    assert (fit["min_gpu_layout_reason"] is None) == (fit["min_gpu_count"] is None)
    if fit["min_gpu_layout"] is not None:
        layout = fit["min_gpu_layout"]
        assert (
            layout["tensor_parallel_size"] * layout["pipeline_parallel_size"]
            == (fit["min_gpu_count"])
        )


def post_back(api: TestClient, body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    layout = answer["fit"]["min_gpu_layout"]
    again = {k: v for k, v in body.items() if k != "gpu_count"}
    again["tensor_parallel_size"] = layout["tensor_parallel_size"]
    again["pipeline_parallel_size"] = layout["pipeline_parallel_size"]
    return infer(api, again)


def test_pool_below_one_sequence_is_the_reason_not_prose(api: TestClient) -> None:
    body = {
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "engine": "vllm",
        "tensor_parallel_size": 2,
        "gpu": "h100",
        "gpu_count": 2,
        # The 0.19 line: 0.9 of the GPU (0.34's extensible cache takes all of it and fits).
        "engine_options": {"max_model_len": 32768, "version": "0.19"},
    }
    answer = infer(api, body)
    fit = answer["fit"]
    assert not fit["fits"] and fit["reason"] == "kv_pool_below_one_sequence"
    assert fit["min_gpu_count"] > 2  # never "fits on 2" next to "does not fit 2"
    assert_consistent(answer)
    assert post_back(api, body, answer)["fit"]["fits"]
    # The flags that fit: the minimal layout at the requested length, as vLLM spells them.
    args = fit["engine_args"]
    assert args[args.index("--max-model-len") + 1] == "32768"
    assert args[args.index("--tensor-parallel-size") + 1] == str(
        fit["min_gpu_layout"]["tensor_parallel_size"]
    )


def test_vllm_defaults_to_the_models_derived_context(api: TestClient) -> None:
    # `vllm serve meta-llama/Llama-3.3-70B-Instruct -tp 2` on two H100s: vLLM sizes for the
    # config's 131072 positions, which that pool cannot hold.
    answer = infer(
        api,
        {
            "model": "meta-llama/Llama-3.3-70B-Instruct",
            "engine": "vllm",
            "tensor_parallel_size": 2,
            "gpu": "h100",
        },
    )
    assert answer["capacity"]["sequence_length"] == 131072
    assert answer["fit"]["reason"] == "kv_pool_below_one_sequence"
    assert_consistent(answer)


def test_a_longer_context_than_the_model_derives_is_refused(api: TestClient) -> None:
    r = api.post(
        "/v1/estimate/inference",
        json={
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "engine": "vllm",
            "engine_options": {"max_model_len": 262144},
        },
    )
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "engine_options.max_model_len"
    assert "131072" in r.json()["detail"]


def test_gpu_count_without_layout_plans_a_runnable_one(api: TestClient) -> None:
    body = {
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "engine": "vllm",
        "gpu": "t4",
        "gpu_count": 12,
        "sequence_length": 32768,
        "engine_options": {"max_model_len": 32768},
    }
    answer = infer(api, body)
    layout = answer["fit"]["layout"]
    plan = (layout["tensor_parallel_size"], layout["pipeline_parallel_size"])
    # 64 heads, 80 layers: the 12-GPU splits are TP 4 × PP 3, TP 2 × PP 6 and TP 1 × PP 12.
    # Judged one by one, the plan is the largest TP among those that fit (T4: 15 GiB each).
    fitting = [
        (tp, pp)
        for tp, pp in ((4, 3), (2, 6), (1, 12))
        if infer(
            api,
            {
                **{k: v for k, v in body.items() if k != "gpu_count"},
                "tensor_parallel_size": tp,
                "pipeline_parallel_size": pp,
            },
        )["fit"]["fits"]
    ]
    assert fitting and plan == fitting[0]
    assert_consistent(answer)
    assert post_back(api, body, answer)["fit"]["fits"]


def test_float32_checkpoints_run_in_16_bits_under_vllm(api: TestClient) -> None:
    # OLMo-2-7B ships float32; vLLM's --dtype auto runs it in bf16 on an L4 (compute 8.9).
    answer = infer(api, {"model": "allenai/OLMo-2-1124-7B", "engine": "vllm", "gpu": "l4"})
    assert answer["details"]["activation_dtype"] == "bf16"
    assert answer["per_gpu"]["breakdown"]["weights"] < 16e9  # 7.3B × 2 bytes, not × 4
    assert answer["fit"]["fits"]
    # On a T4 (compute 7.5, no bf16) the same checkpoint runs in fp16.
    t4 = infer(api, {"model": "allenai/OLMo-2-1124-7B", "engine": "vllm", "gpu": "t4"})
    assert t4["details"]["activation_dtype"] == "fp16"


def test_mig_slices_are_not_pooled(api: TestClient) -> None:
    answer = infer(
        api,
        {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "engine": "vllm",
            "gpu": "h100-sxm-80gb/3g.40gb",
            "gpu_count": 8,
            "tensor_parallel_size": 8,
        },
    )
    assert answer["fit"]["reason"] == "mig_cannot_span" and not answer["fit"]["fits"]
    assert answer["fit"]["min_gpu_layout"] == {
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "data_parallel_size": 1,
        "expert_parallel_size": 1,
    }
    # Replicas on slices are separate processes: that runs.
    replicas = infer(
        api,
        {
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
            "engine": "vllm",
            "gpu": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
            "gpu_count": 4,
            "engine_options": {"max_model_len": 8192},
        },
    )
    assert replicas["fit"]["layout"]["data_parallel_size"] == 4
    assert replicas["fit"]["fits"]


def test_a_finetune_across_mig_slices_cannot_run(api: TestClient) -> None:
    r = api.post(
        "/v1/estimate/finetune",
        json={
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "gpu": "h100-sxm-80gb/1g.10gb",
            "gpu_count": 45,
            "zero_stage": 3,
        },
    )
    fit = r.json()["fit"]
    assert fit["reason"] == "mig_cannot_span" and not fit["fits"]
    assert fit["min_gpu_count"] is None


def test_fp8_weights_on_a_v100_cannot_run(api: TestClient) -> None:
    answer = infer(
        api,
        {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "engine": "vllm",
            "gpu": "v100",
            "weight_format": "fp8",
            "kv_cache_dtype": "fp8",
        },
    )
    assert answer["fit"]["reason"] == "dtype_unsupported"
    assert "7.0" in answer["fit"]["reason_detail"]
    assert answer["fit"]["min_gpu_count"] is None
    assert_consistent(answer)


def test_gpu_by_node_label_and_by_memory(api: TestClient) -> None:
    by_label = infer(
        api, {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "NVIDIA-H100-80GB-HBM3"}
    )
    assert by_label["fit"]["gpu"] == "h100-sxm-80gb"
    by_memory = infer(
        api,
        {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu_memory_bytes": 81559 * 2**20},
    )
    assert by_memory["fit"]["gpu"] == f"memory:{81559 * 2**20}"
    assert by_memory["fit"]["usable_bytes"] < 81559 * 2**20  # the CUDA total, less than smi's
    both = api.post(
        "/v1/estimate/inference",
        json={
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "gpu": "h100",
            "gpu_memory_bytes": 1 << 34,
        },
    )
    assert both.status_code == 422


def test_gpu_count_without_a_gpu_is_a_422_naming_the_field(api: TestClient) -> None:
    r = api.post(
        "/v1/estimate/inference", json={"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu_count": 2}
    )
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "gpu"


def test_an_unknown_batch_kind_fails_that_item_only(api: TestClient) -> None:
    r = api.post(
        "/v1/estimate/batch",
        json={
            "items": [
                {"kind": "training", "request": {"model": "meta-llama/Llama-3.2-1B"}},
                {"kind": "inference", "request": {"model": "meta-llama/Llama-3.2-1B"}},
            ]
        },
    )
    assert r.status_code == 200
    results = r.json()["results"]
    assert results[0]["status"] == 422
    assert results[0]["problem"]["errors"][0]["field"] == "items.0.kind"
    assert results[1]["status"] == 200


def test_every_listed_vllm_option_is_accepted(api: TestClient) -> None:
    # The error that lists an engine's options names only options the schema accepts.
    r = api.post(
        "/v1/estimate/inference",
        json={
            "model": "meta-llama/Llama-3.2-1B",
            "engine": "vllm",
            "engine_options": {"mem_fraction_static": 0.8},
        },
    )
    assert r.status_code == 422
    listed = r.json()["detail"].split("its options: ")[1].split(", ")
    options = {name: 1 for name in listed}
    for name in listed:
        ok = api.post(
            "/v1/estimate/inference",
            json={
                "model": "meta-llama/Llama-3.2-1B",
                "engine": "vllm",
                "engine_options": {name: _valid_value(name)},
            },
        )
        assert ok.status_code == 200, (name, ok.text[:300])
    assert "max_num_seqs" in options


def _valid_value(name: str) -> Any:
    return {
        "gpu_memory_utilization": 0.8,
        "max_model_len": 4096,
        "max_num_batched_tokens": 4096,
        "max_num_seqs": 64,
        "block_size": 32,
        "enforce_eager": True,
        "entrypoint": "llm",
        "dtype": "bfloat16",
        "version": "0.10.1",
        "mxfp4_backend": "marlin",
        "sampler": "flashinfer",
        "limit_mm_per_prompt": 1,
        "all2all_backend": "deepep_low_latency",
        "enable_eplb": True,
        "num_redundant_experts": 0,
        "enable_lora": True,
        "max_loras": 2,
        "max_lora_rank": 32,
        "max_cpu_loras": 4,
        "lora_dtype": "bfloat16",
        "fully_sharded_loras": True,
        "cpu_offload_gb": 1.0,
        "kv_cache_memory_bytes": 2**30,
        "num_gpu_blocks_override": 1000,
        "swap_space": 2.0,
        "kv_offloading_size": 8.0,
        "kv_offloading_backend": "lmcache",
        "moe_dp_chunk_size": 512,
        "kv_connector": "NixlConnector",
        "kv_role": "kv_producer",
        "kv_buffer_device": "cpu",
        "kv_buffer_size": 1e9,
        "kv_connector_host_bytes": 2**30,
    }[name]


_MODELS = [e.id for e in load_model_catalog().all() if e.counts.total < 120e9]
_GPUS = ["h100", "a100-sxm4-80gb", "a100-sxm4-40gb", "l4", "t4", "rtx-4090", "l40s", "h200"]


@pytest.mark.slow
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    model=st.sampled_from(_MODELS),
    gpu=st.sampled_from(_GPUS),
    engine=st.sampled_from(["generic", "transformers", "vllm", "sglang"]),
    length=st.sampled_from([None, 2048, 8192, 32768]),
)
def test_the_minimal_layout_fits_when_posted_back(
    api: TestClient, model: str, gpu: str, engine: str, length: int | None
) -> None:
    body: dict[str, Any] = {"model": model, "gpu": gpu, "engine": engine}
    if length is not None:
        body["sequence_length"] = length
        if engine in ("vllm", "sglang"):
            body["engine_options"] = {"max_model_len": length}
    r = api.post("/v1/estimate/inference", json=body)
    if r.status_code == 422:  # e.g. a length beyond the model's context
        return
    answer = r.json()
    assert_consistent(answer)
    if answer["fit"]["min_gpu_layout"] is not None:
        again = post_back(api, body, answer)
        assert again["fit"]["fits"], (body, answer["fit"], again["fit"])


def test_min_gpu_count_finds_a_window_between_two_doublings(api: TestClient) -> None:
    # Llama 4 Scout on L4 under SGLang, 2 sequences of 4096 tokens with 1000-token prompts:
    # the weights (202 GiB) need more than one node of eight 22 GiB L4s, and SGLang's reserve
    # (tp × pp / 8 GiB per GPU) grows with the stages, so fitting is not monotone in them.
    # Every layout operators run on fewer GPUs (TP 1, 2, 4, 8 alone; TP 8 with fewer stages)
    # is posted back and refused, and the answer is one of that form.
    body = {
        "model": "meta-llama/Llama-4-Scout-17B-16E",
        "engine": "sglang",
        "gpu": "l4",
        "batch_size": 2,
        "sequence_length": 4096,
        "prompt_tokens": 1000,
    }
    answer = infer(api, body)
    assert_consistent(answer)
    count, layout = answer["fit"]["min_gpu_count"], answer["fit"]["min_gpu_layout"]
    assert count is not None and post_back(api, body, answer)["fit"]["fits"]
    tp, pp = layout["tensor_parallel_size"], layout["pipeline_parallel_size"]
    assert tp * pp == count and (pp == 1 or tp == 8)
    smaller = [(t, 1) for t in (1, 2, 4, 8) if t < count]
    smaller += [(8, stages) for stages in range(2, count // 8 + 1) if 8 * stages < count]
    for t, stages in smaller:
        explicit = {**body, "tensor_parallel_size": t, "pipeline_parallel_size": stages}
        assert not infer(api, explicit)["fit"]["fits"], (t, stages)
