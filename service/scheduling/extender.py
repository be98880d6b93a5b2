"""The scheduler extender's filter and scores: does the pod's model fit each node's GPU, and
which node wastes the least.

A node's GPU is what its GPU Feature Discovery labels say (`service.workloads.nodes`):

- ``nvidia.com/gpu.product`` resolved in the GPU catalog (its ``-MIG-<profile>`` form under the
  MIG ``single`` strategy is that slice; under ``mixed`` a pod asking for
  ``nvidia.com/mig-<profile>`` gets that profile of the labelled parent GPU);
- a product the catalog does not know is judged by ``nvidia.com/gpu.memory`` (MiB; under
  ``single`` the slice's, under ``mixed`` ``nvidia.com/mig-<profile>.memory``), with its
  capabilities unknown and not checked;
- sharing: under MPS each replica is limited to 1/replicas of the memory, and is judged on that
  share. Under time-slicing (``nvidia.com/gpu.replicas`` > 1, or the ``-SHARED`` product
  suffix) nothing isolates memory: each replica sees the whole GPU and an engine budgets from
  the whole of it, so the verdict is the one for the whole GPU, true only if the other
  replicas leave it free. Such nodes pass the filter but score half: a GPU of its own is
  preferred.

A node that does not fit goes to ``FailedAndUnresolvableNodes``: preemption frees no GPU memory
that the node does not have. A node whose GPU cannot be told (no labels, an invalid MIG layout,
a pod without GPUs or without a model the service can name) passes: the default scheduler's
resource checks still apply, and the extender never blocks what it cannot judge.

Scores (0 to 10, higher preferred): a node that fits scores 10 × required / usable per GPU,
at least 1 (the tightest fit, the least memory left idle, scores highest); a node that does
not fit or cannot be judged scores 0.

Bounds (service/schemas/limits.py, the table every entry point shares): a Pod over the object
bounds, or more nodes than the table allows, is refused (422); a Pod with more serving
containers than it allows is not judged (every node passes). Each node's judgement starts with
a `checkpoint()`: past the request's deadline the work stops there.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from service.application.estimate_service import Catalogs
from service.application.resolve import ad_hoc_gpu, resolve_gpu
from service.catalog.gpu_record import MIB
from service.estimator.cancel import checkpoint
from service.estimator.errors import EstimatorError, InvalidRequest
from service.estimator.gpu import GpuSpec
from service.scheduling.check import GpuVerdict, Prepared, prepare, verdict_on
from service.scheduling.plan import plan_workload
from service.schemas.limits import LIMITS, object_problem
from service.workloads.extender import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    node_name,
    read_extender_args,
)
from service.workloads.gpus import GpuRequest
from service.workloads.kubernetes import read_workloads
from service.workloads.nodes import NodeGpus, read_node
from service.workloads.sources import ReadProblem

__all__ = ["NodeGpu", "filter_nodes", "node_gpu", "prioritize_nodes", "read_args"]


@dataclass(frozen=True)
class NodeGpu:
    """The GPU a pod would get on a node, as the estimator judges it."""

    label: str
    spec: GpuSpec
    time_sliced: bool


def read_args(body: object) -> ExtenderArgs:
    """``ExtenderArgs``; InvalidRequest naming the field (a 422 problem) when unreadable."""
    args = read_extender_args(body)
    if isinstance(args, ReadProblem):
        raise InvalidRequest(args.message(), field=args.field)
    over = object_problem(args.pod)
    if over is not None:
        raise InvalidRequest(f"Pod: {over}", field="Pod")
    count = len(args.nodes) if args.nodes is not None else len(args.node_names or ())
    over = LIMITS.nodes_problem(count)
    if over is not None:
        raise InvalidRequest(f"Nodes: {over}", field="Nodes")
    return args


def _catalog_or_memory(
    catalogs: Catalogs, ref: str | None, memory_mib: int | None
) -> GpuSpec | None:
    if ref is not None:
        try:
            return resolve_gpu(catalogs.gpus, ref)
        except EstimatorError:
            pass
    if memory_mib:
        try:
            return ad_hoc_gpu(memory_mib * MIB)
        except EstimatorError:
            return None
    return None


def node_gpu(node: NodeGpus, request: GpuRequest, catalogs: Catalogs) -> NodeGpu | None:
    """The GPU (or slice) one pod's GPU request gets on ``node``; None when it cannot be told."""
    spec: GpuSpec | None
    if request.mig_profile is not None:
        device = next((d for d in node.mig_devices if d.profile == request.mig_profile), None)
        if device is None:
            return None
        parent = node.parent_product
        ref = f"{parent}-MIG-{device.profile_nvml}" if parent else None
        spec = _catalog_or_memory(catalogs, ref, device.memory_mib)
        label = f"{parent or 'GPU'} {request.mig_profile}"
        replicas = device.replicas
    else:
        if node.mig_invalid:
            return None
        product = node.product.value if node.product is not None else None
        memory = node.memory_mib.value if node.memory_mib is not None else None
        spec = _catalog_or_memory(catalogs, product, memory)
        label = product or f"{memory} MiB GPU"
        replicas = node.sharing.replicas
    if spec is None:
        return None
    sharing = node.sharing
    if sharing.strategy == "mps" and replicas > 1:
        spec = dataclasses.replace(spec, total_bytes=spec.total_bytes // replicas)
        return NodeGpu(f"{label} (MPS 1/{replicas})", spec, False)
    sliced = sharing.strategy == "time-slicing" or spec.shared
    if sliced:
        spec = dataclasses.replace(spec, shared=True)
    return NodeGpu(label, spec, sliced)


@dataclass(frozen=True)
class _Pod:
    """The pod's serving containers with GPUs, ready to judge."""

    plans: tuple[tuple[Prepared, GpuRequest], ...]


def _pod(pod: Mapping[str, object], catalogs: Catalogs) -> _Pod:
    reading = read_workloads(pod)
    if isinstance(reading, ReadProblem) or LIMITS.containers_problem(len(reading.workloads)):
        return _Pod(())  # nothing judged: every node passes
    plans: list[tuple[Prepared, GpuRequest]] = []
    for workload in reading.workloads:
        if workload.gpus is None:
            continue
        plan, _ = plan_workload(workload, image=None)
        if plan is None or plan.problems:
            continue
        checkpoint()
        prepared = prepare(plan, catalogs)
        if isinstance(prepared, Prepared):
            plans.append((prepared, workload.gpus))
    return _Pod(tuple(plans))


def _judge_node(
    pod: _Pod, node: object, catalogs: Catalogs, cache: dict[tuple[int, GpuSpec], GpuVerdict]
) -> tuple[list[tuple[GpuVerdict, NodeGpu]], str | None]:
    """Verdicts of each container on this node, or a reason it cannot be judged."""
    gpus = read_node(node)
    if isinstance(gpus, ReadProblem):
        return [], gpus.message()
    out: list[tuple[GpuVerdict, NodeGpu]] = []
    for index, (prepared, request) in enumerate(pod.plans):
        found = node_gpu(gpus, request, catalogs)
        if found is None:
            return [], "the node's GPU labels do not say what the pod would get"
        key = (index, found.spec)
        if key not in cache:
            cache[key] = verdict_on(prepared, found.label, found.spec)
        out.append((cache[key], found))
    return out, None


def _failure(verdicts: list[tuple[GpuVerdict, NodeGpu]]) -> str | None:
    for verdict, gpu in verdicts:
        if not verdict.fits:
            why = verdict.reason.value if verdict.reason is not None else "not runnable"
            detail = f": {verdict.detail}" if verdict.detail else ""
            return f"GPU too small for this model on {gpu.label}: {why}{detail}"
    return None


def filter_nodes(args: ExtenderArgs, catalogs: Catalogs) -> ExtenderFilterResult:
    """Nodes whose GPU fits the pod's model; the others, with the reason, as unresolvable."""
    pod = _pod(args.pod, catalogs)
    if args.nodes is None or not pod.plans:
        # Names only (a nodeCacheCapable extender sees no labels), or nothing to judge.
        return ExtenderFilterResult(nodes=args.nodes, node_names=args.node_names)
    passing: list[Mapping[str, object]] = []
    failed: dict[str, str] = {}
    cache: dict[tuple[int, GpuSpec], GpuVerdict] = {}
    for node in args.nodes:
        checkpoint()
        name = node_name(node) or "?"
        verdicts, _ = _judge_node(pod, node, catalogs, cache)
        reason = _failure(verdicts)
        if reason is None:
            passing.append(node)
        else:
            failed[name] = reason
    names = None
    if args.node_names is not None:
        names = tuple(n for n in args.node_names if n not in failed)
    return ExtenderFilterResult(
        nodes=tuple(passing), node_names=names, failed_and_unresolvable=failed
    )


def _score(verdicts: list[tuple[GpuVerdict, NodeGpu]]) -> int:
    if not verdicts or any(not v.fits for v, _ in verdicts):
        return 0
    tightest = max(v.required_bytes / v.usable_bytes for v, _ in verdicts if v.usable_bytes)
    score = max(1, min(MAX_EXTENDER_PRIORITY, math.floor(MAX_EXTENDER_PRIORITY * tightest)))
    if any(gpu.time_sliced for _, gpu in verdicts):
        score = max(1, score // 2)
    return score


def prioritize_nodes(args: ExtenderArgs, catalogs: Catalogs) -> tuple[HostPriority, ...]:
    """A score per candidate node: least waste first, 0 where it does not fit or is unknown."""
    pod = _pod(args.pod, catalogs)
    if args.nodes is None or not pod.plans:
        return tuple(HostPriority(name, 0) for name in args.names)
    cache: dict[tuple[int, GpuSpec], GpuVerdict] = {}
    out: list[HostPriority] = []
    for node in args.nodes:
        checkpoint()
        name = node_name(node)
        if name is None:
            continue
        verdicts, _ = _judge_node(pod, node, catalogs, cache)
        out.append(HostPriority(name, _score(verdicts)))
    return tuple(out)
