"""Evaluating a serving setup at a workload: bytes per GPU and in total, by component.

Components (bytes, per GPU; the total sums them over all GPUs, per GPU is the most loaded):
- weights: the setup's per-stage weights (with what the engine keeps beside them);
- kv_cache: what the engine holds for the workload's sequences;
- activations: the engine's fixed reserve plus the workload's transients;
- overhead: context, workspaces and NCCL charged to the engine's budget.
For engines with a budget fraction (vLLM, SGLang) the breakdown holds what the engine charges
against it; what lives in the margin (vLLM's CUDA context and graph pool) is reported in
``details`` and ``assumptions``. Engine rules: docs/inference.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from service.estimator.engines.serving import ServingSetup, Stage
from service.estimator.errors import InvalidRequest
from service.estimator.inference.request import (
    InferenceRequest,
    resolved,
    setup_for,
    validate_workload,
)
from service.estimator.result import Estimate

__all__ = [
    "COMPONENTS",
    "StageFigures",
    "check_length",
    "estimate_inference",
    "fits",
    "fits_from",
    "max_sequences",
    "required_from",
    "stage_costs",
    "stage_figures",
]

COMPONENTS = ("weights", "kv_cache", "activations", "overhead")


def stage_components(
    setup: ServingSetup, st: Stage, seqs: int, seq_len: int, prompt: int
) -> tuple[int, int, int, int]:
    """(weights, kv_cache, activations, overhead) of one GPU of stage `st`."""
    kv, act = setup.engine.sequence_cost(setup, st, seq_len, prompt)
    return (
        st.weights,
        _held_kv(st, seqs, kv),
        st.fixed_activation + seqs * act,
        setup.overhead.total,
    )


def _held_kv(st: Stage, seqs: int, kv: int) -> int:
    """The KV cache one GPU of ``st`` holds: a fixed pool whatever the workload, else what
    the workload's sequences take."""
    return st.kv_pool if st.kv_pool is not None else st.fixed_kv + seqs * kv


def _stage_fits(st: Stage, usable: int, seqs: int, kv: int, act: int) -> bool:
    if st.kv_pool is not None:
        return st.fixed_kv + seqs * kv <= st.kv_pool and st.base + seqs * act <= usable
    return st.base + seqs * (kv + act) <= usable


Costs = tuple[tuple[int, int], ...]


def stage_costs(setup: ServingSetup, seq_len: int, prompt: int) -> Costs:
    """(KV bytes, activation bytes) one sequence adds on one GPU of each stage, first to last:
    computed once where several checks read them (:func:`~.verdict.judge`)."""
    cost = setup.engine.sequence_cost
    return tuple(cost(setup, st, seq_len, prompt) for st in setup.stages)


def required_from(setup: ServingSetup, costs: Costs, seqs: int) -> int:
    """The most loaded GPU's bytes, from the stages' :func:`stage_costs`."""
    overhead = setup.overhead.total
    return max(
        st.weights + _held_kv(st, seqs, kv) + st.fixed_activation + seqs * act + overhead
        for st, (kv, act) in zip(setup.stages, costs, strict=True)
    )


def fits_from(setup: ServingSetup, costs: Costs, usable: int, seqs: int) -> bool:
    """Whether every GPU holds the workload, from the stages' :func:`stage_costs`: the
    per-stage static part plus ``seqs`` times what one sequence adds (costs are never
    negative, so a static part over ``usable`` fails too)."""
    return all(
        _stage_fits(st, usable, seqs, kv, act)
        for st, (kv, act) in zip(setup.stages, costs, strict=True)
    )


def max_sequences(setup: ServingSetup, usable: int, seq_len: int, prompt: int, cap: int) -> int:
    """The most sequences of this length that fit every GPU (0 if not even one), solved."""
    best = cap
    for st in setup.stages:
        kv, act = setup.engine.sequence_cost(setup, st, seq_len, prompt)
        room = usable - st.base
        per = kv + act
        if st.kv_pool is not None:
            # The workload's KV lives in the fixed pool; only its transients take the rest.
            per = act
            pool_room = st.kv_pool - st.fixed_kv
            if room < 0 or pool_room < kv or (per and room < per):
                return 0
            if kv:
                best = min(best, pool_room // kv)
        elif room < per:
            return 0
        if per:
            best = min(best, room // per)
    return best


def fits(setup: ServingSetup, usable: int, seqs: int, seq_len: int, prompt: int) -> bool:
    """:func:`fits_from` at this sequence length and prompt."""
    return fits_from(setup, stage_costs(setup, seq_len, prompt), usable, seqs)


def check_length(setup: ServingSetup, seq_len: int) -> None:
    if setup.max_model_len is not None and seq_len > setup.max_model_len:
        raise InvalidRequest(
            f"sequence_length {seq_len} exceeds the {setup.max_model_len} tokens the engine "
            f"gives one sequence (engine_options.{setup.engine.context_option or 'max_model_len'})",
            field="sequence_length",
        )


def estimate_inference(req: InferenceRequest) -> Estimate:
    """Bytes to serve `req`: per component, summed over GPUs and for the most loaded GPU."""
    req = resolved(req)
    validate_workload(req)
    setup = setup_for(req)
    seqs, seq_len, prompt = req.sequences, req.seq_len, req.prompt
    check_length(setup, seq_len)
    # Each stage's components once: summed over the GPUs, and the most loaded GPU's.
    stages = [stage_components(setup, st, seqs, seq_len, prompt) for st in setup.stages]
    totals = [sum(values) * setup.tp * setup.dp for values in zip(*stages, strict=True)]
    assumptions = list(setup.assumptions)
    details: dict[str, int | float | str | bool | None] = {
        "weight_format": setup.weight_format,
        "activation_dtype": setup.act_dtype,
        "kv_cache_bytes_per_token_per_gpu": setup.stages[-1].kv.full_token_bytes,
        "engine": setup.engine.name,
    }
    capacity = None
    option = setup.engine.budget_option
    if option is not None:
        assumptions.append(
            f"{option} {setup.budget_fraction:g}: the breakdown is what the engine charges to it"
        )
        if setup.outside_budget.total:
            details["outside_budget_bytes"] = setup.outside_budget.total
            assumptions.extend(
                line + " (outside the budget)" for line in setup.outside_budget.lines()
            )
    if setup.unpriced:
        # Each only adds memory: a "does not fit" stands, a "fits" may be optimistic.
        details["unpriced"] = "; ".join(setup.unpriced)
        assumptions.extend(
            f"not priced: {item} (it only adds memory: a fit may be optimistic)"
            for item in setup.unpriced
        )
    if req.gpu_memory_bytes is not None:
        reported = setup.engine.capacity(setup, req.gpu_memory_bytes, seq_len)
        if reported is not None:
            capacity, notes = reported
            assumptions.extend(notes)
    return Estimate(
        kind="inference",
        estimator="detailed",
        total=MappingProxyType(dict(zip(COMPONENTS, totals, strict=True))),
        per_gpu=MappingProxyType(dict(zip(COMPONENTS, max(stages, key=sum), strict=True))),
        gpu_count=setup.tp * setup.pp * setup.dp,
        assumptions=tuple(dict.fromkeys(assumptions)),
        capacity=capacity,
        cpu_bytes=setup.host_total,
        details=MappingProxyType(details),
    )


@dataclass(frozen=True, slots=True)
class StageFigures:
    """What one GPU of each pipeline stage holds before the KV cache (an engine's start-up log).

    `kv_pool_bytes` is the pool that GPU's own budget leaves (engines with a budget; None
    otherwise).
    """

    weights: int
    activations: int
    non_kv_overhead: int
    kv_pool_bytes: int | None


def stage_figures(req: InferenceRequest) -> tuple[StageFigures, ...]:
    """Per pipeline stage, first to last: weights, profiled activations, overhead, own pool."""
    req = resolved(req)
    validate_workload(req)
    setup = setup_for(req)
    out = []
    for st in setup.stages:
        pool = None
        if req.gpu_memory_bytes is not None and setup.engine.budget_option is not None:
            pool = setup.usable(req.gpu_memory_bytes) - st.base
        out.append(StageFigures(st.weights, st.fixed_activation, setup.overhead.total, pool))
    return tuple(out)
