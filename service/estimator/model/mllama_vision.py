"""Llama 3.2 Vision's tower (``model.vision_model`` of ``MllamaForConditionalGeneration``) and
its projector, as transformers 5 builds them (``models/mllama/modeling_mllama.py``).

A Conv2d patch embedding without bias, a class embedding, a gated position embedding (a table
of every patch plus the class token, and a tile table of ``max_aspect_ratio_id + 1`` rows of
``max_num_tiles`` tiles of it), gated pre- and post-tile aspect-ratio embeddings, LayerNorms
before and after, a local encoder of ``num_hidden_layers`` layers and a global encoder of
``num_global_layers`` gated layers (q/k/v/o without bias, a ``fc1`` / ``fc2`` MLP with bias,
two LayerNorms), and the projector from ``vision_output_dim`` (the final output concatenated
with the listed intermediate layers) to the language model's width, with bias.
"""

from __future__ import annotations

from service.estimator.model.shapes import LinearModule, ParameterGroup, Reads, Shard, VisionSpec

__all__ = ["mllama_vision_groups", "mllama_vision_modules"]

_VISION = "model.vision_model"
_ENCODERS = ("transformer", "global_transformer")


def _encoder_layers(v: VisionSpec, encoder: str) -> tuple[int, ...]:
    return tuple(range(v.num_layers if encoder == "transformer" else v.global_layers))


def mllama_vision_modules(v: VisionSpec) -> list[LinearModule]:
    """Both encoders' projections (q/k/v and fc1 split by output under TP, o and fc2 by input)
    and the projector."""
    h, w = v.hidden_size, v.intermediate_size
    out = []
    for encoder in _ENCODERS:
        layers = _encoder_layers(v, encoder)
        base = f"{_VISION}.{encoder}.layers.{{i}}"
        for name, fan_in, fan_out, bias, shard, where in (
            ("q_proj", h, h, False, Shard.COLUMN, "self_attn"),
            ("k_proj", h, h, False, Shard.COLUMN, "self_attn"),
            ("v_proj", h, h, False, Shard.COLUMN, "self_attn"),
            ("o_proj", h, h, False, Shard.ROW, "self_attn"),
            ("fc1", h, w, True, Shard.COLUMN, "mlp"),
            ("fc2", w, h, True, Shard.ROW, "mlp"),
        ):
            out.append(
                LinearModule(name, f"{base}.{where}.{name}", "vision", fan_in, fan_out, bias,
                             layers, shard, Reads.VISION)
            )  # fmt: skip
    out.append(
        LinearModule("multi_modal_projector", "model.multi_modal_projector", "vision",
                     v.output_dim, v.projector_out, True, (), Shard.COLUMN, Reads.VISION)
    )  # fmt: skip
    return out


def mllama_vision_groups(v: VisionSpec) -> tuple[ParameterGroup, ...]:
    """The embeddings and gates, the outer LayerNorms and the encoders' LayerNorms (two per
    layer, weight and bias) and the global encoder's two gates per layer."""
    h = v.hidden_size
    patches = v.num_patches + 1  # and the class token
    ratios = v.aspect_ratios + 1
    tiles = v.max_tiles
    g = f"{_VISION}.gated_positional_embedding"
    out = [
        ParameterGroup("patch_embedding", f"{_VISION}.patch_embedding", "vision",
                       v.num_channels * v.patch_size**2 * h),
        ParameterGroup("class_embedding", f"{_VISION}.class_embedding", "vision", h),
        ParameterGroup("position_embedding", f"{g}.embedding", "vision", patches * h),
        ParameterGroup("tile_embedding", f"{g}.tile_embedding", "vision",
                       ratios * tiles * patches * h),
        ParameterGroup("gates", _VISION, "vision", 1, per_layer=3),
        ParameterGroup("tile_positional_embeddings", _VISION, "vision", ratios * tiles * h,
                       per_layer=2),
        ParameterGroup("layernorm_pre_post", _VISION, "vision", 2 * h, per_layer=2),
    ]  # fmt: skip
    for encoder in _ENCODERS:
        layers = _encoder_layers(v, encoder)
        base = f"{_VISION}.{encoder}.layers.{{i}}"
        out.append(ParameterGroup("layer_norms", base, "vision", 2 * h, layers, per_layer=2))
    out.append(
        ParameterGroup("gate_attn_ffn", f"{_VISION}.global_transformer.layers.{{i}}", "vision",
                       1, _encoder_layers(v, "global_transformer"), per_layer=2)
    )  # fmt: skip
    return tuple(out)
