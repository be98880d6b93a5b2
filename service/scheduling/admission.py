"""The validating admission webhook's decision on one AdmissionReview.

What it does, in order:

1. A review it cannot read, an operation other than CREATE or UPDATE, an object that is not a
   workload or that requests no GPU: allowed, untouched (no warnings for the last three).
2. The mode: the object's annotation `MODE_KEY`, else its label of that name, else the
   default of the route the API server called (``/v1/admission`` is ``warn``;
   ``/v1/admission/deny`` etc. let one webhook entry per namespace selector set a namespace's
   default, since an AdmissionReview carries no namespace labels). ``off``: allowed untouched.
3. Each serving container with GPUs is sized as pre-flight sizes it. Pinned to GPU products on
   none of which it fits, or given fewer GPUs than its engine layout uses: a denial under
   ``deny`` (403, with the reason and the engine flags that fit), a warning under ``warn``.
   Not pinned (admission runs before a node is chosen): allowed, warning with the products it
   fits on. Pinned to several products, fitting on some: allowed, warning naming those.
4. Anything the estimator could not read (a model given as a path, a model or GPU not in the
   catalog): allowed with a warning. Admission never fails because of the estimator, and never
   denies on a model the alias rules read from its name (a guess): allowed with a warning.
5. What the service cannot check in time or within its bounds is answered as the webhook's
   ``failurePolicy: Ignore`` would have it, but with a warning that says why: an object over
   the limit table's bounds (service/schemas/limits.py: depth, keys, serving or training
   containers), or a review whose deadline (``LLMMEM_ADMISSION_DEADLINE_S``, below the
   webhook's ``timeoutSeconds``) passed between two containers: the containers checked by
   then keep their verdicts, the rest are named unchecked. ``LLMMEM_ADMISSION_UNCHECKED=deny``
   denies such a review instead (``failurePolicy: Fail``, with the reason). Serving and
   training containers alike.

Warnings stay short (the API server passes 120 characters comfortably and cuts at 256,
`service.workloads.admission.WARNING_LIMIT`); the denial message carries the details.

Every review is counted (`Metrics.observe_admission`): the route's default mode, the decision
(allowed, warned, denied, skipped, unreadable, failed; ``unchecked`` is counted by the route,
which answers a review the pool could not run in time) and each sized container's verdict.
An object without ``kind`` is read as the kind the request names (``request.kind``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from service.application.estimate_service import Catalogs
from service.application.metrics import Metrics
from service.estimator.cancel import Cancelled, checkpoint
from service.estimator.engines import get_engine
from service.estimator.result import FitReason
from service.scheduling.check import Check, check_plan
from service.scheduling.plan import Plan
from service.scheduling.preflight import Overrides, WorkloadUnreadable, plans_for_object
from service.scheduling.training import judge_training
from service.schemas.limits import LIMITS, OverLimits, object_problem
from service.workloads.admission import (
    AdmissionRequest,
    AdmissionResponse,
    admission_review,
    read_admission_review,
)
from service.workloads.kubernetes import read_workloads
from service.workloads.sources import ReadProblem

logger = logging.getLogger("service.admission")

# The label a Pod pins a GPU product with (GPU Feature Discovery's; what `fits_on` lists).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

__all__ = [
    "DEFAULT_MODE",
    "MODES",
    "MODE_KEY",
    "Mode",
    "Unchecked",
    "review",
    "unchecked_review",
]

Mode = Literal["deny", "warn", "off"]
# What a review the service could not check (over the bounds, out of time) gets.
Unchecked = Literal["allow", "deny"]
MODES: tuple[Mode, ...] = ("deny", "warn", "off")
MODE_KEY = "llm-memory.io/admission-mode"
DEFAULT_MODE: Mode = "warn"
PREFIX = "llm-memory: "
# Products named in one warning before "and N more".
_SHOWN = 4


def _uid(body: object) -> str:
    request = body.get("request") if isinstance(body, Mapping) else None
    uid = request.get("uid") if isinstance(request, Mapping) else None
    return uid if isinstance(uid, str) else ""


def _mode(obj: Mapping[str, object], default: Mode) -> tuple[Mode, str | None]:
    """The mode for this object, and a warning when its annotation or label is not a mode."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    for place in ("annotations", "labels"):
        values = metadata.get(place)
        value = values.get(MODE_KEY) if isinstance(values, Mapping) else None
        if value is None:
            continue
        if value in MODES:
            return value, None
        return default, (
            f"{PREFIX}{place[:-1]} {MODE_KEY}={str(value)[:20]!r} is not deny, warn or off; "
            f"{default} applies"
        )
    return default, None


def _products(labels: tuple[str, ...]) -> str:
    shown = ", ".join(labels[:_SHOWN])
    return shown + (f" and {len(labels) - _SHOWN} more" if len(labels) > _SHOWN else "")


def _name(plan: Plan, container: str | None) -> str:
    model = plan.model.value if plan.model else "?"
    return f"{container or 'container'} ({model})"


def _shorter_context(check: Check) -> str | None:
    """The engine's context flag at the longest length that fits the GPUs as given."""
    fit = check.estimate.fit if check.estimate is not None else None
    if fit is None or not fit.max_sequence_length:
        return None
    if fit.reason not in ("kv_pool_below_one_sequence", "workload_exceeds_memory"):
        return None  # a shorter context changes nothing else
    engine = get_engine(check.plan.engine.value)
    option = engine.option_table().get(engine.context_option or "")
    if option is None or option.flag is None:
        return None
    return f"{option.flag} {fit.max_sequence_length}"


def _gpus_for_flags(check: Check) -> str:
    """The GPUs the flags that fit need, where that is more than the pod's limit gives."""
    fit = check.estimate.fit if check.estimate is not None else None
    request = check.plan.gpu_request
    if fit is None or fit.min_gpu_count is None or fit.fits:
        return ""
    if request is not None and fit.min_gpu_count <= request.count:
        return ""
    resource = request.resource if request is not None else "nvidia.com/gpu"
    return f" with {fit.min_gpu_count} GPUs (resources.limits {resource})"


def _unpriced_options(check: Check) -> str | None:
    """The options read that could change the memory but are not priced (a verdict resting
    on them is a warning, never a denial), or None."""
    names = [o.name for o in check.plan.options if not o.priced and o.affects_memory]
    if not names:
        return None
    return f"{', '.join(names[:4])} read but not priced"


def _guessed_model(check: Check) -> str | None:
    """Why a verdict rests on a guess of the model (the alias rules read its name), or None."""
    resolution = check.estimate.model.resolution if check.estimate is not None else None
    if resolution is None or resolution.exact:
        return None
    how = f" in {resolution.format}" if resolution.format else ""
    return f"model read as {resolution.resolved_to}{how} by the alias rules (a guess)"


def _judge(check: Check, who: str) -> tuple[str | None, str | None]:
    """(denial message or None, warning or None) for one container."""
    plan = check.plan
    verdict = check.verdict
    if verdict == "will_not_start":
        detail = "; ".join(p.pod_message() for p in plan.problems)
        return f"{who}: {detail}", f"{PREFIX}{who}: will not start: {detail}"
    if verdict == "does_not_fit":
        reasons = "; ".join(
            f"{v.gpu}: {v.reason.value if v.reason else 'unknown'}"
            + (f" ({v.detail})" if v.detail else "")
            for v in check.gpu_verdicts
        )
        fix = ""
        if check.engine_args:
            fix = f"; flags that fit: {' '.join(check.engine_args)}{_gpus_for_flags(check)}"
        if any(v.reason is FitReason.HOST_MEMORY_EXCEEDED for v in check.gpu_verdicts):
            fix += "; raise the container's resources.limits.memory"
        shorter = _shorter_context(check)
        if shorter:
            fix += f"; or on these GPUs: {shorter}"
        elsewhere = ""
        if check.fits_on:
            elsewhere = f"; fits on nodeSelector {GPU_PRODUCT_LABEL}: {_products(check.fits_on)}"
        warning = f"{PREFIX}{who} does not fit {', '.join(v.gpu for v in check.gpu_verdicts)}"
        warning += (
            f" ({check.gpu_verdicts[0].reason.value if check.gpu_verdicts[0].reason else ''})"
        )
        return f"{who} does not fit: {reasons}{fix}{elsewhere}", warning
    if verdict == "fits_some":
        good = tuple(v.gpu for v in check.gpu_verdicts if v.fits)
        return None, f"{PREFIX}{who} fits only on {_products(good)} of the allowed products"
    if verdict == "unknown" and not check.gpu_verdicts:
        if check.fits_on:
            return None, (
                f"{PREFIX}{who}: no GPU product pinned; fits on nodeSelector "
                f"{GPU_PRODUCT_LABEL}: {_products(check.fits_on)}"
            )
        return None, f"{PREFIX}{who}: no GPU product pinned, and it fits on no catalog GPU"
    if verdict == "unknown":
        unread = "; ".join(p.pod_message() for p in check.problems)
        unread = unread or "the GPU could not be judged"
        return None, f"{PREFIX}{who}: not checked: {unread}"
    return None, None


def unchecked(
    uid: str, why: str, policy: Unchecked, warnings: tuple[str, ...] = ()
) -> AdmissionResponse:
    """The answer to a review the service could not check: allowed with a warning saying why
    (``failurePolicy: Ignore``), or denied with the reason under ``policy`` deny."""
    note = f"{PREFIX}not checked: {why}"
    if policy == "deny":
        return AdmissionResponse(
            uid=uid,
            allowed=False,
            code=403,
            reason="Forbidden",
            message=f"GPU memory check not done ({why}); unchecked reviews are denied "
            "(LLMMEM_ADMISSION_UNCHECKED=deny)",
            warnings=(*warnings, note),
        )
    return AdmissionResponse(uid=uid, allowed=True, warnings=(*warnings, note))


def _ran_out(done: int, total: int) -> str:
    return (
        f"the check ran out of time (LLMMEM_ADMISSION_DEADLINE_S) with {done} of {total} "
        "containers checked"
    )


def _with_kind(obj: Mapping[str, object], request: AdmissionRequest) -> Mapping[str, object]:
    """The object with the kind the request names, where the object itself carries none."""
    if obj.get("kind") or not request.kind.kind:
        return obj
    group = request.kind.group
    version = f"{group}/{request.kind.version}" if group else request.kind.version
    return {**obj, "kind": request.kind.kind, "apiVersion": obj.get("apiVersion") or version}


def decide(
    request: AdmissionRequest,
    default: Mode,
    catalogs: Catalogs,
    metrics: Metrics,
    policy: Unchecked = "allow",
) -> tuple[AdmissionResponse, tuple[str, ...]]:
    """The webhook's answer to a review it could read, and each sized container's verdict
    (empty when nothing was sized: the object was let through untouched)."""
    allowed = AdmissionResponse(uid=request.uid, allowed=True)
    if request.operation not in ("CREATE", "UPDATE") or request.obj is None:
        return allowed, ()
    obj = _with_kind(request.obj, request)
    mode, mode_warning = _mode(obj, default)
    if mode == "off":
        return allowed, ()
    warnings: list[str] = [mode_warning] if mode_warning else []
    # Bounded before anything reads the object's workloads (the limit table).
    over = object_problem(obj)
    if over is not None:
        return unchecked(request.uid, over, policy, tuple(warnings)), ()
    # Training jobs: the same decision from the training judgement.
    try:
        training = judge_training(obj, catalogs, metrics, PREFIX)
    except OverLimits as exc:
        return unchecked(request.uid, exc.detail, policy, tuple(warnings)), ()
    if training is not None:
        warned = [*warnings, *training.warnings]
        judged = tuple(training.verdicts)
        if training.unfinished is not None:
            why = _ran_out(*training.unfinished)
            if policy == "deny":
                return unchecked(request.uid, why, policy, tuple(warned)), judged
            warned.append(f"{PREFIX}not checked: {why}")
        audit = {"verdict": ",".join(dict.fromkeys(training.verdicts))} if training.verdicts else {}
        if training.denials and mode == "deny":
            denied = AdmissionResponse(
                uid=request.uid,
                allowed=False,
                code=403,
                reason="Forbidden",
                message="GPU memory check (" + MODE_KEY + "=deny): " + " | ".join(training.denials),
                warnings=tuple(warned),
                audit_annotations=audit,
            )
            return denied, judged
        return AdmissionResponse(
            request.uid, True, warnings=tuple(warned), audit_annotations=audit
        ), judged
    reading = read_workloads(obj)
    if isinstance(reading, ReadProblem):
        return allowed, ()
    # Problems arise only in engine containers or GPU resources, so they are worth a warning.
    if not reading.requests_gpus and not reading.problems:
        return allowed, ()
    over = LIMITS.containers_problem(len(reading.workloads))
    if over is not None:
        return unchecked(request.uid, over, policy, tuple(warnings)), ()
    denials: list[str] = []
    verdicts: list[str] = []
    try:
        _, plans, problems = plans_for_object(obj, Overrides())
    except WorkloadUnreadable as exc:  # pragma: no cover - read_workloads succeeded above
        return AdmissionResponse(request.uid, True, warnings=(f"{PREFIX}{exc.detail}",)), ()
    warnings += [f"{PREFIX}not checked: {p.pod_message()}" for p in problems]
    sized = [(w, p) for w, p in plans if w.gpus is not None]
    for done, (workload, plan) in enumerate(sized):
        who = _name(plan, workload.container)
        pinned_one = len(plan.gpu_refs) == 1
        try:
            checkpoint()
            check = check_plan(plan, catalogs, metrics, with_estimate=pinned_one)
        except Cancelled as exc:
            if str(exc) != "deadline":
                raise
            why = _ran_out(done, len(sized))
            if policy == "deny":
                return unchecked(request.uid, why, policy, tuple(warnings)), tuple(verdicts)
            warnings.append(f"{PREFIX}not checked: {why}")
            break
        if isinstance(check, ReadProblem):
            warnings.append(f"{PREFIX}{who}: not checked: {check.pod_message()}")
            verdicts.append("unknown")
            continue
        verdicts.append(check.verdict)
        denial, warning = _judge(check, who)
        # Never denied on a guess: a model read from its name by the alias rules, or options
        # that change the memory and are not priced.
        guess = _guessed_model(check) or _unpriced_options(check)
        if denial is not None and guess is not None:
            warnings.append(f"{PREFIX}{who}: not denied: {guess}")
            denial = None
        if denial is not None:
            denials.append(denial)
        if warning is not None:
            warnings.append(warning)
    audit = {"verdict": ",".join(dict.fromkeys(verdicts))} if verdicts else {}
    # Containers that could not be read at all were not checked either (their warning says why).
    verdicts += ["unknown"] * len(problems)
    if denials and mode == "deny":
        denied = AdmissionResponse(
            uid=request.uid,
            allowed=False,
            code=403,
            reason="Forbidden",
            message="GPU memory check (" + MODE_KEY + "=deny): " + " | ".join(denials),
            warnings=tuple(warnings),
            audit_annotations=audit,
        )
        return denied, tuple(verdicts)
    answer = AdmissionResponse(
        uid=request.uid, allowed=True, warnings=tuple(warnings), audit_annotations=audit
    )
    return answer, tuple(verdicts)


def _decision(response: AdmissionResponse, verdicts: tuple[str, ...]) -> str:
    if not response.allowed:
        return "denied"
    if not verdicts and not response.warnings:
        return "skipped"
    return "warned" if response.warnings else "allowed"


def unchecked_review(body: object, why: str, policy: Unchecked = "allow") -> dict[str, Any]:
    """The AdmissionReview answering ``body`` unchecked (see :func:`unchecked`); what the
    HTTP layer answers when the review could not even start in time."""
    return admission_review(unchecked(_uid(body), why, policy))


def review(
    body: object,
    default: Mode,
    catalogs: Catalogs,
    metrics: Metrics,
    policy: Unchecked = "allow",
) -> dict[str, Any]:
    """The AdmissionReview JSON answering ``body``; never raises for what it cannot read."""
    request = read_admission_review(body)
    if isinstance(request, ReadProblem):
        response = AdmissionResponse(
            uid=_uid(body),
            allowed=True,
            warnings=(f"{PREFIX}the review could not be read: {request.message()}",),
        )
        metrics.observe_admission(default, "unreadable")
        return admission_review(response)
    try:
        answer, verdicts = decide(request, default, catalogs, metrics, policy)
    except Cancelled:
        raise  # the client left, or the deadline passed before the check began
    except Exception as exc:
        # Admission must never fail because of the estimator: logged, allowed, warned.
        logger.exception("admission review %s could not be checked", request.uid)
        message = f"{PREFIX}not checked: {type(exc).__name__}: {str(exc)[:160]}"
        metrics.observe_admission(default, "failed")
        return admission_review(AdmissionResponse(request.uid, True, warnings=(message,)))
    metrics.observe_admission(default, _decision(answer, verdicts), verdicts)
    return admission_review(answer)
