"""What vLLM's and SGLang's production options allocate, each worked by hand from the
engines' own code (and DeepEP's), not read back from the estimator: expert parallelism,
DeepEP's buffers, LoRA slots, CPU offload, a fixed KV pool, a draft model, HiCache."""

from __future__ import annotations

from typing import Any

import pytest

from service.estimator.engines.vllm_features import stacked_lora
from service.estimator.engines.vllm_parallel import deepep_low_latency_bytes
from service.estimator.inference import InferenceRequest, estimate_inference, stage_figures
from service.estimator.inference.request import setup_for
from service.estimator.parallel import ExpertLayout
from service.estimator.speculative import Speculative
from service.estimator.units import GIB
from tests.estimator.conftest import catalog_architecture

DEEPSEEK_V3 = "deepseek-ai/DeepSeek-V3"
LLAMA_8B_INSTRUCT = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"
LLAMA_1B = "meta-llama/Llama-3.2-1B-Instruct"


def _request(model: str, **fields: Any) -> InferenceRequest:
    options = {"max_model_len": 8192, **fields.pop("engine_options", {})}
    return InferenceRequest(
        architecture=catalog_architecture(model), engine="vllm", engine_options=options, **fields
    )


def test_deepep_low_latency_buffer_for_deepseek_v3() -> None:
    """DeepEP csrc/config.hpp LowLatencyLayout for 256 tokens per rank (VLLM_MOE_DP_CHUNK_SIZE),
    hidden 7168, 256 experts: dispatch message 16 + max(2·7168, 7168 + 56·4) = 14352 bytes,
    combine message 56·4 + 2·7168 = 14560; send max(256·14352, 256·256·14560), receive
    256·256·max(14352, 14560), signals 256·4 aligned to 128; all twice (odd/even), then
    get_low_latency_rdma_size_hint's round up past 128."""
    combine = 56 * 4 + 2 * 7168
    send = recv = 256 * 256 * combine
    total = 2 * (send + recv + 1024)
    assert deepep_low_latency_bytes(256, 7168, 256) == (total + 128) // 128 * 128
    assert deepep_low_latency_bytes(256, 7168, 256) == 3_816_818_816  # 3.55 GiB


def test_local_experts_follow_determine_expert_map() -> None:
    """vLLM's determine_expert_map: the first (E + R) mod ep ranks hold one more expert."""
    assert ExpertLayout(expert=8).local_experts(256) == 32
    assert ExpertLayout(expert=8, redundant=32).local_experts(256) == 36
    assert ExpertLayout(expert=8).local_experts(257) == 33
    assert ExpertLayout(tensor=8).local_experts(256) == 256  # no EP: every expert, sliced


def test_expert_parallel_keeps_an_eighth_of_deepseek_v3_routed_experts() -> None:
    """DP 8 with --enable-expert-parallel: attention, dense layers, shared experts and
    embeddings are a full copy per DP rank (TP 1), the routed experts split 8 ways. Each
    routed expert of the FP8 checkpoint is 3 × 7168 × 2048 fp8 bytes plus one float32 scale
    per 128 × 128 block (16 × 56 blocks per matrix); 58 MoE layers × 256 experts."""
    per_expert = 3 * 7168 * 2048 + 3 * 16 * 56 * 4
    routed = 58 * 256 * per_expert
    one_gpu = stage_figures(_request(DEEPSEEK_V3))[0].weights
    ep = stage_figures(_request(DEEPSEEK_V3, data_parallel_size=8, expert_parallel=True))[0]
    assert one_gpu - ep.weights == routed * 7 // 8
    assert 90e9 <= ep.weights <= 110e9  # issue 24: ~100 GB per GPU
    # Without EP the experts are cut in width over TP × DP = 8 GPUs instead: the same bytes.
    sliced = stage_figures(_request(DEEPSEEK_V3, data_parallel_size=8))[0]
    assert abs(sliced.weights - ep.weights) < 0.01 * ep.weights


@pytest.mark.parametrize(
    ("model", "layers", "experts", "hidden", "width"),
    [
        # config.json of each (published): num_hidden_layers, num_experts, hidden_size,
        # moe_intermediate_size; every decoder layer holds experts, bf16 weights.
        ("Qwen/Qwen3.5-35B-A3B", 40, 256, 2048, 512),
        ("google/gemma-4-26B-A4B", 30, 128, 2816, 704),
    ],
)
def test_expert_parallel_keeps_each_rank_its_share_of_new_moe_families(
    model: str, layers: int, experts: int, hidden: int, width: int
) -> None:
    """DP 8 with --enable-expert-parallel on the 2026 MoE families: each rank drops 7/8 of
    the routed experts (gate, up, down: 3 x hidden x width bf16 bytes each) and nothing else."""
    routed = layers * experts * 3 * hidden * width * 2
    one_gpu = stage_figures(_request(model))[0].weights
    ep = stage_figures(_request(model, data_parallel_size=8, expert_parallel=True))[0]
    assert one_gpu - ep.weights == routed * 7 // 8


def test_eplb_redundant_experts_add_whole_experts() -> None:
    """32 redundant experts over 8 ranks: 36 instead of 32 experts on each GPU."""
    per_expert = 3 * 7168 * 2048 + 3 * 16 * 56 * 4
    base = _request(DEEPSEEK_V3, data_parallel_size=8, expert_parallel=True)
    eplb = _request(
        DEEPSEEK_V3,
        data_parallel_size=8,
        expert_parallel=True,
        engine_options={"enable_eplb": True, "num_redundant_experts": 32},
    )
    extra = stage_figures(eplb)[0].weights - stage_figures(base)[0].weights
    assert extra == 58 * 4 * per_expert


def test_lora_slots_of_llama_8b_by_hand() -> None:
    """vLLM's stacked slots (lora/layers create_lora_weights): per slot and layer, qkv_proj
    lora_a 3 × 64 × 4096 and lora_b 64 × (4096 + 1024 + 1024); o_proj 64 × 4096 and
    4096 × 64; gate_up_proj 2 × 64 × 4096 and 64 × 2 × 14336; down_proj 64 × 14336 and
    4096 × 64; with the embedding (128256 × 64 + 4096 × 64) and lm_head (64 × 4096 +
    128256 × 64) Llama lists in embedding_modules. Four slots in bf16."""
    arch = catalog_architecture(LLAMA_8B_INSTRUCT)
    layer = (
        3 * 64 * 4096 + 64 * 6144 + 64 * 4096 + 4096 * 64
        + 2 * 64 * 4096 + 64 * 2 * 14336 + 64 * 14336 + 4096 * 64
    )  # fmt: skip
    vocab = 2 * (128256 * 64 + 4096 * 64)
    expected = (32 * layer + vocab) * 4 * 2
    assert expected == 1_477_705_728
    common: dict[str, Any] = dict(
        slots=4, rank=64, cpu_adapters=4, dtype="bf16", fully_sharded=False, vocab=True,
        pp=1, index=0, experts=None, moe_lora=True, engine="vLLM",
    )  # fmt: skip
    one = stacked_lora(arch, tp=1, **common)
    assert one.gpu_bytes == expected
    assert one.host_bytes == expected  # the CPU cache: four whole adapters
    # TP 2: column layers keep the whole input and half the output, row layers the reverse;
    # the vocabulary tables stay whole.
    layer_tp2 = (
        3 * 64 * 4096 + 64 * 3072 + 64 * 2048 + 4096 * 64
        + 2 * 64 * 4096 + 64 * 14336 + 64 * 7168 + 4096 * 64
    )  # fmt: skip
    two = stacked_lora(arch, tp=2, **common)
    assert two.gpu_bytes == (32 * layer_tp2 + vocab) * 4 * 2
    assert two.host_bytes == expected  # whole adapters, per worker


def test_lora_slots_come_out_of_the_kv_pool() -> None:
    """Allocated before the KV cache is sized: the pool shrinks by exactly the slots."""
    h100 = 85_029_615_043  # cudaMemGetInfo total of an H100 80GB (GPU catalog)
    plain = _request(LLAMA_8B_INSTRUCT, gpu_memory_bytes=h100)
    lora = _request(
        LLAMA_8B_INSTRUCT,
        gpu_memory_bytes=h100,
        engine_options={"enable_lora": True, "max_loras": 4, "max_lora_rank": 64},
    )
    drop = stage_figures(plain)[0].kv_pool_bytes - stage_figures(lora)[0].kv_pool_bytes  # type: ignore[operator]
    assert drop == 1_477_705_728  # the slots of the test above
    assert 1.1e9 <= drop <= 1.8e9  # issue 24's range


def test_cpu_offload_of_70b_moves_whole_parameters_in_layer_order() -> None:
    """--cpu-offload-gb 80 (vLLM maybe_offload_to_cpu / the UVA offloader): each decoder
    layer's parameters in module order (qkv_proj 10240 × 8192, o_proj 8192 × 8192,
    gate_up_proj 57344 × 8192, down_proj 8192 × 28672, two norms of 8192, in bf16) move to host
    memory until 80 GiB is reached, the last one overshooting: 50 whole layers, then layer 51's
    qkv_proj, o_proj and gate_up_proj."""
    qkv, o, gate_up, down = (2 * 10240 * 8192, 2 * 8192 * 8192, 2 * 57344 * 8192, 2 * 8192 * 28672)
    layer = qkv + o + gate_up + down + 2 * 2 * 8192
    budget = 80 * GIB
    assert 50 * layer + qkv + o < budget <= 50 * layer + qkv + o + gate_up
    moved = 50 * layer + qkv + o + gate_up
    embeddings = 2 * 2 * 128256 * 8192  # embed_tokens and the untied lm_head
    rope = 2 * 131072 * 128  # vLLM's rotary cos/sin cache
    on_gpu = embeddings + 80 * layer + 2 * 8192 + rope - moved
    req = _request(LLAMA_70B, engine_options={"cpu_offload_gb": 80})
    assert stage_figures(req)[0].weights == on_gpu
    assert 54e9 <= on_gpu <= 57e9  # issue 24's range
    assert setup_for(req).host_per_gpu == (moved,)


def test_fixed_kv_pool_is_what_was_asked() -> None:
    h100 = 85_029_615_043
    pool = 20 * GIB
    req = _request(
        LLAMA_8B_INSTRUCT, gpu_memory_bytes=h100, engine_options={"kv_cache_memory_bytes": pool}
    )
    assert setup_for(req).stages[0].kv_pool == pool


def test_draft_model_adds_its_weights_and_kv_at_the_target_tp() -> None:
    """A Llama-3.2-1B draft beside a 70B at TP 4 (draft_tensor_parallel_size defaults to the
    target's): its 1,235,814,400 parameters, all sharded over 4 but its 16 × 2 + 1 norms of
    2048 (tied embedding counted once), in bf16; its KV per token on one GPU: 16 layers × 2 of
    8 KV heads × 64 × (K and V) × 2 bytes."""
    norms = (16 * 2 + 1) * 2048
    draft_weights = 2 * ((1_235_814_400 - norms) // 4 + norms)
    draft_kv = 16 * 2 * 64 * 2 * 2
    target = _request(LLAMA_70B, tensor_parallel_size=4)
    spec = Speculative(method="draft_model", num_tokens=3, draft=catalog_architecture(LLAMA_1B))
    with_draft = _request(LLAMA_70B, tensor_parallel_size=4, speculative=spec)
    assert stage_figures(with_draft)[0].weights - stage_figures(target)[0].weights == (
        draft_weights
    )
    per_token = "kv_cache_bytes_per_token_per_gpu"
    added = estimate_inference(with_draft).details[per_token]
    assert added - estimate_inference(target).details[per_token] == draft_kv


def _sglang(model: str, **fields: Any) -> InferenceRequest:
    options = {"context_length": 8192, **fields.pop("engine_options", {})}
    return InferenceRequest(
        architecture=catalog_architecture(model), engine="sglang", engine_options=options, **fields
    )


def test_sglang_lora_buffers_have_no_vocabulary_slots() -> None:
    """SGLang's LoRAMemoryPool.init_buffers: max_loras_per_batch buffers of the largest rank
    on the linear modules (A [slots, r × stacked, in], B [slots, out, r]); no embedding or
    lm_head. Eight rank-64 buffers on Llama-3.1-8B at TP 1, bf16: 32 layers × the per-layer
    elements of the vLLM test above."""
    layer = (
        3 * 64 * 4096 + 64 * 6144 + 64 * 4096 + 4096 * 64
        + 2 * 64 * 4096 + 64 * 2 * 14336 + 64 * 14336 + 4096 * 64
    )  # fmt: skip
    plain = stage_figures(_sglang(LLAMA_8B_INSTRUCT))[0].weights
    lora = _sglang(
        LLAMA_8B_INSTRUCT,
        engine_options={"enable_lora": True, "max_loras_per_batch": 8, "max_lora_rank": 64},
    )
    assert stage_figures(lora)[0].weights - plain == 32 * layer * 8 * 2


def test_sglang_hicache_holds_its_ratio_of_the_pool_in_host_memory() -> None:
    """HiCache's host pool (mem_cache/memory_pool_host.py): hicache_ratio × the device pool's
    tokens at the same bytes per token; --hicache-size GB overrides the ratio."""
    h100 = 85_029_615_043
    base = _sglang(LLAMA_8B_INSTRUCT, gpu_memory_bytes=h100)
    pool = estimate_inference(base).capacity.kv_cache_pool_bytes  # type: ignore[union-attr]
    ratio = _sglang(
        LLAMA_8B_INSTRUCT,
        gpu_memory_bytes=h100,
        engine_options={"enable_hierarchical_cache": True, "hicache_ratio": 2.0},
    )
    assert setup_for(ratio).host_per_gpu == (2 * pool,)
    sized = _sglang(
        LLAMA_8B_INSTRUCT,
        gpu_memory_bytes=h100,
        engine_options={"enable_hierarchical_cache": True, "hicache_size": 100},
    )
    assert setup_for(sized).host_per_gpu == (100 * 10**9,)


def test_sglang_max_total_tokens_caps_the_pool() -> None:
    h100 = 85_029_615_043
    req = _sglang(
        LLAMA_8B_INSTRUCT, gpu_memory_bytes=h100, engine_options={"max_total_tokens": 50_000}
    )
    assert estimate_inference(req).capacity.kv_cache_tokens == 50_000  # type: ignore[union-attr]


def test_sglang_dp_attention_with_ep_keeps_an_eighth_of_the_experts() -> None:
    """--tp 8 --dp 8 --enable-dp-attention --ep-size 8 (the estimate's TP 1 × DP 8): attention
    a full copy per GPU, routed experts divided among 8 ranks (moe_ep_size 8, moe_tp_size 1)."""
    per_expert = 3 * 7168 * 2048 + 3 * 16 * 56 * 4
    one_gpu = stage_figures(_sglang(DEEPSEEK_V3))[0].weights
    dp_attention = _sglang(
        DEEPSEEK_V3,
        data_parallel_size=8,
        engine_options={"enable_dp_attention": True, "ep_size": 8},
    )
    assert one_gpu - stage_figures(dp_attention)[0].weights == 58 * 256 * per_expert * 7 // 8
