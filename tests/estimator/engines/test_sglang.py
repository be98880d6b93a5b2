"""SGLang's budget, pool, slack and hybrid pool, each worked by hand.

Sources (public repository sgl-project/sglang at the release's tag):
``python/sglang/srt/model_executor/model_runner.py`` (``profile_max_num_token``: the pool is
``F1 − F0 · (1 − mem_fraction_static)``, ``F0`` the memory free before the weights load;
``init_memory_pool``: request slots and the req_to_token table), 0.5.23's
``mem_cache/kv_cache_configurator.py`` (the same rule, ``_profile_available_bytes``) and
``configs/model_config.py`` (``is_hybrid_swa_model``; ``swa_full_tokens_ratio`` 0.8).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.estimator.engines import get_engine
from service.estimator.engines.sglang import SglangEngine
from service.estimator.errors import InvalidRequest
from service.estimator.gpu import GpuSpec
from service.estimator.inference import InferenceRequest
from service.estimator.inference.fit import fit_inference
from service.estimator.inference.request import setup_for
from service.estimator.result import FitReason
from tests.estimator.conftest import LLAMA_8B, catalog_architecture

GIB, MIB = 2**30, 2**20
# An H100 as nvidia-smi (81559 MiB) and CUDA (here a round 80 GiB) see it.
H100 = GpuSpec("h100", "H100", 80 * GIB, (9, 0), True, True, driver_total_bytes=81559 * MIB)
# Llama-3.1-8B: 8,030,261,248 parameters in bf16 (the model card's count); 32 layers x 8 KV
# heads x 128 x 2 (K, V) x 2 bytes = 131072 bytes per token.
LLAMA_WEIGHTS = 8_030_261_248 * 2
LLAMA_CELL = 32 * 8 * 128 * 2 * 2


def _request(model: str = LLAMA_8B, **options: Any) -> InferenceRequest:
    return InferenceRequest(
        architecture=catalog_architecture(model),
        engine="sglang",
        sequence_length=None,
        engine_options=options,
        gpu=H100,
        gpu_memory_bytes=H100.total_bytes,
    )


def _engine() -> SglangEngine:
    engine = get_engine("sglang")
    assert isinstance(engine, SglangEngine)
    return engine


def test_fraction_applies_to_memory_free_at_start() -> None:
    # 0.5.2 on an H100 at TP 1: mem_fraction_static 0.874 (line D); F0 = 80 GiB less the CUDA
    # context (no NCCL at TP 1; the GpuSpec names no SMs: the reference H100 SXM's 132 × 2048
    # resident threads × 2060 B); the pool is what F0 x 0.874 leaves after the weights.
    setup = setup_for(_request(version="0.5.2"))
    assert setup.settings["mem_fraction_static"] == 0.874
    free = 80 * GIB - 132 * 2048 * 2060
    budget = int(free * 0.874)
    assert setup.usable(H100.total_bytes) == budget
    assert setup.stages[0].weights == LLAMA_WEIGHTS
    pool = _engine().pool(setup, H100.total_bytes)
    assert (pool.free_at_start, pool.cell) == (free, LLAMA_CELL)
    assert pool.tokens == (budget - LLAMA_WEIGHTS) // LLAMA_CELL


def test_request_table_lives_in_the_slack() -> None:
    # Context 131072 (Llama 3.1's own, a llama3 rope: no factor); (0.874 x 79.5 - 14.96) GiB
    # / 128 KiB = about 447k tokens give 447k / 131072 * 512 = 1745 slots, raised to 2048;
    # 0.5.2 allocates no spare row:
    # 2048 x (131072 + 4) x 4 bytes.
    setup = setup_for(_request(version="0.5.2"))
    pool = _engine().pool(setup, H100.total_bytes)
    assert 440_000 < pool.tokens < 450_000
    assert pool.max_num_reqs == 2048
    assert setup.outside_budget.request_table == 2048 * 131076 * 4
    # 0.5.12 allocates the spare row again
    later = setup_for(_request(version="0.5.12"))
    assert later.outside_budget.request_table == 2049 * 131076 * 4


def test_defaults_follow_the_layout_judged() -> None:
    # Line A's table by TP: 0.88 at TP 1, 0.81 at TP 8 (0.4.0).
    req = _request(version="0.4.0")
    assert setup_for(req).settings["mem_fraction_static"] == 0.88
    assert setup_for(req, 8, 1).settings["mem_fraction_static"] == 0.81


def test_slack_too_small_is_outside_budget_exceeded() -> None:
    # At 0.99 the slack is 1 % of ~79.5 GiB = 0.8 GiB; the 128k context's req_to_token table
    # alone is 1.0 GiB: SGLang would fail after sizing its pool.
    req = _request(mem_fraction_static=0.99)
    fit = fit_inference(req, "h100", 1)
    assert fit.reason is FitReason.OUTSIDE_BUDGET_EXCEEDED
    assert _request().engine_options == {}
    assert fit_inference(_request(), "h100", 1).reason is FitReason.FITS


def test_weights_beyond_the_budget_refuse() -> None:
    # SGLang's 'Not enough memory': the weights alone exceed F0 x fraction.
    fit = fit_inference(_request(mem_fraction_static=0.15), "h100", 1)
    assert fit.reason is FitReason.WEIGHTS_EXCEED_MEMORY


def test_pool_shorter_than_the_context_still_starts() -> None:
    # SGLang limits a request to the pool instead of refusing: at a 2048-token sequence the
    # workload fits even when the pool holds fewer than context_length tokens.
    req = _request(mem_fraction_static=0.215)
    setup = setup_for(req)
    pool = _engine().pool(setup, H100.total_bytes)
    assert 0 < pool.tokens < 131072
    short = InferenceRequest(**{**req.__dict__, "sequence_length": 2048})
    assert fit_inference(short, "h100", 1).reason is FitReason.FITS


def test_hybrid_pool_by_release() -> None:
    # gpt-oss-20b: 12 sliding + 12 full layers, 8 KV heads x 64 x 2 x 2 bytes = 2048 per layer.
    # Hybrid (0.5.23, a listed architecture): 2048 x (12 + 0.8 x 12) = 44236.8 per full slot.
    oss = setup_for(_request("openai/gpt-oss-20b"))
    assert _engine().pool(oss, H100.total_bytes).cell == pytest.approx(44236.8)
    # A 100-token sequence needs 100 full slots and 100 of the 0.8-sized sliding share:
    # max(100, 100 / 0.8) = 125 slots; a 4096-token one 4096 (its window is 128).
    stage = oss.stages[0]
    assert _engine().sequence_cost(oss, stage, 100, 100)[0] == 125 * 2048 * 216 // 10
    assert _engine().sequence_cost(oss, stage, 4096, 4096)[0] == -(-4096 * 2048 * 216 // 10)
    # 0.4.9 has no hybrid pool: every layer holds every token, 2048 x 24.
    plain = setup_for(_request("openai/gpt-oss-20b", version="0.4.9"))
    assert _engine().pool(plain, H100.total_bytes).cell == 2048 * 24
    # Gemma 2 (8 KV heads x 256, 21 of 42 layers sliding): hybrid in 0.5.6, plain from 0.5.8.
    per_layer = 8 * 256 * 2 * 2
    g6 = setup_for(_request("google/gemma-2-9b", version="0.5.6"))
    g8 = setup_for(_request("google/gemma-2-9b", version="0.5.8"))
    assert _engine().pool(g6, H100.total_bytes).cell == pytest.approx(per_layer * 37.8)
    assert _engine().pool(g8, H100.total_bytes).cell == per_layer * 42


def test_version_assumptions_and_bad_version() -> None:
    setup = setup_for(_request(version="0.5.9"))
    assert any("not among the releases read" in a for a in setup.assumptions)
    assert any("line E" in a for a in setup.assumptions)
    with pytest.raises(InvalidRequest) as e:
        setup_for(_request(version="latest"))
    assert e.value.field == "engine_options.version"


def test_engine_args_carry_the_derived_fraction() -> None:
    fit = fit_inference(_request(version="0.5.2", context_length=8192), "h100", 1)
    assert fit.engine_args is not None
    args = list(fit.engine_args)
    assert args[args.index("--mem-fraction-static") + 1] == "0.874"
    assert "--max-running-requests" not in args


def test_api_names_a_bad_version(client: TestClient) -> None:
    response = client.post(
        "/v1/estimate/inference",
        json={
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "engine": "sglang",
            "engine_options": {"version": "newest"},
        },
    )
    assert response.status_code == 422
    assert "engine_options.version" in response.text


def test_a_pcie_board_holds_channel_buffers_not_the_nvswitch_figure() -> None:
    # Issue 26: QwQ-32B at TP 4 on 4 x L4 (SGLang 0.4.3, chunked prefill 2048, fraction 0.85).
    # The TP group's two communicators (SGLang's PyNccl and torch's process group) on a PCIe
    # board: NCCL's channel buffers per peer, 64 MiB each way per communicator (calibration
    # register, nccl.pp_peer_bytes), 2 x 3 x 64 MiB; an H100 SXM board keeps the NVSwitch
    # figure fitted on vLLM (1832 MiB + 40 MiB per extra peer).
    l4 = GpuSpec("l4", "NVIDIA L4 24GB", 22 * GIB, (8, 9), True, True, multiprocessors=58)
    sxm = GpuSpec("h100", "H100 SXM", 80 * GIB, (9, 0), True, True, multiprocessors=132)
    for gpu, nccl in ((l4, 2 * 3 * 64 * MIB), (sxm, 1832 * MIB + 3 * 40 * MIB)):
        request = InferenceRequest(
            architecture=catalog_architecture("Qwen/QwQ-32B"),
            engine="sglang",
            sequence_length=None,
            tensor_parallel_size=4,
            engine_options={"version": "0.4.3", "mem_fraction_static": 0.85},
            gpu=gpu,
            gpu_memory_bytes=gpu.total_bytes,
        )
        setup = setup_for(request)
        assert setup.outside_budget.nccl == nccl
        context = setup.outside_budget.cuda_context
        assert _engine().free_at_start(setup, gpu.total_bytes) == gpu.total_bytes - context - nccl
