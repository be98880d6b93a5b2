"""What the family modules share: frozen mappings and records more than one family uses."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["QWEN_MOE_TARGETS", "SANDWICH_NORMS", "frozen", "keys"]


def frozen(**kw: Any) -> Mapping[str, Any]:
    """A read-only mapping (a config class's defaults, peft's target names)."""
    return MappingProxyType(kw)


def keys(**kw: tuple[str, ...]) -> Mapping[str, tuple[str, ...]]:
    """Canonical key -> the keys a family's config spells it with, in order of precedence."""
    return MappingProxyType(kw)


#: peft's names for the pre-fusion expert projections of Qwen-style experts.
QWEN_MOE_TARGETS = frozen(
    gate_proj="experts.gate_up_proj", up_proj="experts.gate_up_proj", down_proj="experts.down_proj"
)

#: Gemma 2's four norms per layer, around both the attention and the MLP block.
SANDWICH_NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)
