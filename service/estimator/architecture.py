"""The normalized shape of a decoder-only language model.

One immutable :class:`Architecture` is built from a Hugging Face ``config.json`` by
:meth:`Architecture.from_hf_config`; every formula in the estimator reads this object and
never the raw config keys. It follows the modeling code of transformers 5.x: which modules
each family instantiates, their sizes, their biases and norms, and the defaults its
``*Config`` classes apply to keys a config leaves out. Where a default was applied, the
architecture says so in ``assumptions``.

Two inventories describe every tensor of the model:

* :meth:`Architecture.linear_modules` lists each linear projection (attention, MLP,
  experts, routers, lm_head) with its shape, bias and instance count;
* :meth:`Architecture.parameter_groups` lists everything else (embeddings, norms,
  attention sinks, router correction biases).

A multimodal wrapper (Gemma 3's ``Gemma3ForConditionalGeneration``) also carries a vision
tower and projector, described by :class:`VisionSpec` and listed apart by
:meth:`Architecture.vision_modules` and :meth:`Architecture.vision_parameter_groups`
(component ``"vision"``), so code that walks the language model's inventories (fine-tuning,
LoRA targets) is unchanged.

``service.estimator.parameters.count_parameters`` adds the two up; the reference tests
check the result against ``model.parameters()`` of transformers built on the meta device.
The counting rules per family are written out in ``docs/architectures.md``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.estimator.errors import InvalidConfig, UnsupportedArchitecture

__all__ = [
    "COMPONENTS",
    "FULL_ATTENTION",
    "SLIDING_ATTENTION",
    "SUPPORTED_MODEL_TYPES",
    "Architecture",
    "LinearModule",
    "MlaSpec",
    "MoeSpec",
    "ParameterGroup",
    "QuantizationSpec",
    "VisionSpec",
]

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"

#: Component names used by both inventories and by ``ParameterCounts.by_component``.
COMPONENTS = (
    "embeddings",
    "attention",
    "mlp",
    "experts",
    "shared_experts",
    "router",
    "norms",
    "lm_head",
    "vision",
)

# Bounds on every size read from a config: generous for real models, small enough that the
# arithmetic downstream stays meaningful.
_MAX_HIDDEN = 65_536
_MAX_LAYERS = 1_024
_MAX_VOCAB = 4_194_304
_MAX_HEADS = 1_024
_MAX_HEAD_DIM = 4_096
_MAX_INTERMEDIATE = 1_048_576
_MAX_EXPERTS = 1_024
_MAX_RANK = 65_536
_MAX_POSITIONS = 1 << 26
_MAX_WINDOW = 1 << 26
_MAX_SOFTCAP = 1e6

_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}

# ---------------------------------------------------------------------------------------
# Public value objects
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank query and key/value paths."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class MoeSpec:
    """Mixture of experts: routed experts, optional shared experts, which layers are sparse.

    ``shared_expert_intermediate_size`` is the width of the whole shared-expert MLP (for
    DeepSeek that is ``n_shared_experts × moe_intermediate_size``, one fused MLP in
    transformers). Which layers are MoE is answered by ``Architecture.is_moe_layer``.
    """

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    shared_expert_gate: bool = False
    router_bias: bool = False
    e_score_correction_bias: bool = False
    expert_bias: bool = False
    router_dtype: str | None = None
    first_k_dense_replace: int = 0
    mlp_only_layers: tuple[int, ...] = ()
    decoder_sparse_step: int = 1
    moe_layer_freq: int = 1


@dataclass(frozen=True)
class VisionSpec:
    """A SigLIP vision tower (``siglip_vision_model``) and Gemma 3's multimodal projector.

    The tower, as transformers' ``SiglipVisionModel`` builds it: a patch-embedding Conv2d
    (``channels × patch² × hidden`` + bias), a learned position embedding with one row per
    patch (``(image_size / patch_size)²``), ``num_layers`` encoder layers (two LayerNorms with
    bias, q/k/v/out projections with bias, an fc1/fc2 MLP with bias) and a post LayerNorm.
    ``projector_out`` is the language model's hidden size: Gemma 3's projector holds
    ``mm_input_projection_weight`` (``hidden × projector_out``) and ``mm_soft_emb_norm``
    (an RMSNorm over the vision hidden size).
    """

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    image_size: int
    patch_size: int
    num_channels: int
    projector_out: int
    tokens_per_image: int

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class QuantizationSpec:
    """What a checkpoint's ``quantization_config`` says about its stored weights.

    ``bits`` is the width of a quantized weight element, ``group_size`` the number of
    elements sharing a scale (None: per channel or per block, see ``weight_block_size``),
    ``symmetric`` False means a zero point is stored too. ``modules_not_converted`` holds
    the config's own exclusion patterns (``modules_to_not_convert``, ``ignore``,
    ``llm_int8_skip_modules``), matched by :meth:`is_quantized`.
    """

    method: str
    bits: int
    group_size: int | None = None
    symmetric: bool | None = None
    quant_type: str | None = None
    double_quant: bool = False
    weight_block_size: tuple[int, ...] | None = None
    modules_not_converted: tuple[str, ...] = ()
    quantize_lm_head: bool = False
    format: str | None = None

    def is_quantized(self, path: str) -> bool:
        """Whether the linear weight at module ``path`` (e.g. ``model.layers.3.mlp.up_proj``)
        is stored quantized. lm_head stays in the checkpoint dtype unless the config says
        otherwise, as transformers' quantizers do."""
        is_lm_head = path == "lm_head" or path.endswith(".lm_head")
        if is_lm_head and not self.quantize_lm_head:
            return False
        for pattern in self.modules_not_converted:
            if _module_pattern_matches(pattern, path):
                return False
        return True


@dataclass(frozen=True)
class LinearModule:
    """One kind of linear projection, aggregated over the layers that hold it.

    ``name`` is the name PEFT and the quantizers see (``q_proj``, ``experts.gate_up_proj``,
    ``lm_head``); ``path`` the full module path with ``{i}`` for the layer index. Routed
    experts are stored by transformers as one 3-D parameter per layer (``is_nn_linear``
    False); ``per_layer`` is then the number of experts and ``active_per_layer`` the number
    one token passes through. A tied lm_head (``tied``) shares the embedding's weight and
    adds no parameters of its own.
    """

    name: str
    path: str
    component: str
    in_features: int
    out_features: int
    bias: bool
    layers: tuple[int, ...]
    per_layer: int = 1
    active_per_layer: int = 1
    is_nn_linear: bool = True
    tied: bool = False
    dtype: str | None = None

    @property
    def count(self) -> int:
        """Instances in the whole model."""
        return self.per_layer * (len(self.layers) if self.layers else 1)

    @property
    def active_count(self) -> int:
        """Instances one token passes through."""
        return self.active_per_layer * (len(self.layers) if self.layers else 1)

    @property
    def weight_numel(self) -> int:
        return self.in_features * self.out_features

    @property
    def bias_numel(self) -> int:
        return self.out_features if self.bias else 0

    @property
    def params_per_instance(self) -> int:
        return self.weight_numel + self.bias_numel

    @property
    def parameters(self) -> int:
        """Parameters this entry stores (0 for a tied lm_head)."""
        return 0 if self.tied else self.params_per_instance * self.count

    @property
    def active_parameters(self) -> int:
        return 0 if self.tied else self.params_per_instance * self.active_count

    def paths(self) -> tuple[str, ...]:
        """Concrete module paths, one per holding layer."""
        if not self.layers:
            return (self.path,)
        return tuple(self.path.format(i=i) for i in self.layers)


@dataclass(frozen=True)
class ParameterGroup:
    """Non-linear tensors of one kind (an embedding, a norm, sinks), with their count.

    ``is_buffer`` marks a persistent buffer stored in the checkpoint but not a parameter
    (DeepSeek-V3's ``e_score_correction_bias``); ``dtype`` is set when transformers keeps
    the tensor in a fixed dtype instead of the model's.
    """

    name: str
    path: str
    component: str
    numel: int
    layers: tuple[int, ...] = ()
    per_layer: int = 1
    is_buffer: bool = False
    dtype: str | None = None

    @property
    def count(self) -> int:
        return self.per_layer * (len(self.layers) if self.layers else 1)

    @property
    def parameters(self) -> int:
        return 0 if self.is_buffer else self.numel * self.count


# ---------------------------------------------------------------------------------------
# Family table
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    """How one transformers family builds its modules (see docs/architectures.md)."""

    attention: str = "standard"  # standard | fused_qkv | qwen_c_attn | mla
    attention_bias: str = "attention_bias"  # rule name, see _attention_biases
    mlp: str = "gated"  # gated | fused_gate_up | plain | qwen_w
    mlp_bias_key: str | None = None
    norm: str = "rmsnorm"
    norm_bias: bool = False
    layer_norms: tuple[str, ...] = ("input_layernorm", "post_attention_layernorm")
    qk_norm: str | None = None  # per_head | full_width | cohere
    moe: str | None = None  # mixtral | phimoe | qwen2_moe | qwen3_moe | deepseek | gpt_oss
    layers: str = "full"  # full | all_sliding | qwen2 | qwen2_moe | gemma2 | gemma3 | explicit
    defaults: Mapping[str, Any] = field(default_factory=dict)
    prefix: str = "model"
    embed_name: str = "embed_tokens"
    final_norm: str = "norm"
    layers_name: str = "layers"
    attn_name: str = "self_attn"
    mlp_name: str = "mlp"
    lm_head_bias_key: str | None = None
    sinks: bool = False
    softcapping: bool = False  # reads attn_logit_softcapping / final_logit_softcapping
    softmax_fp32_key: str | None = None  # config flag for an fp32 attention softmax (Qwen-1)


_LLAMA_DEFAULTS = {"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}

_FAMILIES: dict[str, _Family] = {
    "llama": _Family(mlp_bias_key="mlp_bias", defaults=_LLAMA_DEFAULTS),
    "granite": _Family(mlp_bias_key="mlp_bias", defaults=_LLAMA_DEFAULTS),
    "mistral": _Family(
        attention_bias="none",
        layers="all_sliding",
        defaults={"tie_word_embeddings": False, "num_key_value_heads": 8, "sliding_window": 4096},
    ),
    "mixtral": _Family(
        attention_bias="none",
        moe="mixtral",
        layers="all_sliding",
        defaults={
            "tie_word_embeddings": False,
            "num_key_value_heads": 8,
            "sliding_window": None,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
        },
    ),
    "qwen2": _Family(
        attention_bias="qkv_true",
        layers="qwen2",
        defaults={
            "tie_word_embeddings": False,
            "use_sliding_window": False,
            "sliding_window": 4096,
            "max_window_layers": 28,
        },
    ),
    "qwen2_moe": _Family(
        attention_bias="qkv_bias_key",
        moe="qwen2_moe",
        layers="qwen2_moe",
        defaults={
            "tie_word_embeddings": False,
            "qkv_bias": True,
            "use_sliding_window": False,
            "sliding_window": 4096,
            "max_window_layers": 28,
            "decoder_sparse_step": 1,
            "num_experts": 60,
            "num_experts_per_tok": 4,
            "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632,
            "mlp_only_layers": [],
        },
    ),
    "qwen3": _Family(
        qk_norm="per_head",
        layers="qwen2",
        defaults={
            "tie_word_embeddings": False,
            "attention_bias": False,
            "use_sliding_window": False,
            "sliding_window": 4096,
            "max_window_layers": 28,
        },
    ),
    "qwen3_moe": _Family(
        qk_norm="per_head",
        moe="qwen3_moe",
        layers="all_sliding",
        defaults={
            "tie_word_embeddings": False,
            "attention_bias": False,
            "use_sliding_window": False,
            "sliding_window": 4096,
            "num_key_value_heads": 4,
            "decoder_sparse_step": 1,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 768,
            "mlp_only_layers": [],
        },
    ),
    "gemma": _Family(defaults={"tie_word_embeddings": True, "attention_bias": False}),
    "gemma2": _Family(
        layer_norms=(
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ),
        layers="gemma2",
        softcapping=True,
        defaults={
            "tie_word_embeddings": True,
            "attention_bias": False,
            "num_key_value_heads": 4,
            "sliding_window": 4096,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
        },
    ),
    "gemma3_text": _Family(
        layer_norms=(
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ),
        qk_norm="per_head",
        layers="gemma3",
        softcapping=True,
        defaults={
            "tie_word_embeddings": True,
            "attention_bias": False,
            "num_key_value_heads": 4,
            "sliding_window": 4096,
        },
    ),
    "phi3": _Family(
        attention="fused_qkv",
        attention_bias="none",
        mlp="fused_gate_up",
        layers="all_sliding",
        defaults={"tie_word_embeddings": False, "sliding_window": None},
    ),
    "phimoe": _Family(
        norm="layernorm",
        norm_bias=True,
        moe="phimoe",
        layers="all_sliding",
        lm_head_bias_key="lm_head_bias",
        defaults={
            "tie_word_embeddings": False,
            "attention_bias": False,
            "lm_head_bias": False,
            "num_key_value_heads": 8,
            "sliding_window": None,
            "num_local_experts": 16,
            "num_experts_per_tok": 2,
        },
    ),
    "deepseek_v2": _Family(
        attention="mla",
        mlp_bias_key="mlp_bias",
        moe="deepseek",
        defaults={
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "first_k_dense_replace": 0,
            "n_shared_experts": 2,
            "moe_layer_freq": 1,
        },
    ),
    "deepseek_v3": _Family(
        attention="mla",
        moe="deepseek",
        defaults={
            "tie_word_embeddings": False,
            "attention_bias": False,
            "first_k_dense_replace": 3,
            "n_shared_experts": 1,
            "moe_layer_freq": 1,
        },
    ),
    "gpt_oss": _Family(
        moe="gpt_oss",
        layers="explicit",
        sinks=True,
        defaults={
            "tie_word_embeddings": False,
            "attention_bias": True,
            "num_key_value_heads": 8,
            "sliding_window": 128,
            "num_local_experts": 128,
            "num_experts_per_tok": 4,
        },
    ),
    "olmo2": _Family(
        layer_norms=("post_attention_layernorm", "post_feedforward_layernorm"),
        qk_norm="full_width",
        defaults={"tie_word_embeddings": False, "attention_bias": False},
    ),
    "cohere": _Family(
        norm="layernorm",
        layer_norms=("input_layernorm",),
        qk_norm="cohere",
        defaults={"tie_word_embeddings": True, "attention_bias": False, "use_qk_norm": False},
    ),
    "glm": _Family(
        attention_bias="qkv_attention_bias",
        mlp="fused_gate_up",
        defaults={"tie_word_embeddings": False, "attention_bias": True, "num_key_value_heads": 2},
    ),
    "starcoder2": _Family(
        attention_bias="use_bias",
        mlp="plain",
        mlp_bias_key="use_bias",
        norm="layernorm",
        norm_bias=True,
        layers="all_sliding",
        defaults={
            "tie_word_embeddings": True,
            "use_bias": True,
            "num_key_value_heads": 2,
            "sliding_window": None,
        },
    ),
    # The original Qwen (Qwen-7B, Qwen-14B, Qwen-72B): remote code "QWenLMHeadModel".
    "qwen": _Family(
        attention="qwen_c_attn",
        attention_bias="qwen",
        mlp="qwen_w",
        layer_norms=("ln_1", "ln_2"),
        prefix="transformer",
        embed_name="wte",
        final_norm="ln_f",
        layers_name="h",
        attn_name="attn",
        softmax_fp32_key="softmax_in_fp32",
        defaults={"tie_word_embeddings": False, "no_bias": True, "softmax_in_fp32": False},
    ),
}

#: model_type values (inner model_type for multimodal wrappers) this module can describe.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted([*_FAMILIES, "gemma3"]))

# Outer model_type of a multimodal wrapper -> model_type of its text_config when the inner
# config does not name one.
_WRAPPER_TEXT_TYPES = {"gemma3": "gemma3_text"}

# ---------------------------------------------------------------------------------------
# Config reading helpers
# ---------------------------------------------------------------------------------------


class _Reader:
    """Reads typed, bounded values from a config, recording the defaults it applies."""

    def __init__(self, config: Mapping[str, Any], family: _Family, model_type: str) -> None:
        self.config = config
        self.family = family
        self.model_type = model_type
        self.assumptions: list[str] = []

    def has(self, key: str) -> bool:
        return self.config.get(key) is not None

    def raw(self, key: str) -> Any:
        return self.config.get(key)

    def _default(self, key: str) -> Any:
        if key not in self.family.defaults:
            raise InvalidConfig(f"config is missing required field {key!r}", field=key)
        value = self.family.defaults[key]
        self.assumptions.append(
            f"{key} not in config; used the {self.model_type} default {value!r} (transformers)"
        )
        return value

    def integer(
        self,
        key: str,
        *,
        low: int = 1,
        high: int,
        default: Any = ...,
    ) -> int:
        value = self.config.get(key)
        if value is None:
            if default is not ...:
                return int(default)
            value = self._default(key)
        return _check_int(value, key, low, high)

    def _optional(self, key: str) -> Any:
        """The config's value, else the family default, else None (null is a value too)."""
        if key in self.config:
            return self.config[key]
        if key in self.family.defaults:
            return self._default(key)
        return None

    def opt_int(self, key: str, *, low: int = 1, high: int) -> int | None:
        """An int that may legitimately be null (q_lora_rank, sliding_window)."""
        value = self._optional(key)
        return None if value is None else _check_int(value, key, low, high)

    def opt_float(self, key: str, *, low: float, high: float) -> float | None:
        """A positive float that may legitimately be null (softcapping: null means off)."""
        value = self._optional(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidConfig(f"{key} must be a number or null, got {value!r}", field=key)
        number = float(value)
        if not low < number <= high:
            raise InvalidConfig(
                f"{key} must be above {low:g} and at most {high:g}, got {value!r}", field=key
            )
        return number

    def flag(self, key: str) -> bool:
        value = self.config.get(key)
        if value is None:
            value = self._default(key)
        if not isinstance(value, bool):
            raise InvalidConfig(f"{key} must be true or false, got {value!r}", field=key)
        return value


def _check_int(value: Any, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidConfig(f"{key} must be an integer, got {value!r}", field=key)
    if isinstance(value, float) and not value.is_integer():
        raise InvalidConfig(f"{key} must be an integer, got {value!r}", field=key)
    number = int(value)
    if number < low or number > high:
        raise InvalidConfig(f"{key} must be between {low} and {high}, got {number}", field=key)
    return number


def _canonical_dtype(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise InvalidConfig(f"{key} must be a dtype name, got {value!r}", field=key)
    name = value.strip().lower().removeprefix("torch.")
    if name not in _DTYPES:
        raise InvalidConfig(
            f"{key} {value!r} is not a checkpoint dtype this service knows "
            f"(bfloat16, float16, float32)",
            field=key,
        )
    return _DTYPES[name]


def _module_pattern_matches(pattern: str, path: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], path) is not None
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + ".*")
    return pattern in path


# ---------------------------------------------------------------------------------------
# Quantization
# ---------------------------------------------------------------------------------------

_QUANT_METHODS = (
    "awq",
    "bitsandbytes",
    "compressed-tensors",
    "fp8",
    "gptq",
    "mxfp4",
)


def _str_tuple(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise InvalidConfig(f"{key} must be a list of module names", field=key)
    return tuple(value)


def _quant_bits(value: Any, key: str) -> int:
    bits = _check_int(value, key, 1, 32)
    return bits


def _parse_quantization(qc: Any) -> QuantizationSpec | None:
    field_ = "quantization_config"
    if qc is None:
        return None
    if not isinstance(qc, Mapping):
        raise InvalidConfig("quantization_config must be an object", field=field_)
    method = qc.get("quant_method")
    if method is None and (qc.get("load_in_4bit") or qc.get("load_in_8bit")):
        method = "bitsandbytes"
    if not isinstance(method, str):
        raise InvalidConfig(
            "quantization_config.quant_method is missing", field=f"{field_}.quant_method"
        )
    method = method.lower().replace("_", "-")
    if method == "compressed_tensors":
        method = "compressed-tensors"
    skip = _str_tuple(qc.get("modules_to_not_convert"), f"{field_}.modules_to_not_convert")
    if method == "gptq":
        return QuantizationSpec(
            method="gptq",
            bits=_quant_bits(qc.get("bits", 4), f"{field_}.bits"),
            group_size=_group_size(qc.get("group_size", 128)),
            symmetric=bool(qc.get("sym", True)),
            modules_not_converted=skip,
            quantize_lm_head=bool(qc.get("lm_head", False)),
            format=qc.get("checkpoint_format")
            if isinstance(qc.get("checkpoint_format"), str)
            else None,
        )
    if method == "awq":
        return QuantizationSpec(
            method="awq",
            bits=_quant_bits(qc.get("bits", qc.get("w_bit", 4)), f"{field_}.bits"),
            group_size=_group_size(qc.get("group_size", qc.get("q_group_size", 128))),
            symmetric=not bool(qc.get("zero_point", True)),
            modules_not_converted=skip,
            format=qc.get("version") if isinstance(qc.get("version"), str) else None,
        )
    if method == "bitsandbytes":
        four = bool(qc.get("load_in_4bit", False))
        eight = bool(qc.get("load_in_8bit", False))
        if four == eight:
            raise InvalidConfig(
                "bitsandbytes quantization_config must set exactly one of load_in_4bit and "
                "load_in_8bit",
                field=f"{field_}.load_in_4bit",
            )
        skip = skip + _str_tuple(qc.get("llm_int8_skip_modules"), f"{field_}.llm_int8_skip_modules")
        if four:
            quant_type = str(qc.get("bnb_4bit_quant_type", "fp4")).lower()
            if quant_type not in ("nf4", "fp4"):
                raise InvalidConfig(
                    f"bnb_4bit_quant_type must be nf4 or fp4, got {quant_type!r}",
                    field=f"{field_}.bnb_4bit_quant_type",
                )
            return QuantizationSpec(
                method="bitsandbytes",
                bits=4,
                group_size=64,
                symmetric=True,
                quant_type=quant_type,
                double_quant=bool(qc.get("bnb_4bit_use_double_quant", False)),
                modules_not_converted=skip,
            )
        return QuantizationSpec(
            method="bitsandbytes",
            bits=8,
            group_size=None,
            symmetric=True,
            quant_type="int8",
            modules_not_converted=skip,
        )
    if method == "fp8":
        block = qc.get("weight_block_size")
        block_t = (
            tuple(_check_int(b, f"{field_}.weight_block_size", 1, 1 << 20) for b in block)
            if isinstance(block, Sequence)
            else None
        )
        return QuantizationSpec(
            method="fp8",
            bits=8,
            quant_type="float8_e4m3fn",
            weight_block_size=block_t,
            modules_not_converted=skip,
            format=qc.get("fmt") if isinstance(qc.get("fmt"), str) else None,
        )
    if method == "mxfp4":
        return QuantizationSpec(
            method="mxfp4",
            bits=4,
            group_size=32,
            symmetric=True,
            quant_type="mxfp4",
            modules_not_converted=skip,
        )
    if method == "compressed-tensors":
        return _parse_compressed_tensors(qc, skip)
    raise InvalidConfig(
        f"quantization method {method!r} is not supported; supported: " + ", ".join(_QUANT_METHODS),
        field=f"{field_}.quant_method",
    )


def _group_size(value: Any) -> int | None:
    if value is None or value == -1:
        return None
    return _check_int(value, "quantization_config.group_size", 1, 1 << 20)


def _parse_compressed_tensors(qc: Mapping[str, Any], skip: tuple[str, ...]) -> QuantizationSpec:
    field_ = "quantization_config.config_groups"
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise InvalidConfig("compressed-tensors config needs config_groups", field=field_)
    weights = None
    lm_head = False
    for group in groups.values():
        if not isinstance(group, Mapping):
            raise InvalidConfig("each config group must be an object", field=field_)
        w = group.get("weights")
        if isinstance(w, Mapping):
            weights = w
            targets = _str_tuple(group.get("targets"), f"{field_}.targets")
            lm_head = lm_head or any("lm_head" in t for t in targets)
            break
    if weights is None:
        raise InvalidConfig("compressed-tensors config has no weight scheme", field=field_)
    strategy = weights.get("strategy")
    kind = weights.get("type", "int")
    return QuantizationSpec(
        method="compressed-tensors",
        bits=_quant_bits(weights.get("num_bits", 8), f"{field_}.weights.num_bits"),
        group_size=_group_size(weights.get("group_size")) if strategy == "group" else None,
        symmetric=bool(weights.get("symmetric", True)),
        quant_type=str(kind),
        weight_block_size=tuple(weights["block_structure"])
        if isinstance(weights.get("block_structure"), Sequence)
        else None,
        modules_not_converted=skip + _str_tuple(qc.get("ignore"), "quantization_config.ignore"),
        quantize_lm_head=lm_head,
        format=qc.get("format") if isinstance(qc.get("format"), str) else None,
    )


# ---------------------------------------------------------------------------------------
# Architecture
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Architecture:
    """The normalized, validated shape of one decoder-only model.

    Sizes follow transformers' naming: ``head_dim`` is the query/key head size (for MLA
    ``qk_nope_head_dim + qk_rope_head_dim``), ``v_head_dim`` the value head size.
    ``intermediate_size`` is the dense MLP width; in families whose every layer is MoE
    (Mixtral, Phi-3.5-MoE, gpt-oss) it equals the expert width. ``attention_bias`` is the
    bias on the q/k/v projections and ``attention_out_bias`` on the output projection.
    ``norms_per_layer`` counts the hidden-size norms of one decoder layer; ``qk_norm`` says
    whether queries and keys are normalized per head (``"per_head"``) or over the whole
    projection (``"full_width"``). ``rope_scaling_factor`` is the factor of a ``linear`` or
    ``dynamic`` rope scaling (1.0 without one): the positions a precomputed rotary cache spans
    grow by it. ``vision`` describes a multimodal wrapper's vision tower and projector.
    ``attn_logit_softcapping`` / ``final_logit_softcapping`` are the caps of transformers'
    ``tanh(x / cap) · cap`` on attention scores and on the final logits (Gemma 2 / Gemma 3
    configs; None: off). ``attention_softmax_fp32`` says whether eager attention takes its
    softmax in fp32 (transformers' ``eager_attention_forward``); Qwen-1's remote code does so
    only with ``softmax_in_fp32``, off by default.
    """

    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    intermediate_size: int
    gated_mlp: bool
    hidden_act: str
    tie_word_embeddings: bool
    attention_bias: bool
    attention_out_bias: bool
    mlp_bias: bool
    lm_head_bias: bool
    norm: str
    norm_bias: bool
    norms_per_layer: int
    qk_norm: str | None
    dtype: str
    max_position_embeddings: int | None
    sliding_window: int | None
    layer_types: tuple[str, ...]
    mla: MlaSpec | None = None
    moe: MoeSpec | None = None
    quantization: QuantizationSpec | None = None
    attention_sinks: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    wrapper_model_type: str | None = None
    architectures: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()
    vision: VisionSpec | None = None
    rope_scaling_factor: float = 1.0
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    attention_softmax_fp32: bool = True

    def __hash__(self) -> int:
        # An Architecture keys every estimator cache (plans, splits, candidate counts) and a
        # request looks several of them up; the generated hash walks all ~45 fields on every
        # lookup. The instance is frozen, so the hash is computed once and kept.
        cached: int | None = self.__dict__.get("_cached_hash")
        if cached is None:
            values = tuple(getattr(self, f.name) for f in dataclasses.fields(self))
            cached = hash(values)
            object.__setattr__(self, "_cached_hash", cached)
        return cached

    # ---- construction ---------------------------------------------------------------

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> Architecture:
        """Build and validate the architecture a Hugging Face ``config.json`` describes."""
        if not isinstance(config, Mapping):
            raise InvalidConfig("the model config must be a JSON object")
        outer = config
        outer_type = outer.get("model_type")
        wrapper: str | None = None
        text = outer.get("text_config")
        if text is not None:
            if not isinstance(text, Mapping):
                raise InvalidConfig("text_config must be an object", field="text_config")
            inner_type = text.get("model_type")
            if inner_type is None and isinstance(outer_type, str):
                inner_type = _WRAPPER_TEXT_TYPES.get(outer_type, outer_type)
            wrapper = outer_type if isinstance(outer_type, str) else None
            merged = dict(text)
            # Fields a wrapper keeps at its top level apply to the language model too.
            for key in ("torch_dtype", "dtype", "quantization_config"):
                if merged.get(key) is None and outer.get(key) is not None:
                    merged[key] = outer[key]
            if "tie_word_embeddings" not in merged and "tie_word_embeddings" in outer:
                merged["tie_word_embeddings"] = outer["tie_word_embeddings"]
            config = merged
            model_type = inner_type
        else:
            model_type = outer_type
        if model_type is None:
            raise InvalidConfig("config is missing model_type", field="model_type")
        if not isinstance(model_type, str):
            raise InvalidConfig("model_type must be a string", field="model_type")
        if model_type == "gemma3":
            raise InvalidConfig(
                "a gemma3 config must carry its language model in text_config",
                field="text_config",
            )
        family = _FAMILIES.get(model_type)
        if family is None:
            raise UnsupportedArchitecture(
                f"model_type {model_type!r} is not supported; supported model types: "
                + ", ".join(SUPPORTED_MODEL_TYPES),
                field="model_type",
            )
        arch = _build(config, model_type, family, wrapper)
        vision_config = outer.get("vision_config") if text is not None else None
        if vision_config is not None:
            arch = _with_vision(arch, outer, vision_config)
        return arch

    # ---- layer layout ---------------------------------------------------------------

    def is_moe_layer(self, i: int) -> bool:
        """Whether decoder layer ``i`` holds routed experts (transformers' rule per family)."""
        if not 0 <= i < self.num_layers:
            raise IndexError(f"layer {i} out of range 0..{self.num_layers - 1}")
        return i in _moe_layer_set(self)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(sorted(_moe_layer_set(self)))

    @property
    def dense_layers(self) -> tuple[int, ...]:
        moe = _moe_layer_set(self)
        return tuple(i for i in range(self.num_layers) if i not in moe)

    @property
    def num_moe_layers(self) -> int:
        return len(_moe_layer_set(self))

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def is_sliding_layer(self, i: int) -> bool:
        return self.layer_types[i] == SLIDING_ATTENTION

    @property
    def num_sliding_layers(self) -> int:
        return sum(1 for t in self.layer_types if t == SLIDING_ATTENTION)

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def family(self) -> str:
        """The family name (``gemma3`` for both the wrapper and ``gemma3_text``)."""
        return "gemma3" if self.model_type == "gemma3_text" else self.model_type

    @property
    def q_proj_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_proj_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    # ---- inventories ------------------------------------------------------------------

    def linear_modules(self) -> tuple[LinearModule, ...]:
        """Every linear projection of the model, lm_head last."""
        return _linear_modules(self)

    def parameter_groups(self) -> tuple[ParameterGroup, ...]:
        """Every non-linear tensor: embeddings, norms, sinks, router correction biases."""
        return _parameter_groups(self)

    def vision_modules(self) -> tuple[LinearModule, ...]:
        """The vision tower's linear projections (empty without one)."""
        return _vision_modules(self)

    def vision_parameter_groups(self) -> tuple[ParameterGroup, ...]:
        """The vision tower's other tensors and the projector (empty without one)."""
        return _vision_groups(self)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields (for the model record's ``architecture``)."""
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, MlaSpec | MoeSpec | QuantizationSpec | VisionSpec):
                value = {k: getattr(value, k) for k in value.__dataclass_fields__}
                value = {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


# ---------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------


def _build(
    config: Mapping[str, Any], model_type: str, family: _Family, wrapper: str | None
) -> Architecture:
    r = _Reader(config, family, model_type)

    hidden = r.integer("hidden_size", high=_MAX_HIDDEN)
    layers = r.integer("num_hidden_layers", high=_MAX_LAYERS)
    vocab = r.integer("vocab_size", high=_MAX_VOCAB)
    heads = r.integer("num_attention_heads", high=_MAX_HEADS)
    if r.has("num_key_value_heads") or "num_key_value_heads" in family.defaults:
        kv_heads = r.integer("num_key_value_heads", high=_MAX_HEADS)
    else:
        kv_heads = heads
    if heads % kv_heads != 0:
        raise InvalidConfig(
            f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})",
            field="num_key_value_heads",
        )

    # Head sizes.
    mla: MlaSpec | None = None
    if family.attention == "mla":
        mla = MlaSpec(
            q_lora_rank=r.opt_int("q_lora_rank", high=_MAX_RANK),
            kv_lora_rank=r.integer("kv_lora_rank", high=_MAX_RANK),
            qk_nope_head_dim=r.integer("qk_nope_head_dim", high=_MAX_HEAD_DIM),
            qk_rope_head_dim=r.integer("qk_rope_head_dim", high=_MAX_HEAD_DIM),
            v_head_dim=r.integer("v_head_dim", high=_MAX_HEAD_DIM),
        )
        head_dim = mla.qk_head_dim
        v_head_dim = mla.v_head_dim
    elif family.attention == "qwen_c_attn":
        head_dim = r.integer("kv_channels", high=_MAX_HEAD_DIM, default=_exact_div(hidden, heads))
        v_head_dim = head_dim
    else:
        if r.has("head_dim"):
            head_dim = r.integer("head_dim", high=_MAX_HEAD_DIM)
        else:
            head_dim = _exact_div(hidden, heads)
        v_head_dim = head_dim

    # Biases.
    qkv_bias, o_bias = _attention_biases(r, family)
    mlp_bias = r.flag(family.mlp_bias_key) if family.mlp_bias_key else False
    if family.mlp == "qwen_w":
        mlp_bias = not r.flag("no_bias")
    lm_head_bias = r.flag(family.lm_head_bias_key) if family.lm_head_bias_key else False

    # MLP widths and MoE.
    moe = _parse_moe(r, family, layers, hidden) if family.moe else None
    if family.moe in ("mixtral", "phimoe", "gpt_oss"):
        intermediate = r.integer("intermediate_size", high=_MAX_INTERMEDIATE)
    elif family.mlp == "qwen_w":
        full = r.integer("intermediate_size", high=_MAX_INTERMEDIATE * 2)
        intermediate = full // 2
        if intermediate < 1:
            raise InvalidConfig("intermediate_size must be at least 2", field="intermediate_size")
    else:
        intermediate = r.integer("intermediate_size", high=_MAX_INTERMEDIATE)
    gated = family.mlp != "plain"

    act = config.get("hidden_act", config.get("hidden_activation", "silu"))
    if not isinstance(act, str):
        raise InvalidConfig("hidden_act must be a string", field="hidden_act")

    tie = r.flag("tie_word_embeddings")

    # Norms.
    qk_norm = family.qk_norm
    if qk_norm == "cohere":
        qk_norm = "per_head_weights" if r.flag("use_qk_norm") else None

    # Attention layout.
    sliding_window, layer_types = _layer_layout(r, family, layers)

    # dtype.
    dtype_value = config.get("torch_dtype", config.get("dtype"))
    if dtype_value is None:
        if config.get("bf16") is True:
            dtype_value = "bfloat16"
        elif config.get("fp16") is True:
            dtype_value = "float16"
    if dtype_value is None:
        dtype = "float32"
        r.assumptions.append(
            "config names no torch_dtype; assumed float32, the dtype transformers loads it in"
        )
    else:
        dtype = _canonical_dtype(dtype_value, "torch_dtype")

    max_pos = r.raw("max_position_embeddings")
    if max_pos is None and model_type == "qwen":
        max_pos = r.raw("seq_length")
    max_pos = (
        None
        if max_pos is None
        else _check_int(max_pos, "max_position_embeddings", 1, _MAX_POSITIONS)
    )

    archs = config.get("architectures")
    architectures = _str_tuple(archs, "architectures") if archs is not None else ()
    rope_factor = _rope_scaling_factor(config)
    attn_cap = final_cap = None
    if family.softcapping:
        attn_cap = r.opt_float("attn_logit_softcapping", low=0.0, high=_MAX_SOFTCAP)
        final_cap = r.opt_float("final_logit_softcapping", low=0.0, high=_MAX_SOFTCAP)
    softmax_fp32 = r.flag(family.softmax_fp32_key) if family.softmax_fp32_key else True

    return Architecture(
        model_type=model_type,
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        intermediate_size=intermediate,
        gated_mlp=gated,
        hidden_act=act,
        tie_word_embeddings=tie,
        attention_bias=qkv_bias,
        attention_out_bias=o_bias,
        mlp_bias=mlp_bias,
        lm_head_bias=lm_head_bias,
        norm=family.norm,
        norm_bias=family.norm_bias,
        norms_per_layer=len(family.layer_norms),
        qk_norm=qk_norm,
        dtype=dtype,
        max_position_embeddings=max_pos,
        sliding_window=sliding_window,
        layer_types=layer_types,
        mla=mla,
        moe=moe,
        quantization=_parse_quantization(config.get("quantization_config")),
        attention_sinks=family.sinks,
        fused_qkv=family.attention in ("fused_qkv", "qwen_c_attn"),
        fused_gate_up=family.mlp == "fused_gate_up",
        wrapper_model_type=wrapper,
        architectures=architectures,
        assumptions=tuple(r.assumptions),
        rope_scaling_factor=rope_factor,
        attn_logit_softcapping=attn_cap,
        final_logit_softcapping=final_cap,
        attention_softmax_fp32=softmax_fp32,
    )


def _rope_scaling_factor(config: Mapping[str, Any]) -> float:
    """The factor of a linear / dynamic-NTK rope scaling (``rope_scaling`` or transformers 5's
    ``rope_parameters``, per layer type for Gemma 3: the full-attention entry), else 1.0."""
    spec = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(spec, Mapping) and isinstance(spec.get("full_attention"), Mapping):
        spec = spec["full_attention"]
    if not isinstance(spec, Mapping):
        return 1.0
    kind = spec.get("rope_type", spec.get("type"))
    factor = spec.get("factor")
    if kind not in ("linear", "dynamic") or isinstance(factor, bool):
        return 1.0
    if not isinstance(factor, int | float) or not 1.0 <= factor <= 1024.0:
        raise InvalidConfig("rope_scaling.factor must be between 1 and 1024", field="rope_scaling")
    return float(factor)


_VISION_TYPES = ("siglip_vision_model",)


def _with_vision(arch: Architecture, outer: Mapping[str, Any], cfg: Any) -> Architecture:
    """Attach the vision tower a wrapper's ``vision_config`` describes (SigLIP, as Gemma 3
    ships it); another tower is named in the assumptions and not counted."""
    if not isinstance(cfg, Mapping):
        raise InvalidConfig("vision_config must be an object", field="vision_config")
    kind = cfg.get("model_type", "siglip_vision_model")
    if kind not in _VISION_TYPES or arch.family != "gemma3":
        note = f"vision tower ({kind}) of the {arch.wrapper_model_type} wrapper not counted"
        return dataclasses.replace(arch, assumptions=(*arch.assumptions, note))
    if cfg.get("vision_use_head"):
        raise UnsupportedArchitecture(
            "a SigLIP vision tower with vision_use_head is not supported", field="vision_config"
        )

    def get(key: str, default: int, high: int) -> int:
        value = cfg.get(key, default)
        return _check_int(value, f"vision_config.{key}", 1, high)

    hidden = get("hidden_size", 768, _MAX_HIDDEN)
    heads = get("num_attention_heads", 12, _MAX_HEADS)
    _exact_div(hidden, heads)
    image = get("image_size", 224, 1 << 16)
    patch = get("patch_size", 16, 1 << 12)
    if image % patch:
        raise InvalidConfig(
            "vision_config.image_size must be a multiple of patch_size", field="vision_config"
        )
    spec = VisionSpec(
        hidden_size=hidden,
        intermediate_size=get("intermediate_size", 3072, _MAX_INTERMEDIATE),
        num_layers=get("num_hidden_layers", 12, _MAX_LAYERS),
        num_heads=heads,
        image_size=image,
        patch_size=patch,
        num_channels=get("num_channels", 3, 64),
        projector_out=arch.hidden_size,
        tokens_per_image=_check_int(
            outer.get("mm_tokens_per_image", 256), "mm_tokens_per_image", 1, 1 << 20
        ),
    )
    return dataclasses.replace(arch, vision=spec)


def _exact_div(hidden: int, heads: int) -> int:
    if hidden % heads != 0:
        raise InvalidConfig(
            f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}) and the "
            "config gives no head_dim",
            field="head_dim",
        )
    return hidden // heads


def _attention_biases(r: _Reader, family: _Family) -> tuple[bool, bool]:
    rule = family.attention_bias
    if family.attention == "mla":
        bias = r.flag("attention_bias")
        return bias, bias
    if rule == "attention_bias":
        bias = r.flag("attention_bias")
        return bias, bias
    if rule == "none":
        return False, False
    if rule == "qkv_true":
        return True, False
    if rule == "qkv_bias_key":
        return r.flag("qkv_bias"), False
    if rule == "qkv_attention_bias":
        return r.flag("attention_bias"), False
    if rule == "use_bias":
        bias = r.flag("use_bias")
        return bias, bias
    if rule == "qwen":
        return True, not r.flag("no_bias")
    raise AssertionError(rule)  # pragma: no cover - table is closed


def _int_list(value: Any, key: str, high: int) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise InvalidConfig(f"{key} must be a list of layer indices", field=key)
    return tuple(_check_int(v, key, 0, high) for v in value)


def _parse_moe(r: _Reader, family: _Family, layers: int, hidden: int) -> MoeSpec | None:
    kind = family.moe
    if kind in ("mixtral", "phimoe", "gpt_oss"):
        experts = r.integer("num_local_experts", high=_MAX_EXPERTS)
        top_k = r.integer("num_experts_per_tok", high=_MAX_EXPERTS)
        width = r.integer("intermediate_size", high=_MAX_INTERMEDIATE)
        spec = MoeSpec(
            num_experts=experts,
            experts_per_token=top_k,
            expert_intermediate_size=width,
            router_bias=kind == "gpt_oss",
            expert_bias=kind == "gpt_oss",
        )
    elif kind in ("qwen2_moe", "qwen3_moe"):
        key = (
            "num_experts"
            if r.has("num_experts") or not r.has("num_local_experts")
            else ("num_local_experts")
        )
        experts = r.integer(key, low=0, high=_MAX_EXPERTS)
        if experts == 0:
            return None
        top_k = r.integer("num_experts_per_tok", high=_MAX_EXPERTS)
        width = r.integer("moe_intermediate_size", high=_MAX_INTERMEDIATE)
        shared = 0
        if kind == "qwen2_moe":
            shared = r.integer("shared_expert_intermediate_size", low=0, high=_MAX_INTERMEDIATE)
        only = r.raw("mlp_only_layers")
        if only is None and "mlp_only_layers" in family.defaults:
            only = []
        spec = MoeSpec(
            num_experts=experts,
            experts_per_token=top_k,
            expert_intermediate_size=width,
            num_shared_experts=1 if shared else 0,
            shared_expert_intermediate_size=shared,
            shared_expert_gate=kind == "qwen2_moe",
            mlp_only_layers=_int_list(only, "mlp_only_layers", _MAX_LAYERS),
            decoder_sparse_step=r.integer("decoder_sparse_step", high=_MAX_LAYERS),
        )
    elif kind == "deepseek":
        experts = r.integer("n_routed_experts", high=_MAX_EXPERTS)
        top_k = r.integer("num_experts_per_tok", high=_MAX_EXPERTS)
        width = r.integer("moe_intermediate_size", high=_MAX_INTERMEDIATE)
        n_shared = r.integer("n_shared_experts", low=0, high=_MAX_EXPERTS)
        first_dense = r.integer("first_k_dense_replace", low=0, high=_MAX_LAYERS)
        freq = r.integer("moe_layer_freq", high=_MAX_LAYERS)
        if freq != 1:
            r.assumptions.append(
                f"moe_layer_freq {freq} ignored: transformers makes every layer from "
                "first_k_dense_replace on an MoE layer"
            )
        spec = MoeSpec(
            num_experts=experts,
            experts_per_token=top_k,
            expert_intermediate_size=width,
            num_shared_experts=n_shared,
            shared_expert_intermediate_size=n_shared * width,
            e_score_correction_bias=r.model_type == "deepseek_v3",
            router_dtype="float32",
            first_k_dense_replace=first_dense,
            moe_layer_freq=freq,
        )
    else:  # pragma: no cover - table is closed
        raise AssertionError(kind)
    if spec.experts_per_token > spec.num_experts:
        raise InvalidConfig(
            f"num_experts_per_tok ({spec.experts_per_token}) exceeds the number of experts "
            f"({spec.num_experts})",
            field="num_experts_per_tok",
        )
    return spec


def _layer_layout(r: _Reader, family: _Family, layers: int) -> tuple[int | None, tuple[str, ...]]:
    rule = family.layers
    explicit = r.raw("layer_types")
    if rule == "full":
        return None, (FULL_ATTENTION,) * layers
    window = r.opt_int("sliding_window", low=0, high=_MAX_WINDOW)
    if window == 0:
        window = None
    qwen_style = rule in ("qwen2", "qwen2_moe") or family.moe == "qwen3_moe"
    if qwen_style and not r.flag("use_sliding_window"):
        window = None
    if explicit is not None and rule in ("qwen2", "qwen2_moe", "gemma2", "gemma3", "explicit"):
        if not isinstance(explicit, Sequence) or isinstance(explicit, str):
            raise InvalidConfig("layer_types must be a list", field="layer_types")
        types = tuple(explicit)
        if len(types) != layers:
            raise InvalidConfig(
                f"layer_types has {len(types)} entries for {layers} layers", field="layer_types"
            )
        for t in types:
            if t not in (FULL_ATTENTION, SLIDING_ATTENTION):
                raise InvalidConfig(
                    f"layer type {t!r} is not supported (full_attention, sliding_attention)",
                    field="layer_types",
                )
        if SLIDING_ATTENTION in types and window is None:
            raise InvalidConfig(
                "layer_types has sliding layers but the config has no sliding_window",
                field="sliding_window",
            )
        return window, types
    if rule == "all_sliding":
        kind = SLIDING_ATTENTION if window is not None else FULL_ATTENTION
        return window, (kind,) * layers
    if rule == "qwen2":
        max_window = r.integer("max_window_layers", low=0, high=_MAX_LAYERS)
        types = tuple(
            SLIDING_ATTENTION if window is not None and i >= max_window else FULL_ATTENTION
            for i in range(layers)
        )
        return (window if SLIDING_ATTENTION in types else None), types
    if rule == "qwen2_moe":
        max_window = r.integer("max_window_layers", low=0, high=_MAX_LAYERS)
        types = tuple(
            SLIDING_ATTENTION
            if window is not None and (i + 1) % 2 and i < max_window
            else FULL_ATTENTION
            for i in range(layers)
        )
        return (window if SLIDING_ATTENTION in types else None), types
    if rule in ("gemma2", "gemma3", "explicit"):
        if rule == "gemma3":
            pattern = r.integer("sliding_window_pattern", high=_MAX_LAYERS, default=6)
        else:
            pattern = 2
        if window is None:
            return None, (FULL_ATTENTION,) * layers
        types = tuple(
            SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION for i in range(layers)
        )
        return window, types
    raise AssertionError(rule)  # pragma: no cover - table is closed


# ---------------------------------------------------------------------------------------
# Inventories
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _moe_layer_set(arch: Architecture) -> frozenset[int]:
    moe = arch.moe
    if moe is None:
        return frozenset()
    family = _FAMILIES[arch.model_type].moe
    if family == "deepseek":
        return frozenset(range(moe.first_k_dense_replace, arch.num_layers))
    if family in ("qwen2_moe", "qwen3_moe"):
        only = set(moe.mlp_only_layers)
        return frozenset(
            i
            for i in range(arch.num_layers)
            if i not in only and (i + 1) % moe.decoder_sparse_step == 0
        )
    return frozenset(range(arch.num_layers))


@functools.lru_cache(maxsize=256)
def _linear_modules(arch: Architecture) -> tuple[LinearModule, ...]:
    family = _FAMILIES[arch.model_type]
    all_layers = tuple(range(arch.num_layers))
    base = f"{family.prefix}.{family.layers_name}.{{i}}"
    attn = f"{base}.{family.attn_name}"
    mlp = f"{base}.{family.mlp_name}"
    out: list[LinearModule] = []
    h = arch.hidden_size

    def add(
        name: str,
        path: str,
        component: str,
        fan_in: int,
        fan_out: int,
        bias: bool,
        layers: tuple[int, ...] = all_layers,
        **kw: Any,
    ) -> None:
        if layers or component == "lm_head":
            out.append(LinearModule(name, path, component, fan_in, fan_out, bias, layers, **kw))

    # Attention.
    q, kv = arch.q_proj_size, arch.kv_proj_size
    if family.attention == "mla":
        mla = arch.mla
        assert mla is not None
        heads = arch.num_attention_heads
        if mla.q_lora_rank is None:
            add("q_proj", f"{attn}.q_proj", "attention", h, heads * mla.qk_head_dim, False)
        else:
            add(
                "q_a_proj", f"{attn}.q_a_proj", "attention", h, mla.q_lora_rank, arch.attention_bias
            )
            add(
                "q_b_proj",
                f"{attn}.q_b_proj",
                "attention",
                mla.q_lora_rank,
                heads * mla.qk_head_dim,
                False,
            )
        add(
            "kv_a_proj_with_mqa",
            f"{attn}.kv_a_proj_with_mqa",
            "attention",
            h,
            mla.kv_lora_rank + mla.qk_rope_head_dim,
            arch.attention_bias,
        )
        add(
            "kv_b_proj",
            f"{attn}.kv_b_proj",
            "attention",
            mla.kv_lora_rank,
            heads * (mla.qk_nope_head_dim + mla.v_head_dim),
            False,
        )
        add(
            "o_proj",
            f"{attn}.o_proj",
            "attention",
            heads * mla.v_head_dim,
            h,
            arch.attention_out_bias,
        )
    elif family.attention == "fused_qkv":
        add("qkv_proj", f"{attn}.qkv_proj", "attention", h, q + 2 * kv, arch.attention_bias)
        add("o_proj", f"{attn}.o_proj", "attention", q, h, arch.attention_out_bias)
    elif family.attention == "qwen_c_attn":
        add("c_attn", f"{attn}.c_attn", "attention", h, 3 * q, arch.attention_bias)
        add("c_proj", f"{attn}.c_proj", "attention", q, h, arch.attention_out_bias)
    else:
        add("q_proj", f"{attn}.q_proj", "attention", h, q, arch.attention_bias)
        add("k_proj", f"{attn}.k_proj", "attention", h, kv, arch.attention_bias)
        add("v_proj", f"{attn}.v_proj", "attention", h, kv, arch.attention_bias)
        add("o_proj", f"{attn}.o_proj", "attention", q, h, arch.attention_out_bias)

    # Dense MLP on the layers without routed experts.
    dense = arch.dense_layers
    _add_mlp(add, family.mlp, mlp, "mlp", h, arch.intermediate_size, arch.mlp_bias, dense)

    # Experts.
    moe = arch.moe
    if moe is not None:
        sparse = arch.moe_layers
        kind = family.moe
        router_name, router_path = (
            ("router", f"{mlp}.router")
            if kind in ("phimoe", "gpt_oss")
            else ("gate", f"{mlp}.gate")
        )
        add(
            router_name,
            router_path,
            "router",
            h,
            moe.num_experts,
            moe.router_bias,
            sparse,
            is_nn_linear=kind == "phimoe",
            dtype=moe.router_dtype,
        )
        e, k, w = moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size
        for name, fan_in, fan_out in (
            ("experts.gate_up_proj", h, 2 * w),
            ("experts.down_proj", w, h),
        ):
            add(
                name,
                f"{mlp}.{name}",
                "experts",
                fan_in,
                fan_out,
                moe.expert_bias,
                sparse,
                per_layer=e,
                active_per_layer=k,
                is_nn_linear=False,
            )
        if moe.shared_expert_intermediate_size:
            shared_path = f"{mlp}.shared_expert" if kind == "qwen2_moe" else f"{mlp}.shared_experts"
            _add_mlp(
                add,
                "gated",
                shared_path,
                "shared_experts",
                h,
                moe.shared_expert_intermediate_size,
                arch.mlp_bias and kind == "deepseek",
                sparse,
            )
        if moe.shared_expert_gate:
            add("shared_expert_gate", f"{mlp}.shared_expert_gate", "router", h, 1, False, sparse)

    add(
        "lm_head",
        "lm_head",
        "lm_head",
        h,
        arch.vocab_size,
        arch.lm_head_bias,
        (),
        tied=arch.tie_word_embeddings,
    )
    return tuple(out)


def _add_mlp(
    add: Any,
    style: str,
    path: str,
    component: str,
    h: int,
    width: int,
    bias: bool,
    layers: tuple[int, ...],
) -> None:
    if style == "gated":
        add("gate_proj", f"{path}.gate_proj", component, h, width, bias, layers)
        add("up_proj", f"{path}.up_proj", component, h, width, bias, layers)
        add("down_proj", f"{path}.down_proj", component, width, h, bias, layers)
    elif style == "fused_gate_up":
        add("gate_up_proj", f"{path}.gate_up_proj", component, h, 2 * width, bias, layers)
        add("down_proj", f"{path}.down_proj", component, width, h, bias, layers)
    elif style == "plain":
        add("c_fc", f"{path}.c_fc", component, h, width, bias, layers)
        add("c_proj", f"{path}.c_proj", component, width, h, bias, layers)
    elif style == "qwen_w":
        add("w1", f"{path}.w1", component, h, width, bias, layers)
        add("w2", f"{path}.w2", component, h, width, bias, layers)
        add("c_proj", f"{path}.c_proj", component, width, h, bias, layers)
    else:  # pragma: no cover - table is closed
        raise AssertionError(style)


@functools.lru_cache(maxsize=256)
def _parameter_groups(arch: Architecture) -> tuple[ParameterGroup, ...]:
    family = _FAMILIES[arch.model_type]
    all_layers = tuple(range(arch.num_layers))
    base = f"{family.prefix}.{family.layers_name}.{{i}}"
    attn = f"{base}.{family.attn_name}"
    h = arch.hidden_size
    norm_numel = h * (2 if arch.norm_bias else 1)
    out = [
        ParameterGroup(
            "embed_tokens",
            f"{family.prefix}.{family.embed_name}.weight",
            "embeddings",
            arch.vocab_size * h,
        )
    ]
    for name in family.layer_norms:
        out.append(ParameterGroup(name, f"{base}.{name}", "norms", norm_numel, all_layers))
    if arch.qk_norm is not None:
        if arch.qk_norm == "per_head":
            q_numel = k_numel = arch.head_dim
        else:  # full_width (OLMo2) and Cohere's (heads, head_dim) norms
            q_numel, k_numel = arch.q_proj_size, arch.kv_proj_size
        out.append(ParameterGroup("q_norm", f"{attn}.q_norm", "norms", q_numel, all_layers))
        out.append(ParameterGroup("k_norm", f"{attn}.k_norm", "norms", k_numel, all_layers))
    if arch.mla is not None:
        if arch.mla.q_lora_rank is not None:
            out.append(
                ParameterGroup(
                    "q_a_layernorm",
                    f"{attn}.q_a_layernorm",
                    "norms",
                    arch.mla.q_lora_rank,
                    all_layers,
                )
            )
        out.append(
            ParameterGroup(
                "kv_a_layernorm",
                f"{attn}.kv_a_layernorm",
                "norms",
                arch.mla.kv_lora_rank,
                all_layers,
            )
        )
    if arch.attention_sinks:
        out.append(
            ParameterGroup(
                "sinks", f"{attn}.sinks", "attention", arch.num_attention_heads, all_layers
            )
        )
    if arch.moe is not None and arch.moe.e_score_correction_bias:
        out.append(
            ParameterGroup(
                "e_score_correction_bias",
                f"{base}.{family.mlp_name}.gate.e_score_correction_bias",
                "router",
                arch.moe.num_experts,
                arch.moe_layers,
                is_buffer=True,
                dtype="float32",
            )
        )
    out.append(
        ParameterGroup(
            family.final_norm, f"{family.prefix}.{family.final_norm}", "norms", norm_numel
        )
    )
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _vision_modules(arch: Architecture) -> tuple[LinearModule, ...]:
    v = arch.vision
    if v is None:
        return ()
    h, w = v.hidden_size, v.intermediate_size
    layers = tuple(range(v.num_layers))
    base = "model.vision_tower.encoder.layers.{i}"
    out = [
        LinearModule(name, f"{base}.self_attn.{name}", "vision", h, h, True, layers)
        for name in ("q_proj", "k_proj", "v_proj", "out_proj")
    ]
    out.append(LinearModule("fc1", f"{base}.mlp.fc1", "vision", h, w, True, layers))
    out.append(LinearModule("fc2", f"{base}.mlp.fc2", "vision", w, h, True, layers))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _vision_groups(arch: Architecture) -> tuple[ParameterGroup, ...]:
    v = arch.vision
    if v is None:
        return ()
    h = v.hidden_size
    layers = tuple(range(v.num_layers))
    tower = "model.vision_tower"
    patch = v.num_channels * v.patch_size * v.patch_size * h + h
    return (
        ParameterGroup("patch_embedding", f"{tower}.embeddings.patch_embedding", "vision", patch),
        ParameterGroup(
            "position_embedding",
            f"{tower}.embeddings.position_embedding",
            "vision",
            v.num_patches * h,
        ),
        ParameterGroup(
            "layer_norms", f"{tower}.encoder.layers.{{i}}", "vision", 2 * h, layers, per_layer=2
        ),
        ParameterGroup("post_layernorm", f"{tower}.post_layernorm", "vision", 2 * h),
        ParameterGroup(
            "mm_input_projection_weight",
            "model.multi_modal_projector.mm_input_projection_weight",
            "vision",
            h * v.projector_out,
        ),
        ParameterGroup(
            "mm_soft_emb_norm", "model.multi_modal_projector.mm_soft_emb_norm", "vision", h
        ),
    )
