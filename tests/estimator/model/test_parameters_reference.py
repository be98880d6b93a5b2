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

import transformers
from torch import nn

from service.catalog.model_catalog import load_model_catalog
from service.estimator.model import count_parameters, read_config

pytestmark = pytest.mark.reference

transformers.logging.set_verbosity_error()


def _component(name: str) -> str:
    """Component of a parameter, from its module path alone (independent of the estimator)."""
    parts = name.split(".")
    owner = parts[-2] if len(parts) > 1 else ""
    if "vision_tower" in parts or "multi_modal_projector" in parts:
        return "vision"
    if "embed_tokens" in parts or "wte" in parts:
        return "embeddings"
    if parts[0] == "lm_head":
        return "lm_head"
    if "norm" in owner or owner.startswith("ln_") or owner.endswith("layernorm"):
        return "norms"
    if "experts" in parts and "shared_experts" not in parts:
        return "experts"
    if "shared_expert_gate" in parts:
        return "router"
    if "shared_expert" in parts or "shared_experts" in parts:
        return "shared_experts"
    if owner in ("gate", "router") and "mlp" in parts:
        return "router"
    if "self_attn" in parts:
        return "attention"
    if "mlp" in parts:
        return "mlp"
    raise AssertionError(f"unmapped parameter {name}")


def _hf_config(config: dict[str, Any]) -> Any:
    cfg = copy.deepcopy(config)
    cfg.pop("quantization_config", None)
    cfg.pop("vision_config", None)  # the language model alone; the wrapper is checked below
    cfg.pop("mm_tokens_per_image", None)
    if "text_config" in cfg:
        inner = cfg.pop("text_config")
        inner.setdefault("model_type", "gemma3_text")
        if "tie_word_embeddings" in cfg:
            inner.setdefault("tie_word_embeddings", cfg["tie_word_embeddings"])
        cfg = inner
    model_type = cfg.pop("model_type")
    return transformers.AutoConfig.for_model(model_type, **cfg)


def _build(config: dict[str, Any]) -> nn.Module:
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(_hf_config(config))


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
        assert list(arch.layer_types) == list(hf_types)


_CATALOG = load_model_catalog()
_SEEN: set[str] = set()
_CATALOG_CASES = []
for _entry in _CATALOG.all():
    if _entry.architecture.model_type == "qwen":  # remote code; see test_parameters.py
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
}


@pytest.mark.parametrize("config", list(EDGE_CASES.values()), ids=list(EDGE_CASES))
def test_edge_case_matches_transformers(config: dict[str, Any]) -> None:
    _check(copy.deepcopy(config))


def test_every_supported_family_is_exercised() -> None:
    from service.estimator.model import SUPPORTED_MODEL_TYPES

    covered = {read_config(c).model_type for c in EDGE_CASES.values()}
    covered |= {p.values[0]["model_type"] for p in _CATALOG_CASES}
    covered.add("gemma3")  # the wrapper, exercised through text_config above
    assert set(SUPPORTED_MODEL_TYPES) - {"qwen"} <= covered


_WRAPPERS = [
    pytest.param(dict(e.config), id=e.id)
    for e in _CATALOG.all()
    if "vision_config" in e.config and e.id.endswith("-it")
]


@pytest.mark.parametrize("config", _WRAPPERS)
def test_multimodal_wrapper_matches_transformers(config: dict[str, Any]) -> None:
    """The whole Gemma3ForConditionalGeneration (language model, SigLIP tower, projector)."""
    cfg = copy.deepcopy(config)
    cfg.pop("model_type")
    with torch.device("meta"):
        model = transformers.Gemma3ForConditionalGeneration(transformers.Gemma3Config(**cfg))
    expected: Counter[str] = Counter()
    for name, p in model.named_parameters():
        expected[_component(name)] += p.numel()
    counts = count_parameters(read_config(config))
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert dict(counts.by_component) == dict(expected)
    arch = read_config(config)
    hf_vision: Counter[tuple[str, int, int, bool]] = Counter()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and "vision_tower" in name:
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
