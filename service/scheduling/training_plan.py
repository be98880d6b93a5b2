"""A training job as the fine-tune estimate it stands for: the body, where each field was read,
the world size, and the body at the floor of what is not priced.

`plan_training` turns one `TrainingCommand` (from a command line or a Kubernetes object) into
the body of ``POST /v1/estimate/finetune`` that asks what one rank of the job holds at its
peak: the fields the trainer sets (`service.workloads.training`), ``gpu_count`` the world
size (processes per node × nodes; the GPUs of one node for hybrid sharding), and the pinned
GPU. The body stays plain JSON so a caller can post it back and get the same bytes. A value
the model decides (peft's default LoRA targets, a dtype ``auto``) is resolved once the model
is known, against the catalog.

The floor body replaces every unpriced field by its floor; it exists only when every unpriced
field has one and no unpriced option may lower the need. A job is refused (admission ``deny``)
only when even the floor body does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from service.application.estimate_service import Catalogs
from service.application.resolve import resolve_model
from service.estimator.errors import EstimatorError
from service.schemas.estimates import FinetuneRequestBody
from service.workloads.gpus import GpuRequest, mig_profile_nvml_name
from service.workloads.models import ModelRef
from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.kinds import TrainingWorkload
from service.workloads.training.rules import dtype_name
from service.workloads.training.settings import (
    MISSING,
    ByModel,
    Setting,
    TrainingCommand,
    Value,
)

__all__ = ["TrainingPlan", "plan_training"]


@dataclass(frozen=True)
class TrainingPlan:
    """What to ask the fine-tune estimator for one trainer container, and why."""

    command: TrainingCommand
    workload: TrainingWorkload | None
    model: Sourced[str]
    body: Mapping[str, Any]
    """The ``/v1/estimate/finetune`` body without the GPU (see `with_gpu`)."""
    sources: Mapping[str, str]
    settings: Mapping[str, Setting]
    """The fields as read, with values the model decides resolved."""
    floor_body: Mapping[str, Any] | None
    world: int
    nproc_per_node: Sourced[int]
    nnodes: Sourced[int]
    gpus_per_pod: Sourced[int] | None
    gpu_request: GpuRequest | None
    gpu_refs: tuple[str, ...]
    gpu_source: str | None
    notes: tuple[str, ...] = ()
    problems: tuple[ReadProblem, ...] = ()
    """Why the job would not start for reasons other than memory."""
    unpriced: tuple[str, ...] = field(default_factory=tuple)
    """What is not priced exactly (field or option names)."""

    @property
    def exact(self) -> bool:
        return not self.unpriced

    def with_gpu(
        self, ref: str | None = None, memory_bytes: int | None = None, *, floor: bool = False
    ) -> dict[str, Any]:
        body = dict(self.floor_body if floor and self.floor_body is not None else self.body)
        if ref is not None:
            body["gpu"] = ref
        elif memory_bytes is not None:
            body["gpu_memory_bytes"] = memory_bytes
        return body


def _json(value: Value) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _put(body: dict[str, Any], name: str, value: Any) -> None:
    if "." in name:
        head, tail = name.split(".", 1)
        body.setdefault(head, {})[tail] = value
    else:
        body[name] = value


def _resolve(
    settings: Mapping[str, Setting], model_type: str, dtype: str, problems: list[ReadProblem]
) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for name, setting in settings.items():
        if isinstance(setting.value, ByModel):
            try:
                value = setting.value.resolve(model_type, dtype)
            except ValueError as exc:
                problems.append(ReadProblem(setting.source, str(exc)))
                continue
            note = f"{setting.value.describe}: {_shown(value)}"
            out[name] = Setting(value, setting.source, setting.priced, note, setting.floor)
        else:
            out[name] = setting
    return out


def _shown(value: Value) -> str:
    return ", ".join(value) if isinstance(value, tuple) else str(value)


def _gpu_refs(
    request: GpuRequest | None, workload: TrainingWorkload | None, override: str | None
) -> tuple[tuple[str, ...], str | None]:
    selector = workload.gpu_product if workload is not None else None
    products = selector.values if selector is not None else ()
    if products:
        if request is not None and request.mig_profile is not None:
            profile = mig_profile_nvml_name(request.mig_profile)
            return tuple(f"{p}-MIG-{profile}" for p in products), selector.source  # type: ignore[union-attr]
        return products, selector.source  # type: ignore[union-attr]
    if override is not None:
        return (override,), "request gpu"
    return (), None


def plan_training(
    command: TrainingCommand,
    catalogs: Catalogs,
    *,
    workload: TrainingWorkload | None = None,
    model_override: str | None = None,
    gpu: str | None = None,
    gpu_count: int | None = None,
) -> TrainingPlan | ReadProblem:
    """The plan of one trainer invocation; a problem when its model cannot be named or its
    settings are not a valid fine-tune request."""
    given = command.model
    if model_override is not None:
        model = Sourced(model_override, "request model")
    elif given is not None and given.repo_id is not None:
        model = Sourced(given.repo_id, given.source)
    else:
        return _model_problem(given, command)
    problems: list[ReadProblem] = []
    notes: list[str] = list(command.notes)
    if workload is not None:
        notes += workload.notes

    # Processes: per node (one per visible GPU when the launcher says so) and nodes.
    request = workload.gpus if workload is not None else None
    per_pod: Sourced[int] | None = None
    if request is not None:
        per_pod = Sourced(request.count, request.source)
    elif gpu_count is not None:
        per_pod = Sourced(gpu_count, "request gpu_count")
    launch = command.launch
    if launch.nproc_per_node.value is None:
        if per_pod is not None:
            nproc = Sourced(per_pod.value, f"{launch.nproc_per_node.source} = {per_pod.source}")
        else:
            nproc = Sourced(1, f"{launch.nproc_per_node.source}; one GPU assumed (give gpu_count)")
    else:
        nproc = Sourced(launch.nproc_per_node.value, launch.nproc_per_node.source)
    nodes = launch.nnodes
    if per_pod is not None and per_pod.value < nproc.value:
        problems.append(
            ReadProblem(
                per_pod.source,
                f"{launch.name} starts {nproc.value} processes per node ({nproc.source}) but "
                f"the pod has {per_pod.value} GPU(s): ranks would share or miss a GPU",
                f"request {nproc.value} GPUs per pod or start {per_pod.value} processes",
            )
        )
    elif per_pod is not None and per_pod.value > nproc.value:
        notes.append(
            f"{per_pod.value} GPUs per pod, {nproc.value} process(es) per node: "
            f"{per_pod.value - nproc.value} GPU(s) stay idle"
        )
    world = nproc.value * nodes.value
    shard_over = command.extra.get("shard_over")
    gpus_for_estimate = world
    if shard_over is not None and shard_over.value == "node":
        gpus_for_estimate = nproc.value
        notes.append(f"hybrid sharding ({shard_over.source}): shards span one node's GPUs")

    # The model decides some values: resolve them against the catalog.
    raw: dict[str, Any] = {"model": model.value}
    try:
        selector = FinetuneRequestBody.model_validate(raw)
        spec = resolve_model(selector, catalogs.models, catalogs.store)
    except (ValidationError, EstimatorError) as exc:
        detail = exc.detail if isinstance(exc, EstimatorError) else str(exc)
        return ReadProblem(model.source, detail, "give the Hugging Face id as `model`")
    arch = spec.architecture
    model_type = arch.model_type if arch is not None else ""
    dtype = dtype_name(arch.dtype if arch is not None else spec.dtype) or "bf16"
    settings = _resolve(command.settings, model_type, dtype, problems)
    settings = _single_gpu_sharding(settings, gpus_for_estimate, notes)

    body: dict[str, Any] = {"model": model.value, "gpu_count": gpus_for_estimate}
    sources: dict[str, str] = {
        "model": model.source,
        "gpu_count": f"{nproc.source} × {nodes.source}"
        if gpus_for_estimate == world
        else nproc.source,
    }
    floor: dict[str, Any] | None = {"model": model.value, "gpu_count": gpus_for_estimate}
    unpriced: list[str] = []
    for name, setting in settings.items():
        if setting.value is None:
            continue
        _put(body, name, _json(setting.value))  # type: ignore[arg-type]
        sources[name] = setting.source
        if setting.priced:
            if floor is not None:
                _put(floor, name, _json(setting.value))  # type: ignore[arg-type]
            continue
        unpriced.append(name)
        if setting.floor is MISSING or floor is None:
            floor = None
        else:
            _put(floor, name, _json(setting.floor))  # type: ignore[arg-type]
    for option in command.options:
        if not option.priced:
            unpriced.append(option.name)
            if option.lowers:
                floor = None
    for use in command.configs:
        if use.read_from is None:
            unpriced.append(use.path)
            notes.append(f"{use.role} file {use.path} ({use.named_at}) is not in the request")
    refs, gpu_source = _gpu_refs(request, workload, gpu)
    return TrainingPlan(
        command=command,
        workload=workload,
        model=model,
        body=body,
        sources=sources,
        settings=settings,
        floor_body=floor,
        world=world,
        nproc_per_node=nproc,
        nnodes=nodes,
        gpus_per_pod=per_pod,
        gpu_request=request,
        gpu_refs=refs,
        gpu_source=gpu_source,
        notes=tuple(dict.fromkeys(notes)),
        problems=tuple(problems),
        unpriced=tuple(dict.fromkeys(unpriced)),
    )


def _single_gpu_sharding(
    settings: dict[str, Setting], gpus: int, notes: list[str]
) -> dict[str, Setting]:
    """ZeRO or FSDP over one GPU without offload partitions nothing: priced as stage 0."""
    stage = settings.get("zero_stage")
    offload = any(
        settings.get(name) is not None and settings[name].value is True
        for name in ("offload_optimizer", "offload_parameters")
    )
    if gpus > 1 or stage is None or stage.value in (0, None) or offload:
        return settings
    out = dict(settings)
    out["zero_stage"] = Setting(
        0,
        stage.source,
        stage.priced,
        "one GPU: ZeRO/FSDP has nothing to partition, priced as stage 0",
        stage.floor,
    )
    out["sharding_implementation"] = Setting("deepspeed", stage.source)
    notes.append("sharding over one GPU partitions nothing: priced without it")
    return out


def _model_problem(given: ModelRef | None, command: TrainingCommand) -> ReadProblem:
    if given is None:
        return ReadProblem(
            command.entrypoint_source,
            f"the {command.trainer} job names no model the request carries",
            "give the model in the command or its config (post the config in `files`), or "
            "`model` in the request",
        )
    return ReadProblem(
        given.source,
        f"the model is given as {given.given!r} ({given.scheme}), which does not say which "
        "model it is",
        "give the Hugging Face id as `model` in the request",
    )
