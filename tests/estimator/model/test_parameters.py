"""Parameter counts against hand calculations written out here (no torch needed)."""

from __future__ import annotations

from service.estimator.model import count_parameters, read_config
from tests.estimator.conftest import LLAMA_8B, catalog_architecture, catalog_config


def test_llama_31_8b_by_hand() -> None:
    h, inter, layers, vocab, kv = 4096, 14336, 32, 128256, 8 * 128
    attention = layers * (h * h + 2 * h * kv + h * h)  # q, k, v, o
    mlp = layers * 3 * h * inter  # gate, up, down
    norms = layers * 2 * h + h  # two per layer and the final norm
    embeddings = lm_head = vocab * h
    counts = count_parameters(catalog_architecture(LLAMA_8B))
    assert dict(counts.by_component) == {
        "embeddings": embeddings,
        "attention": attention,
        "mlp": mlp,
        "norms": norms,
        "lm_head": lm_head,
    }
    assert counts.total == counts.active == 8_030_261_248


def test_tied_embeddings_counted_once() -> None:
    tied = count_parameters(read_config({**catalog_config(LLAMA_8B), "tie_word_embeddings": True}))
    assert "lm_head" not in tied.by_component
    assert tied.total == 8_030_261_248 - 128256 * 4096


def test_qwen_7b_remote_code_by_hand() -> None:
    # modeling_qwen.py: c_attn (h -> 3h, bias), c_proj (no bias), w1/w2 (h -> 11008), c_proj.
    config = {
        "model_type": "qwen",
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "kv_channels": 128,
        "vocab_size": 151936,
        "no_bias": True,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    h, ff = 4096, 11008
    per_layer = (h * 3 * h + 3 * h) + h * h + 3 * h * ff + 2 * h
    total = 32 * per_layer + h + 2 * 151936 * h
    counts = count_parameters(read_config(config))
    assert counts.total == total == 7_721_324_544


def test_mixtral_active_is_two_of_eight_experts() -> None:
    config = {
        **catalog_config(LLAMA_8B),
        "model_type": "mixtral",
        "architectures": ["MixtralForCausalLM"],
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    counts = count_parameters(read_config(config))
    expert = 3 * 4096 * 14336
    assert counts.by_component["experts"] == 32 * 8 * expert
    assert counts.total - counts.active == 32 * 6 * expert
    assert counts.by_component["router"] == 32 * 8 * 4096


def test_deepseek_v3_buffers_not_parameters() -> None:
    config = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "vocab_size": 129280,
        "torch_dtype": "bfloat16",
    }
    counts = count_parameters(read_config(config))
    assert counts.buffers == 58 * 256  # e_score_correction_bias on the 58 MoE layers
    routed = 58 * 256 * 3 * 7168 * 2048
    assert counts.by_component["experts"] == routed
    assert counts.total - counts.active == routed // 256 * (256 - 8)


def test_components_sum_to_total() -> None:
    counts = count_parameters(catalog_architecture(LLAMA_8B))
    assert sum(counts.by_component.values()) == counts.total
    assert counts.non_embedding == counts.total - 128256 * 4096
