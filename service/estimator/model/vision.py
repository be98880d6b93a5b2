"""Vision towers of multimodal wrappers, apart from the language model.

Today: SigLIP (``siglip_vision_model``) with Gemma 3's multimodal projector, as transformers'
``Gemma3ForConditionalGeneration`` builds it (:class:`~.shapes.VisionSpec` says what each
tensor is). A wrapper with another tower is read for its language model and the tower is
named in the assumptions, not counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from service.estimator.errors import InvalidConfig, UnsupportedArchitecture
from service.estimator.model.architecture import Architecture
from service.estimator.model.config_reader import Bounds, check_int
from service.estimator.model.shapes import LinearModule, ParameterGroup, Reads, Shard, VisionSpec

__all__ = ["attach_vision", "vision_modules", "vision_parameter_groups"]

# (tower model_type, language-model family) pairs this module can describe.
_SUPPORTED = frozenset({("siglip_vision_model", "gemma3")})
_TOWER = "model.vision_tower"


def attach_vision(arch: Architecture, outer: Mapping[str, Any], cfg: Any) -> Architecture:
    """``arch`` with the vision tower a wrapper's ``vision_config`` describes."""
    if not isinstance(cfg, Mapping):
        raise InvalidConfig("vision_config must be an object", field="vision_config")
    kind = cfg.get("model_type", "siglip_vision_model")
    if (kind, arch.family_name) not in _SUPPORTED:
        note = (
            f"vision tower ({str(kind)[:40]}) of the {arch.wrapper_model_type} wrapper not counted"
        )
        return dataclasses.replace(arch, assumptions=(*arch.assumptions, note))
    if cfg.get("vision_use_head"):
        raise UnsupportedArchitecture(
            "a SigLIP vision tower with vision_use_head is not supported", field="vision_config"
        )

    def get(key: str, default: int, high: int) -> int:
        return check_int(cfg.get(key, default), f"vision_config.{key}", 1, high)

    hidden = get("hidden_size", 768, Bounds.HIDDEN)
    heads = get("num_attention_heads", 12, Bounds.HEADS)
    if hidden % heads:
        raise InvalidConfig(
            "vision_config.hidden_size must be a multiple of num_attention_heads",
            field="vision_config",
        )
    image = get("image_size", 224, 1 << 16)
    patch = get("patch_size", 16, 1 << 12)
    if image % patch:
        raise InvalidConfig(
            "vision_config.image_size must be a multiple of patch_size", field="vision_config"
        )
    spec = VisionSpec(
        hidden_size=hidden,
        intermediate_size=get("intermediate_size", 3072, Bounds.INTERMEDIATE),
        num_layers=get("num_hidden_layers", 12, Bounds.LAYERS),
        num_heads=heads,
        image_size=image,
        patch_size=patch,
        num_channels=get("num_channels", 3, 64),
        projector_out=arch.hidden_size,
        tokens_per_image=check_int(
            outer.get("mm_tokens_per_image", 256), "mm_tokens_per_image", 1, 1 << 20
        ),
    )
    return dataclasses.replace(arch, vision=spec)


def vision_modules(v: VisionSpec | None) -> tuple[LinearModule, ...]:
    """The tower's projections: q/k/v and fc1 split their outputs, out_proj and fc2 their
    inputs under tensor parallelism (vLLM's SigLIP)."""
    if v is None:
        return ()
    h, w = v.hidden_size, v.intermediate_size
    layers = tuple(range(v.num_layers))
    base = f"{_TOWER}.encoder.layers.{{i}}"
    out = [
        LinearModule(
            name,
            f"{base}.self_attn.{name}",
            "vision",
            h,
            h,
            True,
            layers,
            Shard.COLUMN,
            Reads.VISION,
        )
        for name in ("q_proj", "k_proj", "v_proj")
    ]
    out.append(
        LinearModule(
            "out_proj",
            f"{base}.self_attn.out_proj",
            "vision",
            h,
            h,
            True,
            layers,
            Shard.ROW,
            Reads.VISION,
        )
    )
    out.append(
        LinearModule(
            "fc1", f"{base}.mlp.fc1", "vision", h, w, True, layers, Shard.COLUMN, Reads.VISION
        )
    )
    out.append(
        LinearModule(
            "fc2", f"{base}.mlp.fc2", "vision", w, h, True, layers, Shard.ROW, Reads.VISION
        )
    )
    return tuple(out)


def vision_parameter_groups(v: VisionSpec | None) -> tuple[ParameterGroup, ...]:
    """The tower's other tensors and the projector; the position embedding is split like a
    vocabulary under tensor parallelism, the rest is replicated."""
    if v is None:
        return ()
    h = v.hidden_size
    layers = tuple(range(v.num_layers))
    patch = v.num_channels * v.patch_size * v.patch_size * h + h
    return (
        ParameterGroup("patch_embedding", f"{_TOWER}.embeddings.patch_embedding", "vision", patch),
        ParameterGroup(
            "position_embedding",
            f"{_TOWER}.embeddings.position_embedding",
            "vision",
            v.num_patches * h,
            vocab_rows=v.num_patches,
        ),
        ParameterGroup(
            "layer_norms", f"{_TOWER}.encoder.layers.{{i}}", "vision", 2 * h, layers, per_layer=2
        ),
        ParameterGroup("post_layernorm", f"{_TOWER}.post_layernorm", "vision", 2 * h),
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
