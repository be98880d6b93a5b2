"""Per-token KV and per-sequence state of the hybrid families, by hand from their configs."""

from __future__ import annotations

from service.catalog.model_catalog import load_model_catalog
from service.estimator.engines.vllm_kv import vllm_groups
from service.estimator.kv_cache import stage_kv_layouts

_CATALOG = load_model_catalog()


def test_qwen3_next_state_and_vllm_pages() -> None:
    arch = _CATALOG.get("Qwen/Qwen3-Next-80B-A3B-Instruct").architecture
    (kv,) = stage_kv_layouts(arch, 2, 1, 1, True)
    # 48 layers, full attention every 4th: 12 attention layers, 36 Gated DeltaNet layers.
    assert (kv.full_layers, kv.linear_layers) == (12, 36)
    # K and V: 2 KV heads x 256 x 2 bytes each.
    assert kv.layer_token_bytes == 2 * 2 * 256 * 2
    conv_dim = 2 * 16 * 128 + 32 * 128  # q, k (16 key heads x 128) and v (32 value heads x 128)
    # transformers: 4 conv taps in bf16, a 32 x 128 x 128 float32 recurrent state per layer.
    hf_layer = conv_dim * 4 * 2 + 32 * 128 * 128 * 4
    assert kv.decode_bytes(1000) == 12 * 1000 * 2048 + 36 * hf_layer
    # vLLM: 3 conv taps and the recurrent state, both bf16: 1,097,728 bytes, so the attention
    # block grows to 16 x ceil(1,097,728 / (16 x 2048)) = 544 tokens; 12 attention + 36 state
    # layers make groups of 12: one attention group and three state groups.
    g = vllm_groups(kv, 16)
    assert conv_dim * 3 * 2 + 32 * 128 * 128 * 2 == 1_097_728
    assert (g.block_size, g.group_size, g.full_groups, g.state_groups) == (544, 12, 1, 3)
    assert g.request_bytes(4096, 8192) == (8 + 3) * 544 * 2048 * 12


def test_llama4_chunked_layers() -> None:
    arch = _CATALOG.get("meta-llama/Llama-4-Scout-17B-16E-Instruct").architecture
    (kv,) = stage_kv_layouts(arch, 2, 1, 1, True)
    # Every 4th layer is NoPE with global attention; the 36 RoPE layers attend in 8192 chunks.
    assert (kv.full_layers, kv.chunked_layers, kv.chunk) == (12, 36, 8192)
    per = 2 * 8 * 128 * 2
    # transformers caches a chunked layer as a sliding window of the chunk size.
    assert kv.decode_bytes(20_000) == (12 * 20_000 + 36 * 8192) * per
    # vLLM pools chunked-local layers as full attention (hybrid manager off by default).
    g = vllm_groups(kv, 16)
    assert (g.full_groups, g.sliding_groups, g.group_size) == (1, 0, 48)
