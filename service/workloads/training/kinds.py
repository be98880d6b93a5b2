"""Kubernetes objects that run training jobs: their pod templates, pods, GPUs and trainers.

Field names follow the published API types:

- Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``, kubeflow/training-operator v1.9.0
  ``pkg/apis/kubeflow.org/v1/pytorch_types.go``): ``spec.pytorchReplicaSpecs.{Master,Worker}``
  (``replicas`` default 1, ``template``), ``spec.nprocPerNode`` (default ``auto``). The
  operator sets ``PET_NNODES`` to the total replicas and ``PET_NPROC_PER_NODE`` to
  ``nprocPerNode`` in every container (``pkg/controller.v1/pytorch/envvar.go`` ``setPodEnv``),
  which torchrun reads.
- Kubeflow ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``, kubeflow/trainer
  ``pkg/apis/trainer/v1alpha1/trainjob_types.go``): ``spec.trainer`` (``image``, ``command``,
  ``args``, ``env``, ``numNodes``, ``numProcPerNode`` default ``auto``, ``resourcesPerNode``),
  ``spec.runtimeRef`` (a ``ClusterTrainingRuntime``/``TrainingRuntime``, read when the request
  carries it: its ``mlPolicy.numNodes`` and the ``node`` job's container),
  ``spec.runtimePatches[].trainingRuntimeSpec.template.spec.replicatedJobs[].template.spec
  .template.spec`` (node selection), ``spec.initializer.model.storageUri``. The torch plugin
  sets ``PET_NNODES`` and ``PET_NPROC_PER_NODE`` (``pkg/runtime/framework/plugins/torch``).
- ``JobSet`` (``jobset.x-k8s.io/v1alpha2``, kubernetes-sigs/jobset
  ``api/jobset/v1alpha2/jobset_types.go``): ``spec.replicatedJobs[]`` with ``replicas`` Jobs of
  ``template.spec.parallelism`` pods each.
- batch ``Job``: ``spec.parallelism`` pods (default 1); a ``kueue.x-k8s.io/queue-name`` label
  makes it Kueue-managed. Kueue's own ``Workload`` (``kueue.x-k8s.io/v1beta1``):
  ``spec.podSets[]`` with ``count`` pods of ``template``.
- ``RayJob`` (``ray.io/v1``, ray-project/kuberay ``ray-operator/apis/ray/v1/rayjob_types.go``):
  ``spec.entrypoint`` (the trainer, run by the driver) and ``spec.rayClusterSpec``'s
  ``headGroupSpec`` and ``workerGroupSpecs[]`` (``replicas``, ``template``): the GPU pods.
- ``Pod``, and a ``List`` whose ``items`` hold one of these with the ``ConfigMap``s its
  containers mount (their keys become the files at the mount paths).

A container's config files are the request's ``files`` and the ConfigMaps mounted into it;
its working directory is its ``workingDir``. The host memory a pod may use is its container's
``resources.limits.memory`` (a Kubernetes quantity).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

from service.workloads.gpus import GpuRequest, ProductSelector, gpu_requests, product_selector
from service.workloads.models import ModelRef, model_ref
from service.workloads.pods import (
    Collector,
    PodTemplate,
    as_list,
    as_map,
    as_text,
    container_env,
    container_words,
    read_pod,
    sourced_count,
    string_map,
    subtree,
)
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError
from service.workloads.training.files import ConfigFiles, FoundFile, parse_document
from service.workloads.training.launchers import find_training_command
from service.workloads.training.settings import Launch, TrainingCommand

__all__ = [
    "TRAINING_KINDS",
    "OtherTrainingContainer",
    "TrainingReading",
    "TrainingWorkload",
    "memory_bytes",
    "read_training",
    "serving_reader",
]


@dataclass(frozen=True)
class TrainingWorkload:
    """One trainer container of a pod template, as a scheduler would size it."""

    kind: str
    name: str | None
    namespace: str | None
    role: str
    """The template's role: ``main``, PyTorchJob ``Master``/``Worker``, a JobSet's
    replicated job, a Ray worker group."""
    path: str
    container: str | None
    command: TrainingCommand
    gpus: GpuRequest | None
    pods: Sourced[int]
    """Pods of this template."""
    nodes: Sourced[int]
    """Pods that run the trainer, over all templates (the launcher's node count)."""
    gpu_product: ProductSelector | None
    memory_limit: Sourced[int] | None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class OtherTrainingContainer:
    path: str
    name: str | None
    reason: str


@dataclass(frozen=True)
class TrainingReading:
    kind: str
    name: str | None
    namespace: str | None
    workloads: tuple[TrainingWorkload, ...]
    others: tuple[OtherTrainingContainer, ...] = ()
    problems: tuple[ReadProblem, ...] = ()


@dataclass(frozen=True)
class _PodSet:
    role: str
    path: str
    spec: Mapping[str, object]
    pods: Sourced[int]
    env: Mapping[str, Sourced[str]] = field(default_factory=dict)
    """Variables the controller sets in every container (PET_NNODES, ...)."""
    selector: ProductSelector | None = None
    """The node selection, where it is not the pod spec's own (a TrainJob's patches)."""


# ------------------------------------------------------------------------------ quantities

_QUANTITY = re.compile(
    r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?)$"
)
_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def memory_bytes(value: object) -> int | None:
    """Bytes of a Kubernetes memory quantity (apimachinery ``resource.Quantity``: binary
    ``Ki``..``Ei``, decimal ``k``..``E``, an exponent ``e3``, milli ``m``), rounded up; None
    when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    number, exponent, suffix = match.groups()
    amount = Fraction(number)
    if exponent:
        power = int(exponent[1:])
        if abs(power) > 30:
            return None
        amount *= Fraction(10) ** power
    elif suffix == "m":
        amount /= 1000
    else:
        amount *= _SUFFIX[suffix or ""]
    return -(-amount.numerator // amount.denominator)


# ------------------------------------------------------------------------------ kinds


def _pods_pod(obj: Mapping[str, object]) -> list[_PodSet] | ReadProblem:
    spec = as_map(obj.get("spec"))
    if not spec:
        return ReadProblem("spec", "a Pod needs a spec", "send the whole Pod object")
    return [_PodSet("main", "spec", spec, Sourced(1, "a Pod"))]


def _pods_job(obj: Mapping[str, object]) -> list[_PodSet] | ReadProblem:
    spec = subtree(obj, "spec.template.spec")
    if spec is None:
        return ReadProblem("spec.template.spec", "a Job needs a pod template here")
    pods = sourced_count(
        as_map(obj.get("spec")).get("parallelism"), "spec.parallelism", 1, "default (Job: 1)"
    )
    return [_PodSet("main", "spec.template.spec", spec, pods)]


def _pods_pytorchjob(obj: Mapping[str, object]) -> list[_PodSet] | ReadProblem:
    specs = subtree(obj, "spec.pytorchReplicaSpecs")
    if not specs:
        return ReadProblem("spec.pytorchReplicaSpecs", "a PyTorchJob needs its replica specs")
    sets: list[_PodSet] = []
    for role, raw in specs.items():
        base = f"spec.pytorchReplicaSpecs.{role}"
        spec = subtree(as_map(raw), "template.spec")
        if spec is None:
            return ReadProblem(f"{base}.template.spec", "the replica spec has no pod template")
        pods = sourced_count(
            as_map(raw).get("replicas"), f"{base}.replicas", 1, "default (PyTorchJob: 1)"
        )
        sets.append(_PodSet(str(role), f"{base}.template.spec", spec, pods))
    total = sum(s.pods.value for s in sets)
    nproc = as_text(as_map(obj.get("spec")).get("nprocPerNode")) or "auto"
    nproc_source = (
        "spec.nprocPerNode" if "nprocPerNode" in as_map(obj.get("spec")) else "default (auto)"
    )
    env = {
        "PET_NNODES": Sourced(str(total), "the PyTorchJob operator (total replicas)"),
        "PET_NPROC_PER_NODE": Sourced(nproc, f"the PyTorchJob operator ({nproc_source})"),
    }
    return [_PodSet(s.role, s.path, s.spec, s.pods, env) for s in sets]


def _pods_jobset(obj: Mapping[str, object]) -> list[_PodSet] | ReadProblem:
    jobs = as_list(as_map(obj.get("spec")).get("replicatedJobs"))
    if not jobs:
        return ReadProblem("spec.replicatedJobs", "a JobSet needs replicatedJobs")
    sets: list[_PodSet] = []
    for index, raw in enumerate(jobs):
        job = as_map(raw)
        base = f"spec.replicatedJobs[{index}]"
        spec = subtree(job, "template.spec.template.spec")
        if spec is None:
            return ReadProblem(f"{base}.template.spec.template.spec", "no pod template")
        replicas = sourced_count(job.get("replicas"), f"{base}.replicas", 1, "default (1)")
        parallelism = sourced_count(
            as_map(subtree(job, "template.spec")).get("parallelism"),
            f"{base}.template.spec.parallelism",
            1,
            "default (Job: 1)",
        )
        pods = Sourced(
            replicas.value * parallelism.value, f"{replicas.source} × {parallelism.source}"
        )
        role = as_text(job.get("name")) or f"job {index}"
        sets.append(_PodSet(role, f"{base}.template.spec.template.spec", spec, pods))
    return sets


def _pods_workload(obj: Mapping[str, object]) -> list[_PodSet] | ReadProblem:
    pod_sets = as_list(as_map(obj.get("spec")).get("podSets"))
    if not pod_sets:
        return ReadProblem("spec.podSets", "a Kueue Workload needs podSets")
    sets: list[_PodSet] = []
    for index, raw in enumerate(pod_sets):
        item = as_map(raw)
        base = f"spec.podSets[{index}]"
        spec = subtree(item, "template.spec")
        if spec is None:
            return ReadProblem(f"{base}.template.spec", "the pod set has no template")
        count = sourced_count(item.get("count"), f"{base}.count", 1, "default (1)")
        sets.append(
            _PodSet(
                as_text(item.get("name")) or f"podset {index}", f"{base}.template.spec", spec, count
            )
        )
    return sets


def _pods_rayjob(obj: Mapping[str, object]) -> list[_PodSet] | ReadProblem:
    cluster = subtree(obj, "spec.rayClusterSpec")
    if cluster is None:
        return ReadProblem(
            "spec.rayClusterSpec", "a RayJob needs a rayClusterSpec (or reads a running cluster)"
        )
    sets: list[_PodSet] = []
    head = subtree(cluster, "headGroupSpec.template.spec")
    if head is not None:
        sets.append(
            _PodSet(
                "head",
                "spec.rayClusterSpec.headGroupSpec.template.spec",
                head,
                Sourced(1, "one head"),
            )
        )
    for index, raw in enumerate(as_list(cluster.get("workerGroupSpecs"))):
        group = as_map(raw)
        base = f"spec.rayClusterSpec.workerGroupSpecs[{index}]"
        spec = subtree(group, "template.spec")
        if spec is None:
            continue
        pods = sourced_count(group.get("replicas"), f"{base}.replicas", 1, "default (1)")
        sets.append(
            _PodSet(
                as_text(group.get("groupName")) or f"group {index}",
                f"{base}.template.spec",
                spec,
                pods,
            )
        )
    return sets


_POD_SETS: dict[str, Callable[[Mapping[str, object]], list[_PodSet] | ReadProblem]] = {
    "Pod": _pods_pod,
    "Job": _pods_job,
    "PyTorchJob": _pods_pytorchjob,
    "JobSet": _pods_jobset,
    "Workload": _pods_workload,
    "RayJob": _pods_rayjob,
}
TRAINING_KINDS: tuple[str, ...] = (*_POD_SETS, "TrainJob")


def serving_reader(kind: str) -> Callable[[Mapping[str, object], Collector], ReadProblem | None]:
    """A reader for ``service.workloads.kubernetes``'s kind table: each pod template of a
    training kind, read for serving containers (a JobSet or Kueue Workload may serve)."""

    def read(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
        sets = _POD_SETS[kind](obj)
        if isinstance(sets, ReadProblem):
            return sets
        for pod_set in sets:
            read_pod(
                out,
                PodTemplate(
                    out.kind,
                    "main",
                    pod_set.path,
                    pod_set.spec,
                    pod_set.pods,
                    Sourced(1, "one pod per replica"),
                ),
            )
        return None

    return read


# ------------------------------------------------------------------------------ reading


def _config_maps(items: list[object]) -> dict[str, dict[str, str]]:
    maps: dict[str, dict[str, str]] = {}
    for item in items:
        obj = as_map(item)
        if as_text(obj.get("kind")) == "ConfigMap":
            name = as_text(as_map(obj.get("metadata")).get("name"))
            if name:
                maps[name] = string_map(obj.get("data"))
    return maps


def _mounted(
    spec: Mapping[str, object],
    container: Mapping[str, object],
    maps: Mapping[str, Mapping[str, str]],
) -> dict[str, tuple[str, str]]:
    """The ConfigMap files a container sees: path -> (text, source)."""
    volumes = {
        as_text(as_map(v).get("name")): as_map(as_map(v).get("configMap"))
        for v in as_list(spec.get("volumes"))
    }
    files: dict[str, tuple[str, str]] = {}
    for mount in as_list(container.get("volumeMounts")):
        item = as_map(mount)
        volume = volumes.get(as_text(item.get("name")))
        target = as_text(item.get("mountPath"))
        if not volume or not target:
            continue
        name = as_text(volume.get("name")) or ""
        data = maps.get(name)
        if data is None:
            continue
        paths = {
            as_text(as_map(i).get("key")) or "": as_text(as_map(i).get("path")) or ""
            for i in as_list(volume.get("items"))
        } or {key: key for key in data}
        sub = as_text(item.get("subPath"))
        for key, relative in paths.items():
            if key not in data:
                continue
            if sub:
                if sub == relative:
                    files[target] = (data[key], f"ConfigMap {name} key {key}")
                continue
            path = posixpath.join(target, relative)
            files[path] = (data[key], f"ConfigMap {name} key {key} at {path}")
    return files


def _memory_limit(container: Mapping[str, object], path: str) -> Sourced[int] | None:
    limits = as_map(as_map(container.get("resources")).get("limits"))
    raw = limits.get("memory")
    found = memory_bytes(raw)
    return None if found is None else Sourced(found, f"{path}.resources.limits.memory")


def _with_nodes(command: TrainingCommand, nodes: Sourced[int], notes: list[str]) -> TrainingCommand:
    """The launcher's node count reconciled with the pods the object runs."""
    launch = command.launch
    if nodes.value <= 1 or launch.nnodes.value == nodes.value:
        return command
    if launch.name == "python" or launch.name.startswith("axolotl (python"):
        return replace(
            command,
            launch=Launch(launch.name, launch.source, launch.nproc_per_node, nodes),
        )
    notes.append(
        f"{launch.name} starts {launch.nnodes.value} node(s) ({launch.nnodes.source}) but the "
        f"object runs {nodes.value} pods ({nodes.source}): the launcher's count is judged"
    )
    return command


def read_training(
    obj: object, files: ConfigFiles | None = None
) -> TrainingReading | ReadProblem | None:
    """Read an object into training workloads; None when it runs no trainer (or is not a
    kind read here). Never raises."""
    try:
        return _read(obj, files or ConfigFiles())
    except RecursionError:  # pragma: no cover - a pathological nesting depth
        return ReadProblem("object", "the object is nested too deeply to read")


def _read(obj: object, files: ConfigFiles) -> TrainingReading | ReadProblem | None:
    if not isinstance(obj, Mapping):
        return None
    kind = as_text(obj.get("kind"))
    maps: dict[str, dict[str, str]] = {}
    runtime: Mapping[str, object] | None = None
    if kind == "List":
        items = as_list(obj.get("items"))
        maps = _config_maps(items)
        runtime = next(
            (
                as_map(i)
                for i in items
                if as_text(as_map(i).get("kind")) in ("ClusterTrainingRuntime", "TrainingRuntime")
            ),
            None,
        )
        workload = next(
            (as_map(i) for i in items if as_text(as_map(i).get("kind")) in TRAINING_KINDS),
            None,
        )
        if workload is None:
            return None
        obj, kind = workload, as_text(workload.get("kind"))
    metadata = as_map(obj.get("metadata"))
    name = as_text(metadata.get("name"))
    namespace = as_text(metadata.get("namespace"))
    labels, annotations = (
        string_map(metadata.get("labels")),
        string_map(metadata.get("annotations")),
    )
    notes: list[str] = []
    queue = labels.get("kueue.x-k8s.io/queue-name")
    if queue:
        notes.append(
            f"Kueue queue {queue}: the job waits suspended until Kueue admits it and sets its "
            "node selection; fits_on lists the products it fits on"
        )
    if kind == "TrainJob":
        sets_or_problem = _trainjob(obj, runtime)
        model_hint = _trainjob_model(obj, runtime)
    elif kind in _POD_SETS:
        sets_or_problem = _POD_SETS[kind](obj)
        model_hint = None
    else:
        return None
    if isinstance(sets_or_problem, ReadProblem):
        return sets_or_problem
    sets = sets_or_problem
    workloads: list[TrainingWorkload] = []
    others: list[OtherTrainingContainer] = []
    problems: list[ReadProblem] = []
    if kind == "RayJob":
        return _rayjob(obj, sets, files, kind, name, namespace, labels, annotations, notes)
    found: list[tuple[_PodSet, str, Mapping[str, object], TrainingCommand, list[ReadProblem]]] = []
    for pod_set in sets:
        for index, raw in enumerate(as_list(pod_set.spec.get("containers"))):
            container = as_map(raw)
            path = f"{pod_set.path}.containers[{index}]"
            if pod_set.path == "spec.trainer":
                path = "spec.trainer"
            env, env_notes = container_env(container, path)
            env = {**env, **pod_set.env}
            words = container_words(container, path, "command", env) + container_words(
                container, path, "args", env
            )
            container_files = files.with_files(_mounted(pod_set.spec, container, maps))
            try:
                command, read_problems = find_training_command(
                    words, env, container_files, as_text(container.get("workingDir"))
                )
            except WorkloadError as exc:
                problems.append(exc.problem)
                continue
            if command is None:
                reason = "runs no trainer this service reads" if words else "gives no command"
                others.append(OtherTrainingContainer(path, as_text(container.get("name")), reason))
                continue
            found.append((pod_set, path, container, command, read_problems))
            notes.extend(env_notes)
    if not found:
        return (
            None
            if not problems
            else TrainingReading(kind or "", name, namespace, (), tuple(others), tuple(problems))
        )
    trainer_sets = {id(s) for s, *_ in found}
    total = sum(s.pods.value for s in sets if id(s) in trainer_sets)
    total_source = " + ".join(s.pods.source for s in sets if id(s) in trainer_sets)
    nodes = Sourced(total, total_source)
    for pod_set, path, container, command, read_problems in found:
        problems.extend(read_problems)
        own_notes = list(notes)
        command = _with_nodes(command, nodes, own_notes)
        if model_hint is not None and (command.model is None or command.model.repo_id is None):
            command = replace(command, model=model_hint)
        requests, gpu_problems = gpu_requests(
            container.get("resources"),
            f"{path}.resources" if path != "spec.trainer" else "spec.trainer.resourcesPerNode",
        )
        problems.extend(gpu_problems)
        workloads.append(
            TrainingWorkload(
                kind=kind or "",
                name=name,
                namespace=namespace,
                role=pod_set.role,
                path=path,
                container=as_text(container.get("name")),
                command=command,
                gpus=requests[0] if requests else None,
                pods=pod_set.pods,
                nodes=nodes,
                gpu_product=pod_set.selector
                if pod_set.path == "spec.trainer"
                else product_selector(pod_set.spec, pod_set.path),
                memory_limit=_memory_limit(container, path),
                labels=labels,
                annotations=annotations,
                notes=tuple(dict.fromkeys(own_notes)),
            )
        )
    return TrainingReading(
        kind or "", name, namespace, tuple(workloads), tuple(others), tuple(problems)
    )


def _node_job(runtime: Mapping[str, object] | None) -> Mapping[str, object]:
    """The runtime's trainer pod spec (the replicated job named ``node``)."""
    for raw in as_list(
        subtree(runtime or {}, "spec.template.spec")
        and as_map(subtree(runtime or {}, "spec.template.spec")).get("replicatedJobs")
    ):
        job = as_map(raw)
        if as_text(job.get("name")) == "node":
            return subtree(job, "template.spec.template.spec") or {}
    return {}


def _trainjob(
    obj: Mapping[str, object], runtime: Mapping[str, object] | None
) -> list[_PodSet] | ReadProblem:
    trainer = as_map(subtree(obj, "spec.trainer"))
    base_spec = _node_job(runtime)
    base = next(
        (
            as_map(c)
            for c in as_list(base_spec.get("containers"))
            if as_text(as_map(c).get("name")) == "node"
        ),
        {},
    )
    if not trainer and not base:
        return ReadProblem(
            "spec.trainer",
            "the TrainJob gives no trainer and its runtime is not in the request",
            "send the runtime in a List with the TrainJob, or set spec.trainer",
        )
    container: dict[str, object] = {"name": "node"}
    for key in ("image", "command", "args", "workingDir", "volumeMounts"):
        if key in trainer:
            container[key] = trainer[key]
        elif key in base:
            container[key] = base[key]
    container["env"] = [*as_list(base.get("env")), *as_list(trainer.get("env"))]
    resources = trainer.get("resourcesPerNode", base.get("resources"))
    if resources is not None:
        container["resources"] = resources
    spec: dict[str, object] = {"containers": [container], "volumes": base_spec.get("volumes", [])}
    selector_spec: dict[str, object] = {
        k: base_spec[k] for k in ("nodeSelector", "affinity") if k in base_spec
    }
    selector_path = "runtime node job"
    for index, raw in enumerate(as_list(as_map(obj.get("spec")).get("runtimePatches"))):
        jobs = as_list(
            subtree(as_map(raw), "trainingRuntimeSpec.template.spec")
            and as_map(subtree(as_map(raw), "trainingRuntimeSpec.template.spec")).get(
                "replicatedJobs"
            )
        )
        for job_index, job in enumerate(jobs):
            if as_text(as_map(job).get("name")) != "node":
                continue
            patch = subtree(as_map(job), "template.spec.template.spec") or {}
            for key in ("nodeSelector", "affinity"):
                if key in patch:
                    selector_spec[key] = patch[key]
                    selector_path = (
                        f"spec.runtimePatches[{index}].trainingRuntimeSpec.template.spec."
                        f"replicatedJobs[{job_index}].template.spec.template.spec"
                    )
    if "nodeSelector" in trainer:
        selector_spec["nodeSelector"] = trainer["nodeSelector"]
    nodes_raw = trainer.get("numNodes")
    if nodes_raw is not None:
        pods = sourced_count(nodes_raw, "spec.trainer.numNodes", 1, "default (1)")
    else:
        policy = as_map(subtree(runtime or {}, "spec.mlPolicy")).get("numNodes")
        pods = sourced_count(
            policy,
            "runtime spec.mlPolicy.numNodes",
            1,
            "default (1: the runtime is not in the request)",
        )
    nproc = trainer.get("numProcPerNode")
    env = {
        "PET_NNODES": Sourced(str(pods.value), f"the TrainJob torch plugin ({pods.source})"),
        "PET_NPROC_PER_NODE": Sourced(
            str(nproc) if nproc is not None else "auto",
            "the TrainJob torch plugin (spec.trainer.numProcPerNode)"
            if nproc is not None
            else "the TrainJob torch plugin (default auto)",
        ),
    }
    selector = product_selector(selector_spec, selector_path) if selector_spec else None
    return [_PodSet("node", "spec.trainer", spec, pods, env, selector)]


def _trainjob_model(
    obj: Mapping[str, object], runtime: Mapping[str, object] | None
) -> ModelRef | None:
    uri = as_text(as_map(subtree(obj, "spec.initializer.model")).get("storageUri"))
    if uri:
        return model_ref(uri, "spec.initializer.model.storageUri")
    del runtime
    return None


def _rayjob(
    obj: Mapping[str, object],
    sets: list[_PodSet],
    files: ConfigFiles,
    kind: str,
    name: str | None,
    namespace: str | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    notes: list[str],
) -> TrainingReading | ReadProblem | None:
    entrypoint = as_text(as_map(obj.get("spec")).get("entrypoint"))
    if not entrypoint:
        return None
    env: dict[str, Sourced[str]] = {}
    runtime_env = as_text(as_map(obj.get("spec")).get("runtimeEnvYAML"))
    if runtime_env:
        doc = parse_document(
            FoundFile("runtime_env.yaml", runtime_env, "spec.runtimeEnvYAML"), "spec.runtimeEnvYAML"
        )
        if isinstance(doc, Mapping):
            for key, value in as_map(doc.get("env_vars")).items():
                env[str(key)] = Sourced(str(value), f"spec.runtimeEnvYAML env_vars.{key}")
    words = [
        Token("sh", "spec.entrypoint"),
        Token("-c", "spec.entrypoint"),
        Token(entrypoint, "spec.entrypoint"),
    ]
    try:
        command, problems = find_training_command(words, env, files)
    except WorkloadError as exc:
        return ReadProblem(exc.problem.field, exc.problem.detail, exc.problem.fix)
    if command is None:
        return None
    gpu_sets: list[tuple[_PodSet, Mapping[str, object], str, GpuRequest]] = []
    for pod_set in sets:
        for index, raw in enumerate(as_list(pod_set.spec.get("containers"))):
            container = as_map(raw)
            path = f"{pod_set.path}.containers[{index}]"
            requests, gpu_problems = gpu_requests(container.get("resources"), f"{path}.resources")
            problems.extend(gpu_problems)
            if requests:
                gpu_sets.append((pod_set, container, path, requests[0]))
                break
    if not gpu_sets:
        return TrainingReading(
            kind,
            name,
            namespace,
            (),
            (),
            (ReadProblem("spec.rayClusterSpec", "no Ray pod requests a GPU"),),
        )
    total = sum(s.pods.value for s, *_ in gpu_sets)
    nodes = Sourced(total, " + ".join(s.pods.source for s, *_ in gpu_sets))
    launch = Launch(
        "Ray Train",
        "spec.entrypoint",
        Sourced(None, "every GPU of each Ray worker (ScalingConfig is in the script)"),
        nodes,
    )
    command = replace(command, launch=launch)
    workloads = tuple(
        TrainingWorkload(
            kind=kind,
            name=name,
            namespace=namespace,
            role=pod_set.role,
            path=path,
            container=as_text(container.get("name")),
            command=command,
            gpus=request,
            pods=pod_set.pods,
            nodes=nodes,
            gpu_product=product_selector(pod_set.spec, pod_set.path),
            memory_limit=_memory_limit(container, path),
            labels=labels,
            annotations=annotations,
            notes=(
                *notes,
                "Ray Train's world size is set in the script: one rank per worker GPU assumed",
            ),
        )
        for pod_set, container, path, request in gpu_sets
    )
    return TrainingReading(kind, name, namespace, workloads, (), tuple(problems))
