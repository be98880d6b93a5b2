"""Per-token KV and per-sequence state of the hybrid families, by hand from their configs."""

from __future__ import annotations

from service.catalog.model_catalog import load_model_catalog
from service.estimator.engines.vllm_kv import vllm_groups
from service.estimator.kv_cache import MlaCache, stage_kv_layouts

_CATALOG = load_model_catalog()


def test_qwen3_next_state_and_vllm_pages() -> None:
    arch = _CATALOG.get("Qwen/Qwen3-Next-80B-A3B-Instruct").architecture
    (kv,) = stage_kv_layouts(arch, 2, 1, 1, MlaCache.LATENT)
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
    (kv,) = stage_kv_layouts(arch, 2, 1, 1, MlaCache.LATENT)
    # Every 4th layer is NoPE with global attention; the 36 RoPE layers attend in 8192 chunks.
    assert (kv.full_layers, kv.chunked_layers, kv.chunk) == (12, 36, 8192)
    per = 2 * 8 * 128 * 2
    # transformers caches a chunked layer as a sliding window of the chunk size.
    assert kv.decode_bytes(20_000) == (12 * 20_000 + 36 * 8192) * per
    # vLLM pools chunked-local layers as full attention (hybrid manager off by default).
    g = vllm_groups(kv, 16)
    assert (g.full_groups, g.sliding_groups, g.group_size) == (1, 0, 48)


def test_gemma4_e4b_pages_and_logged_tokens() -> None:
    """Gemma 4 E4B: 42 layers of which the last 18 read earlier caches; the 24 that cache are
    five sliding to one full. A sliding token is 2 KV heads x 256 x (K, V) x 2 bytes, a full
    one the same with 512-wide heads: vLLM grows the sliding block to 32 tokens so that both
    pages are 16 x 4096 bytes (the block sizes LMCache's Gemma 4 recipe reports for E4B:
    sliding 32, full 16), and groups 4 full + 20 sliding layers as 1 + 5 groups of 4."""
    arch = _CATALOG.get("google/gemma-4-E4B-it").architecture
    (kv,) = stage_kv_layouts(arch, 2, 1, 1, MlaCache.LATENT)
    assert (kv.full_layers, kv.sliding_layers, kv.window) == (4, 20, 512)
    assert (kv.layer_token_bytes, kv.sliding_token_bytes) == (2 * 512 * 2 * 2, 2 * 256 * 2 * 2)
    assert kv.full_token_bytes == 4 * 4096 + 20 * 2048
    g = vllm_groups(kv, 16)
    assert (g.block_size, g.sliding_block, g.page_bytes) == (16, 32, 16 * 4096)
    assert (g.group_size, g.full_groups, g.sliding_groups) == (4, 1, 5)
    # A 131072-token request, 2048 tokens per step: 8192 full blocks, and per sliding group
    # ceil((512 - 1 + 2048) / 32) + 1 = 81 blocks.
    assert g.blocks_per_request(131072, 2048) == 8192 + 5 * 81
    # Before 0.21 vLLM logs the pool's blocks per group x the smallest block; from 0.21
    # max_concurrency x max_model_len.
    blocks = 60_000
    assert g.logged_tokens(blocks, 131072, 2048) == blocks // 6 * 16
    later = vllm_groups(kv, 16, tokens_from_concurrency=True)
    assert later.logged_tokens(blocks, 131072, 2048) == int(blocks / (8192 + 405) * 131072)


def test_gemma4_shared_layers_and_k_eq_v() -> None:
    """E2B caches 15 of its 35 layers (the last 20 reuse them); 26B-A4B's full layers hold 2
    global KV heads of 512 (keys serve as values, both cached), its sliding layers 8 of 256:
    there the sliding page is the larger and the full block grows to 32 tokens."""
    e2b = _CATALOG.get("google/gemma-4-E2B-it").architecture
    (kv,) = stage_kv_layouts(e2b, 2, 1, 1, MlaCache.LATENT)
    assert (kv.full_layers, kv.sliding_layers) == (3, 12)
    a26 = _CATALOG.get("google/gemma-4-26B-A4B-it").architecture
    (kv,) = stage_kv_layouts(a26, 2, 1, 1, MlaCache.LATENT)
    assert (kv.full_layers, kv.sliding_layers) == (5, 25)
    assert (kv.layer_token_bytes, kv.sliding_token_bytes) == (2 * 512 * 2 * 2, 8 * 256 * 2 * 2)
    g = vllm_groups(kv, 16)
    assert (g.block_size, g.sliding_block, g.page_bytes) == (32, 16, 16 * 8192)
    assert (g.group_size, g.full_groups, g.sliding_groups) == (5, 1, 5)


def test_deepseek_v32_indexer_keys() -> None:
    """DeepSeek-V3.2 caches per layer the 512 + 64 latent (bf16) and one 128-wide indexer key
    in fp8 with a float32 scale per 128 values (132 bytes); vLLM pages every layer's caches
    together in one group."""
    arch = _CATALOG.get("deepseek-ai/DeepSeek-V3.2").architecture
    (kv,) = stage_kv_layouts(arch, 2, 1, 1, MlaCache.LATENT)
    assert (kv.layer_token_bytes, kv.indexer_layers, kv.indexer_token_bytes) == (1152, 61, 132)
    assert kv.full_token_bytes == 61 * (1152 + 132)
    assert kv.decode_bytes(1000) == 1000 * 61 * (1152 + 132)
    g = vllm_groups(kv, 64)
    assert (g.group_size, g.full_groups, g.page_bytes) == (1, 1, 64 * 61 * 1284)
    assert g.token_bytes == 61 * 1284


def test_kimi_linear_kda_state_in_vllm() -> None:
    """Kimi Delta Attention keeps three short-conv states (q, k, v: heads x head_dim channels
    each, kernel - 1 taps) in the model dtype and a float32 recurrent state of head_dim x
    head_dim per head (vLLM's kda_state_shape / kda_state_dtype); the latent-attention layers
    cache 512 + 64 per token."""
    from service.estimator.model import read_config

    arch = read_config(
        {
            "model_type": "kimi_linear",
            "torch_dtype": "bfloat16",
            "vocab_size": 163840,
            "hidden_size": 2304,
            "intermediate_size": 9216,
            "moe_intermediate_size": 1024,
            "num_hidden_layers": 27,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
        }
    )
    (kv,) = stage_kv_layouts(arch, 2, 1, 1, MlaCache.LATENT)
    # KimiLinearConfig's default layout: full attention on layers 4, 8, ..., 24.
    assert (kv.full_layers, kv.linear_layers) == (6, 21)
    assert kv.layer_token_bytes == (512 + 64) * 2
    conv = 3 * 32 * 128 * 3 * 2
    recurrent = 32 * 128 * 128 * 4
    assert kv.state_bytes(3, 4) == conv + recurrent == 2_170_880
    # The attention block grows to the smallest multiple of 16 tokens whose page holds the
    # state: 16 x ceil(2,170,880 / (16 x 1152)) = 1888 tokens, a page of 1888 x 1152 bytes;
    # 6 attention + 21 KDA layers in groups of 6: one attention group and four state groups.
    g = vllm_groups(kv, 16)
    assert (g.block_size, g.page_bytes) == (1888, 1888 * 1152)
    assert (g.group_size, g.full_groups, g.state_groups) == (6, 1, 4)
