"""Audio towers of multimodal wrappers, apart from the language model: Gemma 4's conformer
(``gemma4_audio``, laid out in :mod:`.gemma4_towers`). Another family's audio tower is named in
the assumptions, not counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from service.estimator.errors import InvalidConfig
from service.estimator.model.architecture import Architecture
from service.estimator.model.config_reader import Bounds, check_int
from service.estimator.model.gemma4_towers import gemma4_audio_groups, gemma4_audio_modules
from service.estimator.model.shapes import AudioSpec, LinearModule, ParameterGroup

__all__ = ["attach_audio", "audio_modules", "audio_parameter_groups"]


# Gemma4AudioConfig's defaults (transformers 5), for keys an audio_config leaves out.
_AUDIO_DEFAULTS: Mapping[str, Any] = {
    "hidden_size": 1024,
    "num_hidden_layers": 12,
    "num_attention_heads": 8,
    "subsampling_conv_channels": [128, 32],
    "conv_kernel_size": 5,
    "output_proj_dims": 1536,
    "use_clipped_linears": True,
}


def attach_audio(arch: Architecture, cfg: Any) -> Architecture:
    """``arch`` with the audio tower an ``audio_config`` describes (Gemma 4's conformer);
    another family's audio tower is named in the assumptions, not counted."""
    if not isinstance(cfg, Mapping):
        raise InvalidConfig("audio_config must be an object", field="audio_config")
    kind = str(cfg.get("model_type", "gemma4_audio" if arch.family_name == "gemma4" else ""))
    if kind != "gemma4_audio" or arch.family_name != "gemma4":
        note = f"audio tower ({kind[:40]}) of the {arch.wrapper_model_type} wrapper not counted"
        return dataclasses.replace(arch, assumptions=(*arch.assumptions, note))

    def get(key: str, high: int) -> int:
        return check_int(cfg.get(key, _AUDIO_DEFAULTS[key]), f"audio_config.{key}", 1, high)

    channels = cfg.get("subsampling_conv_channels", _AUDIO_DEFAULTS["subsampling_conv_channels"])
    if not isinstance(channels, list | tuple) or len(channels) != 2:
        raise InvalidConfig(
            "audio_config.subsampling_conv_channels must list two channel counts",
            field="audio_config",
        )
    c0, c1 = (check_int(c, "audio_config.subsampling_conv_channels", 1, 1 << 16) for c in channels)
    clipped = cfg.get("use_clipped_linears", True)
    if not isinstance(clipped, bool):
        raise InvalidConfig(
            "audio_config.use_clipped_linears must be true or false", field="audio_config"
        )
    hidden, heads = get("hidden_size", Bounds.HIDDEN), get("num_attention_heads", Bounds.HEADS)
    if hidden % heads:
        raise InvalidConfig(
            "audio_config.hidden_size must be a multiple of num_attention_heads",
            field="audio_config",
        )
    spec = AudioSpec(
        hidden_size=hidden,
        num_layers=get("num_hidden_layers", Bounds.LAYERS),
        num_heads=heads,
        conv_channels=(c0, c1),
        conv_kernel=get("conv_kernel_size", 64),
        output_dim=get("output_proj_dims", Bounds.HIDDEN),
        projector_out=arch.hidden_size,
        clipped=clipped,
    )
    return dataclasses.replace(arch, audio=spec)


def audio_modules(a: AudioSpec | None) -> tuple[LinearModule, ...]:
    return () if a is None else tuple(gemma4_audio_modules(a))


def audio_parameter_groups(a: AudioSpec | None) -> tuple[ParameterGroup, ...]:
    return () if a is None else gemma4_audio_groups(a)
