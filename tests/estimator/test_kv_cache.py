"""KV-cache sizing: per-token bytes, TP replication, the DynamicCache layout of sliding layers."""

from __future__ import annotations

from service.estimator.kv_cache import MlaCache, per_layer_token_bytes, stage_kv_layouts
from service.estimator.model import read_config
from tests.estimator.conftest import LLAMA_8B, catalog_architecture

GEMMA3 = {
    "model_type": "gemma3_text",
    "hidden_size": 5376,
    "intermediate_size": 21504,
    "num_hidden_layers": 62,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "head_dim": 128,
    "vocab_size": 262208,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
}
MLA = {
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 102400,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 64,
    "num_experts_per_tok": 6,
    "n_shared_experts": 2,
    "first_k_dense_replace": 1,
    "torch_dtype": "bfloat16",
}


def test_gqa_per_token() -> None:
    a = catalog_architecture(LLAMA_8B)
    # 2 (K,V) × 8 heads × 128 × 2 bytes per layer; × 32 layers = 131072 bytes per token.
    assert per_layer_token_bytes(a, 2) * 32 == 131072
    assert per_layer_token_bytes(a, 1) * 32 == 65536  # fp8
    assert per_layer_token_bytes(a, 2, tp=2) == 2 * 4 * 128 * 2
    # TP 16 > 8 KV heads: one head replicated per rank.
    assert per_layer_token_bytes(a, 2, tp=16) == 2 * 1 * 128 * 2


def test_mla_latent_not_split_by_tp() -> None:
    a = read_config(MLA)
    assert per_layer_token_bytes(a, 2, tp=4) == (512 + 64) * 2
    # transformers caches decompressed K (16 × 192) and V (16 × 128)
    assert per_layer_token_bytes(a, 2, mla_cache=MlaCache.HEADS) == 16 * (192 + 128) * 2
    assert per_layer_token_bytes(a, 2, mla_cache=MlaCache.HEADS_PADDED_V) == 16 * (192 + 192) * 2


def test_transformers_sliding_cache() -> None:
    a = read_config(GEMMA3)
    (stage,) = stage_kv_layouts(a, 2, 1, 1, MlaCache.HEADS)
    per = 2 * 16 * 128 * 2
    assert stage.prefill_bytes(4096) == 62 * 4096 * per
    assert stage.decode_bytes(4096) == (10 * 4096 + 52 * 1024) * per
