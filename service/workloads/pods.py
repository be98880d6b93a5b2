"""What every Kubernetes kind's reader shares: the workloads read, JSON access, and the
pod and container reading (``command`` + ``args`` after ``$(VAR)`` expansion from ``env``, the
GPU resources, the node selection), per the ``k8s.io/api`` core types.

:mod:`.kubernetes` dispatches on the object's kind; :mod:`.controllers` reads the serving
controllers' model specs (KServe, the vLLM production stack).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from service.workloads.commands import (
    EngineCommand,
    IgnoredArg,
    find_engine_command,
    parse_engine_args,
)
from service.workloads.engine_flags import Engine, OptionValue
from service.workloads.gpus import GpuRequest, ProductSelector, gpu_requests
from service.workloads.gpus import product_selector as read_product_selector
from service.workloads.models import ModelRef
from service.workloads.quantities import memory_bytes
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError

__all__ = [
    "Collector",
    "OtherContainer",
    "PodTemplate",
    "Role",
    "ServingWorkload",
    "WorkloadReading",
    "as_list",
    "as_map",
    "as_text",
    "container_env",
    "container_words",
    "first_gpu",
    "pod_gpus",
    "read_pod",
    "sourced_count",
    "string_map",
    "subtree",
]

Role = Literal["main", "leader", "worker", "prefill", "decode"]


@dataclass(frozen=True)
class ServingWorkload:
    """One serving container (or controller model spec) as a scheduler would size it."""

    kind: str
    name: str | None
    namespace: str | None
    role: Role
    """``main``; ``leader``/``worker`` in a LeaderWorkerSet; ``prefill`` and ``decode`` in a
    disaggregated LLMInferenceService (``spec.prefill`` set)."""
    path: str
    """JSON path of the container or model spec read."""
    container: str | None
    engine: Sourced[Engine]
    model: ModelRef | None
    command: EngineCommand
    """The engine invocation as read (``options``, ``ignored_args``, ``env``, ``notes``)."""
    gpus: GpuRequest | None
    """GPUs per pod for this container; None when it requests none."""
    pods_per_group: Sourced[int]
    """Pods that together run one copy of the model (LeaderWorkerSet size, KServe multi-node)."""
    gpus_per_group: Sourced[int] | None
    """GPUs of one group: this pod's plus the other pods' of the group; None without GPUs."""
    replicas: Sourced[int]
    """Copies of the group (Deployment replicas, LWS replicas, KServe minReplicas)."""
    gpu_product: ProductSelector | None
    """The GPU products the pod is pinned to; None when the manifest leaves them open."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """The object's own ``metadata`` labels and annotations (e.g. a webhook mode)."""
    notes: tuple[str, ...] = ()
    memory_limit: Sourced[int] | None = None
    """The container's ``resources.limits.memory`` in bytes: past it the kubelet kills it."""

    @property
    def options(self) -> Mapping[str, Sourced[OptionValue]]:
        return self.command.options

    @property
    def ignored_args(self) -> tuple[IgnoredArg, ...]:
        return self.command.ignored_args


@dataclass(frozen=True)
class OtherContainer:
    """A container that is not read as a serving workload, and why."""

    path: str
    name: str | None
    reason: str
    gpus: GpuRequest | None = None


@dataclass(frozen=True)
class WorkloadReading:
    """Everything read from one object."""

    kind: str
    name: str | None
    namespace: str | None
    workloads: tuple[ServingWorkload, ...]
    others: tuple[OtherContainer, ...] = ()
    problems: tuple[ReadProblem, ...] = ()
    """Containers that could not be read (a flag value the engine would refuse, a GPU count
    that is not a whole number), next to those that could."""

    @property
    def requests_gpus(self) -> bool:
        """Whether any container asks for a GPU (a webhook lets the others through untouched)."""
        return any(w.gpus is not None for w in self.workloads) or any(
            o.gpus is not None for o in self.others
        )


# ---------------------------------------------------------------------------- JSON access


def as_map(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def as_text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def sourced_count(value: object, source: str, default: int, default_source: str) -> Sourced[int]:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Sourced(value, source)
    if isinstance(value, str) and value.isdigit():
        return Sourced(int(value), source)
    return Sourced(default, default_source)


def string_map(value: object) -> dict[str, str]:
    return {k: v for k, v in as_map(value).items() if isinstance(v, str)}


# ---------------------------------------------------------------------------- containers

_K8S_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def container_env(
    container: Mapping[str, object],
    path: str,
    injected: Mapping[str, Sourced[str]] | None = None,
) -> tuple[dict[str, Sourced[str]], list[str]]:
    """The container's ``env`` values (earlier entries expand into later ones), and notes on
    the variables whose values live elsewhere (``valueFrom``, ``envFrom``).

    ``injected`` are the variables the controller puts first in every container's ``env``,
    replacing the container's own entries of the same name (LeaderWorkerSet's
    ``AddLWSVariables``, kubernetes-sigs/lws ``pkg/utils/pod/pod_utils.go``; AIBrix's
    ``injectContainerEnvVars`` and PodSet built-ins)."""
    env: dict[str, Sourced[str]] = dict(injected or {})
    notes: list[str] = []
    for index, entry in enumerate(as_list(container.get("env"))):
        item = as_map(entry)
        name = as_text(item.get("name"))
        if name is None:
            continue
        if injected and name in injected:
            notes.append(f"env {name} at {path}.env[{index}] is replaced by the controller's")
            continue
        value = as_text(item.get("value"))
        if value is not None:
            expanded, _ = _expand_k8s(value, env)
            env[name] = Sourced(expanded, f"{path}.env[{index}].value")
        elif "valueFrom" in item:
            notes.append(f"env {name} comes from {path}.env[{index}].valueFrom and is not read")
    if as_list(container.get("envFrom")):
        notes.append(f"variables from {path}.envFrom are not read")
    return env, notes


def _expand_k8s(text: str, env: Mapping[str, Sourced[str]]) -> tuple[str, list[str]]:
    """Kubernetes' ``$(VAR)`` expansion of command, args and env values; unknown refs stay."""
    used: list[str] = []

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        if name in env:
            used.append(name)
            return env[name].value
        return match.group(0)

    return _K8S_REF.sub(replace, text), used


def container_words(
    container: Mapping[str, object], path: str, field_name: str, env: Mapping[str, Sourced[str]]
) -> list[Token]:
    out: list[Token] = []
    for index, raw in enumerate(as_list(container.get(field_name))):
        if not isinstance(raw, str | int | float) or isinstance(raw, bool):
            continue
        text, used = _expand_k8s(str(raw), env)
        source = f"{path}.{field_name}[{index}]"
        if used:
            source += " (" + ", ".join(f"$({n}) from {env[n].source}" for n in used) + ")"
        out.append(Token(text, source))
    return out


# vLLM's published images (vllm/vllm-openai, rocm/vllm, …-vllm-cuda-…): args alone run vLLM.
_VLLM_IMAGE = re.compile(r"(^|/)vllm[-/]openai|(^|/)vllm(-[a-z0-9]+)*(:|@|$)", re.IGNORECASE)


@dataclass(frozen=True)
class PodTemplate:
    """A pod template to read, with what the enclosing object says about it."""

    kind: str
    role: Role
    path: str
    """JSON path of the pod spec."""
    spec: Mapping[str, object]
    replicas: Sourced[int]
    pods_per_group: Sourced[int]
    other_pods_gpus: int = 0
    """GPUs of the group's other pods (LWS workers, KServe multi-node workers)."""
    injected_env: Mapping[str, Sourced[str]] = field(default_factory=dict)
    """Variables the controller sets in every container of the pod (``LWS_GROUP_SIZE``, ...),
    with the values the object gives them."""


@dataclass
class Collector:
    """The workloads, other containers and problems read from one object so far."""

    kind: str
    name: str | None
    namespace: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    workloads: list[ServingWorkload] = field(default_factory=list)
    others: list[OtherContainer] = field(default_factory=list)
    problems: list[ReadProblem] = field(default_factory=list)

    def reading(self) -> WorkloadReading:
        return WorkloadReading(
            self.kind,
            self.name,
            self.namespace,
            tuple(self.workloads),
            tuple(self.others),
            tuple(self.problems),
        )

    def add(
        self,
        pod: PodTemplate,
        *,
        path: str,
        container: str | None,
        command: EngineCommand,
        engine_source: str,
        gpus: GpuRequest | None,
        model: ModelRef | None = None,
        product: ProductSelector | None = None,
        notes: Sequence[str] = (),
        memory_limit: Sourced[int] | None = None,
    ) -> None:
        per_pod = gpus.count if gpus is not None else 0
        group = per_pod + pod.other_pods_gpus
        group_gpus = None
        if group:
            group_gpus = Sourced(
                group,
                f"{gpus.source if gpus else 'no GPU in this pod'}"
                + (
                    f" + {pod.other_pods_gpus} in the group's other pods"
                    if pod.other_pods_gpus
                    else ""
                ),
            )
        self.workloads.append(
            ServingWorkload(
                kind=self.kind,
                name=self.name,
                namespace=self.namespace,
                role=pod.role,
                path=path,
                container=container,
                engine=Sourced(command.engine, engine_source),
                model=model if model is not None else command.model,
                command=command,
                gpus=gpus,
                pods_per_group=pod.pods_per_group,
                gpus_per_group=group_gpus,
                replicas=pod.replicas,
                gpu_product=product
                if product is not None
                else read_product_selector(pod.spec, pod.path),
                labels=self.labels,
                annotations=self.annotations,
                memory_limit=memory_limit,
                notes=tuple(notes) + command.notes,
            )
        )


def pod_gpus(spec: Mapping[str, object], path: str) -> int:
    """Whole GPUs (or slices) one pod of this spec requests, over all its containers."""
    total = 0
    for index, container in enumerate(as_list(spec.get("containers"))):
        requests, _ = gpu_requests(
            as_map(container).get("resources"), f"{path}.containers[{index}].resources"
        )
        total += sum(r.count for r in requests)
    return total


def first_gpu(
    resources: object, path: str, problems: list[ReadProblem]
) -> tuple[GpuRequest | None, list[str]]:
    requests, found_problems = gpu_requests(resources, path)
    problems.extend(found_problems)
    notes = []
    if len(requests) > 1:
        names = ", ".join(r.resource for r in requests)
        notes.append(f"the container requests several GPU resources ({names}); the first is read")
    return (requests[0] if requests else None), notes


def read_pod(out: Collector, pod: PodTemplate) -> None:
    """Read each container of a pod spec."""
    containers = as_list(pod.spec.get("containers"))
    if not containers:
        out.problems.append(ReadProblem(f"{pod.path}.containers", "the pod spec has no containers"))
        return
    for index, raw in enumerate(containers):
        container = as_map(raw)
        path = f"{pod.path}.containers[{index}]"
        name = as_text(container.get("name"))
        gpus, gpu_notes = first_gpu(container.get("resources"), f"{path}.resources", out.problems)
        env, env_notes = container_env(container, path, pod.injected_env)
        command_words = container_words(container, path, "command", env)
        arg_words = container_words(container, path, "args", env)
        try:
            command = find_engine_command(command_words + arg_words, env)
            engine_source = command.entrypoint_source if command else ""
            if command is None and not command_words and arg_words:
                image = as_text(container.get("image")) or ""
                if _VLLM_IMAGE.search(image):
                    # args alone follow the image's entrypoint, which for vLLM's images starts
                    # the OpenAI server (vllm serve, which also takes the model first).
                    engine_source = f"{path}.image ({image}: its entrypoint runs vLLM)"
                    command = parse_engine_args(
                        "vllm",
                        arg_words,
                        entrypoint="image entrypoint",
                        entrypoint_source=engine_source,
                        env=env,
                        positional_model="first",
                    )
        except WorkloadError as exc:
            out.problems.append(exc.problem)
            continue
        if command is None:
            reason = (
                "runs no vLLM or SGLang" if (command_words or arg_words) else "gives no command"
            )
            out.others.append(OtherContainer(path, name, reason, gpus))
            continue
        notes = gpu_notes + env_notes
        if gpus is None:
            notes.append("the container requests no GPU")
        out.add(
            pod,
            path=path,
            container=name,
            command=command,
            engine_source=engine_source,
            gpus=gpus,
            notes=notes,
            memory_limit=container_memory_limit(container, path),
        )


def container_memory_limit(container: Mapping[str, object], path: str) -> Sourced[int] | None:
    """A container's ``resources.limits.memory`` in bytes (None: no limit, or not a
    quantity)."""
    raw = as_map(as_map(container.get("resources")).get("limits")).get("memory")
    found = memory_bytes(raw)
    return None if found is None else Sourced(found, f"{path}.resources.limits.memory")


def subtree(obj: Mapping[str, object], path: str) -> Mapping[str, object] | None:
    node: object = obj
    for key in path.split("."):
        node = as_map(node).get(key)
    return node if isinstance(node, Mapping) else None
