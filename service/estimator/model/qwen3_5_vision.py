"""Qwen3.5's vision tower (``model.visual`` of ``Qwen3_5ForConditionalGeneration`` and its MoE
twin), as transformers 5 builds it (``models/qwen3_5/modeling_qwen3_5.py``): a Conv3d patch
embedding with bias over ``temporal_patch_size × patch_size²`` pixels of ``in_channels``, a
learned position table of ``num_position_embeddings`` rows, ``depth`` blocks of two LayerNorms
(weight and bias), a fused ``qkv`` and ``proj`` attention and a ``linear_fc1`` / ``linear_fc2``
MLP (all with bias), and a patch merger (a LayerNorm over one patch, then two linear layers
over ``spatial_merge_size²`` merged patches, to ``out_hidden_size``). No deepstack mergers.
"""

from __future__ import annotations

from service.estimator.model.shapes import LinearModule, ParameterGroup, Reads, Shard, VisionSpec

__all__ = ["qwen3_5_vision_groups", "qwen3_5_vision_modules"]

_VISUAL = "model.visual"


def _linear(
    name: str, path: str, fan_in: int, fan_out: int, layers: tuple[int, ...], shard: Shard
) -> LinearModule:
    return LinearModule(name, path, "vision", fan_in, fan_out, True, layers, shard, Reads.VISION)


def qwen3_5_vision_modules(v: VisionSpec) -> list[LinearModule]:
    """The blocks' fused q/k/v and MLP input (split by output under TP, vLLM), their output
    projections (split by input), and the merger's two projections."""
    h, w, m = v.hidden_size, v.intermediate_size, v.merge_size
    layers = tuple(range(v.num_layers))
    base = f"{_VISUAL}.blocks.{{i}}"
    merged = h * m * m
    col, row = Shard.COLUMN, Shard.ROW
    return [
        _linear("qkv", f"{base}.attn.qkv", h, 3 * h, layers, col),
        _linear("proj", f"{base}.attn.proj", h, h, layers, row),
        _linear("linear_fc1", f"{base}.mlp.linear_fc1", h, w, layers, col),
        _linear("linear_fc2", f"{base}.mlp.linear_fc2", w, h, layers, row),
        _linear("linear_fc1", f"{_VISUAL}.merger.linear_fc1", merged, merged, (), col),
        _linear("linear_fc2", f"{_VISUAL}.merger.linear_fc2", merged, v.projector_out, (), row),
    ]


def qwen3_5_vision_groups(v: VisionSpec) -> tuple[ParameterGroup, ...]:
    """The Conv3d patch embedding (with bias), the position table, two LayerNorms per block
    and the merger's LayerNorm (weight and bias each)."""
    h = v.hidden_size
    patch = v.num_channels * v.temporal_patch * v.patch_size**2 * h + h
    layers = tuple(range(v.num_layers))
    return (
        ParameterGroup("patch_embed", f"{_VISUAL}.patch_embed.proj", "vision", patch),
        # nn.Embedding in vLLM's Qwen3-VL tower: whole on every rank.
        ParameterGroup("pos_embed", f"{_VISUAL}.pos_embed", "vision", v.position_table * h),
        ParameterGroup("norms", f"{_VISUAL}.blocks.{{i}}", "vision", 2 * h, layers, per_layer=2),
        ParameterGroup("merger.norm", f"{_VISUAL}.merger.norm", "vision", 2 * h),
    )  # fmt: skip
