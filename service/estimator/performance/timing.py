"""How long one engine step takes: the roofline of :mod:`.work` at a GPU's peaks.

A step streams its bytes at the GPU's memory bandwidth × a memory efficiency and runs its FLOPs
at the GPU's dense tensor rate × a compute efficiency; it takes the longer of the two (the
bound), plus the tensor-parallel all-reduces at the interconnect's bandwidth, plus a fixed step
overhead of the engine (scheduling, sampling, launch gaps: what a step costs with no work) and
one per sequence it decodes (the API server turns each sequence's new token into text and
streams it).
Pipeline stages run one after the other for one batch. The efficiencies and overheads are
fitted constants (:mod:`service.estimator.calibration`, keyed by engine and GPU class); where
none were fitted the answer is a band between two assumed sets (:data:`BAND`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.estimator import calibration
from service.estimator.gpu import GpuPerformance
from service.estimator.performance.work import StageWork

__all__ = [
    "CALIBRATED",
    "CHECKED_ON",
    "Bound",
    "Efficiencies",
    "StepTime",
    "band_efficiencies",
    "calibrated_efficiencies",
    "step_time",
]

Bound = Literal["memory", "compute", "communication"]

#: (engine, GPU architecture family) → the register prefix of its fitted constants (the class's
#: memory and compute efficiencies). Only classes with closed-loop measured rows
#: (bench/validate/data/measured/performance_vllm.csv) are listed, each fitted on its own rows
#: (bench/validate/performance.py, fit); tests/estimator/performance/test_calibration_fit.py
#: holds this table and CHECKED_ON to the rows.
CALIBRATED: dict[tuple[str, str], str] = {("vllm", "hopper"): "perf.vllm.hopper"}
#: The GPUs whose measured rows the calibrated constants were fitted and checked on
#: (bench/validate/data/measured/performance_vllm.csv); another GPU of the same architecture
#: (an H200: more bandwidth, the same kernels) gets a band until rows check it.
CHECKED_ON: dict[tuple[str, str], frozenset[str]] = {
    ("vllm", "hopper"): frozenset({"h100-sxm-80gb"}),
}

#: The engine-wide constants (step and request overheads) of each calibrated engine.
_ENGINE_PREFIX: dict[str, str] = {"vllm": "perf.vllm"}


@dataclass(frozen=True, slots=True)
class Efficiencies:
    """The fitted (or assumed) constants one answer is computed with."""

    memory: float  # fraction of the datasheet memory bandwidth a step streams at
    compute: float  # fraction of the datasheet dense tensor rate
    step_overhead_s: float  # per engine step
    request_overhead_s: float  # per request, in its time to first token
    sequence_overhead_s: float = 0.0  # per step, per sequence the step decodes


def _engine_overheads(factor: float = 1.0) -> tuple[float, float, float]:
    step = calibration.value("perf.vllm.step_overhead_s")
    request = calibration.value("perf.vllm.request_overhead_s")
    sequence = calibration.value("perf.vllm.sequence_overhead_s")
    return step * factor, request * factor, sequence * factor


def calibrated_efficiencies(engine: str, architecture: str | None) -> Efficiencies | None:
    """The fitted constants of ``engine`` on GPUs of ``architecture``; None when not fitted."""
    prefix = CALIBRATED.get((engine, architecture or ""))
    if prefix is None or engine not in _ENGINE_PREFIX:
        return None
    step, request, sequence = _engine_overheads()
    return Efficiencies(
        memory=calibration.value(f"{prefix}.memory_efficiency"),
        compute=calibration.value(f"{prefix}.compute_efficiency"),
        step_overhead_s=step,
        request_overhead_s=request,
        sequence_overhead_s=sequence,
    )


def band_efficiencies() -> tuple[Efficiencies, Efficiencies, Efficiencies]:
    """(slow, middle, fast) assumed constants for an answer without calibration data: the
    register's assumed efficiency range, and the vLLM overheads scaled by its assumed factors;
    the middle is the geometric mean of the two ends."""
    lo_m = calibration.value("perf.band.memory_efficiency_low")
    hi_m = calibration.value("perf.band.memory_efficiency_high")
    lo_c = calibration.value("perf.band.compute_efficiency_low")
    hi_c = calibration.value("perf.band.compute_efficiency_high")
    slow_f = calibration.value("perf.band.overhead_factor_high")
    fast_f = calibration.value("perf.band.overhead_factor_low")
    slow = Efficiencies(lo_m, lo_c, *_engine_overheads(slow_f))
    fast = Efficiencies(hi_m, hi_c, *_engine_overheads(fast_f))
    mid = Efficiencies(
        (lo_m * hi_m) ** 0.5,
        (lo_c * hi_c) ** 0.5,
        (slow.step_overhead_s * fast.step_overhead_s) ** 0.5,
        (slow.request_overhead_s * fast.request_overhead_s) ** 0.5,
        (slow.sequence_overhead_s * fast.sequence_overhead_s) ** 0.5,
    )
    return slow, mid, fast


@dataclass(frozen=True, slots=True)
class StepTime:
    seconds: float
    bound: Bound  # the largest term


def step_time(
    work: tuple[StageWork, ...],
    gpu: GpuPerformance,
    eff: Efficiencies,
    tp: int,
    *,
    decode: float,
    prefill: float,
    context: float,
    prompt_context: float = 0.0,
    prompts: float = 0.0,
) -> StepTime:
    """One step of ``decode`` sequences at ``context`` tokens and ``prefill`` prompt tokens
    (of ``prompts`` prompts attending on average ``prompt_context`` tokens each)."""
    total = 0.0
    spent: dict[Bound, float] = {"memory": 0.0, "compute": 0.0, "communication": 0.0}
    for stage in work:
        read = stage.read_bytes(decode, prefill, context)
        memory = read / (gpu.memory_bytes_per_s * eff.memory)
        flops = stage.flops(decode, prefill, context, prompt_context, prompts)
        compute = flops / (gpu.tensor_flops_per_s * eff.compute)
        comm = 0.0
        if tp > 1 and gpu.interconnect_bytes_per_s:
            # Ring all-reduce: each GPU sends 2 (tp - 1) / tp of the payload.
            payload = stage.allreduce_bytes_per_token * (decode + prefill)
            comm = payload * 2 * (tp - 1) / tp / gpu.interconnect_bytes_per_s
        roof: Bound = "memory" if memory >= compute else "compute"
        spent[roof] += max(memory, compute)
        spent["communication"] += comm
        total += max(memory, compute) + comm
    bound = max(spent, key=lambda k: spent[k])
    overhead = eff.step_overhead_s + eff.sequence_overhead_s * decode
    return StepTime(total + overhead, bound)
