"""LoRA adapters: which linear modules a target list selects, and the adapter parameters.

Follows peft 0.21 (``LoraConfig``): a target name matches a module whose name equals it or
whose path ends with ``.name``; ``"all-linear"`` selects every ``nn.Linear`` of the decoder
but the output layer (lm_head), so routers and MoE experts stored as 3-D parameters are not
included unless named (peft's ``target_parameters``). Each adapted weight of shape
(out, in) gets ``lora_A`` (rank × in) and ``lora_B`` (out × rank): ``rank × (in + out)``
parameters per instance, per expert for 3-D expert weights. peft keeps adapters in fp32
(``autocast_adapter_dtype=True``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from service.estimator.architecture import Architecture, LinearModule
from service.estimator.errors import InvalidRequest

__all__ = ["ALL_LINEAR", "LoraSpec", "adapter_parameters", "lora_targets", "target_names"]

ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class LoraSpec:
    """LoRA settings: rank, alpha (scales the update only, no memory), target modules."""

    rank: int = 16
    alpha: float | None = None
    target_modules: str | tuple[str, ...] = ALL_LINEAR


def _adaptable(arch: Architecture) -> tuple[LinearModule, ...]:
    return tuple(m for m in arch.linear_modules() if m.component != "lm_head" and not m.tied)


def target_names(arch: Architecture) -> tuple[str, ...]:
    """Module names a request may target on ``arch`` (plus ``lm_head`` and ``all-linear``)."""
    names = [m.name for m in _adaptable(arch)]
    return (ALL_LINEAR, *dict.fromkeys(names), "lm_head")


def _matches(target: str, module: LinearModule) -> bool:
    return module.name == target or module.name.endswith("." + target) or (
        module.path == target or module.path.endswith("." + target)
    )


@functools.lru_cache(maxsize=512)
def lora_targets(
    arch: Architecture, target_modules: str | tuple[str, ...]
) -> tuple[LinearModule, ...]:
    """The linear modules ``target_modules`` selects on ``arch``; InvalidRequest if a name
    matches nothing."""
    if isinstance(target_modules, str):
        if target_modules == ALL_LINEAR:
            return tuple(m for m in _adaptable(arch) if m.is_nn_linear)
        target_modules = (target_modules,)
    if not target_modules:
        raise InvalidRequest(
            "lora.target_modules is empty; name modules or use 'all-linear'",
            field="lora.target_modules",
        )
    modules = tuple(m for m in arch.linear_modules() if not m.tied)
    selected: dict[str, LinearModule] = {}
    for target in target_modules:
        if target == ALL_LINEAR:
            for m in _adaptable(arch):
                if m.is_nn_linear:
                    selected[m.name] = m
            continue
        hits = [m for m in modules if _matches(target, m)]
        if not hits:
            raise InvalidRequest(
                f"lora.target_modules names {target!r}, which {arch.model_type} does not have;"
                f" allowed: {', '.join(target_names(arch))}",
                field="lora.target_modules",
            )
        for m in hits:
            selected[m.name] = m
    return tuple(selected.values())


def adapter_parameters(arch: Architecture, spec: LoraSpec) -> int:
    """Trainable LoRA parameters: rank × (in + out) per adapted weight instance."""
    return sum(
        spec.rank * (m.in_features + m.out_features) * m.count
        for m in lora_targets(arch, spec.target_modules)
    )


def validate_lora(arch: Architecture, spec: LoraSpec) -> None:
    """Rank within 1..hidden_size; targets that exist."""
    if isinstance(spec.rank, bool) or not isinstance(spec.rank, int):
        raise InvalidRequest("lora.rank must be an integer", field="lora.rank")
    if not 1 <= spec.rank <= arch.hidden_size:
        raise InvalidRequest(
            f"lora.rank must be between 1 and the hidden size ({arch.hidden_size}); got {spec.rank}",
            field="lora.rank",
        )
    lora_targets(arch, spec.target_modules)
