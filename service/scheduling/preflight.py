"""Pre-flight: read a command line, a Kubernetes object or production-stack values, and answer
each serving container with what was read, where from, the estimate and the verdict.

Input that names no serving engine, a model the service cannot name, or a flag value the
engine would refuse raises `WorkloadUnreadable` (a 422 problem document naming the field);
so does an object with more serving containers than the limit table allows
(service/schemas/limits.py). A GPU product the catalog does not know stays inside the result
(`problems`), next to the estimate without a fit. Each container's check starts with a
`checkpoint()`: past the request's deadline the work stops there.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.application.estimate_service import Catalogs
from service.application.metrics import Metrics
from service.estimator.cancel import checkpoint
from service.estimator.errors import InvalidRequest
from service.scheduling.check import Check, as_json, check_plan
from service.scheduling.plan import Plan, plan_command, plan_workload
from service.scheduling.training import training_preflight
from service.schemas.limits import LIMITS, OverLimits
from service.workloads.commands import parse_command
from service.workloads.kubernetes import ServingWorkload, WorkloadReading, read_workloads
from service.workloads.sources import ReadProblem, Sourced, WorkloadError

__all__ = [
    "ObjectOverLimits",
    "Overrides",
    "WorkloadUnreadable",
    "image_at",
    "plans_for_object",
    "preflight",
    "with_overrides",
]

_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


class WorkloadUnreadable(InvalidRequest):
    """The input holds no serving workload the estimator can size; names each field at fault."""

    def __init__(self, problems: Sequence[ReadProblem], prefix: str) -> None:
        self.problems = tuple(problems)
        first = problems[0]
        detail = "; ".join(p.message() for p in problems[:5])
        if len(problems) > 5:
            detail += f" (and {len(problems) - 5} more)"
        super().__init__(detail, field=_field(prefix, first.field))


class ObjectOverLimits(WorkloadUnreadable):
    """An object with more serving containers than the limit table allows."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            [ReadProblem("object", detail, "check fewer containers at a time")], "object"
        )
        self.detail_text = detail


def _field(prefix: str, source: str) -> str:
    if prefix == "object":
        return f"object.{source}" if source not in ("object", "body") else "object"
    return prefix


@dataclass(frozen=True)
class Overrides:
    """What the request adds where the workload does not say: what the estimate endpoint
    takes for the model (a catalog id or a posted config, a weight format) and the GPU."""

    model: str | None = None
    gpu: str | None = None
    gpu_memory_bytes: int | None = None
    gpu_count: int | None = None
    hf_config: Mapping[str, Any] | None = None
    weight_format: str | None = None


def with_overrides(plan: Plan, overrides: Overrides) -> Plan:
    """``plan`` with the request's model config and weight format: a posted ``hf_config``
    replaces the model the workload names (its name labels the config when it has none); a
    ``weight_format`` fills in where the workload's flags set none."""
    body = dict(plan.body)
    sources = dict(plan.sources)
    notes = list(plan.notes)
    if overrides.hf_config is not None:
        config = dict(overrides.hf_config)
        name = body.pop("model", None)
        if isinstance(name, str) and not config.get("_name_or_path"):
            config["_name_or_path"] = name  # what transformers records, for the summary
        body["hf_config"] = config
        sources.pop("model", None)
        sources["hf_config"] = "request hf_config"
        notes.append(f"the model{f' {name}' if name else ''} priced from the posted hf_config")
    if overrides.weight_format is not None:
        own = body.get("weight_format")
        if own is None:
            body["weight_format"] = overrides.weight_format
            sources["weight_format"] = "request weight_format"
        elif own != overrides.weight_format:
            notes.append(
                f"the request's weight_format {overrides.weight_format} is not used: the "
                f"workload sets {own} ({sources.get('weight_format', 'its flags')})"
            )
    if body == plan.body and notes == list(plan.notes):
        return plan
    return dataclasses.replace(plan, body=body, sources=sources, notes=tuple(dict.fromkeys(notes)))


def _at(obj: object, path: str) -> object:
    node = obj
    for key, index in _STEP.findall(path):
        if key:
            node = node.get(key) if isinstance(node, Mapping) else None
        else:
            position = int(index)
            node = node[position] if isinstance(node, list) and position < len(node) else None
        if node is None:
            return None
    return node


def image_at(obj: object, workload: ServingWorkload) -> Sourced[str] | None:
    """The container image of a workload (``image``, or the chart's ``repository:tag``)."""
    node = _at(obj, workload.path)
    if not isinstance(node, Mapping):
        return None
    image = node.get("image")
    if isinstance(image, str) and image:
        return Sourced(image, f"{workload.path}.image")
    repository, tag = node.get("repository"), node.get("tag")
    if isinstance(repository, str) and isinstance(tag, str):
        return Sourced(f"{repository}:{tag}", f"{workload.path}.repository and .tag")
    return None


def plans_for_object(
    obj: object, overrides: Overrides
) -> tuple[WorkloadReading, list[tuple[ServingWorkload, Plan]], list[ReadProblem]]:
    """Read an object into a plan per serving container; raises `WorkloadUnreadable` for an
    object that is no workload at all, `ObjectOverLimits` for one with more serving
    containers than the limit table allows."""
    reading = read_workloads(obj)
    if isinstance(reading, ReadProblem):
        raise WorkloadUnreadable([reading], "object")
    over = LIMITS.containers_problem(len(reading.workloads))
    if over is not None:
        raise ObjectOverLimits(over)
    plans: list[tuple[ServingWorkload, Plan]] = []
    problems = list(reading.problems)
    for workload in reading.workloads:
        plan, problem = plan_workload(
            workload,
            image=image_at(obj, workload),
            model_override=overrides.model,
            gpu=overrides.gpu,
            gpu_count=overrides.gpu_count,
        )
        if problem is not None:
            problems.append(problem)
        elif plan is not None:
            plans.append((workload, with_overrides(plan, overrides)))
    return reading, plans, problems


def _sourced(value: Sourced[Any] | None) -> dict[str, Any] | None:
    return None if value is None else {"value": value.value, "source": value.source}


def _problem_json(problem: ReadProblem) -> dict[str, Any]:
    return {"field": problem.field, "detail": problem.detail, "fix": problem.fix}


def result_json(check: Check, workload: ServingWorkload | None) -> dict[str, Any]:
    """One result of the pre-flight answer."""
    plan = check.plan
    estimate = check.estimate
    gpus = plan.gpu_request
    out: dict[str, Any] = {
        "container": workload.container if workload else None,
        "path": workload.path if workload else None,
        "role": workload.role if workload else "main",
        "engine": _sourced(plan.engine),
        "engine_version": _sourced(plan.version),
        "model": {
            "value": plan.model_given.given if plan.model_given else None,
            "source": plan.model.source if plan.model else None,
            # A posted config stands in for the model: no catalog entry answered.
            "catalog_id": plan.model.value if plan.model and "model" in plan.body else None,
        },
        "options": [o.as_json() for o in plan.options],
        "layout": {
            "tensor_parallel_size": plan.tensor,
            "pipeline_parallel_size": plan.pipeline,
            "data_parallel_size": plan.data,
        },
        "gpus": None
        if gpus is None
        else {"resource": gpus.resource, "count": gpus.count, "source": gpus.source},
        "gpus_per_group": _sourced(plan.requested_gpus),
        "replicas": _sourced(workload.replicas) if workload else None,
        "gpu": None
        if not plan.gpu_refs
        else {"values": list(plan.gpu_refs), "source": plan.gpu_source},
        "request": dict(check.request),
        "estimate": estimate,
        "fit": estimate.fit if estimate is not None else None,
        **as_json(check),
        "ignored_args": [{"text": text, "source": source} for text, source in plan.ignored],
        "notes": list(plan.notes),
        "problems": [_problem_json(p) for p in (*plan.problems, *check.problems)],
    }
    return out


def preflight(
    *,
    command: str | Sequence[str] | None,
    obj: Mapping[str, Any] | None,
    overrides: Overrides,
    catalogs: Catalogs,
    metrics: Metrics,
    files: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The pre-flight answer (JSON-ready, estimates as response models)."""
    # Training jobs (trainer command lines, PyTorchJob, TrainJob, ...): their own branch.
    try:
        training = training_preflight(
            command=command,
            obj=obj,
            files=files,
            model=overrides.model,
            gpu=overrides.gpu,
            gpu_memory_bytes=overrides.gpu_memory_bytes,
            gpu_count=overrides.gpu_count,
            catalogs=catalogs,
            metrics=metrics,
        )
    except OverLimits as exc:
        raise ObjectOverLimits(exc.detail) from None
    if isinstance(training, list):
        raise WorkloadUnreadable(training, "object" if obj is not None else "command")
    if training is not None:
        return training
    pairs: list[tuple[ServingWorkload | None, Plan]] = []
    others: list[dict[str, Any]] = []
    prefix = "object" if obj is not None else "command"
    if obj is not None:
        reading, found, problems = plans_for_object(obj, overrides)
        kind, name, namespace = reading.kind, reading.name, reading.namespace
        others = [{"path": o.path, "name": o.name, "reason": o.reason} for o in reading.others]
        pairs = list(found)
        if not pairs:
            problems = problems or [
                ReadProblem(
                    "object",
                    "no container runs vLLM or SGLang"
                    + (f" ({'; '.join(o['reason'] for o in others[:3])})" if others else ""),
                    "the service sizes vLLM and SGLang workloads",
                )
            ]
        if problems:
            raise WorkloadUnreadable(problems, prefix)
    else:
        assert command is not None
        kind, name, namespace = "command", None, None
        try:
            parsed = parse_command(command)
        except WorkloadError as exc:
            raise WorkloadUnreadable([exc.problem], prefix) from None
        plan, problem = plan_command(
            parsed,
            model_override=overrides.model,
            gpu=overrides.gpu,
            gpu_count=overrides.gpu_count,
        )
        if problem is not None or plan is None:
            raise WorkloadUnreadable([problem] if problem else [], prefix)
        pairs = [(None, with_overrides(plan, overrides))]
    results: list[dict[str, Any]] = []
    failures: list[ReadProblem] = []
    for workload, plan in pairs:
        checkpoint()
        check = check_plan(plan, catalogs, metrics, memory_bytes=overrides.gpu_memory_bytes)
        if isinstance(check, ReadProblem):
            failures.append(check)
            continue
        results.append(result_json(check, workload))
    if failures:
        raise WorkloadUnreadable(failures, prefix)
    return {
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "results": results,
        "others": others,
    }
