"""LoRA adapters: which linear modules a target list selects, and the adapter parameters.

Follows peft 0.21 (``LoraConfig``): a target name matches a module whose name equals it or
whose path ends with ``.name``; ``"all-linear"`` selects every linear projection of the
decoder but the output layer (lm_head): attention, MLP, MoE routers, and the MoE experts that
transformers stores as 3-D parameters (peft wraps those through ``target_parameters``). Each
adapted weight of shape (out, in) gets ``lora_A`` (rank × in) and ``lora_B`` (out × rank):
``rank × (in + out)`` parameters per instance, per expert for 3-D expert weights; a target
list naming the pre-fusion expert projections (``gate_proj``/``up_proj``/``down_proj``, Mixtral's
``w1``/``w3``/``w2``) selects the fused 3-D expert weights, as peft's conversion does; a fused
3-D ``gate_up_proj`` gets twice the rank (peft's rank pattern, so gate and up each get the
requested rank). peft keeps adapters in fp32
(``autocast_adapter_dtype=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.errors import InvalidRequest
from service.estimator.memo import memoized
from service.estimator.model import Architecture, LinearModule

__all__ = [
    "ALL_LINEAR",
    "LoraSpec",
    "adapter_parameters",
    "lora_targets",
    "module_rank",
    "target_names",
    "validate_lora",
]

ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class LoraSpec:
    """LoRA settings: rank, alpha (scales the update only, no memory), target modules."""

    rank: int = 16
    alpha: float | None = None
    target_modules: str | tuple[str, ...] = ALL_LINEAR


def _adaptable(arch: Architecture) -> tuple[LinearModule, ...]:
    return tuple(m for m in arch.linear_modules if m.component != "lm_head" and not m.tied)


def target_names(arch: Architecture) -> tuple[str, ...]:
    """Module names a request may target on ``arch`` (plus ``lm_head`` and ``all-linear``)."""
    names = [m.name for m in _adaptable(arch)]
    return (ALL_LINEAR, *dict.fromkeys(names), "lm_head")


def _matches(target: str, module: LinearModule) -> bool:
    if not module.is_nn_linear:
        # a 3-D expert weight is a parameter of an `experts` module: peft's target_modules reach
        # it only through its full name or the pre-fusion aliases of the family
        # (`Family.expert_target_aliases`)
        return target in (module.name, module.path)
    return (
        module.name == target
        or module.name.endswith("." + target)
        or (module.path == target or module.path.endswith("." + target))
    )


# In the byte-bounded memo, not an lru_cache: see weights.weight_layout.
@memoized
def lora_targets(
    arch: Architecture, target_modules: str | tuple[str, ...]
) -> tuple[LinearModule, ...]:
    """The linear modules ``target_modules`` selects on ``arch``; InvalidRequest if a name
    matches nothing."""
    if isinstance(target_modules, str):
        if target_modules == ALL_LINEAR:
            return _adaptable(arch)
        target_modules = (target_modules,)
    if not target_modules:
        raise InvalidRequest(
            "lora.target_modules is empty; name modules or use 'all-linear'",
            field="lora.target_modules",
        )
    modules = tuple(m for m in arch.linear_modules if not m.tied)
    selected: dict[str, LinearModule] = {}
    for target in target_modules:
        if target == ALL_LINEAR:
            for m in _adaptable(arch):
                selected[m.name] = m
            continue
        hits = [m for m in modules if _matches(target, m)]
        fused = arch.family.targets.expert_aliases.get(target)
        if fused is not None:
            hits += [m for m in modules if not m.is_nn_linear and m.name.endswith(fused)]
        if not hits:
            raise InvalidRequest(
                f"lora.target_modules names {target[:60]!r}, which {arch.model_type} does not have;"
                f" allowed: {', '.join(target_names(arch))}",
                field="lora.target_modules",
            )
        for m in hits:
            selected[m.name] = m
    return tuple(selected.values())


def module_rank(module: LinearModule, rank: int) -> int:
    """The rank peft gives ``module``: doubled for fused 3-D expert gate_up weights."""
    if not module.is_nn_linear and module.name.endswith("gate_up_proj"):
        return 2 * rank
    return rank


def adapter_parameters(arch: Architecture, spec: LoraSpec) -> int:
    """Trainable LoRA parameters: rank × (in + out) per adapted weight instance."""
    return sum(
        module_rank(m, spec.rank) * (m.in_features + m.out_features) * m.count
        for m in lora_targets(arch, spec.target_modules)
    )


def validate_lora(arch: Architecture, spec: LoraSpec) -> None:
    """Rank within 1..hidden_size; targets that exist."""
    if isinstance(spec.rank, bool) or not isinstance(spec.rank, int):
        raise InvalidRequest("lora.rank must be an integer", field="lora.rank")
    if not 1 <= spec.rank <= arch.hidden_size:
        raise InvalidRequest(
            f"lora.rank must be between 1 and the hidden size ({arch.hidden_size}); "
            f"got {spec.rank}",
            field="lora.rank",
        )
    lora_targets(arch, spec.target_modules)
