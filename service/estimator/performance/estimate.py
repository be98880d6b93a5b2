"""One request's performance answer: latency and throughput at a traffic, and the replicas an
SLO needs.

The serving setup is the memory model's (:func:`service.estimator.inference.request.setup_for`):
the same weights per GPU, KV layout and KV pool. The engine's scheduler limits come from its
resolved options (:data:`SCHEDULERS`). An answer is ``calibrated`` only where its engine and GPU
class have fitted constants and nothing outside their rows is asked (a 16-bit weight format,
one pipeline stage, a whole GPU, a sourced interconnect for TP > 1); any other is a band between
the assumed slow and fast constants, with its middle as the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from service.estimator.engines.serving import ServingSetup
from service.estimator.errors import InvalidRequest
from service.estimator.formats import get_format
from service.estimator.gpu import GpuPerformance
from service.estimator.inference.evaluate import max_sequences
from service.estimator.inference.request import (
    InferenceRequest,
    resolved,
    setup_for,
    validate_workload,
)
from service.estimator.performance.serving import Operating, operate
from service.estimator.performance.timing import (
    CHECKED_ON,
    Bound,
    Efficiencies,
    band_efficiencies,
    calibrated_efficiencies,
)
from service.estimator.performance.work import StageWork, step_work

__all__ = [
    "MAX_TRAFFIC_TOKENS",
    "SCHEDULERS",
    "Band",
    "NotServable",
    "Performance",
    "PerformanceAnswer",
    "Sizing",
    "Slo",
    "Traffic",
    "estimate_performance",
]

LimitedBy = Literal["ttft", "itl", "max_concurrency"]

#: input + output tokens of one traffic request (the API's bound).
MAX_TRAFFIC_TOKENS = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Scheduler:
    """What of an engine's scheduler the steady state needs: the options that limit it
    (sequences running at once, tokens per step; None: the engine has none, so it runs every
    request memory allows and prefills whole prompts) and whether a step whose token budget
    binds decodes the running sequences before it takes new prompt tokens."""

    running_option: str | None
    chunk_option: str | None
    decode_first: bool


#: Each engine's scheduler. vLLM V1 schedules its running requests before any waiting one
#: (vllm/v1/core/sched/scheduler.py, Scheduler.schedule: "First, schedule the RUNNING
#: requests"); SGLang runs a new prefill batch whenever one is waiting before it decodes
#: (python/sglang/srt/managers/scheduler.py, Scheduler.get_next_batch_to_run).
SCHEDULERS: dict[str, Scheduler] = {
    "vllm": Scheduler("max_num_seqs", "max_num_batched_tokens", decode_first=True),
    "sglang": Scheduler("max_running_requests", "chunked_prefill_size", decode_first=False),
    "llama.cpp": Scheduler("n_parallel", None, decode_first=False),
}
_NO_SCHEDULER = Scheduler(None, None, decode_first=False)


class NotServable(Exception):
    """The setup cannot run one request of the traffic (its memory does not hold it): there
    is no latency to give, and the memory answer says why."""


@dataclass(frozen=True, slots=True)
class Traffic:
    input_tokens: int
    output_tokens: int
    concurrency: int


@dataclass(frozen=True, slots=True)
class Slo:
    """Targets on the means; ``None`` leaves a latency unconstrained."""

    requests_per_s: float
    ttft_ms: float | None = None
    itl_ms: float | None = None


@dataclass(frozen=True, slots=True)
class Band:
    """The slow and fast ends of an uncalibrated answer (per figure, low ≤ high)."""

    ttft_ms: tuple[float, float]
    itl_ms: tuple[float, float]
    output_tokens_per_s: tuple[float, float]
    requests_per_s: tuple[float, float]


@dataclass(frozen=True, slots=True)
class Performance:
    ttft_ms: float
    itl_ms: float
    output_tokens_per_s: float
    requests_per_s: float
    latency_ms: float
    bound: Bound
    saturated: bool
    calibrated: bool
    concurrency: int
    running: int
    max_concurrency: int
    queue_wait_ms: float
    calibration: str | None
    band: Band | None


@dataclass(frozen=True, slots=True)
class Sizing:
    replicas: int | None
    gpus: int | None
    per_replica_requests_per_s: float
    concurrency: int  # per replica, the largest the SLO allows
    slo_met: bool
    limited_by: LimitedBy  # max_concurrency: the replica's running limit
    replicas_range: tuple[int, int] | None  # uncalibrated: replicas at the fast and slow ends


@dataclass(frozen=True, slots=True)
class PerformanceAnswer:
    performance: Performance
    sizing: Sizing | None
    assumptions: tuple[str, ...]


def _option(setup: ServingSetup, name: str | None) -> int | None:
    if name is None:
        return None
    value = setup.settings.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def _running_limit(setup: ServingSetup, gpu_bytes: int, traffic: Traffic) -> int:
    """The sequences of this length the replica runs at once: its scheduler's limit and what
    the memory model's KV pool holds (``max_sequences``, the fit's own arithmetic)."""
    running_option = SCHEDULERS.get(setup.engine.name, _NO_SCHEDULER).running_option
    length = traffic.input_tokens + traffic.output_tokens
    cap = _option(setup, running_option) or traffic.concurrency
    fits = max_sequences(setup, setup.usable(gpu_bytes), length, traffic.input_tokens, cap)
    if fits < 1:
        raise NotServable(
            f"performance not answered: one request of {length} tokens (traffic input + "
            "output) does not fit the memory this layout leaves (see `fit`)"
        )
    return fits


def _uncalibrated_reasons(
    req: InferenceRequest, setup: ServingSetup, gpu: GpuPerformance
) -> list[str]:
    reasons = []
    if calibrated_efficiencies(req.engine, gpu.architecture) is None:
        reasons.append(
            f"no measured rows for engine {req.engine} on {gpu.architecture or 'this'} GPUs"
        )
    else:
        checked = CHECKED_ON.get((req.engine, gpu.architecture or ""), frozenset())
        if req.gpu is None or req.gpu.ref not in checked:
            reasons.append(
                f"the {gpu.architecture} constants were checked on {', '.join(sorted(checked))} "
                "only; no measured rows on this GPU"
            )
    fmt = get_format(setup.weight_format)
    if fmt.quantized or fmt.bits != 16:
        reasons.append(f"no measured rows in weight format {setup.weight_format}")
    if setup.pp > 1:
        reasons.append("no measured rows with pipeline parallelism")
    if gpu.mig_share is not None:
        reasons.append("no measured rows on a MIG slice (its peaks are the slice's share)")
    if setup.tp > 1 and gpu.interconnect_bytes_per_s is None:
        reasons.append("the GPU's interconnect is not in the catalog: all-reduces not priced")
    return reasons


def _operate(
    work: tuple[StageWork, ...],
    gpu: GpuPerformance,
    eff: Efficiencies,
    setup: ServingSetup,
    traffic: Traffic,
    limit: int,
    concurrency: int | None = None,
) -> Operating:
    scheduler = SCHEDULERS.get(setup.engine.name, _NO_SCHEDULER)
    return operate(
        work,
        gpu,
        eff,
        setup.tp,
        input_tokens=traffic.input_tokens,
        output_tokens=traffic.output_tokens,
        concurrency=concurrency or traffic.concurrency,
        running_limit=limit,
        chunk=_option(setup, scheduler.chunk_option),
        decode_first=scheduler.decode_first,
    )


def _figures(op: Operating) -> tuple[float, float, float, float]:
    return op.ttft_s * 1e3, op.itl_s * 1e3, op.output_tokens_per_s, op.requests_per_s


def _band(ops: list[Operating]) -> Band:
    columns = list(zip(*(_figures(op) for op in ops), strict=True))
    pairs = [(min(c), max(c)) for c in columns]
    return Band(*pairs)


def _meets(op: Operating, slo: Slo) -> LimitedBy | None:
    """The first SLO target ``op`` misses (None: all met)."""
    if slo.ttft_ms is not None and op.ttft_s * 1e3 > slo.ttft_ms:
        return "ttft"
    if slo.itl_ms is not None and op.itl_s * 1e3 > slo.itl_ms:
        return "itl"
    return None


def _largest_concurrency(run: _Run, slo: Slo) -> tuple[int, Operating | None, LimitedBy]:
    """The largest concurrency up to the running limit whose figures meet the SLO (TTFT and
    ITL grow with the concurrency): a bisection, at most log2(limit) + 1 evaluations."""
    first = run(1)
    missed = _meets(first, slo)
    if missed is not None:
        return 0, None, missed
    lo, hi = 1, run.limit
    best = first
    top = run(hi)
    if _meets(top, slo) is None:
        return hi, top, "max_concurrency"
    limited: LimitedBy = _meets(top, slo) or "max_concurrency"
    while hi - lo > 1:
        mid = (lo + hi) // 2
        op = run(mid)
        if _meets(op, slo) is None:
            lo, best = mid, op
        else:
            hi = mid
    return lo, best, limited


@dataclass(frozen=True, slots=True)
class _Run:
    work: tuple[StageWork, ...]
    gpu: GpuPerformance
    eff: Efficiencies
    setup: ServingSetup
    traffic: Traffic
    limit: int

    def __call__(self, concurrency: int) -> Operating:
        return _operate(
            self.work, self.gpu, self.eff, self.setup, self.traffic, self.limit, concurrency
        )


def _size(run: _Run, slo: Slo, gpus_per_replica: int) -> tuple[Sizing, float | None]:
    concurrency, op, limited = _largest_concurrency(run, slo)
    if op is None:
        return (
            Sizing(None, None, 0.0, 0, False, limited, None),
            None,
        )
    rate = op.requests_per_s
    replicas = max(1, math.ceil(slo.requests_per_s / rate))
    return (
        Sizing(replicas, replicas * gpus_per_replica, rate, concurrency, True, limited, None),
        rate,
    )


def estimate_performance(
    req: InferenceRequest, traffic: Traffic, slo: Slo | None = None
) -> PerformanceAnswer:
    """Latency and throughput of ``req``'s setup under ``traffic`` (and, with ``slo``, the
    replicas it needs). ``req`` carries the architecture and the GPU (the answer sets them)."""
    gpu_spec, gpu_bytes = req.gpu, req.gpu_memory_bytes
    if gpu_spec is None or gpu_spec.performance is None or gpu_bytes is None:
        raise InvalidRequest(
            "`traffic` needs a catalog GPU (its bandwidth and TFLOPS): name it with `gpu`",
            field="gpu",
        )
    gpu = gpu_spec.performance
    req = resolved(req)
    validate_workload(req)
    setup = setup_for(req)
    length = traffic.input_tokens + traffic.output_tokens
    if setup.max_model_len is not None and length > setup.max_model_len:
        raise InvalidRequest(
            f"traffic input + output tokens ({length}) exceed the {setup.max_model_len} tokens "
            "the engine gives one sequence",
            field="traffic",
        )
    limit = _running_limit(setup, gpu_bytes, traffic)
    work = step_work(setup)
    reasons = _uncalibrated_reasons(req, setup, gpu)
    eff = calibrated_efficiencies(req.engine, gpu.architecture)
    calibrated = not reasons and eff is not None
    slow, mid, fast = band_efficiencies()
    point_eff = eff if calibrated and eff is not None else mid
    op = _operate(work, gpu, point_eff, setup, traffic, limit)
    band = None
    if not calibrated:
        band = _band([_operate(work, gpu, e, setup, traffic, limit) for e in (slow, fast)])
    gpus = setup.tp * setup.pp
    sizing = None
    if slo is not None:
        sizing, _ = _size(_Run(work, gpu, point_eff, setup, traffic, limit), slo, gpus)
        if not calibrated:
            ends = [
                _size(_Run(work, gpu, e, setup, traffic, limit), slo, gpus)[0] for e in (fast, slow)
            ]
            if all(s.replicas is not None for s in ends):
                low, high = (s.replicas for s in ends)
                sizing = replace(sizing, replicas_range=(int(low or 0), int(high or 0)))
    assumptions = [
        f"performance: closed loop of {traffic.concurrency} clients, each {traffic.input_tokens} "
        f"prompt and {traffic.output_tokens} output tokens; the replica runs at most {limit} "
        "at once (scheduler limit and KV pool); means over requests",
    ]
    if traffic.concurrency > limit:
        assumptions.append(
            f"performance: saturated: past {limit} running requests the rate is the steady "
            "state at that limit, an upper bound: when the KV pool runs out the engine preempts "
            "running requests and recomputes their prompts later, work not priced here "
            "(docs/performance.md, Bursts)"
        )
    if calibrated:
        assumptions.append(
            f"performance calibrated for {req.engine} on {gpu.architecture} GPUs "
            "(held-out errors in docs/accuracy.md)"
        )
    else:
        assumptions.append(
            "performance not calibrated (" + "; ".join(reasons) + "): the figures are the middle "
            "of a band between assumed slow and fast efficiencies, given in `band`"
        )
    performance = Performance(
        ttft_ms=op.ttft_s * 1e3,
        itl_ms=op.itl_s * 1e3,
        output_tokens_per_s=op.output_tokens_per_s,
        requests_per_s=op.requests_per_s,
        latency_ms=op.latency_s * 1e3,
        bound=op.bound,
        saturated=traffic.concurrency > limit,
        calibrated=calibrated,
        concurrency=traffic.concurrency,
        running=op.running,
        max_concurrency=limit,
        queue_wait_ms=op.queue_wait_s * 1e3,
        calibration=f"{req.engine}/{gpu.architecture}" if calibrated else None,
        band=band,
    )
    return PerformanceAnswer(performance, sizing, tuple(assumptions))
