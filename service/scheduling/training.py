"""Training jobs at the three scheduler-facing endpoints: pre-flight, the admission webhook and
the scheduler extender, from one judgement (`service.scheduling.training_check`).

Each entry point answers None when the input runs no trainer this service reads, so the
serving path answers as before. The admission rule: a training container with GPUs that does
not fit is refused under ``deny`` only when the refusal holds for what is not priced too (the
floor body fits on none of the pinned GPUs, or the host memory is below what the pod needs,
see `TrainingCheck.refusable`); otherwise it is a warning. The extender filters a node out on
the same condition and lets through what it cannot judge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.application.estimate_service import Catalogs
from service.application.metrics import Metrics
from service.estimator.cancel import Cancelled, checkpoint
from service.estimator.gpu import GpuSpec
from service.scheduling.check import GpuVerdict
from service.scheduling.training_check import (
    TrainingCheck,
    TrainingPrepared,
    check_training,
    floor_fits,
    prepare_training,
    training_verdict_on,
)
from service.scheduling.training_plan import TrainingPlan, plan_training
from service.schemas.limits import LIMITS, OverLimits
from service.workloads.extender import (
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    node_name,
)
from service.workloads.gpus import GpuRequest
from service.workloads.nodes import NodeGpus, read_node
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError
from service.workloads.training.files import ConfigFiles
from service.workloads.training.kinds import TrainingWorkload
from service.workloads.training.launchers import find_training_command
from service.workloads.training.objects import read_training
from service.workloads.training.settings import TrainingCommand

__all__ = [
    "TrainingJudgement",
    "judge_training",
    "result_json",
    "training_filter",
    "training_preflight",
    "training_prioritize",
]

# The `files` of a request: path -> text.
Files = Mapping[str, str]


def _files(files: Files | None) -> ConfigFiles:
    return ConfigFiles({path: (text, f"files[{path!r}]") for path, text in (files or {}).items()})


def _command_words(command: str | Sequence[str]) -> list[Token]:
    if isinstance(command, str):
        return [Token("sh", "command"), Token("-c", "command"), Token(command, "command")]
    return [Token(word, f"argv[{i}]") for i, word in enumerate(command)]


def _sourced(value: Sourced[Any] | None) -> dict[str, Any] | None:
    return None if value is None else {"value": value.value, "source": value.source}


def _problem(problem: ReadProblem) -> dict[str, Any]:
    return {"field": problem.field, "detail": problem.detail, "fix": problem.fix}


def _json_value(value: object) -> Any:
    return list(value) if isinstance(value, tuple) else value


def result_json(check: TrainingCheck) -> dict[str, Any]:
    """One training result of the pre-flight answer."""
    plan = check.plan
    command = plan.command
    workload = plan.workload
    estimate = check.estimate
    host = check.host
    return {
        "container": workload.container if workload else None,
        "path": workload.path if workload else None,
        "role": workload.role if workload else "main",
        "trainer": {"value": command.trainer, "source": command.entrypoint_source},
        "entrypoint": command.entrypoint,
        "model": {
            "value": command.model.given if command.model else None,
            "source": plan.model.source,
            "catalog_id": plan.model.value,
        },
        "launcher": {
            "name": command.launch.name,
            "nproc_per_node": _sourced(plan.nproc_per_node),
            "nnodes": _sourced(plan.nnodes),
            "world_size": plan.world,
        },
        "options": [
            {
                "name": o.name,
                "value": _json_value(o.value),
                "source": o.source,
                "priced": o.priced,
                "note": o.note,
                "target": o.target or None,
            }
            for o in command.options
        ],
        "settings": [
            {
                "field": name,
                "value": _json_value(s.value),
                "source": s.source,
                "priced": s.priced,
                "note": s.note,
            }
            for name, s in plan.settings.items()
        ],
        "configs": [
            {"path": c.path, "named_at": c.named_at, "role": c.role, "read_from": c.read_from}
            for c in command.configs
        ],
        "gpus": None
        if plan.gpu_request is None
        else {
            "resource": plan.gpu_request.resource,
            "count": plan.gpu_request.count,
            "source": plan.gpu_request.source,
        },
        "pods": _sourced(workload.pods) if workload else None,
        "gpu": None
        if not plan.gpu_refs
        else {"values": list(plan.gpu_refs), "source": plan.gpu_source},
        "request": dict(check.request),
        "estimate": estimate,
        "fit": estimate.fit if estimate is not None else None,
        "verdict": check.verdict,
        "fits": check.fits,
        "exact": plan.exact,
        "unpriced": list(plan.unpriced),
        "floor_request": None if plan.floor_body is None else dict(plan.floor_body),
        "refusable": check.refusable,
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
        "host_memory": None
        if host is None
        else {
            "offload_bytes": host.offload_bytes,
            "pinned_bytes": host.pinned_bytes,
            "needed_bytes": host.needed_bytes,
            "limit": _sourced(host.limit),
            "fits": host.fits,
        },
        "suggestions": [
            {
                "change": s.change,
                "how": s.how,
                "per_gpu_bytes": s.per_gpu_bytes,
                "fits": s.fits,
                "request": dict(s.request),
            }
            for s in check.suggestions
        ],
        "ignored_args": [{"text": a.text, "source": a.source} for a in command.ignored_args],
        "notes": list(plan.notes),
        "problems": [_problem(p) for p in (*plan.problems, *check.problems)],
    }


def _bounded(workloads: Sequence[TrainingWorkload]) -> None:
    """The limit table's bound on containers sized per object (service/schemas/limits.py)."""
    over = LIMITS.containers_problem(len(workloads), "training")
    if over is not None:
        raise OverLimits(over)


def _plans(
    reading_or_command: list[tuple[TrainingWorkload | None, TrainingCommand]],
    catalogs: Catalogs,
    model: str | None,
    gpu: str | None,
    gpu_count: int | None,
) -> tuple[list[TrainingPlan], list[ReadProblem]]:
    plans: list[TrainingPlan] = []
    problems: list[ReadProblem] = []
    for workload, command in reading_or_command:
        plan = plan_training(
            command,
            catalogs,
            workload=workload,
            model_override=model,
            gpu=gpu,
            gpu_count=gpu_count,
        )
        if isinstance(plan, ReadProblem):
            problems.append(plan)
        else:
            plans.append(plan)
    return plans, problems


def training_preflight(
    *,
    command: str | Sequence[str] | None,
    obj: Mapping[str, Any] | None,
    files: Files | None,
    model: str | None,
    gpu: str | None,
    gpu_memory_bytes: int | None,
    gpu_count: int | None,
    catalogs: Catalogs,
    metrics: Metrics,
) -> dict[str, Any] | list[ReadProblem] | None:
    """The pre-flight answer for a training job; the problems that make it unreadable; or
    None when the input runs no trainer."""
    carried = _files(files)
    pairs: list[tuple[TrainingWorkload | None, TrainingCommand]] = []
    problems: list[ReadProblem] = []
    others: list[dict[str, Any]] = []
    if obj is not None:
        reading = read_training(obj, carried)
        if reading is None:
            return None
        if isinstance(reading, ReadProblem):
            return [reading]
        kind, name, namespace = reading.kind, reading.name, reading.namespace
        _bounded(reading.workloads)
        pairs = [(w, w.command) for w in reading.workloads]
        problems += list(reading.problems)
        others = [{"path": o.path, "name": o.name, "reason": o.reason} for o in reading.others]
        if not pairs:
            return problems or None
    else:
        assert command is not None
        kind, name, namespace = "command", None, None
        try:
            found, read_problems = find_training_command(_command_words(command), {}, carried)
        except WorkloadError as exc:
            return [exc.problem]
        if found is None:
            return None
        problems += read_problems
        pairs = [(None, found)]
    plans, plan_problems = _plans(pairs, catalogs, model, gpu, gpu_count)
    problems += plan_problems
    if problems:
        return problems
    results: list[dict[str, Any]] = []
    for plan in plans:
        checkpoint()
        check = check_training(plan, catalogs, metrics, memory_bytes=gpu_memory_bytes)
        if isinstance(check, ReadProblem):
            return [check]
        results.append(result_json(check))
    return {
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "results": [],
        "training": results,
        "others": others,
    }


# ------------------------------------------------------------------------------ admission


@dataclass(frozen=True)
class TrainingJudgement:
    """The admission decision's parts for one object's training containers."""

    denials: tuple[str, ...]
    warnings: tuple[str, ...]
    verdicts: tuple[str, ...]
    # (checked, of): the deadline passed with only the first containers checked.
    unfinished: tuple[int, int] | None = None


def _who(plan: TrainingPlan) -> str:
    container = plan.workload.container if plan.workload else None
    return f"{container or 'trainer'} ({plan.command.trainer}, {plan.model.value})"


def _products(labels: Sequence[str], shown: int = 4) -> str:
    text = ", ".join(labels[:shown])
    return text + (f" and {len(labels) - shown} more" if len(labels) > shown else "")


def _judge_one(check: TrainingCheck, prefix: str) -> tuple[str | None, str | None]:
    plan = check.plan
    who = _who(plan)
    verdict = check.verdict
    if verdict == "will_not_start":
        detail = "; ".join(p.message() for p in plan.problems)
        return f"{who}: {detail}", f"{prefix}{who}: will not start: {detail}"
    if verdict == "does_not_fit":
        reasons = "; ".join(
            f"{v.gpu}: {v.detail or (v.reason.value if v.reason else '')}"
            for v in check.gpu_verdicts
        )
        host = check.host
        if host is not None and host.fits is False and host.limit is not None:
            reasons += (
                f"; host memory: needs at least {host.needed_bytes / 1e9:.1f} GB, limit "
                f"{host.limit.value / 1e9:.1f} GB ({host.limit.source})"
            )
        fixes = [f"{s.change} ({s.how})" for s in check.suggestions if s.fits]
        fix = f"; fits with: {'; '.join(fixes[:3])}" if fixes else ""
        elsewhere = f"; fits on {_products(check.fits_on)}" if check.fits_on else ""
        gpus = ", ".join(v.gpu for v in check.gpu_verdicts) or "its GPUs"
        if check.refusable:
            return (
                f"{who} does not fit: {reasons}{fix}{elsewhere}",
                f"{prefix}{who} does not fit {gpus}",
            )
        unpriced = ", ".join(plan.unpriced[:3])
        return (
            None,
            f"{prefix}{who} does not fit {gpus} as priced; not refused, not priced: {unpriced}",
        )
    if verdict == "fits_some":
        good = [v.gpu for v in check.gpu_verdicts if v.fits]
        return None, f"{prefix}{who} fits only on {_products(good)} of the allowed products"
    if verdict == "unknown" and not check.gpu_verdicts:
        if check.fits_on:
            return None, f"{prefix}{who}: no GPU product pinned; fits on {_products(check.fits_on)}"
        return None, f"{prefix}{who}: no GPU product pinned, and it fits on no catalog GPU"
    if verdict == "unknown":
        unread = "; ".join(p.detail for p in check.problems) or "the GPU could not be judged"
        return None, f"{prefix}{who}: not checked: {unread}"
    return None, None


def judge_training(
    obj: Mapping[str, object], catalogs: Catalogs, metrics: Metrics, prefix: str
) -> TrainingJudgement | None:
    """Admission's judgement of an object's training containers with GPUs; None when it runs
    no trainer with a GPU (the serving path decides). Raises `OverLimits` for more containers
    than the limit table allows; past the request's deadline, the containers not yet checked
    are left (``unfinished``)."""
    reading = read_training(obj)
    if reading is None or isinstance(reading, ReadProblem):
        return None
    with_gpus = [w for w in reading.workloads if w.gpus is not None]
    warnings = [f"{prefix}not checked: {p.message()}"[:240] for p in reading.problems]
    if not with_gpus:
        return TrainingJudgement((), tuple(warnings), ()) if warnings else None
    _bounded(with_gpus)
    denials: list[str] = []
    verdicts: list[str] = []
    plans, problems = _plans([(w, w.command) for w in with_gpus], catalogs, None, None, None)
    warnings += [f"{prefix}not checked: {p.message()}"[:240] for p in problems]
    unfinished = None
    for done, plan in enumerate(plans):
        pinned_one = len(plan.gpu_refs) == 1
        try:
            checkpoint()
            check = check_training(
                plan, catalogs, metrics, with_estimate=pinned_one, with_suggestions=pinned_one
            )
        except Cancelled as exc:
            if str(exc) != "deadline":
                raise
            unfinished = (done, len(plans))
            break
        if isinstance(check, ReadProblem):
            warnings.append(f"{prefix}{_who(plan)}: not checked: {check.message()}"[:240])
            verdicts.append("unknown")
            continue
        verdicts.append(check.verdict)
        denial, warning = _judge_one(check, prefix)
        if denial is not None:
            denials.append(denial)
        if warning is not None:
            warnings.append(warning[:240])
    return TrainingJudgement(tuple(denials), tuple(warnings), tuple(verdicts), unfinished)


# ------------------------------------------------------------------------------ extender

NodeGpuOf = Callable[[NodeGpus, GpuRequest, Catalogs], Any]
"""`service.scheduling.extender.node_gpu`: the GPU a pod's request gets on a node."""
Score = Callable[[list[tuple[GpuVerdict, Any]]], int]
"""The extender's score of a node from its verdicts (the serving one)."""


@dataclass(frozen=True)
class _Ranked:
    prepared: TrainingPrepared
    request: GpuRequest


def _training_pod(pod: Mapping[str, object], catalogs: Catalogs) -> list[_Ranked] | None:
    reading = read_training(pod)
    if reading is None or isinstance(reading, ReadProblem):
        return None
    _bounded(reading.workloads)
    out: list[_Ranked] = []
    for workload in reading.workloads:
        if workload.gpus is None:
            continue
        checkpoint()
        plan = plan_training(workload.command, catalogs, workload=workload)
        if isinstance(plan, ReadProblem) or plan.problems:
            continue
        prepared = prepare_training(plan, catalogs)
        if not isinstance(prepared, ReadProblem):
            out.append(_Ranked(prepared, workload.gpus))
    return out


def _node_verdicts(
    ranked: list[_Ranked], node: object, catalogs: Catalogs, node_gpu: NodeGpuOf
) -> list[tuple[GpuVerdict, Any, bool]] | None:
    """Per container: (verdict, the node's GPU, whether a failure holds for what is not
    priced too); None when the node's GPU cannot be told."""
    gpus = read_node(node)
    if isinstance(gpus, ReadProblem):
        return None
    out: list[tuple[GpuVerdict, Any, bool]] = []
    for item in ranked:
        found = node_gpu(gpus, item.request, catalogs)
        if found is None:
            return None
        spec: GpuSpec = found.spec
        verdict = training_verdict_on(item.prepared, found.label, spec)
        sure = item.prepared.plan.exact
        if not verdict.fits and not sure:
            sure = floor_fits(item.prepared, spec) is False
        out.append((verdict, found, sure))
    return out


def training_filter(
    args: ExtenderArgs, catalogs: Catalogs, node_gpu: NodeGpuOf
) -> ExtenderFilterResult | None:
    """The extender's filter for a training pod; None when the pod runs no trainer. Raises
    `OverLimits` for more containers than the limit table allows."""
    ranked = _training_pod(args.pod, catalogs)
    if ranked is None:
        return None
    if args.nodes is None or not ranked:
        return ExtenderFilterResult(nodes=args.nodes, node_names=args.node_names)
    passing: list[Mapping[str, object]] = []
    failed: dict[str, str] = {}
    for node in args.nodes:
        checkpoint()
        name = node_name(node) or "?"
        verdicts = _node_verdicts(ranked, node, catalogs, node_gpu) or []
        failure = next((v for v, _, sure in verdicts if not v.fits and sure), None)
        if failure is None:
            passing.append(node)
        else:
            why = failure.reason.value if failure.reason else "not runnable"
            failed[name] = (
                f"GPU too small for this training job on {failure.gpu}: {why}: {failure.detail}"
            )
    names = (
        None if args.node_names is None else tuple(n for n in args.node_names if n not in failed)
    )
    return ExtenderFilterResult(
        nodes=tuple(passing), node_names=names, failed_and_unresolvable=failed
    )


def training_prioritize(
    args: ExtenderArgs, catalogs: Catalogs, node_gpu: NodeGpuOf, score: Score
) -> tuple[HostPriority, ...] | None:
    """Scores for a training pod, by the serving score (the tightest fit scores highest).
    Raises `OverLimits` for more containers than the limit table allows."""
    ranked = _training_pod(args.pod, catalogs)
    if ranked is None:
        return None
    if args.nodes is None or not ranked:
        return tuple(HostPriority(name, 0) for name in args.names)
    out: list[HostPriority] = []
    for node in args.nodes:
        checkpoint()
        name = node_name(node)
        if name is None:
            continue
        verdicts = _node_verdicts(ranked, node, catalogs, node_gpu) or []
        out.append(HostPriority(name, score([(v, gpu) for v, gpu, _ in verdicts])))
    return tuple(out)
