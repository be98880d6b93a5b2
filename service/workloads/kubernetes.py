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
- AIBrix ``StormService`` and ``RayClusterFleet`` (:mod:`.aibrix`), KubeRay ``RayCluster`` and
  ``RayService`` with its Ray Serve LLM configs (:mod:`.kuberay`), KAITO ``Workspace``
  (:mod:`.kaito`), NVIDIA Dynamo ``DynamoGraphDeployment`` (:mod:`.dynamo`): their modules say
  which fields are read.
- The variables a controller sets in the pods it makes (LeaderWorkerSet's ``LWS_GROUP_SIZE``,
  ``LWS_WORKER_INDEX``, ``LWS_LEADER_ADDRESS``; AIBrix's ``POD_GROUP_SIZE``, ...) take the
  values the object gives them, so ``$(VAR)``, ``$VAR`` and shell arithmetic on them
  (``$((LWS_GROUP_SIZE * DP_SIZE_LOCAL))``) read as the integers the engine receives.
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

from collections.abc import Callable, Mapping

from service.workloads.aibrix import read_ray_cluster_fleet, read_storm_service
from service.workloads.controllers import (
    read_inference_service,
    read_llm_inference_service,
    read_production_stack,
)
from service.workloads.dynamo import read_dynamo_graph
from service.workloads.kaito import read_workspace
from service.workloads.kuberay import read_ray_cluster, read_ray_service
from service.workloads.pods import (
    Collector,
    OtherContainer,
    PodTemplate,
    Role,
    ServingWorkload,
    WorkloadReading,
    as_map,
    as_text,
    pod_gpus,
    read_pod,
    sourced_count,
    string_map,
    subtree,
)
from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.kinds import serving_reader

__all__ = [
    "OtherContainer",
    "ServingWorkload",
    "WorkloadReading",
    "read_workloads",
]


# ---------------------------------------------------------------------------- kinds

_DEFAULT_ONE = "default (Kubernetes: 1)"

# llm-d's guides label each side of disaggregated serving ``llm-d.ai/role: prefill|decode`` on
# the Deployment or LeaderWorkerSet and its pod template (llm-d/llm-d
# ``guides/wide-ep-lws/manifests/modelserver/base/decode.yaml``, ``guides/pd-disaggregation``);
# its inference scheduler routes on that label, so the pods carry the role they serve.
_LLM_D_ROLE_LABEL = "llm-d.ai/role"
_LLM_D_ROLES: Mapping[str, Role] = {"prefill": "prefill", "decode": "decode"}


def _labelled_role(obj: Mapping[str, object], template_path: str, default: Role) -> Role:
    """The llm-d role of the pods at ``template_path`` (a ``...spec``): their template's label,
    else the object's; ``default`` when neither names one."""
    template_labels = subtree(obj, template_path.rsplit(".", 1)[0] + ".metadata.labels")
    for labels in (template_labels, subtree(obj, "metadata.labels")):
        role = _LLM_D_ROLES.get(as_text(as_map(labels).get(_LLM_D_ROLE_LABEL)) or "")
        if role is not None:
            return role
    return default


def _read_pod_object(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return ReadProblem("spec", "a Pod needs a spec", "send the whole Pod object")
    one = Sourced(1, "a Pod is one replica")
    read_pod(out, PodTemplate(out.kind, "main", "spec", spec, one, Sourced(1, "a Pod")))
    return None


def _replicated(
    replicas_key: str, template_path: str
) -> Callable[[Mapping[str, object], Collector], ReadProblem | None]:
    def read(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
        spec = subtree(obj, template_path)
        if spec is None:
            return ReadProblem(template_path, f"a {out.kind} needs a pod template here")
        parent = subtree(obj, replicas_key.rsplit(".", 1)[0]) or {}
        replicas = sourced_count(
            parent.get(replicas_key.rsplit(".", 1)[1]), replicas_key, 1, _DEFAULT_ONE
        )
        read_pod(
            out,
            PodTemplate(
                out.kind,
                _labelled_role(obj, template_path, "main"),
                template_path,
                spec,
                replicas,
                Sourced(1, "one pod per replica"),
            ),
        )
        return None

    return read


def _read_lws(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    base = "spec.leaderWorkerTemplate"
    lwt = subtree(obj, base)
    if lwt is None:
        return ReadProblem(base, "a LeaderWorkerSet needs spec.leaderWorkerTemplate")
    worker = subtree(lwt, "workerTemplate.spec")
    if worker is None:
        return ReadProblem(f"{base}.workerTemplate.spec", "the worker pod template is missing")
    leader = subtree(lwt, "leaderTemplate.spec")
    leader_path = (
        f"{base}.leaderTemplate.spec" if leader is not None else f"{base}.workerTemplate.spec"
    )
    size = sourced_count(lwt.get("size"), f"{base}.size", 1, "default (LeaderWorkerSet: 1)")
    replicas = sourced_count(
        as_map(obj.get("spec")).get("replicas"), "spec.replicas", 1, "default (LeaderWorkerSet: 1)"
    )
    worker_path = f"{base}.workerTemplate.spec"
    worker_gpus = pod_gpus(worker, worker_path)
    leader_spec = leader if leader is not None else worker
    leader_gpus = pod_gpus(leader_spec, leader_path)
    workers = max(size.value - 1, 0)
    read_pod(
        out,
        PodTemplate(
            out.kind,
            "leader" if leader is not None else _labelled_role(obj, leader_path, "leader"),
            leader_path,
            leader_spec,
            replicas,
            size,
            workers * worker_gpus,
            _lws_env(out, size, 0),
        ),
    )
    if leader is not None and workers:
        read_pod(
            out,
            PodTemplate(
                out.kind,
                "worker",
                worker_path,
                worker,
                replicas,
                size,
                leader_gpus + (workers - 1) * worker_gpus,
                _lws_env(out, size, 1),
            ),
        )
    return None


def _lws_env(out: Collector, size: Sourced[int], index: int) -> dict[str, Sourced[str]]:
    """The variables LeaderWorkerSet sets in every container (kubernetes-sigs/lws
    ``pkg/utils/pod/pod_utils.go`` ``AddLWSVariables``; the reference table in
    ``site/content/en/docs/reference/labels-annotations-and-environment-variables.md``), as
    group 0 sees them: the worker template is read as its first worker (index 1)."""
    env = {
        "LWS_GROUP_SIZE": Sourced(str(size.value), f"LWS_GROUP_SIZE = {size.source}"),
        "LWS_WORKER_INDEX": Sourced(
            str(index),
            "LWS_WORKER_INDEX = 0 (the leader)"
            if index == 0
            else "LWS_WORKER_INDEX = 1 (the first worker; each worker has its own)",
        ),
    }
    if out.name:
        # "<lws>-<group index>.<lws>.<namespace>", the leader's name behind the headless service.
        address = f"{out.name}-0.{out.name}.{out.namespace or 'default'}"
        env["LWS_LEADER_ADDRESS"] = Sourced(
            address, "LWS_LEADER_ADDRESS = the group's leader (group 0), from metadata.name"
        )
    return env


_Reader = Callable[[Mapping[str, object], Collector], "ReadProblem | None"]

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
    "InferenceService": read_inference_service,
    "LLMInferenceService": read_llm_inference_service,
    "StormService": read_storm_service,
    "DynamoGraphDeployment": read_dynamo_graph,
    "RayClusterFleet": read_ray_cluster_fleet,
    "RayCluster": read_ray_cluster,
    "RayService": read_ray_service,
    "Workspace": read_workspace,
    "PyTorchJob": serving_reader("PyTorchJob"),
    "JobSet": serving_reader("JobSet"),
    "RayJob": serving_reader("RayJob"),
    "Workload": serving_reader("Workload"),
}
PRODUCTION_STACK_KIND = "vllm-production-stack values"


def read_workloads(obj: object, *, kind: str | None = None) -> WorkloadReading | ReadProblem:
    """Read a Kubernetes object (or production-stack Helm values) into serving workloads.

    ``kind`` is the kind the place the object came from implies, for objects that carry no
    TypeMeta: decoding into a typed Go struct clears ``kind`` and ``apiVersion``
    (k8s.io/apimachinery ``pkg/runtime/helper.go``, ``WithoutVersionDecoder``; discussed in
    kubernetes/kubernetes#80609 and kubernetes/client-go#308), so the objects of an informer's
    cache have neither, and kube-scheduler marshals the Pod of ``ExtenderArgs`` from that
    cache. An object whose own ``kind`` differs from the implied one is refused.

    Never raises: what cannot be read as a workload gives a `ReadProblem` saying what is
    missing; a container that cannot be read gives a problem inside the `WorkloadReading`.
    """
    try:
        return _read(obj, kind)
    except RecursionError:  # pragma: no cover - a pathological nesting depth
        return ReadProblem("object", "the object is nested too deeply to read")


def _read(obj: object, implied: str | None) -> WorkloadReading | ReadProblem:
    if not isinstance(obj, Mapping):
        return ReadProblem("object", "expected a JSON object", "send a Kubernetes object")
    kind = as_text(obj.get("kind")) or None
    metadata = as_map(obj.get("metadata"))
    if implied is not None and kind is not None and kind != implied:
        return ReadProblem("kind", f"the object says kind {kind!r} where a {implied} is expected")
    kind = kind or implied
    if kind is None and "servingEngineSpec" in obj:
        kind = PRODUCTION_STACK_KIND
        reader: _Reader | None = read_production_stack
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
    out = Collector(
        kind=kind,
        name=as_text(metadata.get("name")),
        namespace=as_text(metadata.get("namespace")),
        labels=string_map(metadata.get("labels")),
        annotations=string_map(metadata.get("annotations")),
    )
    problem = reader(obj, out)
    if problem is not None:
        return problem
    return out.reading()
