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

The host memory a pod may use is its container's ``resources.limits.memory`` (a Kubernetes
quantity). :mod:`.objects` reads the containers of these templates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from service.workloads.gpus import GpuRequest, ProductSelector, product_selector
from service.workloads.models import ModelRef, model_ref
from service.workloads.pods import (
    Collector,
    PodTemplate,
    as_list,
    as_map,
    as_text,
    read_pod,
    sourced_count,
    subtree,
)
from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.settings import TrainingCommand

__all__ = [
    "POD_SETS",
    "TRAINING_KINDS",
    "OtherTrainingContainer",
    "PodSet",
    "TrainingReading",
    "TrainingWorkload",
    "serving_reader",
    "trainjob_model",
    "trainjob_pods",
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
class PodSet:
    role: str
    path: str
    spec: Mapping[str, object]
    pods: Sourced[int]
    env: Mapping[str, Sourced[str]] = field(default_factory=dict)
    """Variables the controller sets in every container (PET_NNODES, ...)."""
    selector: ProductSelector | None = None
    """The node selection, where it is not the pod spec's own (a TrainJob's patches)."""


# ------------------------------------------------------------------------------ kinds


def _pods_pod(obj: Mapping[str, object]) -> list[PodSet] | ReadProblem:
    spec = as_map(obj.get("spec"))
    if not spec:
        return ReadProblem("spec", "a Pod needs a spec", "send the whole Pod object")
    return [PodSet("main", "spec", spec, Sourced(1, "a Pod"))]


def _pods_job(obj: Mapping[str, object]) -> list[PodSet] | ReadProblem:
    spec = subtree(obj, "spec.template.spec")
    if spec is None:
        return ReadProblem("spec.template.spec", "a Job needs a pod template here")
    pods = sourced_count(
        as_map(obj.get("spec")).get("parallelism"), "spec.parallelism", 1, "default (Job: 1)"
    )
    return [PodSet("main", "spec.template.spec", spec, pods)]


def _pods_pytorchjob(obj: Mapping[str, object]) -> list[PodSet] | ReadProblem:
    specs = subtree(obj, "spec.pytorchReplicaSpecs")
    if not specs:
        return ReadProblem("spec.pytorchReplicaSpecs", "a PyTorchJob needs its replica specs")
    sets: list[PodSet] = []
    for role, raw in specs.items():
        base = f"spec.pytorchReplicaSpecs.{role}"
        spec = subtree(as_map(raw), "template.spec")
        if spec is None:
            return ReadProblem(f"{base}.template.spec", "the replica spec has no pod template")
        pods = sourced_count(
            as_map(raw).get("replicas"), f"{base}.replicas", 1, "default (PyTorchJob: 1)"
        )
        sets.append(PodSet(str(role), f"{base}.template.spec", spec, pods))
    total = sum(s.pods.value for s in sets)
    nproc = as_text(as_map(obj.get("spec")).get("nprocPerNode")) or "auto"
    nproc_source = (
        "spec.nprocPerNode" if "nprocPerNode" in as_map(obj.get("spec")) else "default (auto)"
    )
    env = {
        "PET_NNODES": Sourced(str(total), "the PyTorchJob operator (total replicas)"),
        "PET_NPROC_PER_NODE": Sourced(nproc, f"the PyTorchJob operator ({nproc_source})"),
    }
    return [PodSet(s.role, s.path, s.spec, s.pods, env) for s in sets]


def _pods_jobset(obj: Mapping[str, object]) -> list[PodSet] | ReadProblem:
    jobs = as_list(as_map(obj.get("spec")).get("replicatedJobs"))
    if not jobs:
        return ReadProblem("spec.replicatedJobs", "a JobSet needs replicatedJobs")
    sets: list[PodSet] = []
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
        sets.append(PodSet(role, f"{base}.template.spec.template.spec", spec, pods))
    return sets


def _pods_workload(obj: Mapping[str, object]) -> list[PodSet] | ReadProblem:
    pod_sets = as_list(as_map(obj.get("spec")).get("podSets"))
    if not pod_sets:
        return ReadProblem("spec.podSets", "a Kueue Workload needs podSets")
    sets: list[PodSet] = []
    for index, raw in enumerate(pod_sets):
        item = as_map(raw)
        base = f"spec.podSets[{index}]"
        spec = subtree(item, "template.spec")
        if spec is None:
            return ReadProblem(f"{base}.template.spec", "the pod set has no template")
        count = sourced_count(item.get("count"), f"{base}.count", 1, "default (1)")
        sets.append(
            PodSet(
                as_text(item.get("name")) or f"podset {index}", f"{base}.template.spec", spec, count
            )
        )
    return sets


def _pods_rayjob(obj: Mapping[str, object]) -> list[PodSet] | ReadProblem:
    cluster = subtree(obj, "spec.rayClusterSpec")
    if cluster is None:
        return ReadProblem(
            "spec.rayClusterSpec", "a RayJob needs a rayClusterSpec (or reads a running cluster)"
        )
    sets: list[PodSet] = []
    head = subtree(cluster, "headGroupSpec.template.spec")
    if head is not None:
        sets.append(
            PodSet(
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
            PodSet(
                as_text(group.get("groupName")) or f"group {index}",
                f"{base}.template.spec",
                spec,
                pods,
            )
        )
    return sets


POD_SETS: dict[str, Callable[[Mapping[str, object]], list[PodSet] | ReadProblem]] = {
    "Pod": _pods_pod,
    "Job": _pods_job,
    "PyTorchJob": _pods_pytorchjob,
    "JobSet": _pods_jobset,
    "Workload": _pods_workload,
    "RayJob": _pods_rayjob,
}
TRAINING_KINDS: tuple[str, ...] = (*POD_SETS, "TrainJob")


def serving_reader(kind: str) -> Callable[[Mapping[str, object], Collector], ReadProblem | None]:
    """A reader for ``service.workloads.kubernetes``'s kind table: each pod template of a
    training kind, read for serving containers (a JobSet or Kueue Workload may serve)."""

    def read(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
        sets = POD_SETS[kind](obj)
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


def trainjob_pods(
    obj: Mapping[str, object], runtime: Mapping[str, object] | None
) -> list[PodSet] | ReadProblem:
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
    return [PodSet("node", "spec.trainer", spec, pods, env, selector)]


def trainjob_model(
    obj: Mapping[str, object], runtime: Mapping[str, object] | None
) -> ModelRef | None:
    uri = as_text(as_map(subtree(obj, "spec.initializer.model")).get("storageUri"))
    if uri:
        return model_ref(uri, "spec.initializer.model.storageUri")
    del runtime
    return None
