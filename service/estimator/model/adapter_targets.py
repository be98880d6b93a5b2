"""The names other code matches a family's modules by: peft's targets, quantizers' exclusions.

:class:`ModuleNames` are the module paths of the family's modeling code (``model.layers.{i}
.self_attn.q_proj``), which a LoRA ``target_modules`` list and a checkpoint's
``modules_to_not_convert`` name; :class:`AdapterTargets` adds the names peft maps onto a
family's fused expert weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["AdapterTargets", "ModuleNames"]


@dataclass(frozen=True)
class ModuleNames:
    """Module paths of the family's modeling code (for peft targets and quantizer exclusions)."""

    prefix: str = "model"
    embed: str = "embed_tokens"
    final_norm: str = "norm"
    layers: str = "layers"
    attn: str = "self_attn"
    mlp: str = "mlp"
    qkv: str = "qkv_proj"  # a fused q/k/v projection
    o: str = "o_proj"  # the attention output projection


@dataclass(frozen=True)
class AdapterTargets:
    """How adapters and quantizers name the family's modules."""

    names: ModuleNames = ModuleNames()
    # peft 0.21 maps pre-fusion expert projection names onto the fused 3-D expert weights
    # (`peft.utils.transformers_weight_conversion._MOE_TARGET_MODULE_MAPPING`).
    expert_aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
