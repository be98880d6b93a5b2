"""Building and validating Architecture from Hugging Face configs."""

from __future__ import annotations

import pytest

from service.estimator.architecture import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    SUPPORTED_MODEL_TYPES,
    Architecture,
)
from service.estimator.errors import InvalidConfig, UnsupportedArchitecture

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
    return Architecture.from_hf_config({**BASE, **kw})


def test_llama_fields() -> None:
    a = build()
    assert (a.head_dim, a.v_head_dim, a.num_kv_heads) == (128, 128, 8)
    assert a.gated_mlp and a.norm == "rmsnorm" and a.dtype == "bfloat16"
    assert a.layer_types == (FULL_ATTENTION,) * 32
    assert a.moe is None and a.mla is None and a.quantization is None
    names = [m.name for m in a.linear_modules()]
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
    q = next(m for m in a.linear_modules() if m.name == "q_proj")
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
        Architecture.from_hf_config(config)
    assert err.value.field == "vocab_size"


def test_too_many_experts() -> None:
    with pytest.raises(InvalidConfig):
        build(model_type="mixtral", num_local_experts=4096, num_experts_per_tok=2)
    with pytest.raises(InvalidConfig):
        build(model_type="mixtral", num_local_experts=4, num_experts_per_tok=8)


def test_unsupported_model_type_lists_supported() -> None:
    with pytest.raises(UnsupportedArchitecture) as err:
        build(model_type="bert")
    assert "llama" in err.value.detail and "deepseek_v3" in err.value.detail
    assert "qwen" in SUPPORTED_MODEL_TYPES


def test_not_a_mapping() -> None:
    with pytest.raises(InvalidConfig):
        Architecture.from_hf_config([1, 2])  # type: ignore[arg-type]


def test_text_config_wrapper_inner_type_wins() -> None:
    a = Architecture.from_hf_config(
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
    experts = next(m for m in a.linear_modules() if m.name == "experts.gate_up_proj")
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
    names = {m.name for m in a.linear_modules()}
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


def test_assumptions_record_defaults() -> None:
    a = Architecture.from_hf_config({k: v for k, v in BASE.items() if k != "torch_dtype"})
    assert a.dtype == "float32"
    assert any("torch_dtype" in line for line in a.assumptions)


def test_as_dict_is_plain() -> None:
    import json

    json.dumps(build(model_type="mixtral", num_local_experts=8, num_experts_per_tok=2).as_dict())
