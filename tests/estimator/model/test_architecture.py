"""Building and validating Architecture from Hugging Face configs."""

from __future__ import annotations

import pytest

from service.estimator.errors import InvalidConfig, UnsupportedArchitecture
from service.estimator.model import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    SUPPORTED_MODEL_TYPES,
    read_config,
)

BASE = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
}


def build(**kw):
    return read_config({**BASE, **kw})


def test_llama_fields() -> None:
    a = build()
    assert (a.head_dim, a.v_head_dim, a.num_kv_heads) == (128, 128, 8)
    assert a.gated_mlp and a.norm == "rmsnorm" and a.dtype == "bfloat16"
    assert a.layer_types == (FULL_ATTENTION,) * 32
    assert a.moe is None and a.mla is None and a.quantization is None
    names = [m.name for m in a.linear_modules]
    assert names == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "lm_head",
    ]


def test_explicit_head_dim_wins() -> None:  # Mistral-Nemo: 5120 / 32 heads, head_dim 128
    a = build(model_type="mistral", hidden_size=5120, head_dim=128, sliding_window=None)
    assert a.head_dim == 128
    q = next(m for m in a.linear_modules if m.name == "q_proj")
    assert (q.in_features, q.out_features) == (5120, 4096)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hidden_size": 0}, "hidden_size"),
        ({"hidden_size": -4096}, "hidden_size"),
        ({"hidden_size": 100_000}, "hidden_size"),
        ({"num_hidden_layers": 5000}, "num_hidden_layers"),
        ({"vocab_size": 10**8}, "vocab_size"),
        ({"hidden_size": "4096"}, "hidden_size"),
        ({"hidden_size": True}, "hidden_size"),
        ({"hidden_size": 4096.5}, "hidden_size"),
        ({"hidden_size": 4100}, "head_dim"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"torch_dtype": "int7"}, "torch_dtype"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ],
)
def test_invalid_configs(change, field) -> None:
    with pytest.raises(InvalidConfig) as err:
        build(**change)
    assert err.value.field == field


def test_missing_required_field() -> None:
    config = {k: v for k, v in BASE.items() if k != "vocab_size"}
    with pytest.raises(InvalidConfig) as err:
        read_config(config)
    assert err.value.field == "vocab_size"


def test_too_many_experts() -> None:
    with pytest.raises(InvalidConfig):
        build(model_type="mixtral", num_local_experts=4096, num_experts_per_tok=2)
    with pytest.raises(InvalidConfig):
        build(model_type="mixtral", num_local_experts=4, num_experts_per_tok=8)


def test_unsupported_model_type_lists_supported() -> None:
    config = {k: v for k, v in BASE.items() if k != "intermediate_size"}
    with pytest.raises(UnsupportedArchitecture) as err:
        read_config({**config, "model_type": "bert"})
    assert err.value.field == "intermediate_size"
    assert "llama" in err.value.detail and "deepseek_v3" in err.value.detail
    assert "qwen" in SUPPORTED_MODEL_TYPES


def test_not_a_mapping() -> None:
    with pytest.raises(InvalidConfig):
        read_config([1, 2])  # type: ignore[arg-type]


def test_text_config_wrapper_inner_type_wins() -> None:
    a = read_config(
        {
            "model_type": "gemma3",
            "torch_dtype": "bfloat16",
            "text_config": {
                **BASE,
                "model_type": "gemma3_text",
                "head_dim": 256,
                "sliding_window": 1024,
                "num_hidden_layers": 12,
            },
        }
    )
    assert a.model_type == "gemma3_text" and a.wrapper_model_type == "gemma3"
    assert a.dtype == "bfloat16" and a.tie_word_embeddings is True
    # sliding_window_pattern 6: layers 5 and 11 are global
    assert [i for i, t in enumerate(a.layer_types) if t == FULL_ATTENTION] == [5, 11]


def test_gemma2_alternates_and_has_four_norms() -> None:
    a = build(model_type="gemma2", head_dim=256, num_hidden_layers=4, sliding_window=4096)
    assert a.layer_types == (SLIDING_ATTENTION, FULL_ATTENTION) * 2
    assert a.norms_per_layer == 4


def test_qwen2_sliding_layers_from_max_window_layers() -> None:
    a = build(
        model_type="qwen2",
        num_hidden_layers=6,
        use_sliding_window=True,
        sliding_window=4096,
        max_window_layers=4,
    )
    assert a.layer_types == (FULL_ATTENTION,) * 4 + (SLIDING_ATTENTION,) * 2
    off = build(model_type="qwen2", sliding_window=4096, use_sliding_window=False)
    assert off.sliding_window is None and off.num_sliding_layers == 0


def test_layer_types_validated() -> None:
    with pytest.raises(InvalidConfig):
        build(model_type="gpt_oss", num_hidden_layers=2, layer_types=["full_attention"])
    with pytest.raises(InvalidConfig):
        build(model_type="gpt_oss", num_hidden_layers=1, layer_types=["chunked"])


def test_moe_layer_selection() -> None:
    a = build(
        model_type="qwen2_moe",
        num_hidden_layers=8,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=128,
        decoder_sparse_step=2,
        mlp_only_layers=[3],
    )
    assert a.moe_layers == (1, 5, 7)
    assert a.is_moe_layer(1) and not a.is_moe_layer(3) and not a.is_moe_layer(0)
    experts = next(m for m in a.linear_modules if m.name == "experts.gate_up_proj")
    assert (experts.count, experts.active_count) == (3 * 8, 3 * 2)
    assert not experts.is_nn_linear


def test_deepseek_first_k_dense_and_mla() -> None:
    a = build(
        model_type="deepseek_v3",
        q_lora_rank=None,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        n_routed_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
        n_shared_experts=1,
        first_k_dense_replace=3,
        num_hidden_layers=6,
        num_key_value_heads=32,
    )
    assert a.moe_layers == (3, 4, 5)
    assert a.head_dim == 192 and a.v_head_dim == 128
    assert a.mla is not None and a.mla.q_lora_rank is None
    names = {m.name for m in a.linear_modules}
    assert {"q_proj", "kv_a_proj_with_mqa", "kv_b_proj"} <= names and "q_a_proj" not in names


def test_quantization_parsing() -> None:
    gptq = build(
        quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}
    ).quantization
    assert gptq is not None and (gptq.method, gptq.bits, gptq.group_size) == ("gptq", 4, 128)
    bnb = build(
        quantization_config={
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True,
        }
    ).quantization
    assert bnb is not None and bnb.quant_type == "nf4" and bnb.double_quant
    mx = build(
        quantization_config={
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.embed_tokens", "lm_head"],
        }
    ).quantization
    assert mx is not None
    assert not mx.is_quantized("model.layers.3.self_attn.q_proj")
    assert mx.is_quantized("model.layers.3.mlp.experts.gate_up_proj")
    assert not mx.is_quantized("lm_head")
    ct = build(
        quantization_config={
            "quant_method": "compressed-tensors",
            "ignore": ["lm_head"],
            "config_groups": {
                "g": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "int",
                        "strategy": "group",
                        "group_size": 128,
                    },
                }
            },
        }
    ).quantization
    assert ct is not None and (ct.bits, ct.group_size) == (4, 128)
    with pytest.raises(InvalidConfig):
        build(quantization_config={"quant_method": "hqq-magic"})


GEMMA2 = {
    "model_type": "gemma2",
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "num_hidden_layers": 42,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "vocab_size": 256000,
    "torch_dtype": "bfloat16",
}


def test_softcapping_read_from_config_and_defaults() -> None:
    # google/gemma-2-9b config.json: attn_logit_softcapping 50.0, final_logit_softcapping 30.0.
    a = read_config({**GEMMA2, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0})
    assert (a.attn_logit_softcapping, a.final_logit_softcapping) == (50.0, 30.0)
    # Omitted: transformers' Gemma2Config defaults (50, 30), recorded as assumptions.
    d = read_config(GEMMA2)
    assert (d.attn_logit_softcapping, d.final_logit_softcapping) == (50.0, 30.0)
    assert any("final_logit_softcapping" in line for line in d.assumptions)
    # null switches it off; an integer cap is read as a float.
    off = read_config({**GEMMA2, "attn_logit_softcapping": None, "final_logit_softcapping": 30})
    assert off.attn_logit_softcapping is None and off.final_logit_softcapping == 30.0
    # Gemma 3 configs carry null (Gemma3TextConfig's default): off.
    g3 = read_config({**GEMMA2, "model_type": "gemma3_text", "final_logit_softcapping": None})
    assert (g3.attn_logit_softcapping, g3.final_logit_softcapping) == (None, None)
    # Families whose transformers model has no softcapping ignore the keys.
    assert build(final_logit_softcapping=30.0).final_logit_softcapping is None


@pytest.mark.parametrize("value", [0, -5.0, "30", True, float("nan"), float("inf")])
def test_softcapping_validated(value) -> None:
    with pytest.raises(InvalidConfig) as err:
        read_config({**GEMMA2, "final_logit_softcapping": value})
    assert err.value.field == "final_logit_softcapping"


def test_attention_softmax_fp32() -> None:
    # transformers' eager_attention_forward: softmax(dtype=float32) for every family it builds.
    assert build().attention_softmax_fp32 is True
    qwen = {
        "model_type": "qwen",
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "vocab_size": 151936,
        "seq_length": 8192,
        "bf16": True,
    }
    # Qwen-1's QWenConfig: softmax_in_fp32 False by default.
    assert read_config(qwen).attention_softmax_fp32 is False
    on = read_config({**qwen, "softmax_in_fp32": True})
    assert on.attention_softmax_fp32 is True
    with pytest.raises(InvalidConfig):
        read_config({**qwen, "softmax_in_fp32": "yes"})


def test_assumptions_record_defaults() -> None:
    a = read_config({k: v for k, v in BASE.items() if k != "torch_dtype"})
    assert a.dtype == "float32"
    assert any("torch_dtype" in line for line in a.assumptions)


def test_as_dict_is_plain_and_says_what_was_read() -> None:
    """The architecture as the API shows it: plain JSON values, round-tripping through JSON,
    with the fields the config gave (Mixtral: 8 experts, 2 per token)."""
    import json

    plain = build(model_type="mixtral", num_local_experts=8, num_experts_per_tok=2).as_dict()
    assert json.loads(json.dumps(plain)) == plain
    assert plain["model_type"] == "mixtral"
    assert plain["hidden_size"] == BASE["hidden_size"]
    assert plain["num_layers"] == BASE["num_hidden_layers"]
    assert plain["moe"]["num_experts"] == 8 and plain["moe"]["experts_per_token"] == 2


def test_equal_architectures_hash_alike_and_the_hash_is_kept() -> None:
    """Architectures key the estimator's caches: two built from one config must be equal and
    hash alike, a different config must not collide here, and the hash is computed once."""
    a, b = build(), build()
    assert a is not b and a == b and hash(a) == hash(b)
    other = build(num_hidden_layers=3)
    assert other != a and hash(other) != hash(a)
    assert a.__dict__["_cached_hash"] == hash(a)
