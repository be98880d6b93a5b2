"""What llama.cpp makes of a family: the one trait its quantize presets read of the family."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["LlamaCppNames", "LlamaCppType"]


class LlamaCppType(StrEnum):
    """What llama.cpp's loader makes of the family's 80-layer models, which llama-quantize's
    presets read (``LLM_TYPE_70B``: src/models/llama.cpp with GQA, qwen2.cpp, olmo.cpp), and
    whether its quantize rules treat the architecture as Falcon (``LLM_ARCH_FALCON``)."""

    OTHER = "other"
    TYPE_70B_WITH_GQA = "type_70b_with_gqa"  # convert writes these as llama (Llama, Mistral)
    TYPE_70B = "type_70b"  # Qwen2, OLMo
    FALCON = "falcon"


@dataclass(frozen=True)
class LlamaCppNames:
    """The family as llama.cpp's loader and quantizer see it."""

    type: LlamaCppType = LlamaCppType.OTHER
    # llama.cpp caches latent attention's latent (deepseek2's graph); False: K and V of every
    # head as its graph expands them (src/models/minicpm3.cpp).
    mla_latent: bool = True
