"""Answer a plan: the estimate and fit on the pinned GPU, a verdict per allowed product, and
the catalog products it fits on.

One path for the three scheduler-facing endpoints: pre-flight shows everything, the admission
webhook acts on `verdict`, the scheduler extender judges each node's GPU with `judge_on`. The
full estimate goes through `run_estimate`, exactly as ``POST /v1/estimate/inference`` answers
the plan's `request`; the per-product verdicts run only the estimator's verdict (no inverse
searches), which is the same decision `fit.fits` reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from service.application.convert import inference_request
from service.application.estimate_service import Catalogs, run_estimate
from service.application.metrics import Metrics
from service.application.resolve import (
    ad_hoc_gpu,
    resolve_gpu,
    resolve_model,
    resolve_speculative,
)
from service.estimator import memo
from service.estimator.answer import ModelSpec, judge_inference
from service.estimator.engines import get_engine
from service.estimator.errors import EstimatorError, NotFound
from service.estimator.gpu import GpuSpec
from service.estimator.inference import InferenceRequest
from service.estimator.inference.verdict import Verdict
from service.estimator.result import FitReason
from service.scheduling.plan import Plan
from service.schemas.estimates import EstimateResponse, InferenceRequestBody
from service.workloads.sources import ReadProblem

__all__ = [
    "POD_GPU_FIX",
    "Check",
    "GpuVerdict",
    "Prepared",
    "VerdictName",
    "check_plan",
    "in_flags",
    "judge_on",
    "prepare",
    "unknown_gpu",
]

VerdictName = Literal["fits", "does_not_fit", "fits_some", "will_not_start", "unknown"]


@dataclass(frozen=True)
class Prepared:
    """A plan with its model resolved and its typed request built (once per plan)."""

    plan: Plan
    body: InferenceRequestBody
    model: ModelSpec
    request: InferenceRequest


@dataclass(frozen=True)
class GpuVerdict:
    gpu: str
    fits: bool
    reason: FitReason | None
    detail: str
    usable_bytes: int = 0
    required_bytes: int = 0


@dataclass(frozen=True)
class Check:
    """Everything known about one serving container after the estimator has answered."""

    plan: Plan
    estimate: EstimateResponse | None
    gpu_verdicts: tuple[GpuVerdict, ...]
    fits_on: tuple[str, ...]
    fits_on_mig: tuple[str, ...]
    problems: tuple[ReadProblem, ...]
    request: Mapping[str, Any]
    """The ``/v1/estimate/inference`` body `estimate` answers."""

    @property
    def verdict(self) -> VerdictName:
        if self.plan.problems or any(v.reason is FitReason.TOO_FEW_GPUS for v in self.gpu_verdicts):
            return "will_not_start"
        judged = [v for v in self.gpu_verdicts if v.reason is not None]
        if not judged:
            return "unknown"
        fitting = sum(v.fits for v in judged)
        if fitting == len(judged) and len(judged) == len(self.gpu_verdicts):
            return "fits"
        if fitting == 0 and len(judged) == len(self.gpu_verdicts):
            return "does_not_fit"
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
    def engine_args(self) -> list[str] | None:
        fit = self.estimate.fit if self.estimate is not None else None
        return None if fit is None or fit.engine_args is None else list(fit.engine_args)


def _field_source(plan: Plan, field: str | None) -> str:
    if field is None:
        return "request"
    if field in plan.sources:
        return plan.sources[field]
    head = field.split(".", 1)[0]
    return plan.sources.get(head, field)


# What a Pod's author is told where the estimate's own advice names a request field.
_POD_MODEL_UNKNOWN = (
    "name a catalog model (GET /v1/models), or have the service's operator add its files to "
    "the model store"
)
POD_GPU_FIX = "pin a product GET /v1/gpus lists as k8s_product_label"


def in_flags(plan: Plan, exc: EstimatorError) -> str:
    """The estimator's refusal with the request field it names spelled as the engine's flag
    that set it (``tensor_parallel_size 4 does not divide`` -> ``--tensor-parallel-size 4
    ...``): the words a Pod's author finds in the Pod."""
    field = (exc.field or "").removeprefix("engine_options.")
    if not field or field not in exc.detail:
        return exc.detail
    for option in get_engine(plan.engine.value).declared:
        if option.flag and (option.field == field or option.name == field):
            return exc.detail.replace(field, option.flag)
    return exc.detail


def _problem(plan: Plan, exc: EstimatorError) -> ReadProblem:
    """The estimator's refusal, read where its value came from. A model it cannot find gets
    the Pod's way to name one, since the estimate's advice (a posted ``hf_config``) is a
    field no Pod sets."""
    source = _field_source(plan, exc.field)
    if isinstance(exc, NotFound) and exc.field == "model":
        name = plan.model.value if plan.model else "the model"
        return ReadProblem(
            source,
            exc.detail,
            pod_detail=f"model {name!r} is not in the service's catalog or model store",
            pod_fix=_POD_MODEL_UNKNOWN,
        )
    return ReadProblem(source, exc.detail, pod_detail=in_flags(plan, exc))


def unknown_gpu(source: str, ref: str, exc: EstimatorError) -> ReadProblem:
    """A pinned GPU product the catalog does not know, with the fix for each audience."""
    return ReadProblem(
        source,
        exc.detail,
        "give the GPU's memory as `gpu_memory_bytes` (nvidia.com/gpu.memory MiB × 2^20)",
        pod_detail=f"GPU product {ref!r} is not in the service's catalog",
        pod_fix=POD_GPU_FIX,
    )


def prepare(plan: Plan, catalogs: Catalogs) -> Prepared | ReadProblem:
    """Validate the plan's body and resolve its model; a problem names where the bad value was
    read (the flag's position, the manifest field)."""
    try:
        body = InferenceRequestBody.model_validate(plan.with_gpu())
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        return ReadProblem(_field_source(plan, field), str(first.get("msg", "invalid value")))
    try:
        model = resolve_model(body, catalogs.models, catalogs.store)
        speculative = resolve_speculative(body.speculative, catalogs.models, catalogs.store)
        return Prepared(plan, body, model, inference_request(body, speculative))
    except EstimatorError as exc:
        return _problem(plan, exc)


def judge_on(prepared: Prepared, gpu: GpuSpec) -> Verdict:
    """The estimator's verdict on ``gpu`` with the GPUs the plan gives its layout: the
    judgement the estimate's ``fit.fits`` is (raises EstimatorError)."""
    return judge_inference(prepared.model, prepared.request, gpu, prepared.plan.gpus_given)


def verdict_on(prepared: Prepared, ref: str, gpu: GpuSpec) -> GpuVerdict:
    try:
        found = judge_on(prepared, gpu)
    except EstimatorError as exc:
        return GpuVerdict(ref, False, None, in_flags(prepared.plan, exc))
    return GpuVerdict(ref, found.fits, found.reason, found.detail, found.usable, found.required)


# fits_on is a pure function of the plan's request and the GPU catalog, and schedulers ask
# about the same few workloads over and over: answers are kept in the estimator's cache
# (bounded in bytes with everything else; one scan of the catalog is about 100 verdicts, tens
# of milliseconds; a kept answer is a dictionary lookup).


def _capabilities(gpu: GpuSpec) -> tuple[object, ...]:
    """What a verdict reads of a GPU: equal tuples get equal verdicts."""
    return (
        gpu.total_bytes,
        gpu.compute_capability,
        gpu.bf16,
        gpu.fp8,
        gpu.mig_profile is not None,
        gpu.shared,
        gpu.gpus_per_node,
    )


def _scan(prepared: Prepared, catalogs: Catalogs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    whole: list[str] = []
    mig: list[str] = []
    one_gpu = prepared.plan.engine_gpus == 1
    seen: dict[tuple[object, ...], bool] = {}

    def fits(spec: GpuSpec, label: str) -> bool:
        key = _capabilities(spec)
        if key not in seen:
            seen[key] = verdict_on(prepared, label, spec).fits
        return seen[key]

    for gpu in catalogs.gpus.all():
        label = gpu.k8s_product_label
        if label is None:
            continue
        if not fits(resolve_gpu(catalogs.gpus, gpu.id), label):
            continue  # a slice holds less than its GPU: none of them fits either
        whole.append(label)
        if not one_gpu:
            continue
        for profile in gpu.mig_profiles:
            if "+" in profile.name:
                continue  # media-extension slices: no sourced GFD label spelling
            if fits(resolve_gpu(catalogs.gpus, f"{gpu.id}/{profile.name}"), label):
                mig.append(f"{label}-MIG-{profile.name}")
    return tuple(whole), tuple(mig)


def _fits_on(prepared: Prepared, catalogs: Catalogs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Catalog products (GFD ``nvidia.com/gpu.product`` values) it fits on at its layout; and,
    for a one-GPU layout, the MIG single-strategy products (``<product>-MIG-<profile>``)."""
    plan = prepared.plan
    key = (orjson.dumps(plan.with_gpu(), option=orjson.OPT_SORT_KEYS).decode(), plan.engine_gpus)
    return memo.cached("fits_on", (*key, catalogs.gpus), lambda: _scan(prepared, catalogs))


def check_plan(
    plan: Plan,
    catalogs: Catalogs,
    metrics: Metrics,
    *,
    memory_bytes: int | None = None,
    with_estimate: bool = True,
    with_fits_on: bool = True,
) -> Check | ReadProblem:
    """Answer a plan: the full estimate (on its one GPU, if it has one), a verdict on each
    allowed GPU, the products it fits on. A problem for a plan the estimator cannot read."""
    prepared = prepare(plan, catalogs)
    if isinstance(prepared, ReadProblem):
        return prepared
    problems: list[ReadProblem] = []
    verdicts: list[GpuVerdict] = []
    specs: list[tuple[str, GpuSpec]] = []
    for ref in plan.gpu_refs:
        try:
            specs.append((ref, resolve_gpu(catalogs.gpus, ref)))
        except EstimatorError as exc:
            if memory_bytes is not None:
                # The request gives the memory of a product the catalog does not know.
                specs.append((ref, ad_hoc_gpu(memory_bytes)))
                continue
            problems.append(unknown_gpu(plan.gpu_source or "gpu", ref, exc))
            verdicts.append(GpuVerdict(ref, False, None, exc.detail))
    if not plan.gpu_refs and memory_bytes is not None:
        specs.append((f"memory:{memory_bytes}", ad_hoc_gpu(memory_bytes)))
    verdicts += [verdict_on(prepared, ref, spec) for ref, spec in specs]
    estimate: EstimateResponse | None = None
    body = plan.with_gpu()
    if len(specs) == 1:
        ref, spec = specs[0]
        memory = spec.ref.startswith("memory:")
        body = plan.with_gpu(memory_bytes=memory_bytes) if memory else plan.with_gpu(ref)
    if with_estimate:
        try:
            estimate, _ = run_estimate(InferenceRequestBody.model_validate(body), catalogs, metrics)
        except EstimatorError as exc:
            return _problem(plan, exc)
    fits_on, fits_on_mig = _fits_on(prepared, catalogs) if with_fits_on else ((), ())
    return Check(plan, estimate, tuple(verdicts), fits_on, fits_on_mig, tuple(problems), body)


def as_json(check: Check) -> Mapping[str, Any]:
    """The verdict fields of a check (the rest of a result comes from the reading)."""
    return {
        "verdict": check.verdict,
        "fits": check.fits,
        "gpu_verdicts": [
            {
                "gpu": v.gpu,
                "fits": v.fits,
                "reason": v.reason.value if v.reason is not None else None,
                "reason_detail": v.detail,
            }
            for v in check.gpu_verdicts
        ],
        "fits_on": list(check.fits_on),
        "fits_on_mig": list(check.fits_on_mig),
        "engine_args": check.engine_args,
    }
