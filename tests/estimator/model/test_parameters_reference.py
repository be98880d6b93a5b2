"""Parameter counts checked against transformers itself.

Every supported family is built by transformers on the meta device from the same config
the estimator reads (catalog records and edge cases written here), and the parameters of
``model.named_parameters()`` are summed by component from their module names. The linear
inventory is checked against the model's ``nn.Linear`` modules, and the attention layout
against the config's ``layer_types`` where transformers derives one.

CI installs the reference extras, so this module runs there. It is skipped only when torch
is missing and ``LLMMEM_REQUIRE_REFERENCE`` is unset.
"""

from __future__ import annotations

import copy
import os
import re
from collections import Counter
from typing import Any

import pytest

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("LLMMEM_REQUIRE_REFERENCE"):
        raise
    pytest.skip("torch is not installed (reference extras)", allow_module_level=True)

try:
    import transformers
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("LLMMEM_REQUIRE_REFERENCE"):
        raise
    pytest.skip("transformers is not installed (reference extras)", allow_module_level=True)
from torch import nn

from service.catalog.model_catalog import load_model_catalog
from service.estimator.model import count_parameters, read_config
from service.estimator.model.families import WRAPPER_TEXT_TYPES

pytestmark = pytest.mark.reference

transformers.logging.set_verbosity_error()


def _component(name: str) -> str:
    """Component of a parameter, from its module path alone (independent of the estimator)."""
    parts = name.split(".")
    owner = parts[-2] if len(parts) > 1 else ""
    ffn = "mlp" in parts or "feed_forward" in parts
    towers = {"vision_tower", "vision_model", "multi_modal_projector", "audio_tower", "visual"}
    if (towers | {"embed_vision", "embed_audio"}) & set(parts):
        return "vision"
    if "embed_tokens_per_layer" in parts or "per_layer_model_projection" in parts:
        return "embeddings"  # Gemma 4's per-layer embedding table and its projection
    if {"embed_tokens", "wte", "word_embeddings", "embed_positions", "project_in"} & set(parts):
        return "embeddings"
    if "lm_head" in parts or "project_out" in parts:
        return "lm_head"
    if "norm" in owner or owner.startswith("ln_") or owner.endswith("layernorm"):
        return "norms"
    if any(p.endswith("layernorm") for p in parts[:-1]):  # StableLM's per-head q/k norms
        return "norms"
    if "experts" in parts and "shared_experts" not in parts:
        return "experts"
    if "shared_expert_gate" in parts:
        return "router"
    if "shared_expert" in parts or "shared_experts" in parts:
        return "shared_experts"
    if owner in ("gate", "router") and ffn:
        return "router"
    if "router" in parts:  # Gemma 4: router.proj / scale / per_expert_scale on the layer
        return "router"
    if owner in ("per_layer_input_gate", "per_layer_projection"):
        return "mlp"  # Gemma 4's per-layer gate and projection back to the hidden size
    if {"self_attn", "self_attention", "linear_attn", "cross_attn"} & set(parts):
        return "attention"
    if {"cross_attn_attn_gate", "cross_attn_mlp_gate"} & set(parts):
        return "attention"  # Llama 3.2 Vision's scalar gates on its cross-attention layers
    if ffn or owner in ("fc1", "fc2"):  # OPT's MLP projections sit on the layer itself
        return "mlp"
    raise AssertionError(f"unmapped parameter {name}")


def _hf_config(config: dict[str, Any]) -> Any:
    cfg = copy.deepcopy(config)
    cfg.pop("quantization_config", None)
    cfg.pop("vision_config", None)  # the language model alone; the wrapper is checked below
    cfg.pop("audio_config", None)
    cfg.pop("mm_tokens_per_image", None)
    if "text_config" in cfg:
        inner = cfg.pop("text_config")
        inner.setdefault("model_type", WRAPPER_TEXT_TYPES[cfg["model_type"]])
        if "tie_word_embeddings" in cfg:
            inner.setdefault("tie_word_embeddings", cfg["tie_word_embeddings"])
        cfg = inner
    # The type the estimator resolved: a config whose model_type transformers does not know
    # (Kimi-K2's kimi_k2) is built as the class its architectures names.
    model_type = read_config(cfg).model_type
    cfg.pop("model_type")
    return transformers.AutoConfig.for_model(model_type, **cfg)


# Language models the auto class does not map (built by their own causal-LM class).
_CAUSAL_LM = {"mllama_text_model": "MllamaForCausalLM"}


def _build(config: dict[str, Any]) -> nn.Module:
    hf_config = _hf_config(config)
    with torch.device("meta"):
        cls = _CAUSAL_LM.get(hf_config.model_type)
        if cls is not None:
            return getattr(transformers, cls)(hf_config)
        return transformers.AutoModelForCausalLM.from_config(hf_config)


def _check(config: dict[str, Any]) -> None:
    model = _build(config)
    expected: Counter[str] = Counter()
    for name, p in model.named_parameters():
        expected[_component(name)] += p.numel()
    arch = read_config(config)
    counts = count_parameters(arch)
    text_total = counts.total - counts.by_component.get("vision", 0)
    assert text_total == sum(p.numel() for p in model.parameters())
    assert {k: v for k, v in counts.by_component.items() if k != "vision"} == dict(expected)

    # Linear inventory == the model's nn.Linear modules (path pattern, shape, bias, count).
    hf_linears: Counter[tuple[str, int, int, bool]] = Counter()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            key = re.sub(r"\.\d+\.", ".{i}.", name)
            hf_linears[(key, module.in_features, module.out_features, module.bias is not None)] += 1
    mine: Counter[tuple[str, int, int, bool]] = Counter()
    for m in arch.linear_modules:
        if m.is_nn_linear:
            mine[(m.path, m.in_features, m.out_features, m.bias)] += m.count
    assert mine == hf_linears

    # Attention layout, where transformers' config derives one.
    hf_types = getattr(model.config, "layer_types", None)
    if hf_types is not None:
        # DeepSeek sparse attention's layers are full attention with an indexer beside it.
        hf_types = ["full_attention" if t == "indexed_attention" else t for t in hf_types]
        assert list(arch.layer_types) == list(hf_types)


_CATALOG = load_model_catalog()
_SEEN: set[str] = set()
# Language models transformers builds only inside their wrapper (no causal-LM class).
_WRAPPER_ONLY = frozenset({"qwen2_vl_text", "qwen2_5_vl_text"})
# Remote-code families transformers does not ship: counted by hand in test_parameters.py
# (Qwen-1) and test_minicpm.py (MiniCPM, also against LlamaForCausalLM there).
_REMOTE_CODE = frozenset({"qwen", "minicpm"})
_CATALOG_CASES = []
for _entry in _CATALOG.all():
    if _entry.architecture.model_type in _REMOTE_CODE:
        continue
    if _entry.architecture.model_type in _WRAPPER_ONLY:  # checked whole with its tower below
        continue
    # One case per shape: quantized repos and fine-tunes share their base's tensors.
    _shape = {
        k: v
        for k, v in _entry.architecture.as_dict().items()
        if k not in ("quantization", "dtype", "assumptions", "architectures")
    }
    _key = repr(sorted(_shape.items()))
    if _key in _SEEN:
        continue
    _SEEN.add(_key)
    _CATALOG_CASES.append(pytest.param(dict(_entry.config), id=_entry.id))


@pytest.mark.parametrize("config", _CATALOG_CASES)
def test_catalog_model_matches_transformers(config: dict[str, Any]) -> None:
    _check(copy.deepcopy(config))


def _small(model_type: str, **kw: Any) -> dict[str, Any]:
    base = {
        "model_type": model_type,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 6,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
        # Token ids of the families' defaults may fall outside the small vocabulary.
        "pad_token_id": None,
        "bos_token_id": None,
        "eos_token_id": None,
    }
    base.update(kw)
    return base


_DEEPSEEK = {
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "n_shared_experts": 2,
    "first_k_dense_replace": 2,
    "num_key_value_heads": 8,
}


def _without_kv(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != "num_key_value_heads"}


_LLAMA4 = {
    "head_dim": 32,
    "intermediate_size": 64,
    "intermediate_size_mlp": 128,
    "num_local_experts": 4,
    "num_experts_per_tok": 1,
    "attention_chunk_size": 64,
}
_QWEN3_NEXT = {
    "head_dim": 32,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 96,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 24,
    "linear_conv_kernel_dim": 4,
}
_GLM4_MOE = {
    "head_dim": 32,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "n_shared_experts": 2,
    "first_k_dense_replace": 2,
    "partial_rotary_factor": 0.5,
    "num_nextn_predict_layers": 1,
}

# Families added for issue 16, each in the variants its config flags select.
NEW_FAMILY_CASES = {
    "llama4_text-every-layer-moe-qk-norm": _small("llama4_text", **_LLAMA4, use_qk_norm=True),
    "llama4_text-interleaved-no-qk-norm": _small(
        "llama4_text", **_LLAMA4, interleave_moe_layer_step=2, use_qk_norm=False
    ),
    "llama4_text-explicit-moe-and-rope-layers": _small(
        "llama4_text", **_LLAMA4, moe_layers=[1, 4], no_rope_layers=[1, 0, 1, 1, 0, 1]
    ),
    "llama4_text-no-chunking-bias": _small(
        "llama4_text", **{**_LLAMA4, "attention_chunk_size": None}, attention_bias=True
    ),
    "qwen3_next-interval-3": _small("qwen3_next", **_QWEN3_NEXT, full_attention_interval=3),
    "qwen3_next-sparse-step-mlp-only-bias": _small(
        "qwen3_next",
        **_QWEN3_NEXT,
        decoder_sparse_step=2,
        mlp_only_layers=[3],
        attention_bias=True,
    ),
    "glm4_moe-bias-qk-norm-mtp": _small(
        "glm4_moe", **_GLM4_MOE, attention_bias=True, use_qk_norm=True
    ),
    "glm4_moe-plain": _small("glm4_moe", **{**_GLM4_MOE, "first_k_dense_replace": 0}),
    "falcon-multi-query-parallel": _without_kv(
        _small("falcon", multi_query=True, new_decoder_architecture=False, parallel_attn=True)
    ),
    "falcon-new-architecture-gqa": _without_kv(
        _small("falcon", new_decoder_architecture=True, num_kv_heads=2, ffn_hidden_size=768)
    ),
    "falcon-new-architecture-one-norm": _without_kv(
        _small("falcon", new_decoder_architecture=True, num_kv_heads=4, num_ln_in_parallel_attn=1)
    ),
    "falcon-sequential-mha-bias-untied": _without_kv(
        _small(
            "falcon",
            multi_query=False,
            parallel_attn=False,
            bias=True,
            tie_word_embeddings=False,
        )
    ),
    "phi-mha": _without_kv(_small("phi", partial_rotary_factor=0.4)),
    "phi-gqa-qk-layernorm": _small("phi", qk_layernorm=True),
    "stablelm-qkv-bias-qk-norm-parallel": _small(
        "stablelm", use_qkv_bias=True, qk_layernorm=True, use_parallel_residual=True
    ),
    "stablelm-plain": _small("stablelm"),
    "olmo-bias": _small("olmo", attention_bias=True),
    "olmo-mha-tied": _without_kv(_small("olmo", tie_word_embeddings=True)),
}


def _opt(**kw: Any) -> dict[str, Any]:
    base = {
        k: v
        for k, v in _small("opt", max_position_embeddings=128).items()
        if k not in ("intermediate_size", "num_key_value_heads")
    }
    return {**base, "ffn_dim": 512, "word_embed_proj_dim": 256, **kw}


_QWEN3_5 = {
    "head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 24,
    "linear_conv_kernel_dim": 4,
}
_QWEN3_5_VISION = {
    "depth": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_heads": 4,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "num_position_embeddings": 64,
    "out_hidden_size": 256,
}
_GEMMA4 = {
    "head_dim": 32,
    "global_head_dim": 64,
    "sliding_window": 16,
    "hidden_size_per_layer_input": 0,
    "vocab_size_per_layer_input": 1000,
}


# Families added for issue 26, each in the variants its config flags select.
ISSUE26_CASES = {
    "gemma4_text-k-eq-v-moe-beside-dense": _small(
        "gemma4_text",
        **_GEMMA4,
        num_hidden_layers=7,
        attention_k_eq_v=True,
        num_global_key_value_heads=1,
        enable_moe_block=True,
        num_experts=8,
        top_k_experts=2,
        moe_intermediate_size=48,
    ),
    "gemma4_text-kv-shared-per-layer-embeddings-double-wide": _small(
        "gemma4_text",
        **{**_GEMMA4, "hidden_size_per_layer_input": 16},
        num_hidden_layers=10,
        layer_types=(["sliding_attention"] * 4 + ["full_attention"]) * 2,
        num_kv_shared_layers=4,
        use_double_wide_mlp=True,
        tie_word_embeddings=False,
    ),
    "gemma4_text-derived-pattern-last-full": _small("gemma4_text", **_GEMMA4, num_hidden_layers=8),
    "deepseek_v32-indexer-every-layer": _small(
        "deepseek_v32", **_DEEPSEEK, index_n_heads=4, index_head_dim=16
    ),
    "glm_moe_dsa-indexer-shared-layers": _small(
        "glm_moe_dsa",
        **_DEEPSEEK,
        index_n_heads=4,
        index_head_dim=16,
        indexer_types=["full", "shared"] * 3,
    ),
    "glm_moe_dsa-mlp-layer-types": _small(
        "glm_moe_dsa",
        **{k: v for k, v in _DEEPSEEK.items() if k != "first_k_dense_replace"},
        index_n_heads=4,
        index_head_dim=16,
        mlp_layer_types=["dense", "sparse", "dense", "sparse", "sparse", "sparse"],
    ),
    "glm4_moe_lite-default-first-dense": _small(
        "glm4_moe_lite", **{k: v for k, v in _DEEPSEEK.items() if k != "first_k_dense_replace"}
    ),
    "glm4_moe_lite-null-q-lora": _small("glm4_moe_lite", **{**_DEEPSEEK, "q_lora_rank": None}),
    "kimi_linear-default-layout-no-q-lora": _small(
        "kimi_linear",
        **{k: v for k, v in _DEEPSEEK.items() if k not in ("q_lora_rank", "n_routed_experts")},
        num_experts=8,
        num_experts_per_token=2,
        num_shared_experts=2,
        linear_num_heads=4,
        linear_head_dim=16,
    ),
    "kimi_linear-nested-linear-attn-config": _small(
        "kimi_linear",
        **{k: v for k, v in _DEEPSEEK.items() if k != "n_routed_experts"},
        num_experts=8,
        num_experts_per_token=2,
        linear_attn_config={
            "num_heads": 4,
            "head_dim": 16,
            "short_conv_kernel_size": 3,
            "full_attn_layers": [2, 6],
            "kda_layers": [1, 3, 4, 5],
        },
    ),
    "mllama_text_model-cross-layers": {
        **_small("mllama_text_model", cross_attention_layers=[1, 4]),
        "bos_token_id": 1,  # MllamaTextConfig's token ids are ints, never null
        "pad_token_id": 2,
        "eos_token_id": 3,
    },
    "qwen3_5_text-dense-interval-3-mtp": _small(
        "qwen3_5_text", **_QWEN3_5, full_attention_interval=3, mtp_num_hidden_layers=1
    ),
    "qwen3_5_moe_text-every-layer-experts": _small(
        "qwen3_5_moe_text",
        **_QWEN3_5,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=96,
    ),
    "opt-pre-norm-tied": _opt(do_layer_norm_before=True),
    "opt-350m-style-projections-post-norm": _opt(
        word_embed_proj_dim=128, do_layer_norm_before=False
    ),
    "opt-no-bias-untied": _opt(enable_bias=False, tie_word_embeddings=False),
    "olmo3-derived-sliding": _small("olmo3", num_hidden_layers=8, sliding_window=64),
    "olmo3-explicit-layer-types-mha": _without_kv(
        _small("olmo3", sliding_window=32, layer_types=["full_attention", "sliding_attention"] * 3)
    ),
    "minimax_m2-small": _small(
        "minimax_m2",
        head_dim=48,
        num_local_experts=8,
        num_experts_per_tok=2,
        num_mtp_modules=3,
    ),
}

EDGE_CASES = {
    "llama-untied-biases": _small("llama", attention_bias=True, mlp_bias=True),
    "llama-tied-no-kv-key": {
        k: v
        for k, v in _small("llama", tie_word_embeddings=True).items()
        if k != "num_key_value_heads"
    },
    "llama-explicit-head-dim": _small("llama", head_dim=64),
    "mistral-window-no-kv-key": {
        k: v for k, v in _small("mistral", sliding_window=128).items() if k != "num_key_value_heads"
    },
    "mixtral-window": _small(
        "mixtral", num_local_experts=4, num_experts_per_tok=2, sliding_window=64
    ),
    "qwen2-sliding-top-layers": _small(
        "qwen2",
        use_sliding_window=True,
        sliding_window=64,
        max_window_layers=3,
        tie_word_embeddings=True,
    ),
    "qwen2_moe-sparse-step-mlp-only": _small(
        "qwen2_moe",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=128,
        decoder_sparse_step=2,
        mlp_only_layers=[3],
        use_sliding_window=True,
        sliding_window=32,
        max_window_layers=4,
        qkv_bias=False,
    ),
    "qwen2_moe-no-experts": _small(
        "qwen2_moe", num_experts=0, moe_intermediate_size=64, shared_expert_intermediate_size=128
    ),
    "qwen3-bias": _small("qwen3", head_dim=48, attention_bias=True),
    "qwen3_moe-sparse-step-3": _small(
        "qwen3_moe",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        decoder_sparse_step=3,
        mlp_only_layers=[0],
        head_dim=32,
    ),
    "gemma": _small("gemma", head_dim=64, attention_bias=True),
    "gemma2-untied": _small("gemma2", head_dim=64, tie_word_embeddings=False, sliding_window=32),
    "gemma3_text-pattern": _small(
        "gemma3_text",
        head_dim=64,
        num_hidden_layers=13,
        sliding_window=32,
        sliding_window_pattern=4,
    ),
    "gemma3_text-layer-types": _small(
        "gemma3_text",
        head_dim=64,
        sliding_window=32,
        layer_types=["full_attention", "sliding_attention"] * 3,
    ),
    "gemma3-wrapper": {
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "text_config": _small("gemma3_text", head_dim=64, sliding_window=16),
    },
    "phi3-gqa-window": _small("phi3", sliding_window=100),
    "phimoe-bias": _small(
        "phimoe", num_local_experts=4, num_experts_per_tok=2, attention_bias=True, lm_head_bias=True
    ),
    "deepseek_v2-q-lora-biases": _small(
        "deepseek_v2", **_DEEPSEEK, attention_bias=True, mlp_bias=True
    ),
    "deepseek_v2-null-q-lora": _small("deepseek_v2", **{**_DEEPSEEK, "q_lora_rank": None}),
    "deepseek_v3-shared-2-all-moe": _small(
        "deepseek_v3", **{**_DEEPSEEK, "first_k_dense_replace": 0}
    ),
    "gpt_oss-small": _small(
        "gpt_oss", head_dim=32, num_local_experts=4, num_experts_per_tok=2, sliding_window=16
    ),
    "granite-biases-untied": _small("granite", attention_bias=True, mlp_bias=True),
    "olmo2-gqa": _small("olmo2"),
    "cohere-qk-norm": _small("cohere", use_qk_norm=True),
    "cohere-plain": _small("cohere"),
    "glm-no-bias": _small("glm", head_dim=64, attention_bias=False),
    "starcoder2-no-bias-untied": _small(
        "starcoder2", use_bias=False, tie_word_embeddings=False, sliding_window=64
    ),
    **NEW_FAMILY_CASES,
    **ISSUE26_CASES,
}


@pytest.mark.parametrize("config", list(EDGE_CASES.values()), ids=list(EDGE_CASES))
def test_edge_case_matches_transformers(config: dict[str, Any]) -> None:
    _check(copy.deepcopy(config))


def test_every_supported_family_is_exercised() -> None:
    from service.estimator.model import SUPPORTED_MODEL_TYPES

    covered = {read_config(c).model_type for c in EDGE_CASES.values()}
    covered |= {p.values[0]["model_type"] for p in _CATALOG_CASES}
    covered |= {c["model_type"] for c in _SMALL_WRAPPERS.values()}
    # _WRAPPER_ONLY language models: checked whole by test_multimodal_wrapper_matches_transformers.
    covered |= {read_config(c).model_type for c in _SMALL_WRAPPERS.values()} & _WRAPPER_ONLY
    covered.add("gemma3")  # the wrapper, exercised through text_config above
    assert set(SUPPORTED_MODEL_TYPES) - _REMOTE_CODE <= covered


_WRAPPER_CLASSES = {
    "gemma3": "Gemma3ForConditionalGeneration",
    "llama4": "Llama4ForConditionalGeneration",
    "mistral3": "Mistral3ForConditionalGeneration",
    "gemma4": "Gemma4ForConditionalGeneration",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "mllama": "MllamaForConditionalGeneration",
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
}


def _small_wrapper(model_type: str, text: dict[str, Any], vision: dict[str, Any]) -> Any:
    return {"model_type": model_type, "torch_dtype": "bfloat16", "text_config": text,
            "vision_config": vision}  # fmt: skip


_SMALL_WRAPPERS = {
    "llama4-wrapper": _small_wrapper(
        "llama4",
        _small("llama4_text", **_LLAMA4, interleave_moe_layer_step=2),
        {
            "model_type": "llama4_vision_model",
            "hidden_size": 64,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": 56,
            "patch_size": 14,
            "vision_output_dim": 96,
            "projector_input_dim": 96,
            "projector_output_dim": 96,
            "pixel_shuffle_ratio": 0.5,
        },
    ),
    "mistral3-wrapper": {
        **_small_wrapper(
            "mistral3",
            _small("mistral", head_dim=32, sliding_window=None),
            {
                "model_type": "pixtral",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "head_dim": 16,
                "image_size": 112,
                "patch_size": 14,
            },
        ),
        "spatial_merge_size": 2,
        "multimodal_projector_bias": True,
        "tie_word_embeddings": False,
    },
}

_SMALL_WRAPPERS["gemma4-wrapper-vision-audio"] = {
    **_small_wrapper(
        "gemma4",
        _small(
            "gemma4_text",
            **{**_GEMMA4, "hidden_size_per_layer_input": 8},
            num_hidden_layers=5,
            num_kv_shared_layers=2,
            layer_types=["sliding_attention", "full_attention"] * 2 + ["full_attention"],
        ),
        {
            "model_type": "gemma4_vision",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "position_embedding_size": 64,
            "use_clipped_linears": True,
            "standardize": True,
        },
    ),
    "audio_config": {
        "model_type": "gemma4_audio",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "subsampling_conv_channels": [16, 8],
        "output_proj_dims": 48,
    },
}

_SMALL_WRAPPERS["qwen3_5-wrapper"] = _small_wrapper(
    "qwen3_5",
    _small("qwen3_5_text", **_QWEN3_5),
    {"model_type": "qwen3_5_vision", **_QWEN3_5_VISION},
)
_SMALL_WRAPPERS["qwen3_5_moe-wrapper"] = _small_wrapper(
    "qwen3_5_moe",
    _small(
        "qwen3_5_moe_text", **_QWEN3_5, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=64,
    ),
    {"model_type": "qwen3_5_moe_vision", **_QWEN3_5_VISION},
)  # fmt: skip

# Qwen2.5-VL / Qwen2-VL: the Hub's flat configs (the decoder's keys beside vision_config) and
# transformers 5's nested ones; tied and untied heads; Qwen2-VL's tower is embed_dim wide and
# its config's hidden_size is the merger's output.
_QWEN2_5_VL_VISION = {
    "depth": 3,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_heads": 4,
    "in_channels": 3,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "window_size": 112,
    "fullatt_block_indexes": [2],
    "out_hidden_size": 256,
}
_SMALL_WRAPPERS["qwen2_5_vl-flat-tied"] = {
    **{k: v for k, v in _small("qwen2_5_vl").items()},
    "tie_word_embeddings": True,
    "vision_config": {"model_type": "qwen2_5_vl", **_QWEN2_5_VL_VISION},
}
_SMALL_WRAPPERS["qwen2_5_vl-nested"] = _small_wrapper(
    "qwen2_5_vl",
    _small("qwen2_5_vl_text"),
    {"model_type": "qwen2_5_vl_vision", **_QWEN2_5_VL_VISION, "spatial_merge_size": 1},
)
_SMALL_WRAPPERS["qwen2_vl-flat"] = {
    **_small("qwen2_vl"),
    "vision_config": {
        "depth": 2, "embed_dim": 64, "hidden_size": 256, "mlp_ratio": 3, "num_heads": 4,
        "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
    },
}  # fmt: skip

_WRAPPERS = [
    *(
        pytest.param(dict(e.config), id=e.id)
        for e in _CATALOG.all()
        if "vision_config" in e.config and e.base is None
    ),
    *(pytest.param(c, id=k) for k, c in _SMALL_WRAPPERS.items()),
]


def _build_wrapper(config: dict[str, Any]) -> nn.Module:
    cfg = copy.deepcopy(config)
    cfg.pop("quantization_config", None)
    model_type = cfg.pop("model_type")
    # transformers 5 ties a wrapper's lm_head by the top-level flag (Mistral3Config defaults it
    # to true) but un-ties it at load when the checkpoint stores both matrices; on the meta
    # device only the flag speaks, so give it the language model's own (False for mistral).
    cfg.setdefault("tie_word_embeddings", read_config(config).tie_word_embeddings)
    hf_config = transformers.AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        return getattr(transformers, _WRAPPER_CLASSES[model_type])(hf_config)


@pytest.mark.parametrize("config", _WRAPPERS)
def test_multimodal_wrapper_matches_transformers(config: dict[str, Any]) -> None:
    """The whole wrapper (language model, vision tower, projector) built by transformers."""
    model = _build_wrapper(config)
    expected: Counter[str] = Counter()
    for name, p in model.named_parameters():
        expected[_component(name)] += p.numel()
    arch = read_config(config)
    counts = count_parameters(arch)
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert dict(counts.by_component) == dict(expected)
    hf_vision: Counter[tuple[str, int, int, bool]] = Counter()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and _component(name + ".weight") == "vision":
            key = re.sub(r"\.\d+\.", ".{i}.", name)
            hf_vision[(key, module.in_features, module.out_features, module.bias is not None)] += 1
    mine: Counter[tuple[str, int, int, bool]] = Counter()
    for m in arch.vision_modules:
        mine[(m.path, m.in_features, m.out_features, m.bias)] += m.count
    assert mine == hf_vision


def test_gemma3_12b_wrapper_total_by_hand() -> None:
    """SigLIP so400m/14 at 896 px + Gemma 3's projector, written out (transformers' modules)."""
    h, w, layers, patches = 1152, 4304, 27, (896 // 14) ** 2
    per_layer = 4 * (h * h + h) + (h * w + w) + (w * h + h) + 2 * 2 * h
    tower = (3 * 14 * 14 * h + h) + patches * h + layers * per_layer + 2 * h
    projector = h * 3840 + h
    arch = _CATALOG.get("google/gemma-3-12b-it").architecture
    assert count_parameters(arch).by_component["vision"] == tower + projector
