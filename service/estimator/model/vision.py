"""Vision towers of multimodal wrappers, apart from the language model.

One reader and one layout per tower (:class:`~.shapes.VisionTower`), as transformers builds
it: SigLIP (``siglip_vision_model``) with Gemma 3's projector, Llama 4's vision model with its
pixel-shuffle adapter and projector (``Llama4ForConditionalGeneration``), and Pixtral with
Mistral 3's norm, patch merger and two-layer projector (``Mistral3ForConditionalGeneration``).
:class:`~.shapes.VisionSpec` says what each tensor is. A wrapper with another tower is read
for its language model and the tower is named in the assumptions, not counted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from service.estimator.errors import InvalidConfig, UnsupportedArchitecture
from service.estimator.model.architecture import Architecture
from service.estimator.model.config_reader import Bounds, check_int
from service.estimator.model.gemma4_towers import (
    gemma4_vision_groups,
    gemma4_vision_modules,
)
from service.estimator.model.mllama_vision import mllama_vision_groups, mllama_vision_modules
from service.estimator.model.qwen2_vl_vision import (
    QWEN2_5_VL_DEFAULTS,
    QWEN2_VL_DEFAULTS,
    qwen2_vl_extras,
    qwen2_vl_groups,
    qwen2_vl_modules,
)
from service.estimator.model.qwen3_5_vision import qwen3_5_vision_groups, qwen3_5_vision_modules
from service.estimator.model.shapes import (
    LinearModule,
    ParameterGroup,
    Reads,
    Shard,
    VisionSpec,
    VisionTower,
)

__all__ = [
    "attach_vision",
    "vision_modules",
    "vision_parameter_groups",
]

# (tower model_type, language-model family) -> the tower.
_SUPPORTED: Mapping[tuple[str, str], VisionTower] = {
    ("siglip_vision_model", "gemma3"): VisionTower.SIGLIP,
    ("llama4_vision_model", "llama4"): VisionTower.LLAMA4,
    ("pixtral", "mistral"): VisionTower.PIXTRAL,
    ("gemma4_vision", "gemma4"): VisionTower.GEMMA4,
    ("qwen3_5_vision", "qwen3_5"): VisionTower.QWEN3_5,
    ("qwen3_5_moe_vision", "qwen3_5_moe"): VisionTower.QWEN3_5,
    ("mllama_vision_model", "mllama"): VisionTower.MLLAMA,
    # Checkpoints saved before transformers 5 name the tower by the wrapper's model_type.
    ("qwen2_vl_vision", "qwen2_vl"): VisionTower.QWEN2_VL,
    ("qwen2_vl", "qwen2_vl"): VisionTower.QWEN2_VL,
    ("qwen2_5_vl_vision", "qwen2_5_vl"): VisionTower.QWEN2_5_VL,
    ("qwen2_5_vl", "qwen2_5_vl"): VisionTower.QWEN2_5_VL,
}
# A tower config that names no model_type: the one its family's wrapper builds.
_DEFAULT_KIND = {
    "gemma3": "siglip_vision_model",
    "llama4": "llama4_vision_model",
    "gemma4": "gemma4_vision",
    "qwen3_5": "qwen3_5_vision",
    "qwen3_5_moe": "qwen3_5_moe_vision",
    "mllama": "mllama_vision_model",
    "qwen2_vl": "qwen2_vl_vision",
    "qwen2_5_vl": "qwen2_5_vl_vision",
}
# Towers that take images of any size (their extras derive the image vLLM profiles).
_ANY_SIZE = frozenset(
    {VisionTower.GEMMA4, VisionTower.QWEN3_5, VisionTower.QWEN2_VL, VisionTower.QWEN2_5_VL}
)
# Tower keys under the names their config classes give them (transformers' attribute_map).
_TOWER_KEYS: Mapping[VisionTower, Mapping[str, str]] = {
    VisionTower.QWEN3_5: {"num_hidden_layers": "depth", "num_attention_heads": "num_heads"},
    VisionTower.MLLAMA: {"num_attention_heads": "attention_heads"},
    VisionTower.QWEN2_VL: {
        "hidden_size": "embed_dim",
        "out_hidden_size": "hidden_size",
        "num_hidden_layers": "depth",
        "num_attention_heads": "num_heads",
    },
    VisionTower.QWEN2_5_VL: {"num_hidden_layers": "depth", "num_attention_heads": "num_heads"},
}

# The config class defaults of each tower (transformers), for keys a config leaves out.
_DEFAULTS: Mapping[VisionTower, Mapping[str, int]] = {
    VisionTower.SIGLIP: {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "image_size": 224,
        "patch_size": 16,
        "num_channels": 3,
    },
    VisionTower.LLAMA4: {
        "hidden_size": 768,
        "intermediate_size": 5632,
        "num_hidden_layers": 34,
        "num_attention_heads": 16,
        "image_size": 448,
        "patch_size": 14,
        "num_channels": 3,
        "vision_output_dim": 7680,
        "projector_input_dim": 4096,
        "projector_output_dim": 4096,
    },
    VisionTower.PIXTRAL: {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "image_size": 1024,
        "patch_size": 16,
        "num_channels": 3,
    },
    # Gemma4VisionConfig: images of any size, three channels; image_size is set from the
    # soft tokens per image below.
    VisionTower.GEMMA4: {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 16,
        "num_attention_heads": 12,
        "patch_size": 16,
        "num_channels": 3,
        "head_dim": 64,
        "position_embedding_size": 10240,
        "pooling_kernel_size": 3,
    },
    # MllamaVisionConfig (transformers 5).
    VisionTower.MLLAMA: {
        "hidden_size": 1280,
        "intermediate_size": 5120,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "image_size": 448,
        "patch_size": 14,
        "num_channels": 3,
        "num_global_layers": 8,
        "vision_output_dim": 7680,
        "max_num_tiles": 4,
    },
    # Qwen3_5VisionConfig (transformers 5); image_size is set from the position table below.
    VisionTower.QWEN3_5: {
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "patch_size": 16,
        "num_channels": 3,
        "in_channels": 3,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "num_position_embeddings": 2304,
        "out_hidden_size": 3584,
    },
    VisionTower.QWEN2_VL: QWEN2_VL_DEFAULTS,
    VisionTower.QWEN2_5_VL: QWEN2_5_VL_DEFAULTS,
}


def attach_vision(arch: Architecture, outer: Mapping[str, Any], cfg: Any) -> Architecture:
    """``arch`` with the vision tower a wrapper's ``vision_config`` describes."""
    if not isinstance(cfg, Mapping):
        raise InvalidConfig("vision_config must be an object", field="vision_config")
    kind_name = cfg.get("model_type", _DEFAULT_KIND.get(arch.family_name, ""))
    kind = _SUPPORTED.get((str(kind_name), arch.family_name))
    if kind is None:
        note = (
            f"vision tower ({str(kind_name)[:40]}) of the {arch.wrapper_model_type} wrapper "
            "not counted"
        )
        return dataclasses.replace(arch, assumptions=(*arch.assumptions, note))
    if kind is VisionTower.SIGLIP and cfg.get("vision_use_head"):
        raise UnsupportedArchitecture(
            "a SigLIP vision tower with vision_use_head is not supported", field="vision_config"
        )
    defaults = _DEFAULTS[kind]
    renamed = _TOWER_KEYS.get(kind, {})

    def get(key: str, high: int) -> int:
        name = renamed.get(key, key)
        return check_int(cfg.get(name, defaults[key]), f"vision_config.{name}", 1, high)

    hidden = get("hidden_size", Bounds.HIDDEN)
    heads = get("num_attention_heads", Bounds.HEADS)
    if hidden % heads:
        raise InvalidConfig(
            "vision_config.hidden_size must be a multiple of num_attention_heads",
            field="vision_config",
        )
    patch = get("patch_size", 1 << 12)
    # Towers that take images of any size: the profiled image is derived below.
    image = patch if kind in _ANY_SIZE else get("image_size", 1 << 16)
    if image % patch:
        raise InvalidConfig(
            "vision_config.image_size must be a multiple of patch_size", field="vision_config"
        )
    spec = VisionSpec(
        hidden_size=hidden,
        intermediate_size=get("intermediate_size", Bounds.INTERMEDIATE),
        num_layers=get("num_hidden_layers", Bounds.LAYERS),
        num_heads=heads,
        image_size=image,
        patch_size=patch,
        num_channels=get("num_channels", 64),
        projector_out=arch.hidden_size,
        tokens_per_image=1,
        kind=kind,
    )
    spec = _EXTRAS[kind](spec, outer, get)
    return dataclasses.replace(arch, vision=spec)


def _siglip_extras(
    spec: VisionSpec, outer: Mapping[str, Any], get: Callable[[str, int], int]
) -> VisionSpec:
    tokens = check_int(outer.get("mm_tokens_per_image", 256), "mm_tokens_per_image", 1, 1 << 20)
    return dataclasses.replace(spec, tokens_per_image=tokens)


def _llama4_extras(
    spec: VisionSpec, outer: Mapping[str, Any], get: Callable[[str, int], int]
) -> VisionSpec:
    # The pixel shuffle folds 2 x 2 patches into one token (pixel_shuffle_ratio 0.5).
    return dataclasses.replace(
        spec,
        adapter_in=get("projector_input_dim", Bounds.INTERMEDIATE),
        adapter_out=get("projector_output_dim", Bounds.INTERMEDIATE),
        output_dim=get("vision_output_dim", Bounds.INTERMEDIATE),
        tokens_per_image=spec.num_patches // 4,
    )


def _pixtral_extras(
    spec: VisionSpec, outer: Mapping[str, Any], get: Callable[[str, int], int]
) -> VisionSpec:
    merge = check_int(outer.get("spatial_merge_size", 2), "spatial_merge_size", 1, 64)
    layer = outer.get("vision_feature_layer", -1)
    feature_layers = len(layer) if isinstance(layer, list) and layer else 1
    bias = outer.get("multimodal_projector_bias", False)
    if not isinstance(bias, bool):
        raise InvalidConfig(
            "multimodal_projector_bias must be true or false", field="multimodal_projector_bias"
        )
    return dataclasses.replace(
        spec,
        merge_size=merge,
        feature_layers=feature_layers,
        projector_bias=bias,
        tokens_per_image=max(1, spec.num_patches // (merge * merge)),
    )


def _gemma4_extras(
    spec: VisionSpec, outer: Mapping[str, Any], get: Callable[[str, int], int]
) -> VisionSpec:
    """Gemma 4: the encoder's own head size and KV heads, its position table, its clip bounds
    and standardization buffers; an image is ``vision_soft_tokens_per_image`` soft tokens
    (280), each pooled from ``pooling_kernel_size²`` patches, so the dummy image vLLM
    profiles is taken as the square that many patches cover."""
    cfg = outer.get("vision_config") or {}
    tokens = check_int(
        outer.get("vision_soft_tokens_per_image", 280), "vision_soft_tokens_per_image", 1, 1 << 16
    )
    pool = get("pooling_kernel_size", 64)
    side = math.isqrt(tokens * pool * pool - 1) + 1
    flags = {}
    for key in ("use_clipped_linears", "standardize"):
        value = cfg.get(key, False)
        if not isinstance(value, bool):
            raise InvalidConfig(f"vision_config.{key} must be true or false", field="vision_config")
        flags[key] = value
    return dataclasses.replace(
        spec,
        head_dim=get("head_dim", Bounds.HEAD_DIM),
        num_kv_heads=check_int(
            cfg.get("num_key_value_heads", spec.num_heads), "vision_config.num_key_value_heads",
            1, Bounds.HEADS,
        ),
        position_table=get("position_embedding_size", 1 << 20),
        clipped=flags["use_clipped_linears"],
        standardize=flags["standardize"],
        tokens_per_image=tokens,
        image_size=side * spec.patch_size,
    )  # fmt: skip


def _qwen3_5_extras(
    spec: VisionSpec, outer: Mapping[str, Any], get: Callable[[str, int], int]
) -> VisionSpec:
    """Qwen3.5: Conv3d patches over ``temporal_patch_size`` frames of ``in_channels``, a
    position table of ``num_position_embeddings`` rows (a square grid), merged ``2 × 2``
    into one token; the dummy image vLLM profiles is taken as that grid."""
    out = get("out_hidden_size", Bounds.HIDDEN)
    if out != spec.projector_out:
        raise InvalidConfig(
            f"vision_config.out_hidden_size ({out}) must equal the language model's hidden_size "
            f"({spec.projector_out})",
            field="vision_config",
        )
    rows = get("num_position_embeddings", 1 << 20)
    merge = get("spatial_merge_size", 64)
    side = math.isqrt(rows)
    return dataclasses.replace(
        spec,
        num_channels=get("in_channels", 64),
        temporal_patch=get("temporal_patch_size", 64),
        merge_size=merge,
        position_table=rows,
        image_size=side * spec.patch_size,
        tokens_per_image=max(1, rows // (merge * merge)),
    )


def _mllama_extras(
    spec: VisionSpec, outer: Mapping[str, Any], get: Callable[[str, int], int]
) -> VisionSpec:
    """Llama 3.2 Vision: the global encoder, the projector's input (the final output and the
    intermediate layers concatenated, ``vision_output_dim``), the tiles and the aspect-ratio
    tables (one row per supported ratio and a padding row); an image is up to
    ``max_num_tiles`` tiles of every patch and a class token."""
    cfg = outer.get("vision_config") or {}
    ratios = cfg.get("supported_aspect_ratios")
    n_ratios = 8 if ratios is None else len(ratios) if isinstance(ratios, list) else -1
    if not 1 <= n_ratios <= 1024:
        raise InvalidConfig(
            "vision_config.supported_aspect_ratios must be a list of ratios", field="vision_config"
        )
    tiles = get("max_num_tiles", 64)
    return dataclasses.replace(
        spec,
        global_layers=get("num_global_layers", Bounds.LAYERS),
        output_dim=get("vision_output_dim", Bounds.INTERMEDIATE),
        max_tiles=tiles,
        aspect_ratios=n_ratios,
        tokens_per_image=tiles * (spec.num_patches + 1),
    )


_EXTRAS: Mapping[
    VisionTower, Callable[[VisionSpec, Mapping[str, Any], Callable[[str, int], int]], VisionSpec]
] = {
    VisionTower.SIGLIP: _siglip_extras,
    VisionTower.LLAMA4: _llama4_extras,
    VisionTower.PIXTRAL: _pixtral_extras,
    VisionTower.GEMMA4: _gemma4_extras,
    VisionTower.QWEN3_5: _qwen3_5_extras,
    VisionTower.MLLAMA: _mllama_extras,
    VisionTower.QWEN2_VL: qwen2_vl_extras,
    VisionTower.QWEN2_5_VL: qwen2_vl_extras,
}


def _linear(
    name: str,
    path: str,
    fan_in: int,
    fan_out: int,
    bias: bool,
    layers: tuple[int, ...],
    shard: Shard,
) -> LinearModule:
    return LinearModule(name, path, "vision", fan_in, fan_out, bias, layers, shard, Reads.VISION)


def _encoder(
    base: str, attn: str, mlp: str, names: tuple[str, ...], v: VisionSpec, bias: bool
) -> list[LinearModule]:
    """An encoder's attention and MLP projections: q/k/v and the MLP's inputs split their
    outputs, the attention output and the MLP's last projection their inputs (vLLM)."""
    h, w = v.hidden_size, v.intermediate_size
    layers = tuple(range(v.num_layers))
    q, k, val, o, *mlp_names = names
    out = [_linear(n, f"{base}.{attn}.{n}", h, h, bias, layers, Shard.COLUMN) for n in (q, k, val)]
    out.append(_linear(o, f"{base}.{attn}.{o}", h, h, bias, layers, Shard.ROW))
    *ins, last = mlp_names
    out += [_linear(n, f"{base}.{mlp}.{n}", h, w, bias, layers, Shard.COLUMN) for n in ins]
    out.append(_linear(last, f"{base}.{mlp}.{last}", w, h, bias, layers, Shard.ROW))
    return out


_SIGLIP = "model.vision_tower"
_LLAMA4 = "vision_model"
_PIXTRAL = "model.vision_tower"
_PROJECTOR = {
    VisionTower.SIGLIP: "model.multi_modal_projector",
    VisionTower.LLAMA4: "multi_modal_projector",
    VisionTower.PIXTRAL: "model.multi_modal_projector",
}


def vision_modules(v: VisionSpec | None) -> tuple[LinearModule, ...]:
    """The tower's and the projector's linear projections (empty without a tower)."""
    return () if v is None else tuple(_MODULES[v.kind](v))


def _siglip_modules(v: VisionSpec) -> list[LinearModule]:
    base = f"{_SIGLIP}.encoder.layers.{{i}}"
    names = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")
    return _encoder(base, "self_attn", "mlp", names, v, True)


def _llama4_modules(v: VisionSpec) -> list[LinearModule]:
    """Llama 4: an unfold + linear patch embedding without bias, the encoder (biases on),
    the pixel-shuffle adapter's two projections and the projector, all without bias."""
    base = f"{_LLAMA4}.model.layers.{{i}}"
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2")
    out = _encoder(base, "self_attn", "mlp", names, v, True)
    patch = v.num_channels * v.patch_size * v.patch_size
    projector, rep = _PROJECTOR[v.kind], Shard.REPLICATED
    out += [
        _linear("linear", f"{_LLAMA4}.patch_embedding.linear", patch, v.hidden_size, False,
                (), rep),
        _linear("fc1", f"{_LLAMA4}.vision_adapter.mlp.fc1", v.intermediate_size,
                v.adapter_in, False, (), rep),
        _linear("fc2", f"{_LLAMA4}.vision_adapter.mlp.fc2", v.adapter_out, v.adapter_out,
                False, (), rep),
        _linear("linear_1", f"{projector}.linear_1", v.output_dim, v.projector_out, False,
                (), rep),
    ]  # fmt: skip
    return out


def _pixtral_modules(v: VisionSpec) -> list[LinearModule]:
    """Pixtral: the encoder without biases and a gated MLP; Mistral 3's patch merger and
    its two-layer projector (biases as multimodal_projector_bias says)."""
    base = f"{_PIXTRAL}.transformer.layers.{{i}}"
    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    out = _encoder(base, "attention", "feed_forward", names, v, False)
    h, t, m = v.hidden_size, v.projector_out, v.merge_size
    projector, b = _PROJECTOR[v.kind], v.projector_bias
    out += [
        _linear("merging_layer", f"{projector}.patch_merger.merging_layer", h * m * m, h, False,
                (), Shard.REPLICATED),
        _linear("linear_1", f"{projector}.linear_1", h * v.feature_layers, t, b, (),
                Shard.COLUMN),
        _linear("linear_2", f"{projector}.linear_2", t, t, b, (), Shard.ROW),
    ]  # fmt: skip
    return out


_MODULES: Mapping[VisionTower, Callable[[VisionSpec], list[LinearModule]]] = {
    VisionTower.SIGLIP: _siglip_modules,
    VisionTower.LLAMA4: _llama4_modules,
    VisionTower.PIXTRAL: _pixtral_modules,
    VisionTower.GEMMA4: gemma4_vision_modules,
    VisionTower.QWEN3_5: qwen3_5_vision_modules,
    VisionTower.MLLAMA: mllama_vision_modules,
    VisionTower.QWEN2_VL: qwen2_vl_modules,
    VisionTower.QWEN2_5_VL: qwen2_vl_modules,
}


def vision_parameter_groups(v: VisionSpec | None) -> tuple[ParameterGroup, ...]:
    """The tower's and the projector's other tensors; a learned position embedding is split
    like a vocabulary under tensor parallelism, the rest is replicated."""
    if v is None:
        return ()
    return _GROUPS[v.kind](v)


def _siglip_groups(v: VisionSpec) -> tuple[ParameterGroup, ...]:
    h = v.hidden_size
    layers = tuple(range(v.num_layers))
    patch = v.num_channels * v.patch_size * v.patch_size * h + h
    projector = _PROJECTOR[v.kind]
    return (
        ParameterGroup("patch_embedding", f"{_SIGLIP}.embeddings.patch_embedding", "vision", patch),
        ParameterGroup(
            "position_embedding",
            f"{_SIGLIP}.embeddings.position_embedding",
            "vision",
            v.num_patches * h,
            vocab_rows=v.num_patches,
        ),
        ParameterGroup(
            "layer_norms", f"{_SIGLIP}.encoder.layers.{{i}}", "vision", 2 * h, layers, per_layer=2
        ),
        ParameterGroup("post_layernorm", f"{_SIGLIP}.post_layernorm", "vision", 2 * h),
        ParameterGroup(
            "mm_input_projection_weight",
            f"{projector}.mm_input_projection_weight",
            "vision",
            h * v.projector_out,
        ),
        ParameterGroup("mm_soft_emb_norm", f"{projector}.mm_soft_emb_norm", "vision", h),
    )


def _llama4_groups(v: VisionSpec) -> tuple[ParameterGroup, ...]:
    """Llama 4: a class embedding, a position embedding of every patch plus the class token,
    LayerNorms (weight and bias) before and after the encoder and two per layer."""
    h = v.hidden_size
    layers = tuple(range(v.num_layers))
    rows = v.num_patches + 1
    return (
        ParameterGroup("class_embedding", f"{_LLAMA4}.class_embedding", "vision", h),
        ParameterGroup(
            "positional_embedding_vlm", f"{_LLAMA4}.positional_embedding_vlm", "vision", rows * h
        ),
        ParameterGroup("layernorm_pre", f"{_LLAMA4}.layernorm_pre", "vision", 2 * h),
        ParameterGroup("layernorm_post", f"{_LLAMA4}.layernorm_post", "vision", 2 * h),
        ParameterGroup(
            "layer_norms", f"{_LLAMA4}.model.layers.{{i}}", "vision", 2 * h, layers, per_layer=2
        ),
    )


def _pixtral_groups(v: VisionSpec) -> tuple[ParameterGroup, ...]:
    """Pixtral: a patch Conv2d without bias, RMSNorms (weight only) before the encoder and two
    per layer (its positions are rotary, no table); Mistral 3's projector RMSNorm."""
    h = v.hidden_size
    layers = tuple(range(v.num_layers))
    patch = v.num_channels * v.patch_size * v.patch_size * h
    return (
        ParameterGroup("patch_conv", f"{_PIXTRAL}.patch_conv", "vision", patch),
        ParameterGroup("ln_pre", f"{_PIXTRAL}.ln_pre", "vision", h),
        ParameterGroup(
            "layer_norms", f"{_PIXTRAL}.transformer.layers.{{i}}", "vision", h, layers, per_layer=2
        ),
        ParameterGroup("norm", f"{_PROJECTOR[v.kind]}.norm", "vision", h),
    )


_GROUPS: Mapping[VisionTower, Callable[[VisionSpec], tuple[ParameterGroup, ...]]] = {
    VisionTower.SIGLIP: _siglip_groups,
    VisionTower.LLAMA4: _llama4_groups,
    VisionTower.PIXTRAL: _pixtral_groups,
    VisionTower.GEMMA4: gemma4_vision_groups,
    VisionTower.QWEN3_5: qwen3_5_vision_groups,
    VisionTower.MLLAMA: mllama_vision_groups,
    VisionTower.QWEN2_VL: qwen2_vl_groups,
    VisionTower.QWEN2_5_VL: qwen2_vl_groups,
}
