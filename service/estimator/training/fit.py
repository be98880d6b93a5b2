"""Fine-tuning answers: the estimate of one step, its fit, and the inverse answers."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from service.estimator.calibration import value
from service.estimator.errors import InvalidRequest
from service.estimator.gpu import GpuSpec
from service.estimator.memo import memoized
from service.estimator.parallel import Layout
from service.estimator.result import Estimate, Fit, FitReason
from service.estimator.training.phases import evaluate, per_gpu_bytes, solve_max
from service.estimator.training.request import FinetuneRequest, positive, sharding_of, validate
from service.estimator.training.sharding import validate_sharding
from service.estimator.training.state import StaticState, static_state

__all__ = ["BREAKDOWN_KEYS", "estimate_finetune", "fit_finetune"]

BREAKDOWN_KEYS = ("weights", "gradients", "optimizer_states", "activations", "overhead")
MAX_BATCH_SEARCH = 1 << 16
MAX_SEQUENCE_SEARCH = 1 << 22
# The most data-parallel replicas min_gpu_count considers.
MAX_DATA_PARALLEL = 4096


def _static_key(req: FinetuneRequest) -> FinetuneRequest:
    """``req`` with what the static state does not depend on set to fixed values."""
    targets = req.lora.target_modules
    lora = req.lora
    if not isinstance(targets, str):
        lora = dataclasses.replace(lora, target_modules=tuple(targets))
    if req.batch_size == 1 and req.sequence_length == 1 and lora is req.lora:
        return req
    return dataclasses.replace(req, batch_size=1, sequence_length=1, lora=lora)


@memoized
def _validated_state(key: FinetuneRequest) -> StaticState:
    validate(key)
    return static_state(key)


def prepare(req: FinetuneRequest) -> StaticState:
    """The validated, cached static part of ``req``; batch and sequence are checked here."""
    positive(req.batch_size, "batch_size")
    positive(req.sequence_length, "sequence_length")
    return _validated_state(_static_key(req))


def estimate_finetune(req: FinetuneRequest) -> Estimate:
    """Peak GPU memory of one training step of ``req``: per GPU (most loaded) and in total."""
    st = prepare(req)
    phase, alloc, parts = evaluate(st, req.batch_size, req.sequence_length)
    per_gpu = {k: int(parts[k]) for k in BREAKDOWN_KEYS}
    total = {k: v * req.gpu_count for k, v in per_gpu.items()}
    details = dict(st.details)
    details["peak_phase"] = phase
    details["allocated_peak_bytes"] = alloc
    details["fragmentation_fraction"] = value("training.fragmentation_fraction")
    return Estimate(
        kind="finetune",
        estimator="detailed",
        total=MappingProxyType(total),
        per_gpu=MappingProxyType(per_gpu),
        gpu_count=req.gpu_count,
        assumptions=st.assumptions,
        cpu_bytes=st.cpu_bytes,
        details=MappingProxyType(details),
    )


def _reason(req: FinetuneRequest, gpu: GpuSpec, st: StaticState, need: int) -> FitReason:
    if gpu.is_mig and req.gpu_count > 1:
        return FitReason.MIG_CANNOT_SPAN  # NCCL does not span MIG instances
    if max(stage.weights for stage in st.stages) > gpu.total_bytes:
        return FitReason.WEIGHTS_EXCEED_MEMORY
    if need > gpu.total_bytes:
        return FitReason.WORKLOAD_EXCEEDS_MEMORY
    return FitReason.FITS


def fit_finetune(req: FinetuneRequest, gpu: GpuSpec) -> Fit:
    """Whether ``req`` fits GPUs like ``gpu``, and the inverse answers: fewest GPUs at the
    requested ZeRO stage, largest micro-batch, longest sequence."""
    st = prepare(req)
    b, s = req.batch_size, req.sequence_length
    usable = gpu.total_bytes
    need = per_gpu_bytes(st, b, s)
    reason = _reason(req, gpu, st, need)
    mp = req.model_parallel_size
    min_count = _min_gpu_count(_static_key(req), b, s, usable)
    if gpu.is_mig and min_count is not None and min_count > 1:
        min_count = None  # a job spanning slices cannot run
    return Fit(
        gpu=gpu.ref,
        gpu_count=req.gpu_count,
        usable_bytes=usable,
        required_bytes=need,
        fits=reason is FitReason.FITS,
        headroom_bytes=usable - need,
        min_gpu_count=min_count,
        # Memory is a maximum of phase lines in b·s and b·s²: the largest batch and sequence
        # are solved per line, then checked exactly.
        max_batch_size=solve_max(st, usable, None, s, MAX_BATCH_SEARCH),
        max_sequence_length=solve_max(st, usable, b, None, MAX_SEQUENCE_SEARCH),
        assumptions=(
            f"min_gpu_count keeps zero_stage {req.zero_stage}, tensor_parallel_size "
            f"{req.tensor_parallel_size} and pipeline_parallel_size "
            f"{req.pipeline_parallel_size}; data-parallel replicas are added",
        ),
        reason=reason,
        layout=Layout(req.tensor_parallel_size, req.pipeline_parallel_size, req.gpu_count // mp),
        min_gpu_layout=(
            None
            if min_count is None
            else Layout(req.tensor_parallel_size, req.pipeline_parallel_size, min_count // mp)
        ),
    )


@memoized
def _min_gpu_count(key: FinetuneRequest, b: int, s: int, usable: int) -> int | None:
    """Fewest GPUs (a multiple of TP × PP) at the requested ZeRO stage that fit."""
    mp = key.model_parallel_size

    def ok(dp: int) -> bool:
        r = dataclasses.replace(key, gpu_count=dp * mp)
        try:
            validate_sharding(dp * mp, sharding_of(r))
        except InvalidRequest:
            return False
        return per_gpu_bytes(static_state(r), b, s) <= usable

    if key.zero_stage == 0 and not (key.offload_optimizer or key.offload_parameters):
        # Data parallelism without sharding replicates everything: more GPUs never help.
        return mp if ok(1) else None
    if not ok(MAX_DATA_PARALLEL):
        return None
    # Per-GPU bytes fall monotonically with dp: bisect on dp.
    lo, hi = 1, MAX_DATA_PARALLEL
    if ok(lo):
        return lo * mp
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi * mp
