"""Gemma 4's encoder towers: the vision encoder (every size) and the audio conformer (E2B/E4B),
with the embedders that project their outputs into the language model.

Laid out as transformers 5 builds ``Gemma4ForConditionalGeneration``
(``models/gemma4/modeling_gemma4.py``): the vision tower is a patch embedder (a linear patch
projection and a ``2 × position_embedding_size × hidden`` position table), encoder layers of
q/k/v/o and a gated MLP behind ``Gemma4ClippableLinear`` wrappers (an ``nn.Linear`` at
``.linear``, and with ``use_clipped_linears`` four scalar clip bounds kept as checkpoint
buffers), per-head q/k norms (the v norm has no weight), four norms per layer, and with
``standardize`` a bias and scale buffer; ``embed_vision`` projects to the text width behind a
weightless norm. The audio tower is two strided Conv2d subsampling layers (LayerNorms without
bias), an input projection, ``num_hidden_layers`` conformer layers (two macaron feed-forwards,
relative-position self-attention with ``relative_k_proj`` and ``per_dim_scale``, a light
depthwise Conv1d block, norms) and ``output_proj``; ``embed_audio`` projects its
``output_proj_dims`` to the text width. Everything counts under the ``vision`` component (the
multimodal encoders); vLLM replicates the towers on every tensor-parallel rank except where a
module says otherwise.
"""

from __future__ import annotations

from service.estimator.model.shapes import (
    AudioSpec,
    LinearModule,
    ParameterGroup,
    Reads,
    Shard,
    VisionSpec,
)

__all__ = [
    "gemma4_audio_groups",
    "gemma4_audio_modules",
    "gemma4_vision_groups",
    "gemma4_vision_modules",
]

_VISION = "model.vision_tower"
_AUDIO = "model.audio_tower"
_CLIP_BOUNDS = 4  # input_min, input_max, output_min, output_max


def _linear(
    name: str, path: str, fan_in: int, fan_out: int, layers: tuple[int, ...] = (),
    shard: Shard = Shard.REPLICATED, bias: bool = False,
) -> LinearModule:  # fmt: skip
    return LinearModule(name, path, "vision", fan_in, fan_out, bias, layers, shard, Reads.VISION)


def _group(
    name: str, path: str, numel: int, layers: tuple[int, ...] = (), per_layer: int = 1,
    buffer: bool = False,
) -> ParameterGroup:  # fmt: skip
    return ParameterGroup(name, path, "vision", numel, layers, per_layer, is_buffer=buffer)


def gemma4_vision_modules(v: VisionSpec) -> list[LinearModule]:
    """The vision encoder's projections (q/k/v and the MLP's inputs split their outputs,
    o and down their inputs) and ``embed_vision``'s projection."""
    h, w, d = v.hidden_size, v.intermediate_size, v.head_dim
    q, kv = v.num_heads * d, v.num_kv_heads * d
    layers = tuple(range(v.num_layers))
    base = f"{_VISION}.encoder.layers.{{i}}"
    col, row = Shard.COLUMN, Shard.ROW
    patch = v.num_channels * v.patch_size**2
    return [
        _linear("input_proj", f"{_VISION}.patch_embedder.input_proj", patch, h),
        _linear("q_proj", f"{base}.self_attn.q_proj.linear", h, q, layers, col),
        _linear("k_proj", f"{base}.self_attn.k_proj.linear", h, kv, layers, col),
        _linear("v_proj", f"{base}.self_attn.v_proj.linear", h, kv, layers, col),
        _linear("o_proj", f"{base}.self_attn.o_proj.linear", q, h, layers, row),
        _linear("gate_proj", f"{base}.mlp.gate_proj.linear", h, w, layers, col),
        _linear("up_proj", f"{base}.mlp.up_proj.linear", h, w, layers, col),
        _linear("down_proj", f"{base}.mlp.down_proj.linear", w, h, layers, row),
        _linear("embedding_projection", "model.embed_vision.embedding_projection", h,
                v.projector_out),
    ]  # fmt: skip


def gemma4_vision_groups(v: VisionSpec) -> tuple[ParameterGroup, ...]:
    """The position table, the q/k norms (per head) and four norms per layer, and the
    buffers the checkpoint stores: clip bounds of the seven clippable linears per layer,
    ``std_bias`` / ``std_scale`` with ``standardize``."""
    h, d = v.hidden_size, v.head_dim
    layers = tuple(range(v.num_layers))
    base = f"{_VISION}.encoder.layers.{{i}}"
    out = [
        _group("position_embedding_table", f"{_VISION}.patch_embedder.position_embedding_table",
               2 * v.position_table * h),
        _group("q_norm", f"{base}.self_attn.q_norm", d, layers),
        _group("k_norm", f"{base}.self_attn.k_norm", d, layers),
        _group("layer_norms", base, h, layers, per_layer=4),
    ]  # fmt: skip
    if v.clipped:
        out.append(_group("clip_bounds", base, _CLIP_BOUNDS, layers, per_layer=7, buffer=True))
    if v.standardize:
        out.append(_group("std_bias_scale", f"{_VISION}.std", 2 * h, buffer=True))
    return tuple(out)


def gemma4_audio_modules(a: AudioSpec) -> list[LinearModule]:
    """The conformer's projections (two feed-forwards, attention with its relative-key
    projection, the light-conv block), the subsampler's input projection, ``output_proj`` and
    ``embed_audio``'s projection."""
    h, c0, c1 = a.hidden_size, a.conv_channels[0], a.conv_channels[1]
    layers = tuple(range(a.num_layers))
    base = f"{_AUDIO}.layers.{{i}}"
    out = [_linear("input_proj_linear", f"{_AUDIO}.subsample_conv_projection.input_proj_linear",
                   (c0 // 4) * c1, h)]  # fmt: skip
    for ff in ("feed_forward1", "feed_forward2"):
        out.append(_linear("ffw_layer_1", f"{base}.{ff}.ffw_layer_1.linear", h, 4 * h, layers))
        out.append(_linear("ffw_layer_2", f"{base}.{ff}.ffw_layer_2.linear", 4 * h, h, layers))
    for name in ("q_proj", "k_proj", "v_proj", "post"):
        out.append(_linear(name, f"{base}.self_attn.{name}.linear", h, h, layers))
    out += [
        _linear("relative_k_proj", f"{base}.self_attn.relative_k_proj", h, h, layers),
        _linear("linear_start", f"{base}.lconv1d.linear_start.linear", h, 2 * h, layers),
        _linear("linear_end", f"{base}.lconv1d.linear_end.linear", h, h, layers),
        _linear("output_proj", f"{_AUDIO}.output_proj", h, a.output_dim, bias=True),
        _linear("embedding_projection", "model.embed_audio.embedding_projection", a.output_dim,
                a.projector_out),
    ]  # fmt: skip
    return out


def gemma4_audio_groups(a: AudioSpec) -> tuple[ParameterGroup, ...]:
    """The subsampler's convolutions and norms (weight only), the attention's per-dimension
    scale, the depthwise Conv1d, the nine norms of a layer (two per feed-forward, two in the
    conv block, three around attention) and the clip bounds of the ten clippable linears per
    layer (four feed-forward, q/k/v/post, the conv block's two)."""
    h, c0, c1 = a.hidden_size, a.conv_channels[0], a.conv_channels[1]
    layers = tuple(range(a.num_layers))
    base = f"{_AUDIO}.layers.{{i}}"
    sub = f"{_AUDIO}.subsample_conv_projection"
    out = [
        _group("layer0.conv", f"{sub}.layer0.conv", c0 * 1 * 3 * 3),
        _group("layer0.norm", f"{sub}.layer0.norm", c0),
        _group("layer1.conv", f"{sub}.layer1.conv", c1 * c0 * 3 * 3),
        _group("layer1.norm", f"{sub}.layer1.norm", c1),
        _group("per_dim_scale", f"{base}.self_attn.per_dim_scale", h // a.num_heads, layers),
        _group("depthwise_conv1d", f"{base}.lconv1d.depthwise_conv1d", h * a.conv_kernel, layers),
        _group("norms", base, h, layers, per_layer=9),
    ]
    if a.clipped:
        out.append(_group("clip_bounds", base, _CLIP_BOUNDS, layers, per_layer=10, buffer=True))
    return tuple(out)
