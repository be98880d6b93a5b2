"""The generic reader: a config whose model_type no family module knows is counted from the
names families give its sizes, with experts, shared experts, first dense layers and latent
attention as its keys say, and refused only where the config does not say.

Each expectation comes from transformers on the meta device: the same shape built by the
family class that really uses those conventions (Llama for a dense decoder, Mixtral for
routed experts, DeepSeek-V3 for latent attention with shared experts and first dense
layers), so the generic read must count exactly what that class builds.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from service.estimator.errors import UnsupportedArchitecture
from service.estimator.model import count_parameters, read_config

try:
    import torch
    import transformers
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("LLMMEM_REQUIRE_REFERENCE"):
        raise
    torch = None  # type: ignore[assignment]
    transformers = None  # type: ignore[assignment]

_SMALL = {
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
    "pad_token_id": None,
    "bos_token_id": None,
    "eos_token_id": None,
}


def _transformers_count(model_type: str, **kw: Any) -> int:
    if transformers is None:
        pytest.skip("transformers is not installed (reference extras)")
    cfg = transformers.AutoConfig.for_model(model_type, **{**_SMALL, **kw})
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def _generic(**kw: Any) -> Any:
    return read_config({"model_type": "some_new_decoder", **_SMALL, **kw})


@pytest.mark.reference
def test_gpt2_style_names_count_as_the_llama_they_describe() -> None:
    arch = _generic(n_embd=256, n_layer=3, n_head=8, n_inner=512, tie_word_embeddings=False)
    expected = _transformers_count(
        "llama",
        hidden_size=256,
        num_hidden_layers=3,
        num_attention_heads=8,
        intermediate_size=512,
        tie_word_embeddings=False,
    )
    assert count_parameters(arch).total == expected
    assert arch.family_name == "llama" and arch.intermediate_size == 512


@pytest.mark.reference
def test_ffn_dim_and_grouped_heads_under_other_names() -> None:
    arch = _generic(
        hidden_size=256,
        num_layers=2,
        n_heads=8,
        n_kv_heads=2,
        ffn_dim=384,
        tie_word_embeddings=True,
    )
    expected = _transformers_count(
        "llama",
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=384,
        tie_word_embeddings=True,
    )
    assert count_parameters(arch).total == expected
    assert arch.num_kv_heads == 2


@pytest.mark.reference
def test_routed_experts_under_num_local_experts_count_as_mixtral() -> None:
    sizes = dict(
        hidden_size=256,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=320,
        num_local_experts=6,
        num_experts_per_tok=2,
        tie_word_embeddings=False,
    )
    arch = _generic(**sizes)
    counts = count_parameters(arch)
    assert counts.total == _transformers_count("mixtral", **sizes)
    assert arch.moe is not None and arch.moe.layers == (0, 1, 2)
    assert any("routed experts as Mixtral's" in a for a in arch.assumptions)


@pytest.mark.reference
def test_latent_attention_shared_experts_and_first_dense_layers_count_as_deepseek_v3() -> None:
    sizes = dict(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        intermediate_size=512,
        q_lora_rank=64,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        n_shared_experts=2,
        first_k_dense_replace=1,
        tie_word_embeddings=False,
    )
    arch = _generic(**sizes)
    assert count_parameters(arch).total == _transformers_count("deepseek_v3", **sizes)
    assert arch.mla is not None and arch.moe is not None
    assert arch.moe.layers == (1, 2, 3) and arch.moe.num_shared_experts == 2


def test_refused_only_where_the_config_does_not_say() -> None:
    base = dict(n_embd=256, n_layer=2, n_head=8)
    with pytest.raises(UnsupportedArchitecture) as err:
        _generic(**base)  # no MLP width under any name
    assert err.value.field == "intermediate_size"
    assert "ffn_dim" in err.value.detail and "n_inner" in err.value.detail
    with pytest.raises(UnsupportedArchitecture) as err:
        _generic(**base, n_inner=512, mamba_d_state=16)
    assert err.value.field == "mamba_d_state"
    with pytest.raises(UnsupportedArchitecture) as err:
        _generic(**base, n_inner=512, kv_lora_rank=32)  # latent attention, sizes missing
    assert err.value.field == "qk_nope_head_dim"
