"""Which family reads a config whose ``model_type`` the family table (:mod:`.families`) does
not know: the type whose transformers class its ``architectures`` names (Kimi-K2's ``kimi_k2``
runs as ``DeepseekV3ForCausalLM``), else, when it has the standard decoder keys and none that
say it is more than a dense decoder, the generic decoder (read as Llama); else it is refused,
naming the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from service.estimator.errors import UnsupportedArchitecture
from service.estimator.model.config_reader import ALIASES, identifier
from service.estimator.model.families import ARCHITECTURE_CLASSES, LLAMA, SUPPORTED_MODEL_TYPES
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType

__all__ = [
    "GENERIC_DECODER",
    "GENERIC_DECODER_KEYS",
    "NOT_A_DENSE_DECODER",
    "generic_decoder",
    "outer_model_type",
    "shown_name",
]

FAMILIES_OR_WRAPPERS = frozenset(SUPPORTED_MODEL_TYPES)

#: A decoder whose family is unknown but whose config has the standard keys is read as Llama
#: (but llama.cpp's loader knows nothing of it: no Llama typing in its quantize rules).
GENERIC_DECODER = dataclasses.replace(LLAMA, llamacpp=LlamaCppNames(LlamaCppType.OTHER))

#: Config keys of the standard decoder a generic read needs (under ALIASES' names too).
GENERIC_DECODER_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)

#: Keys that say an unknown config is more than a dense decoder: read as one, it would be
#: wrong (experts, latent attention, recurrent mixers), so it is refused instead.
NOT_A_DENSE_DECODER = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "moe_intermediate_size",
    "kv_lora_rank",
    "linear_num_value_heads",
    "ssm_state_size",
    "mamba_d_state",
)


def shown_name(name: str) -> str:
    """A model_type as messages quote it: cut to 60 characters, so a long one stays readable."""
    return name if len(name) <= 60 else name[:57] + "..."


def outer_model_type(outer: Mapping[str, Any], notes: list[str]) -> Any:
    """The config's model_type; an unknown one is replaced by the type whose transformers
    class its ``architectures`` names (Kimi-K2: ``kimi_k2`` runs as DeepseekV3ForCausalLM)."""
    model_type = outer.get("model_type")
    if isinstance(model_type, str):
        identifier(model_type, "model_type")  # before any reading falls back to another name
    known = isinstance(model_type, str) and (
        model_type in FAMILIES_OR_WRAPPERS or outer.get("text_config") is not None
    )
    if known:
        return model_type
    archs = outer.get("architectures")
    if not isinstance(archs, Sequence) or isinstance(archs, str):
        return model_type
    for cls in archs:
        mapped = ARCHITECTURE_CLASSES.get(cls) if isinstance(cls, str) else None
        if mapped is not None:
            if model_type is not None:
                notes.append(
                    f"model_type {shown_name(str(model_type))!r} is not one this service knows; "
                    f"read as {mapped} because architectures names {cls}"
                )
            return mapped
    return model_type


def generic_decoder(config: Mapping[str, Any], model_type: str) -> Family:
    """The generic decoder for an unknown model_type whose config has the standard keys;
    refused, naming the field, when a key is missing or says it is more than a dense decoder."""
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    for key in NOT_A_DENSE_DECODER:
        if config.get(key) is not None:
            raise UnsupportedArchitecture(
                f"model_type {shown_name(model_type)!r} is not supported and its {key} says it is "
                "not a plain dense decoder, so it cannot be read as one; supported model "
                f"types: {supported}",
                field=key,
            )
    for key in GENERIC_DECODER_KEYS:
        if not any(config.get(name) is not None for name in (key, *ALIASES.get(key, ()))):
            raise UnsupportedArchitecture(
                f"model_type {shown_name(model_type)!r} is not supported and the config has no "
                f"{key}, which a generic decoder needs; supported model types: {supported}",
                field=key,
            )
    return GENERIC_DECODER
