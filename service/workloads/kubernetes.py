"""Read Kubernetes objects into serving workloads: engine, model, flags, GPUs, replicas.

One `ServingWorkload` per serving container: a container whose command and args run vLLM or
SGLang, or a model spec a serving controller turns into one (KServe, the vLLM production-stack
chart). Other containers are listed with the reason they were not read. Field names follow the
published API types:

- core/apps/batch: ``k8s.io/api`` (Pod ``spec``; Deployment, StatefulSet, ReplicaSet
  ``spec.replicas`` and ``spec.template``; Job ``spec.parallelism``; CronJob
  ``spec.jobTemplate``). Kubernetes runs ``command`` + ``args`` as one argv (``args`` alone
  follow the image's entrypoint) after expanding ``$(VAR)`` from the container's ``env``
  (``$$`` escapes a ``$``).
- LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``, kubernetes-sigs/lws
  ``api/leaderworkerset/v1/leaderworkerset_types.go``): ``spec.replicas`` groups, each of
  ``spec.leaderWorkerTemplate.size`` pods (default 1), one leader from ``leaderTemplate``
  (defaulting to ``workerTemplate``) and size-1 workers from ``workerTemplate``.
- KServe InferenceService (``serving.kserve.io/v1beta1``, kserve/kserve
  ``pkg/apis/serving/v1beta1/predictor.go``): ``spec.predictor.model`` with ``modelFormat``,
  ``storageUri`` and the container fields inline (``args``, ``resources``);
  ``spec.predictor.containers`` for a custom predictor; the pod fields (``nodeSelector``,
  ``affinity``) inline in the predictor; ``minReplicas``; ``workerSpec`` with
  ``tensorParallelSize`` and ``pipelineParallelSize`` for multi-node serving. The
  ``huggingface`` model format runs KServe's Hugging Face server, which serves with vLLM
  unless ``--backend=huggingface`` is given.
- KServe LLMInferenceService (``serving.kserve.io/v1alpha1``/``v1alpha2``, kserve/kserve
  ``pkg/apis/serving/v1alpha2/llm_inference_service_types.go``): ``spec.model.uri``, the
  workload fields inline (``replicas``, ``parallelism.{tensor,pipeline,data,expert}``,
  ``template`` for the main pod, ``worker`` for multi-node) and ``spec.prefill`` for the
  prefill side of disaggregated serving. It runs vLLM.
- The vLLM production-stack Helm values (vllm-project/production-stack
  ``helm/templates/deployment-vllm-multi.yaml`` and ``_helpers.tpl``): one Deployment per
  ``servingEngineSpec.modelSpec[]`` running ``vllm serve <modelURL>`` with flags from
  ``vllmConfig`` and ``vllmConfig.extraArgs``, ``requestGPU`` of ``requestGPUType`` (default
  ``nvidia.com/gpu``), ``replicaCount`` and ``nodeSelectorTerms``.

`read_workloads` never raises: input it cannot read as a workload gives a `ReadProblem`, and a
container with a flag value the engine would refuse gives a problem in the reading, next to
the containers that could be read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from service.workloads.commands import (
    EngineCommand,
    IgnoredArg,
    find_engine_command,
    parse_engine_args,
)
from service.workloads.engine_flags import Engine, OptionValue
from service.workloads.gpus import GpuRequest, ProductSelector, gpu_request, gpu_requests
from service.workloads.gpus import product_selector as read_product_selector
from service.workloads.models import ModelRef, model_ref
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError

__all__ = [
    "OtherContainer",
    "ServingWorkload",
    "WorkloadReading",
    "read_workloads",
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


def _map(value: object) -> Mapping[str, object]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object, source: str, default: int, default_source: str) -> Sourced[int]:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Sourced(value, source)
    if isinstance(value, str) and value.isdigit():
        return Sourced(int(value), source)
    return Sourced(default, default_source)


def _strings(value: object) -> dict[str, str]:
    return {k: v for k, v in _map(value).items() if isinstance(v, str)}


# ---------------------------------------------------------------------------- containers

_K8S_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _container_env(
    container: Mapping[str, object], path: str
) -> tuple[dict[str, Sourced[str]], list[str]]:
    """The container's ``env`` values (earlier entries expand into later ones), and notes on
    the variables whose values live elsewhere (``valueFrom``, ``envFrom``)."""
    env: dict[str, Sourced[str]] = {}
    notes: list[str] = []
    for index, entry in enumerate(_list(container.get("env"))):
        item = _map(entry)
        name = _text(item.get("name"))
        if name is None:
            continue
        value = _text(item.get("value"))
        if value is not None:
            expanded, _ = _expand_k8s(value, env)
            env[name] = Sourced(expanded, f"{path}.env[{index}].value")
        elif "valueFrom" in item:
            notes.append(f"env {name} comes from {path}.env[{index}].valueFrom and is not read")
    if _list(container.get("envFrom")):
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


def _words(
    container: Mapping[str, object], path: str, field_name: str, env: Mapping[str, Sourced[str]]
) -> list[Token]:
    out: list[Token] = []
    for index, raw in enumerate(_list(container.get(field_name))):
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
class _Pod:
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


@dataclass
class _Collector:
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
        pod: _Pod,
        *,
        path: str,
        container: str | None,
        command: EngineCommand,
        engine_source: str,
        gpus: GpuRequest | None,
        model: ModelRef | None = None,
        product: ProductSelector | None = None,
        notes: Sequence[str] = (),
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
                notes=tuple(notes) + command.notes,
            )
        )


def _pod_gpus(spec: Mapping[str, object], path: str) -> int:
    """Whole GPUs (or slices) one pod of this spec requests, over all its containers."""
    total = 0
    for index, container in enumerate(_list(spec.get("containers"))):
        requests, _ = gpu_requests(
            _map(container).get("resources"), f"{path}.containers[{index}].resources"
        )
        total += sum(r.count for r in requests)
    return total


def _first_gpu(
    resources: object, path: str, problems: list[ReadProblem]
) -> tuple[GpuRequest | None, list[str]]:
    requests, found_problems = gpu_requests(resources, path)
    problems.extend(found_problems)
    notes = []
    if len(requests) > 1:
        names = ", ".join(r.resource for r in requests)
        notes.append(f"the container requests several GPU resources ({names}); the first is read")
    return (requests[0] if requests else None), notes


def _read_pod(out: _Collector, pod: _Pod) -> None:
    """Read each container of a pod spec."""
    containers = _list(pod.spec.get("containers"))
    if not containers:
        out.problems.append(ReadProblem(f"{pod.path}.containers", "the pod spec has no containers"))
        return
    for index, raw in enumerate(containers):
        container = _map(raw)
        path = f"{pod.path}.containers[{index}]"
        name = _text(container.get("name"))
        gpus, gpu_notes = _first_gpu(container.get("resources"), f"{path}.resources", out.problems)
        env, env_notes = _container_env(container, path)
        command_words = _words(container, path, "command", env)
        arg_words = _words(container, path, "args", env)
        try:
            command = find_engine_command(command_words + arg_words, env)
            engine_source = command.entrypoint_source if command else ""
            if command is None and not command_words and arg_words:
                image = _text(container.get("image")) or ""
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
        )


# ---------------------------------------------------------------------------- kinds

_DEFAULT_ONE = "default (Kubernetes: 1)"


def _read_pod_object(obj: Mapping[str, object], out: _Collector) -> ReadProblem | None:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return ReadProblem("spec", "a Pod needs a spec", "send the whole Pod object")
    one = Sourced(1, "a Pod is one replica")
    _read_pod(out, _Pod(out.kind, "main", "spec", spec, one, Sourced(1, "a Pod")))
    return None


def _template(obj: Mapping[str, object], path: str) -> Mapping[str, object] | None:
    node: object = obj
    for key in path.split("."):
        node = _map(node).get(key)
    return node if isinstance(node, Mapping) else None


def _replicated(
    replicas_key: str, template_path: str
) -> Callable[[Mapping[str, object], _Collector], ReadProblem | None]:
    def read(obj: Mapping[str, object], out: _Collector) -> ReadProblem | None:
        spec = _template(obj, template_path)
        if spec is None:
            return ReadProblem(template_path, f"a {out.kind} needs a pod template here")
        parent = _template(obj, replicas_key.rsplit(".", 1)[0]) or {}
        replicas = _int(parent.get(replicas_key.rsplit(".", 1)[1]), replicas_key, 1, _DEFAULT_ONE)
        _read_pod(
            out,
            _Pod(
                out.kind, "main", template_path, spec, replicas, Sourced(1, "one pod per replica")
            ),
        )
        return None

    return read


def _read_lws(obj: Mapping[str, object], out: _Collector) -> ReadProblem | None:
    base = "spec.leaderWorkerTemplate"
    lwt = _template(obj, base)
    if lwt is None:
        return ReadProblem(base, "a LeaderWorkerSet needs spec.leaderWorkerTemplate")
    worker = _template(lwt, "workerTemplate.spec")
    if worker is None:
        return ReadProblem(f"{base}.workerTemplate.spec", "the worker pod template is missing")
    leader = _template(lwt, "leaderTemplate.spec")
    leader_path = (
        f"{base}.leaderTemplate.spec" if leader is not None else f"{base}.workerTemplate.spec"
    )
    size = _int(lwt.get("size"), f"{base}.size", 1, "default (LeaderWorkerSet: 1)")
    replicas = _int(
        _map(obj.get("spec")).get("replicas"), "spec.replicas", 1, "default (LeaderWorkerSet: 1)"
    )
    worker_path = f"{base}.workerTemplate.spec"
    worker_gpus = _pod_gpus(worker, worker_path)
    leader_spec = leader if leader is not None else worker
    leader_gpus = _pod_gpus(leader_spec, leader_path)
    workers = max(size.value - 1, 0)
    _read_pod(
        out,
        _Pod(out.kind, "leader", leader_path, leader_spec, replicas, size, workers * worker_gpus),
    )
    if leader is not None and workers:
        _read_pod(
            out,
            _Pod(
                out.kind,
                "worker",
                worker_path,
                worker,
                replicas,
                size,
                leader_gpus + (workers - 1) * worker_gpus,
            ),
        )
    return None


def _kserve_engine(model: Mapping[str, object]) -> tuple[Engine | None, str]:
    fmt = _text(_map(model.get("modelFormat")).get("name")) or ""
    name = fmt.lower()
    if name in ("huggingface", "vllm"):
        return "vllm", fmt
    if name == "sglang":
        return "sglang", fmt
    return None, fmt


def _read_inference_service(obj: Mapping[str, object], out: _Collector) -> ReadProblem | None:
    predictor = _template(obj, "spec.predictor")
    if predictor is None:
        return ReadProblem("spec.predictor", "an InferenceService needs spec.predictor")
    replicas = _int(
        predictor.get("minReplicas"), "spec.predictor.minReplicas", 1, "default (KServe: 1)"
    )
    worker = _map(predictor.get("workerSpec"))
    pods = Sourced(1, "one pod per replica")
    other_gpus = 0
    extra: list[Token] = []
    wpath = "spec.predictor.workerSpec"
    if worker:
        pp = _int(
            worker.get("pipelineParallelSize"),
            f"{wpath}.pipelineParallelSize",
            1,
            "default (KServe: 1)",
        )
        pods = Sourced(pp.value, f"{pp.source} (one pod per pipeline stage)")
        other_gpus = max(pp.value - 1, 0) * _pod_gpus(worker, wpath)
        if "pipelineParallelSize" in worker:
            extra += [Token("--pipeline-parallel-size", pp.source), Token(str(pp.value), pp.source)]
        tp = worker.get("tensorParallelSize")
        if isinstance(tp, int) and not isinstance(tp, bool):
            src = f"{wpath}.tensorParallelSize"
            extra += [Token("--tensor-parallel-size", src), Token(str(tp), src)]
    pod = _Pod(out.kind, "main", "spec.predictor", predictor, replicas, pods, other_gpus)
    model = _map(predictor.get("model"))
    if not model:
        if _list(predictor.get("containers")):
            _read_pod(out, pod)
            return None
        return ReadProblem(
            "spec.predictor.model",
            "the predictor has neither a model spec nor containers",
            "give spec.predictor.model (modelFormat, storageUri, args, resources)",
        )
    path = "spec.predictor.model"
    engine, fmt = _kserve_engine(model)
    gpus, gpu_notes = _first_gpu(model.get("resources"), f"{path}.resources", out.problems)
    env, env_notes = _container_env(model, path)
    words = _words(model, path, "command", env) + _words(model, path, "args", env)
    backend = next(
        (w for w in words if w.text in ("--backend=huggingface", "--backend=transformers")), None
    )
    if engine is None or backend is not None:
        why = (
            f"{backend.source} selects the transformers backend"
            if backend is not None
            else f"model format {fmt!r} is not served by vLLM or SGLang"
        )
        out.others.append(OtherContainer(path, "kserve-container", why, gpus))
        return None
    try:
        command = find_engine_command(words, env) if _list(model.get("command")) else None
        if command is None:
            command = parse_engine_args(
                engine,
                [w for w in words if not w.text.startswith("--backend")] + extra,
                entrypoint=f"KServe {fmt} runtime",
                entrypoint_source=f"{path}.modelFormat.name",
                env=env,
            )
    except WorkloadError as exc:
        out.problems.append(exc.problem)
        return None
    ref = _kserve_model(model, path, command)
    notes = gpu_notes + env_notes
    if gpus is None:
        notes.append("the model spec requests no GPU (the ServingRuntime may add one)")
    out.add(
        pod,
        path=path,
        container="kserve-container",
        command=command,
        engine_source=f"{path}.modelFormat.name ({fmt})",
        gpus=gpus,
        model=ref,
        notes=notes,
    )
    return None


def _kserve_model(
    model: Mapping[str, object], path: str, command: EngineCommand
) -> ModelRef | None:
    """``storageUri`` names the model; else the Hugging Face server's ``--model_id``."""
    uri = _text(model.get("storageUri"))
    if uri:
        return model_ref(uri, f"{path}.storageUri")
    for arg in command.ignored_args:
        flag, _, inline = arg.words[0].partition("=")
        if flag in ("--model_id", "--model-id"):
            value = inline or (arg.words[1] if len(arg.words) > 1 else "")
            if value:
                return model_ref(value, arg.source)
    return command.model


_PARALLELISM = (
    ("tensor", "--tensor-parallel-size"),
    ("pipeline", "--pipeline-parallel-size"),
    ("data", "--data-parallel-size"),
)


def _read_llm_inference_service(obj: Mapping[str, object], out: _Collector) -> ReadProblem | None:
    spec = _template(obj, "spec")
    if spec is None:
        return ReadProblem("spec", "an LLMInferenceService needs a spec")
    uri = _text(_map(spec.get("model")).get("uri"))
    if not uri:
        return ReadProblem("spec.model.uri", "the model URI is missing", "e.g. hf://org/model")
    model = model_ref(uri, "spec.model.uri")
    _read_llm_workload(out, spec, "spec", model, "decode" if spec.get("prefill") else "main")
    prefill = _map(spec.get("prefill"))
    if prefill:
        _read_llm_workload(out, prefill, "spec.prefill", model, "prefill")
    return None


def _read_llm_workload(
    out: _Collector, workload: Mapping[str, object], path: str, model: ModelRef, role: Role
) -> None:
    replicas = _int(workload.get("replicas"), f"{path}.replicas", 1, "default (KServe: 1)")
    parallelism = _map(workload.get("parallelism"))
    extra: list[Token] = []
    sizes: dict[str, int] = {}
    for key, flag in _PARALLELISM:
        value = parallelism.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            src = f"{path}.parallelism.{key}"
            extra += [Token(flag, src), Token(str(value), src)]
            sizes[key] = value
    if parallelism.get("expert") is True:
        extra.append(Token("--enable-expert-parallel", f"{path}.parallelism.expert"))
    template = _map(workload.get("template"))
    template_path = f"{path}.template"
    containers = [_map(c) for c in _list(template.get("containers"))]
    main_index = next(
        (i for i, c in enumerate(containers) if c.get("name") == "main"),
        0 if containers else None,
    )
    gpus: GpuRequest | None = None
    words: list[Token] = []
    env: dict[str, Sourced[str]] = {}
    notes: list[str] = []
    container_path = template_path
    if main_index is not None:
        main = containers[main_index]
        container_path = f"{template_path}.containers[{main_index}]"
        gpus, gpu_notes = _first_gpu(
            main.get("resources"), f"{container_path}.resources", out.problems
        )
        env, env_notes = _container_env(main, container_path)
        words = _words(main, container_path, "command", env) + _words(
            main, container_path, "args", env
        )
        notes += gpu_notes + env_notes
    else:
        notes.append(
            f"{template_path} gives no container: GPUs come from the LLMInferenceServiceConfig "
            "preset and are not in the object"
        )
    worker = _map(workload.get("worker"))
    pods = Sourced(1, "one pod per replica")
    other = 0
    if worker and gpus is not None and gpus.count:
        needed = 1
        for value in sizes.values():
            needed *= value
        count = max(1, -(-needed // gpus.count))
        pods = Sourced(
            count,
            f"{path}.parallelism ({needed} GPUs) / {gpus.count} GPUs per pod ({path}.worker set)",
        )
        other = (count - 1) * gpus.count
    elif worker:
        notes.append(f"{path}.worker is set but the pods per group cannot be derived")
    pod = _Pod(out.kind, role, template_path, template, replicas, pods, other)
    try:
        command = find_engine_command(words, env) if words else None
        if command is None:
            command = parse_engine_args(
                "vllm",
                words,
                entrypoint="KServe LLMInferenceService (vLLM)",
                entrypoint_source="kind LLMInferenceService",
                env=env,
            )
        if extra:
            # spec.parallelism is what the controller passes to vLLM; it comes last so it wins.
            merged = parse_engine_args(
                command.engine,
                extra,
                entrypoint=command.entrypoint,
                entrypoint_source=command.entrypoint_source,
            )
            command = EngineCommand(
                engine=command.engine,
                entrypoint=command.entrypoint,
                entrypoint_source=command.entrypoint_source,
                model=command.model,
                options={**command.options, **merged.options},
                ignored_args=command.ignored_args,
                env=command.env,
                notes=command.notes,
            )
    except WorkloadError as exc:
        out.problems.append(exc.problem)
        return
    if command.model is not None and command.model.scheme == "local":
        notes.append(f"the engine reads {command.model.given}, where {model.source} is downloaded")
    out.add(
        pod,
        path=container_path,
        container=_text(containers[main_index].get("name")) if main_index is not None else None,
        command=command,
        engine_source="kind LLMInferenceService (KServe runs vLLM)",
        gpus=gpus,
        model=model,
        notes=notes,
    )


# vllmConfig keys the production-stack chart turns into flags (deployment-vllm-multi.yaml).
_STACK_VALUE_FLAGS = (
    ("maxModelLen", "--max-model-len"),
    ("dtype", "--dtype"),
    ("tensorParallelSize", "--tensor-parallel-size"),
    ("maxNumSeqs", "--max-num-seqs"),
    ("gpuMemoryUtilization", "--gpu_memory_utilization"),
    ("maxLoras", "--max_loras"),
)
_STACK_SWITCHES = (
    ("enableChunkedPrefill", "--enable-chunked-prefill"),
    ("enablePrefixCaching", "--enable-prefix-caching"),
)


def _read_production_stack(obj: Mapping[str, object], out: _Collector) -> ReadProblem | None:
    engine_spec = _map(obj.get("servingEngineSpec"))
    specs = _list(engine_spec.get("modelSpec"))
    if not specs:
        return ReadProblem(
            "servingEngineSpec.modelSpec", "the values list no model", "give one modelSpec entry"
        )
    for index, raw in enumerate(specs):
        spec = _map(raw)
        path = f"servingEngineSpec.modelSpec[{index}]"
        url = _text(spec.get("modelURL"))
        if not url:
            out.problems.append(ReadProblem(f"{path}.modelURL", "the model URL is missing"))
            continue
        words = [
            Token("vllm", f"{path} (the chart runs vllm serve)"),
            Token("serve", f"{path} (the chart runs vllm serve)"),
            Token(url, f"{path}.modelURL"),
        ]
        if spec.get("enableLoRA") is True:
            words.append(Token("--enable-lora", f"{path}.enableLoRA"))
        config = _map(spec.get("vllmConfig"))
        cpath = f"{path}.vllmConfig"
        for key, flag in _STACK_SWITCHES:
            if key in config:
                on = config.get(key) is True
                words.append(Token(flag if on else "--no-" + flag[2:], f"{cpath}.{key}"))
        for key, flag in _STACK_VALUE_FLAGS:
            if key in config and config[key] is not None:
                words += [Token(flag, f"{cpath}.{key}"), Token(str(config[key]), f"{cpath}.{key}")]
        for k, arg in enumerate(_list(config.get("extraArgs"))):
            if isinstance(arg, str | int | float) and not isinstance(arg, bool):
                words.append(Token(str(arg), f"{cpath}.extraArgs[{k}]"))
        count = _int(spec.get("requestGPU"), f"{path}.requestGPU", 0, "not given")
        resource = _text(spec.get("requestGPUType")) or "nvidia.com/gpu"
        gpus = gpu_request(resource, count.value, count.source) if count.value else None
        notes = []
        if count.value and gpus is None:
            notes.append(
                f"{path}.requestGPUType {resource!r} is not a GPU resource this reader knows"
            )
        if "raySpec" in spec:
            notes.append(f"{path}.raySpec runs a multi-node Ray cluster; its pods are not counted")
        replicas = _int(spec.get("replicaCount"), f"{path}.replicaCount", 1, "default (chart: 1)")
        pod = _Pod(out.kind, "main", path, {}, replicas, Sourced(1, "one pod per replica"))
        product = read_product_selector(
            {},
            path,
            extra_terms=spec.get("nodeSelectorTerms"),
            extra_path=f"{path}.nodeSelectorTerms",
        )
        try:
            command = find_engine_command(words)
        except WorkloadError as exc:
            out.problems.append(exc.problem)
            continue
        assert command is not None  # the words start with vllm serve
        out.add(
            pod,
            path=path,
            container="vllm",
            command=command,
            engine_source=f"{path} (the production-stack chart runs vllm serve)",
            gpus=gpus,
            product=product,
            notes=notes,
        )
    return None


_Reader = Callable[[Mapping[str, object], _Collector], "ReadProblem | None"]

_READERS: dict[str, _Reader] = {
    "Pod": _read_pod_object,
    "Deployment": _replicated("spec.replicas", "spec.template.spec"),
    "StatefulSet": _replicated("spec.replicas", "spec.template.spec"),
    "ReplicaSet": _replicated("spec.replicas", "spec.template.spec"),
    "Job": _replicated("spec.parallelism", "spec.template.spec"),
    "CronJob": _replicated(
        "spec.jobTemplate.spec.parallelism", "spec.jobTemplate.spec.template.spec"
    ),
    "LeaderWorkerSet": _read_lws,
    "InferenceService": _read_inference_service,
    "LLMInferenceService": _read_llm_inference_service,
}
PRODUCTION_STACK_KIND = "vllm-production-stack values"


def read_workloads(obj: object) -> WorkloadReading | ReadProblem:
    """Read a Kubernetes object (or production-stack Helm values) into serving workloads.

    Never raises: what cannot be read as a workload gives a `ReadProblem` saying what is
    missing; a container that cannot be read gives a problem inside the `WorkloadReading`.
    """
    try:
        return _read(obj)
    except RecursionError:  # pragma: no cover - a pathological nesting depth
        return ReadProblem("object", "the object is nested too deeply to read")


def _read(obj: object) -> WorkloadReading | ReadProblem:
    if not isinstance(obj, Mapping):
        return ReadProblem("object", "expected a JSON object", "send a Kubernetes object")
    kind = _text(obj.get("kind"))
    metadata = _map(obj.get("metadata"))
    if kind is None and "servingEngineSpec" in obj:
        kind = PRODUCTION_STACK_KIND
        reader: _Reader | None = _read_production_stack
    elif kind is None:
        return ReadProblem(
            "kind",
            "the object has no kind",
            "send a Kubernetes object with apiVersion and kind, or production-stack values "
            "with servingEngineSpec",
        )
    else:
        reader = _READERS.get(kind)
    if reader is None:
        known = ", ".join([*_READERS, "production-stack values"])
        return ReadProblem(
            "kind", f"kind {kind!r} is not a workload this service reads", f"one of: {known}"
        )
    out = _Collector(
        kind=kind,
        name=_text(metadata.get("name")),
        namespace=_text(metadata.get("namespace")),
        labels=_strings(metadata.get("labels")),
        annotations=_strings(metadata.get("annotations")),
    )
    problem = reader(obj, out)
    if problem is not None:
        return problem
    return out.reading()
