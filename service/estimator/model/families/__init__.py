"""The family table: how each transformers model family builds its modules, as data.

Each module of this package is the one home of a family (or of a lineage: Qwen, Gemma): its
:class:`~service.estimator.model.family_traits.Family` records (config schema, modelling
traits, adapter targets, llama.cpp names), the transformers classes its configs name
(``ARCHITECTURES``) and the multimodal wrappers around its language model (``WRAPPERS``).
This module gathers them. Formulas read the traits from the
:class:`~service.estimator.model.Architecture`; nothing asks for a family by name. Adding a
family is one module here and its line in ``_MODULES`` (docs/CONTRIBUTING.md); its counting
rules are written out in docs/architectures.md and checked against transformers on the meta
device.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType, ModuleType

from service.estimator.model.families import (
    cohere,
    deepseek,
    falcon,
    gemma,
    glm,
    gpt_oss,
    kimi,
    llama,
    minicpm,
    minimax,
    mistral,
    olmo,
    opt,
    phi,
    qwen,
    stablelm,
    starcoder2,
)
from service.estimator.model.families.llama import LLAMA
from service.estimator.model.family_traits import Family

__all__ = [
    "ARCHITECTURE_CLASSES",
    "FAMILIES",
    "FLAT_WRAPPER_TYPES",
    "LLAMA",
    "SUPPORTED_MODEL_TYPES",
    "WRAPPER_TEXT_TYPES",
    "family_for",
]

_MODULES: tuple[ModuleType, ...] = (
    llama,
    mistral,
    qwen,
    gemma,
    phi,
    deepseek,
    glm,
    gpt_oss,
    olmo,
    cohere,
    starcoder2,
    falcon,
    stablelm,
    opt,
    minimax,
    kimi,
    minicpm,
)


def _gather(attribute: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for module in _MODULES:
        for key, value in getattr(module, attribute, {}).items():
            if key in out:
                raise ValueError(f"{key} is claimed by two family modules")
            out[key] = value
    return out


def _families() -> dict[str, Family]:
    out: dict[str, Family] = {}
    for module in _MODULES:
        for family in module.FAMILIES:
            if family.model_type in out:
                raise ValueError(f"model_type {family.model_type} is claimed twice")
            out[family.model_type] = family
    return out


#: model_type -> family. gemma3_text is the language model of the gemma3 wrapper.
FAMILIES: Mapping[str, Family] = MappingProxyType(_families())

#: Outer model_type of a multimodal wrapper -> model_type of its language model, when the
#: inner config does not name one.
WRAPPER_TEXT_TYPES: Mapping[str, str] = MappingProxyType(_gather("WRAPPERS"))

#: Wrappers whose config may keep its language model's keys at the top level (no text_config).
FLAT_WRAPPER_TYPES: frozenset[str] = frozenset(
    wrapper for module in _MODULES for wrapper in getattr(module, "FLAT_WRAPPERS", ())
)

#: model_type values (inner model_type for multimodal wrappers) this package can describe.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted({*FAMILIES, *WRAPPER_TEXT_TYPES}))

#: transformers model classes (a config's ``architectures``) -> the model_type that builds
#: them, for configs whose model_type this table does not know (Kimi-K2's ``kimi_k2`` runs
#: as ``DeepseekV3ForCausalLM``). Wrapper classes map to the wrapper's type.
ARCHITECTURE_CLASSES: Mapping[str, str] = MappingProxyType(_gather("ARCHITECTURES"))


def family_for(model_type: str) -> Family | None:
    return FAMILIES.get(model_type)
