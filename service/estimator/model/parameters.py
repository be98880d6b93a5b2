"""Parameter accounting: how many parameters a model holds, and how many one token uses.

The count is the sum of the two inventories of :class:`~service.estimator.model.
Architecture` (linear projections and the other tensors), so it equals
``sum(p.numel() for p in model.parameters())`` of the transformers model built from the same
config: a tied lm_head is counted once, under ``embeddings``; persistent buffers
(DeepSeek-V3's router correction bias) are not parameters and are reported apart in
``buffers``. ``active`` follows the MoE convention of the model cards: every parameter a
token passes through, i.e. the total less the routed experts the router did not select.
A multimodal wrapper's vision tower and projector (Gemma 3's SigLIP) count under ``vision``
in both, so the totals equal ``Gemma3ForConditionalGeneration``'s.
Rules per family: ``docs/architectures.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from service.estimator.model.architecture import Architecture
from service.estimator.model.shapes import COMPONENTS

__all__ = ["ParameterCounts", "count_parameters"]


@dataclass(frozen=True)
class ParameterCounts:
    """Parameter totals of one model.

    ``by_component`` has a key for every component the model has (a subset of
    ``architecture.COMPONENTS``, in that order) and sums to ``total``.
    ``active_by_component`` is the same split for one token. ``buffers`` counts persistent
    non-parameter tensors that the checkpoint stores alongside the weights.
    """

    total: int
    active: int
    by_component: Mapping[str, int]
    active_by_component: Mapping[str, int] = field(default_factory=dict)
    buffers: int = 0

    @property
    def is_moe(self) -> bool:
        return self.active != self.total

    @property
    def non_embedding(self) -> int:
        """Total less the input embedding (the model cards' "non-embedding" figure)."""
        return self.total - self.by_component.get("embeddings", 0)


def count_parameters(arch: Architecture) -> ParameterCounts:
    """Count every parameter of ``arch`` by component, and those one token uses."""
    total: dict[str, int] = {}
    active: dict[str, int] = {}
    for module in arch.linear_modules:
        if module.tied:
            continue
        total[module.component] = total.get(module.component, 0) + module.parameters
        active[module.component] = active.get(module.component, 0) + module.active_parameters
    buffers = 0
    for group in arch.parameter_groups:
        if group.is_buffer:
            buffers += group.numel * group.count
            continue
        total[group.component] = total.get(group.component, 0) + group.parameters
        active[group.component] = active.get(group.component, 0) + group.parameters
    for module in arch.vision_modules:
        total["vision"] = total.get("vision", 0) + module.parameters
        active["vision"] = active.get("vision", 0) + module.parameters
    for group in arch.vision_parameter_groups:
        total["vision"] = total.get("vision", 0) + group.parameters
        active["vision"] = active.get("vision", 0) + group.parameters
    ordered = {c: total[c] for c in COMPONENTS if c in total}
    ordered_active = {c: active[c] for c in COMPONENTS if c in active}
    return ParameterCounts(
        total=sum(ordered.values()),
        active=sum(ordered_active.values()),
        by_component=MappingProxyType(ordered),
        active_by_component=MappingProxyType(ordered_active),
        buffers=buffers,
    )
