"""The scheduler extender's filter and scores: does the pod's model fit each node's GPU, and
which node wastes the least; and, where it cannot judge, a refusal the scheduler sees.

The Pod of ``ExtenderArgs`` comes from kube-scheduler's informer cache and carries no
``kind`` or ``apiVersion``: it is read as a Pod because the field says so.

A node's GPU is what its labels say (`service.workloads.nodes`): GPU Feature Discovery's
``nvidia.com/gpu.product`` first, else a cloud's own labels (GKE's accelerator label, the
instance type, Karpenter's GPU labels; `service.workloads.cloud_gpus`):

- the product resolved in the GPU catalog (its ``-MIG-<profile>`` form under the MIG
  ``single`` strategy is that slice; under ``mixed`` a pod asking for
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

What the answer says, per kube-scheduler's ``HTTPExtender`` (kubernetes/kubernetes
``pkg/scheduler/extender.go``: ``Filter``, ``Prioritize``, ``send``) and
``findNodesThatPassExtenders`` / ``prioritizeNodes`` (``pkg/scheduler/schedule_one.go``):

- A node whose GPU is too small goes to ``FailedAndUnresolvableNodes`` with the reason:
  preemption frees no GPU memory that the node does not have.
- A pod the extender has no business with (no GPU request, or no vLLM/SGLang container among
  those with GPUs): every node passes, ``Error`` empty.
- A pod it cannot judge (unreadable, a model it cannot name or price, an engine layout that
  will not start): ``Error`` says why. The scheduler turns a non-empty ``Error`` into an
  error of the extender; registered ``ignorable: true`` (deploy/scheduler) it logs
  "Skipping extender as it returned error and has ignorable flag set" and schedules with the
  other plugins, so the refusal is visible without blocking the pod; with ``ignorable:
  false`` the pod waits until it can be judged.
- A node whose labels do not name its GPU passes (the extender never blocks what it cannot
  see); when no candidate node can be judged, ``Error`` says so instead of passing them all
  in silence.
- Names only (``nodeCacheCapable: true``): the service keeps no node cache, so it reads no
  labels. The default filters run before extenders and enforce the pod's node selection, so
  every candidate carries the GPU the pod pins: a pod pinned to products is judged on them
  (all pass, or all fail with the reason); a pod that pins several products and fits only
  some, or pins none, gets ``Error`` naming the fix (register the extender with
  ``nodeCacheCapable: false``). The answer comes back as ``NodeNames``: kube-scheduler reads
  ``NodeNames`` when it sent them and ``Nodes`` otherwise, and takes a missing list as "no
  node passes".
- Prioritize has no error field: kube-scheduler counts a non-200 answer as "No score given by
  this extender". A pod it cannot judge is answered with a 422 problem document naming why
  (`Refused`), never with scores that would pass for a judgement.

Scores (0 to 10, higher preferred): a node that fits scores 10 × required / usable per GPU,
at least 1 (the tightest fit, the least memory left idle, scores highest); a node that does
not fit or cannot be judged scores 0.

Every answer is counted (`Metrics.observe_extender`): the call's outcome, the refusal's
reason, each node's verdict.

Bounds (service/schemas/limits.py, the table every entry point shares): a Pod over the object
bounds, or more nodes than the table allows, is refused (422); a Pod with more serving or
training containers than it allows is not judged (``Error``: ``too_many_containers``). Each
node's judgement starts with a `checkpoint()`: past the request's deadline the work stops there.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from service.application.estimate_service import Catalogs
from service.application.metrics import Metrics
from service.application.resolve import ad_hoc_gpu, resolve_gpu
from service.catalog.gpu_record import MIB
from service.estimator.cancel import checkpoint
from service.estimator.errors import EstimatorError, InvalidRequest
from service.estimator.gpu import GpuSpec
from service.estimator.result import FitReason
from service.scheduling.check import GpuVerdict, Prepared, prepare, unknown_gpu, verdict_on
from service.scheduling.plan import plan_workload
from service.scheduling.preflight import image_at
from service.scheduling.training import training_filter, training_prioritize
from service.schemas.limits import LIMITS, OverLimits, object_problem
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

logger = logging.getLogger("service.extender")

__all__ = [
    "REFUSAL_REASONS",
    "NodeGpu",
    "Refusal",
    "Refused",
    "filter_nodes",
    "node_gpu",
    "prioritize_nodes",
    "read_args",
]

Verb = Literal["filter", "prioritize"]
RefusalReason = Literal[
    "pod_unreadable",
    "workload_unreadable",
    "model_unresolved",
    "will_not_start",
    "pinned_gpu_unknown",
    "names_only_unpinned",
    "names_only_several_products",
    "nodes_unlabelled",
    "too_many_containers",
]
REFUSAL_REASONS: tuple[RefusalReason, ...] = (
    "pod_unreadable",
    "workload_unreadable",
    "model_unresolved",
    "will_not_start",
    "pinned_gpu_unknown",
    "names_only_unpinned",
    "names_only_several_products",
    "nodes_unlabelled",
    "too_many_containers",
)
_PREFIX = "llm-memory extender"
_NAMES_ONLY_FIX = (
    "register the extender with nodeCacheCapable: false (deploy/scheduler), so that it is sent "
    "the Node objects and reads their GPU labels"
)


@dataclass(frozen=True)
class Refusal:
    """Why the extender cannot judge this pod; `reason` is one of `REFUSAL_REASONS`."""

    reason: RefusalReason
    detail: str

    def message(self) -> str:
        return f"{_PREFIX} cannot judge this pod ({self.reason}): {self.detail}"


class Refused(InvalidRequest):
    """A prioritize call for a pod the extender cannot judge: a 422 problem document, which
    kube-scheduler counts as no score from this extender."""

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal
        field = "NodeNames" if refusal.reason.startswith("names_only") else "Pod"
        super().__init__(refusal.message(), field=field)


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


def _as_pod(args: ExtenderArgs) -> ExtenderArgs:
    """The arguments with the Pod's kind said, for readers that dispatch on ``kind`` (the
    informer's Pod carries none)."""
    if args.pod.get("kind"):
        return args
    return dataclasses.replace(args, pod={**args.pod, "kind": "Pod", "apiVersion": "v1"})


@dataclass(frozen=True)
class _Container:
    """One serving container with GPUs, ready to judge on any GPU."""

    prepared: Prepared
    request: GpuRequest
    name: str


@dataclass(frozen=True)
class _Pod:
    """The pod as the extender reads it: containers to judge, or why it cannot, or nothing to
    judge (``containers`` empty and no refusal)."""

    containers: tuple[_Container, ...] = ()
    refusal: Refusal | None = None

    @property
    def applicable(self) -> bool:
        return bool(self.containers) or self.refusal is not None


def _messages(problems: Sequence[ReadProblem]) -> str:
    shown = "; ".join(p.pod_message() for p in problems[:3])
    return shown + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else "")


def _read_pod(pod: Mapping[str, object], catalogs: Catalogs) -> _Pod:
    reading = read_workloads(pod, kind="Pod")
    if isinstance(reading, ReadProblem):
        return _Pod(refusal=Refusal("pod_unreadable", reading.message()))
    if not reading.requests_gpus and not reading.problems:
        return _Pod()
    if reading.problems:
        return _Pod(refusal=Refusal("workload_unreadable", _messages(reading.problems)))
    over = LIMITS.containers_problem(len(reading.workloads))
    if over is not None:
        return _Pod(refusal=Refusal("too_many_containers", over))
    containers: list[_Container] = []
    for workload in reading.workloads:
        if workload.gpus is None:
            continue
        checkpoint()
        who = f"container {workload.container or workload.path}"
        plan, problem = plan_workload(workload, image=image_at(pod, workload))
        if plan is None:
            detail = problem.pod_message() if problem is not None else "no model"
            return _Pod(refusal=Refusal("model_unresolved", f"{who}: {detail}"))
        if plan.problems:
            return _Pod(refusal=Refusal("will_not_start", f"{who}: {_messages(plan.problems)}"))
        prepared = prepare(plan, catalogs)
        if isinstance(prepared, ReadProblem):
            return _Pod(refusal=Refusal("model_unresolved", f"{who}: {prepared.pod_message()}"))
        containers.append(_Container(prepared, workload.gpus, who))
    # GPUs requested only by containers that run no serving engine: nothing to judge.
    return _Pod(tuple(containers))


_Verdicts = list[tuple[GpuVerdict, NodeGpu]]


def _judge_node(
    pod: _Pod,
    node: object,
    catalogs: Catalogs,
    cache: dict[tuple[int, GpuSpec, int | None], GpuVerdict],
) -> tuple[_Verdicts, str | None]:
    """Verdicts of each container on this node, or a reason it cannot be judged."""
    gpus = read_node(node)
    if isinstance(gpus, ReadProblem):
        return [], gpus.message()
    out: _Verdicts = []
    for index, container in enumerate(pod.containers):
        found = node_gpu(gpus, container.request, catalogs)
        if found is None:
            return [], "its labels do not say which GPU the pod would get"
        prepared = container.prepared
        if prepared.request.host_memory_bytes is None and gpus.memory_bytes is not None:
            # No memory limit on the pod: the node's allocatable memory bounds it.
            request = dataclasses.replace(prepared.request, host_memory_bytes=gpus.memory_bytes)
            prepared = dataclasses.replace(prepared, request=request)
        key = (index, found.spec, prepared.request.host_memory_bytes)
        if key not in cache:
            cache[key] = verdict_on(prepared, found.label, found.spec)
        out.append((cache[key], found))
    return out, None


def _reason(verdict: GpuVerdict, label: str) -> str:
    detail = f": {verdict.detail}" if verdict.detail else ""
    if verdict.reason is None:
        # The estimator refused the pod's own flags (a TP that does not divide the heads):
        # not the GPU's size, and the flag the detail names is the fix.
        return f"the engine cannot run this pod on {label}{detail}"
    why = verdict.reason.value
    if verdict.reason is FitReason.HOST_MEMORY_EXCEEDED:
        return f"host memory too small for this deployment on {label}: {why}{detail}"
    return f"GPU too small for this model on {label}: {why}{detail}"


def _failure(verdicts: _Verdicts) -> str | None:
    for verdict, gpu in verdicts:
        if not verdict.fits:
            return _reason(verdict, gpu.label)
    return None


def _pinned(pod: _Pod, catalogs: Catalogs) -> tuple[list[list[GpuVerdict]] | None, Refusal | None]:
    """Verdicts of each container on each GPU product its pod pins (names-only calls)."""
    out: list[list[GpuVerdict]] = []
    for container in pod.containers:
        plan = container.prepared.plan
        if not plan.gpu_refs:
            return None, Refusal(
                "names_only_unpinned",
                f"{container.name} pins no GPU product and the call carries node names only, "
                f"so no node's GPU can be read; {_NAMES_ONLY_FIX}",
            )
        verdicts: list[GpuVerdict] = []
        for ref in plan.gpu_refs:
            try:
                spec = resolve_gpu(catalogs.gpus, ref)
            except EstimatorError as exc:
                unknown = unknown_gpu(plan.gpu_source or "nodeSelector", ref, exc)
                return None, Refusal(
                    "pinned_gpu_unknown", f"{container.name}: {unknown.pod_message()}"
                )
            verdicts.append(verdict_on(container.prepared, ref, spec))
        out.append(verdicts)
    return out, None


@dataclass(frozen=True)
class _Filtered:
    """A filter answer with what `_count` needs: the refusal, each node's verdict (None: not
    judged), whether the pod was the extender's business at all."""

    result: ExtenderFilterResult
    refusal: Refusal | None = None
    verdicts: tuple[bool | None, ...] = ()
    applicable: bool = True


def _error(refusal: Refusal | None) -> str:
    return refusal.message() if refusal is not None else ""


def _refused(args: ExtenderArgs, refusal: Refusal) -> _Filtered:
    """Every node handed back as it came, ``Error`` saying why none was judged."""
    result = ExtenderFilterResult(
        nodes=args.nodes, node_names=args.node_names, error=_error(refusal)
    )
    return _Filtered(result, refusal)


def _several_products(failing: Sequence[GpuVerdict]) -> Refusal:
    return Refusal(
        "names_only_several_products",
        "the pod allows several GPU products and fits only some "
        f"({', '.join(v.gpu for v in failing)} too small); with node names only the extender "
        f"cannot tell which node has which; {_NAMES_ONLY_FIX}",
    )


def _filter_names(args: ExtenderArgs, pod: _Pod, catalogs: Catalogs) -> _Filtered:
    names = args.node_names or ()
    per_container, refusal = _pinned(pod, catalogs)
    if refusal is not None or per_container is None:
        return _refused(args, refusal or Refusal("names_only_unpinned", _NAMES_ONLY_FIX))
    flat = [v for verdicts in per_container for v in verdicts]
    failing = [v for v in flat if not v.fits]
    if failing and len(failing) < len(flat):
        return _refused(args, _several_products(failing))
    if failing:
        reason = _reason(failing[0], failing[0].gpu) + " (the GPU the pod's node selection pins)"
        result = ExtenderFilterResult(
            node_names=(), failed_and_unresolvable=dict.fromkeys(names, reason)
        )
        return _Filtered(result, verdicts=(False,) * len(names))
    return _Filtered(ExtenderFilterResult(node_names=names), verdicts=(True,) * len(names))


def filter_nodes(args: ExtenderArgs, catalogs: Catalogs, metrics: Metrics) -> ExtenderFilterResult:
    """Nodes whose GPU fits the pod's model; the others, with the reason, as unresolvable;
    ``Error`` when the pod cannot be judged. The answer lists the nodes in the form they came."""
    as_pod = _as_pod(args)
    try:
        training = training_filter(as_pod, catalogs, node_gpu)  # a training pod: its own branch
    except OverLimits as exc:
        refused = _refused(args, Refusal("too_many_containers", exc.detail))
        _count(metrics, "filter", refused.refusal, refused.verdicts, applicable=True)
        return refused.result
    if training is not None:
        failed = training.failed_and_unresolvable
        verdicts = [name not in failed for name in args.names]
        _count(metrics, "filter", None, verdicts, applicable=True)
        return training
    answer = _filter(args, catalogs)
    _count(metrics, "filter", answer.refusal, answer.verdicts, applicable=answer.applicable)
    return answer.result


def _filter(args: ExtenderArgs, catalogs: Catalogs) -> _Filtered:
    pod = _read_pod(args.pod, catalogs)
    if pod.refusal is not None:
        return _refused(args, pod.refusal)
    if not pod.containers:
        result = ExtenderFilterResult(nodes=args.nodes, node_names=args.node_names)
        return _Filtered(result, applicable=False)
    if args.nodes is None:
        return _filter_names(args, pod, catalogs)
    passing: list[Mapping[str, object]] = []
    failed: dict[str, str] = {}
    verdicts_out: list[bool | None] = []
    unjudged: list[str] = []
    cache: dict[tuple[int, GpuSpec, int | None], GpuVerdict] = {}
    for node in args.nodes:
        checkpoint()
        name = node_name(node) or "?"
        verdicts, why_not = _judge_node(pod, node, catalogs, cache)
        if why_not is not None:
            unjudged.append(f"{name}: {why_not}")
            verdicts_out.append(None)
            passing.append(node)
            continue
        reason = _failure(verdicts)
        verdicts_out.append(reason is None)
        if reason is None:
            passing.append(node)
        else:
            failed[name] = reason
    if unjudged and len(unjudged) == len(args.nodes):
        answer = _refused(args, _unlabelled(unjudged))
        return dataclasses.replace(answer, verdicts=tuple(verdicts_out))
    if unjudged:
        logger.info("extender passed %d node(s) it could not judge: %s", len(unjudged), unjudged)
    names = None
    if args.node_names is not None:
        names = tuple(n for n in args.node_names if n not in failed)
    result = ExtenderFilterResult(
        nodes=tuple(passing), node_names=names, failed_and_unresolvable=failed
    )
    return _Filtered(result, verdicts=tuple(verdicts_out))


def _unlabelled(unjudged: Sequence[str]) -> Refusal:
    return Refusal(
        "nodes_unlabelled",
        f"none of the {len(unjudged)} candidate nodes has labels that name its GPU (GPU "
        "Feature Discovery's nvidia.com/gpu.product, or a cloud's accelerator or instance-type "
        f"label), e.g. {unjudged[0]}",
    )


def _count(
    metrics: Metrics,
    verb: Verb,
    refusal: Refusal | None,
    verdicts: Sequence[bool | None],
    *,
    applicable: bool,
) -> None:
    if refusal is not None:
        outcome = "refused"
    elif applicable:
        outcome = "judged"
    else:
        outcome = "not_applicable"
    metrics.observe_extender(
        verb,
        outcome,
        refusal.reason if refusal is not None else None,
        [
            "unjudged" if verdict is None else ("fits" if verdict else "does_not_fit")
            for verdict in verdicts
        ],
    )


def _score(verdicts: _Verdicts) -> int:
    if not verdicts or any(not v.fits for v, _ in verdicts):
        return 0
    return _tightness([v for v, _ in verdicts], any(gpu.time_sliced for _, gpu in verdicts))


def _tightness(verdicts: Sequence[GpuVerdict], time_sliced: bool) -> int:
    tightest = max(v.required_bytes / v.usable_bytes for v in verdicts if v.usable_bytes)
    score = max(1, min(MAX_EXTENDER_PRIORITY, math.floor(MAX_EXTENDER_PRIORITY * tightest)))
    return max(1, score // 2) if time_sliced else score


def prioritize_nodes(
    args: ExtenderArgs, catalogs: Catalogs, metrics: Metrics
) -> tuple[HostPriority, ...]:
    """A score per candidate node: least waste first, 0 where it does not fit or is unknown.

    Raises `Refused` (a 422 problem document) for a pod it cannot judge.
    """
    try:
        training = training_prioritize(_as_pod(args), catalogs, node_gpu, _score)  # training
    except OverLimits as exc:
        refusal = Refusal("too_many_containers", exc.detail)
        _count(metrics, "prioritize", refusal, [], applicable=True)
        raise Refused(refusal) from None
    if training is not None:
        _count(metrics, "prioritize", None, [], applicable=True)
        return training
    try:
        scores, verdicts, applicable = _prioritize(args, catalogs)
    except Refused as exc:
        _count(metrics, "prioritize", exc.refusal, [], applicable=True)
        raise
    _count(metrics, "prioritize", None, verdicts, applicable=applicable)
    return scores


def _prioritize(
    args: ExtenderArgs, catalogs: Catalogs
) -> tuple[tuple[HostPriority, ...], list[bool | None], bool]:
    pod = _read_pod(args.pod, catalogs)
    if pod.refusal is not None:
        raise Refused(pod.refusal)
    if not pod.containers:
        return tuple(HostPriority(name, 0) for name in args.names), [], False
    if args.nodes is None:
        per_container, refusal = _pinned(pod, catalogs)
        if refusal is not None or per_container is None:
            raise Refused(refusal or Refusal("names_only_unpinned", _NAMES_ONLY_FIX))
        flat = [v for verdicts in per_container for v in verdicts]
        failing = [v for v in flat if not v.fits]
        if failing and len(failing) < len(flat):
            raise Refused(_several_products(failing))
        fits = not failing
        score = _tightness(flat, time_sliced=False) if fits else 0
        names = args.node_names or ()
        return tuple(HostPriority(n, score) for n in names), [fits] * len(names), True
    cache: dict[tuple[int, GpuSpec, int | None], GpuVerdict] = {}
    out: list[HostPriority] = []
    verdicts_out: list[bool | None] = []
    for node in args.nodes:
        checkpoint()
        name = node_name(node)
        if name is None:
            continue
        verdicts, why_not = _judge_node(pod, node, catalogs, cache)
        verdicts_out.append(None if why_not is not None else all(v.fits for v, _ in verdicts))
        out.append(HostPriority(name, _score(verdicts)))
    if out and all(v is None for v in verdicts_out):
        raise Refused(_unlabelled([n.host for n in out]))
    return tuple(out), verdicts_out, True
