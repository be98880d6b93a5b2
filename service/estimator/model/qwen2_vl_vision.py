"""Qwen2-VL's and Qwen2.5-VL's vision towers (``model.visual`` of
``Qwen2VLForConditionalGeneration`` / ``Qwen2_5_VLForConditionalGeneration``), as transformers 5
builds them (``models/qwen2_vl/modeling_qwen2_vl.py``,
``models/qwen2_5_vl/modeling_qwen2_5_vl.py``).

Both: a Conv3d patch embedding without bias over ``temporal_patch_size × patch_size²`` pixels of
``in_channels``, rotary positions (no table), ``depth`` blocks of a fused ``qkv`` and a ``proj``
attention with bias, and a patch merger (a norm over one patch, then two linear layers with bias
over ``spatial_merge_size²`` merged patches, to the language model's width).

- Qwen2-VL: the tower is ``embed_dim`` wide (its config's ``hidden_size`` is the merger's
  output); LayerNorms (weight and bias) and a ``fc1`` / ``fc2`` MLP ``embed_dim × mlp_ratio``
  wide, with bias.
- Qwen2.5-VL: RMSNorms (weight only) and a SwiGLU MLP (``gate_proj``, ``up_proj``,
  ``down_proj``, all with bias) ``intermediate_size`` wide; window attention on all blocks but
  ``fullatt_block_indexes`` changes no tensor.

The image vLLM profiles is the largest the checkpoint's processor accepts: ``max_pixels``
12845056 (16384 × 28², the Qwen2-VL / Qwen2.5-VL ``preprocessor_config.json`` value and
qwen-vl-utils' ``MAX_PIXELS``), i.e. 3584 × 3584 pixels, 16384 tokens after the 2 × 2 merge
(vLLM ``model_executor/models/qwen2_vl.py``:
``Qwen2VLProcessingInfo.get_image_size_with_most_features``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from service.estimator.errors import InvalidConfig
from service.estimator.model.config_reader import Bounds
from service.estimator.model.shapes import (
    LinearModule,
    ParameterGroup,
    Reads,
    Shard,
    VisionSpec,
    VisionTower,
)

__all__ = [
    "QWEN2_5_VL_DEFAULTS",
    "QWEN2_VL_DEFAULTS",
    "qwen2_vl_extras",
    "qwen2_vl_groups",
    "qwen2_vl_modules",
]

_VISUAL = "model.visual"
# The Qwen2-VL / Qwen2.5-VL processors' max_pixels (module docstring).
_MAX_PIXELS = 12845056

# What Qwen2VLVisionConfig and Qwen2_5_VLVisionConfig default alike (transformers 5), under
# the names vision.py reads.
_SHARED_DEFAULTS: Mapping[str, int] = {
    "num_hidden_layers": 32,
    "num_attention_heads": 16,
    "patch_size": 14,
    "num_channels": 3,
    "in_channels": 3,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": 3584,
}
# Qwen2_5_VLVisionConfig's own.
QWEN2_5_VL_DEFAULTS: Mapping[str, int] = {
    **_SHARED_DEFAULTS,
    "hidden_size": 3584,
    "intermediate_size": 3420,
}
# Qwen2VLVisionConfig's: the tower's width is embed_dim, its hidden_size the merger's output.
QWEN2_VL_DEFAULTS: Mapping[str, int] = {
    **_SHARED_DEFAULTS,
    "hidden_size": 1280,
    "intermediate_size": 1280 * 4,  # unused: embed_dim × mlp_ratio is read instead
    "mlp_ratio": 4,
}


def qwen2_vl_extras(
    spec: VisionSpec, outer: Mapping[str, Any], get: Callable[[str, int], int]
) -> VisionSpec:
    """Conv3d patches over ``temporal_patch_size`` frames of ``in_channels``, merged
    ``spatial_merge_size²`` into one token of the language model's width; Qwen2-VL's MLP is
    ``embed_dim × mlp_ratio`` wide. The profiled image: ``max_pixels`` (module docstring)."""
    out = get("out_hidden_size", Bounds.HIDDEN)
    if out != spec.projector_out:
        key = "hidden_size" if spec.kind is VisionTower.QWEN2_VL else "out_hidden_size"
        raise InvalidConfig(
            f"vision_config.{key} ({out}) must equal the language model's hidden_size "
            f"({spec.projector_out})",
            field="vision_config",
        )
    if spec.kind is VisionTower.QWEN2_VL:
        spec = dataclasses.replace(
            spec, intermediate_size=spec.hidden_size * get("mlp_ratio", 1 << 10)
        )
    merge = get("spatial_merge_size", 64)
    unit = spec.patch_size * merge
    side = max(1, math.isqrt(_MAX_PIXELS // (unit * unit)))
    return dataclasses.replace(
        spec,
        num_channels=get("in_channels", 64),
        temporal_patch=get("temporal_patch_size", 64),
        merge_size=merge,
        image_size=side * unit,
        tokens_per_image=side * side,
    )


def _linear(
    name: str, path: str, fan_in: int, fan_out: int, layers: tuple[int, ...], shard: Shard
) -> LinearModule:
    return LinearModule(name, path, "vision", fan_in, fan_out, True, layers, shard, Reads.VISION)


def qwen2_vl_modules(v: VisionSpec) -> list[LinearModule]:
    """The blocks' fused q/k/v and MLP inputs (split by output under TP, vLLM's
    ``Qwen2_5_VisionBlock``), their output projections (split by input), and the merger's two
    projections (``mlp.0`` by output, ``mlp.2`` by input)."""
    h, w, m = v.hidden_size, v.intermediate_size, v.merge_size
    layers = tuple(range(v.num_layers))
    base = f"{_VISUAL}.blocks.{{i}}"
    merged = h * m * m
    col, row = Shard.COLUMN, Shard.ROW
    if v.kind is VisionTower.QWEN2_VL:
        mlp = [
            _linear("fc1", f"{base}.mlp.fc1", h, w, layers, col),
            _linear("fc2", f"{base}.mlp.fc2", w, h, layers, row),
        ]
    else:
        mlp = [
            _linear("gate_proj", f"{base}.mlp.gate_proj", h, w, layers, col),
            _linear("up_proj", f"{base}.mlp.up_proj", h, w, layers, col),
            _linear("down_proj", f"{base}.mlp.down_proj", w, h, layers, row),
        ]
    return [
        _linear("qkv", f"{base}.attn.qkv", h, 3 * h, layers, col),
        _linear("proj", f"{base}.attn.proj", h, h, layers, row),
        *mlp,
        _linear("mlp.0", f"{_VISUAL}.merger.mlp.0", merged, merged, (), col),
        _linear("mlp.2", f"{_VISUAL}.merger.mlp.2", merged, v.projector_out, (), row),
    ]


def qwen2_vl_groups(v: VisionSpec) -> tuple[ParameterGroup, ...]:
    """The Conv3d patch embedding (no bias), two norms per block and the merger's norm:
    LayerNorms (weight and bias) in Qwen2-VL, RMSNorms (weight) in Qwen2.5-VL."""
    h = v.hidden_size
    norm = 2 * h if v.kind is VisionTower.QWEN2_VL else h
    patch = v.num_channels * v.temporal_patch * v.patch_size**2 * h
    layers = tuple(range(v.num_layers))
    return (
        ParameterGroup("patch_embed", f"{_VISUAL}.patch_embed.proj", "vision", patch),
        ParameterGroup("norms", f"{_VISUAL}.blocks.{{i}}", "vision", norm, layers, per_layer=2),
        ParameterGroup("merger.ln_q", f"{_VISUAL}.merger.ln_q", "vision", norm),
    )
