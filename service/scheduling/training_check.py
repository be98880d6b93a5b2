"""Answer a training plan: the fine-tune estimate and fit on the pinned GPU, a verdict per
allowed product, the catalog products it fits on, the host memory against the pod's limit, and
what to change to fit.

One path for pre-flight, the admission webhook and the scheduler extender, as for serving
(`service.scheduling.check`): the estimate is `run_estimate` on the plan's body, exactly what
``POST /v1/estimate/finetune`` answers; a verdict on a GPU is ``fit_finetune``'s ``fits``.

Host memory (per node): the estimate's ``cpu_bytes`` (optimizer states, master weights and
gradients offloaded by ZeRO-Offload or FSDP CPU offload, for the whole job) shared over the
job's ranks, times the ranks on the node; plus the batches PyTorch's ``DataLoader`` holds in
pinned memory (``pin_memory`` true: ``torch/utils/data/dataloader.py``; with ``num_workers``
workers it keeps ``prefetch_factor`` (default 2) batches per worker in flight, without workers
one; the batch in use is one more). A causal-LM batch holds ``input_ids``, ``attention_mask``
and ``labels`` as int64 (the collators of transformers and TRL): 24 bytes per token. This is
a lower bound of what the pod holds (the Python process, a checkpoint read to host memory
are not counted), so a pod whose limit is below it is OOM-killed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from service.application.convert import finetune_request
from service.application.estimate_service import Catalogs, run_estimate
from service.application.metrics import Metrics
from service.application.resolve import ad_hoc_gpu, resolve_gpu, resolve_model
from service.estimator import memo
from service.estimator.errors import EstimatorError
from service.estimator.gpu import GpuSpec
from service.estimator.result import REASON_TEXT, FitReason
from service.estimator.training import FinetuneRequest, estimate_finetune, fit_finetune
from service.scheduling.check import GpuVerdict, VerdictName
from service.scheduling.training_fixes import Suggestion, suggestions
from service.scheduling.training_plan import TrainingPlan
from service.schemas.estimates import EstimateResponse, FinetuneRequestBody
from service.workloads.sources import ReadProblem, Sourced

__all__ = [
    "HostMemory",
    "Suggestion",
    "TrainingCheck",
    "TrainingPrepared",
    "check_training",
    "floor_fits",
    "prepare_training",
    "training_verdict_on",
]

# A causal-LM batch: input_ids, attention_mask and labels, int64 each.
BATCH_BYTES_PER_TOKEN = 3 * 8
DEFAULT_PREFETCH_FACTOR = 2


@dataclass(frozen=True)
class TrainingPrepared:
    """A plan with its model resolved and its typed requests built."""

    plan: TrainingPlan
    request: FinetuneRequest
    floor: FinetuneRequest | None


@dataclass(frozen=True)
class HostMemory:
    """Host memory one node's pod needs at least, against its limit."""

    offload_bytes: int
    pinned_bytes: int
    limit: Sourced[int] | None

    @property
    def needed_bytes(self) -> int:
        return self.offload_bytes + self.pinned_bytes

    @property
    def fits(self) -> bool | None:
        return None if self.limit is None else self.needed_bytes <= self.limit.value


@dataclass(frozen=True)
class TrainingCheck:
    plan: TrainingPlan
    estimate: EstimateResponse | None
    gpu_verdicts: tuple[GpuVerdict, ...]
    floor_fits: tuple[bool | None, ...]
    """Per verdict: whether the floor body fits there (None: there is no floor)."""
    fits_on: tuple[str, ...]
    host: HostMemory | None
    suggestions: tuple[Suggestion, ...]
    problems: tuple[ReadProblem, ...]
    request: Mapping[str, Any]

    @property
    def verdict(self) -> VerdictName:
        if self.plan.problems:
            return "will_not_start"
        judged = [v for v in self.gpu_verdicts if v.reason is not None]
        host_fails = self.host is not None and self.host.fits is False
        if not judged:
            return "does_not_fit" if host_fails else "unknown"
        fitting = sum(v.fits for v in judged)
        complete = len(judged) == len(self.gpu_verdicts)
        if (fitting == 0 and complete) or host_fails:
            return "does_not_fit"
        if fitting == len(judged) and complete:
            return "fits"
        return "fits_some" if fitting else "unknown"

    @property
    def fits(self) -> bool | None:
        verdict = self.verdict
        if verdict == "fits":
            return True
        if verdict in ("does_not_fit", "will_not_start"):
            return False
        return None

    @property
    def refusable(self) -> bool:
        """Whether a "does not fit" holds for what is not priced too: the host needs more than
        the limit, or the floor body fits on none of the judged GPUs."""
        if self.verdict == "will_not_start":
            return True
        if self.verdict != "does_not_fit":
            return False
        if self.host is not None and self.host.fits is False:
            return True
        return bool(self.floor_fits) and all(f is False for f in self.floor_fits)


def _typed(
    body: Mapping[str, Any], catalogs: Catalogs
) -> tuple[FinetuneRequest, FinetuneRequestBody]:
    validated = FinetuneRequestBody.model_validate(dict(body))
    model = resolve_model(validated, catalogs.models, catalogs.store)
    request = dataclasses.replace(finetune_request(validated), architecture=model.architecture)
    return request, validated


def prepare_training(plan: TrainingPlan, catalogs: Catalogs) -> TrainingPrepared | ReadProblem:
    """Validate the plan's bodies and resolve its model; a problem names where the bad value
    was read."""
    try:
        request, _ = _typed(plan.body, catalogs)
        floor = None if plan.floor_body is None else _typed(plan.floor_body, catalogs)[0]
        estimate_finetune(request)  # validates the settings together (ZeRO on one GPU, ...)
        if floor is not None:
            estimate_finetune(floor)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        return ReadProblem(plan.sources.get(field, field), str(first.get("msg", "invalid")))
    except EstimatorError as exc:
        field = exc.field or "request"
        return ReadProblem(plan.sources.get(field, field), exc.detail)
    return TrainingPrepared(plan, request, floor)


def _detail(fit_reason: FitReason, required: int, usable: int) -> str:
    if fit_reason is FitReason.FITS:
        return ""
    return (
        f"{REASON_TEXT[fit_reason]}: one rank needs {required / 1e9:.2f} GB, the GPU has "
        f"{usable / 1e9:.2f} GB (GB = 10^9 bytes)"
    )


def training_verdict_on(prepared: TrainingPrepared, ref: str, gpu: GpuSpec) -> GpuVerdict:
    """``fit_finetune``'s verdict for one rank on ``gpu``."""
    try:
        fit = fit_finetune(prepared.request, gpu)
    except EstimatorError as exc:
        return GpuVerdict(ref, False, None, exc.detail)
    return GpuVerdict(
        ref,
        fit.fits,
        fit.reason,
        _detail(fit.reason, fit.required_bytes, fit.usable_bytes),
        fit.usable_bytes,
        fit.required_bytes,
    )


def floor_fits(prepared: TrainingPrepared, gpu: GpuSpec) -> bool | None:
    if prepared.floor is None:
        return None
    try:
        return fit_finetune(prepared.floor, gpu).fits
    except EstimatorError:
        return None


def _scan(prepared: TrainingPrepared, catalogs: Catalogs) -> tuple[str, ...]:
    fitting: list[str] = []
    seen: dict[tuple[int, bool], bool] = {}
    for gpu in catalogs.gpus.all():
        label = gpu.k8s_product_label
        if label is None:
            continue
        spec = resolve_gpu(catalogs.gpus, gpu.id)
        key = (spec.total_bytes, spec.is_mig)
        if key not in seen:
            seen[key] = training_verdict_on(prepared, label, spec).fits
        if seen[key]:
            fitting.append(label)
    return tuple(fitting)


def _fits_on(prepared: TrainingPrepared, catalogs: Catalogs) -> tuple[str, ...]:
    key = orjson.dumps(dict(prepared.plan.body), option=orjson.OPT_SORT_KEYS).decode()
    return memo.cached("training_fits_on", (key, catalogs.gpus), lambda: _scan(prepared, catalogs))


def host_memory(plan: TrainingPlan, cpu_bytes: int) -> HostMemory:
    """Host bytes one node's pod needs at least (module docstring)."""
    ranks = plan.nproc_per_node.value
    offload = -(-cpu_bytes * ranks // max(plan.world, 1))
    extra = plan.command.extra
    pin = extra.get("dataloader_pin_memory")
    pinned = 0
    if pin is None or pin.value:
        workers_read = extra.get("dataloader_num_workers")
        workers = (
            int(workers_read.value) if workers_read and isinstance(workers_read.value, int) else 0
        )
        prefetch_read = extra.get("dataloader_prefetch_factor")
        prefetch = (
            int(prefetch_read.value)
            if prefetch_read and isinstance(prefetch_read.value, int)
            else DEFAULT_PREFETCH_FACTOR
        )
        batches = (workers * prefetch if workers else 1) + 1
        tokens = int(plan.body.get("batch_size", 1)) * int(plan.body.get("sequence_length", 2048))
        pinned = ranks * batches * tokens * BATCH_BYTES_PER_TOKEN
    limit = plan.workload.memory_limit if plan.workload is not None else None
    return HostMemory(offload, pinned, limit)


def check_training(
    plan: TrainingPlan,
    catalogs: Catalogs,
    metrics: Metrics,
    *,
    memory_bytes: int | None = None,
    with_estimate: bool = True,
    with_fits_on: bool = True,
    with_suggestions: bool = True,
) -> TrainingCheck | ReadProblem:
    """Answer a training plan (module docstring); a problem for a plan the estimator refuses."""
    prepared = prepare_training(plan, catalogs)
    if isinstance(prepared, ReadProblem):
        return prepared
    problems: list[ReadProblem] = []
    specs: list[tuple[str, GpuSpec]] = []
    verdicts: list[GpuVerdict] = []
    for ref in plan.gpu_refs:
        try:
            specs.append((ref, resolve_gpu(catalogs.gpus, ref)))
        except EstimatorError as exc:
            problems.append(ReadProblem(plan.gpu_source or "gpu", exc.detail))
            verdicts.append(GpuVerdict(ref, False, None, exc.detail))
    if not plan.gpu_refs and memory_bytes is not None:
        specs.append((f"memory:{memory_bytes}", ad_hoc_gpu(memory_bytes)))
    verdicts += [training_verdict_on(prepared, ref, spec) for ref, spec in specs]
    floors = tuple(floor_fits(prepared, spec) for _, spec in specs)
    body = plan.with_gpu()
    if len(specs) == 1:
        ref = specs[0][0]
        body = (
            plan.with_gpu(memory_bytes=memory_bytes)
            if ref.startswith("memory:")
            else plan.with_gpu(ref)
        )
    estimate: EstimateResponse | None = None
    cpu_bytes = 0
    if with_estimate:
        try:
            estimate, _ = run_estimate(FinetuneRequestBody.model_validate(body), catalogs, metrics)
        except EstimatorError as exc:
            return ReadProblem(
                plan.sources.get(exc.field or "", exc.field or "request"), exc.detail
            )
        cpu_bytes = estimate.cpu_bytes
    else:
        cpu_bytes = estimate_finetune(prepared.request).cpu_bytes
    host = host_memory(plan, cpu_bytes)
    fits_on = _fits_on(prepared, catalogs) if with_fits_on else ()
    check = TrainingCheck(
        plan, estimate, tuple(verdicts), floors, fits_on, host, (), tuple(problems), body
    )
    if with_suggestions and check.verdict in ("does_not_fit", "fits_some") and specs:
        fixes = suggestions(plan, prepared.request, specs[0][1], catalogs)
        check = dataclasses.replace(check, suggestions=fixes)
    return check
