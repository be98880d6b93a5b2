"""Reader of NVIDIA Dynamo's ``DynamoGraphDeployment`` (``nvidia.com/v1alpha1``).

Fields as ai-dynamo/dynamo's operator defines them (``deploy/cloud/operator/api/v1alpha1``:
``DynamoGraphDeploymentSpec.services`` and ``DynamoComponentDeploymentSharedSpec``) and its
published manifests use them (``components/backends/vllm/deploy/disagg.yaml``,
``disagg-multinode.yaml``, ``agg_70b.yaml``):

- ``spec.services`` maps a service name to its spec: ``componentType`` (``frontend``,
  ``planner``, ``main``, ``worker``), ``subComponentType`` (``prefill`` or ``decode`` for the
  two sides of disaggregated serving), ``replicas`` (default 1), ``multinode.nodeCount`` (the
  pods of one multi-node instance, default 1), ``resources.requests`` / ``resources.limits``
  with ``gpu`` (a count as a string; the operator requests it as ``nvidia.com/gpu``), ``cpu``
  and ``memory``, and ``extraPodSpec``: a pod spec whose ``mainContainer`` is the container the
  operator runs (its ``command``, ``args``, ``image``, ``env``), read here as the pod's first
  container with the service's resources on it.
- The worker runs ``python3 -m dynamo.vllm`` or ``dynamo.sglang`` with the engine's own flags
  (:mod:`.commands`); ``--is-prefill-worker`` marks a vLLM prefill worker when
  ``subComponentType`` is not given.

Each worker is judged on its own GPUs with its role (prefill/decode); the frontend and planner
run no engine and are listed among the other containers.
"""

from __future__ import annotations

from collections.abc import Mapping

from service.workloads.pods import (
    Collector,
    PodTemplate,
    Role,
    as_list,
    as_map,
    as_text,
    read_pod,
    sourced_count,
)
from service.workloads.sources import ReadProblem, Sourced

__all__ = ["read_dynamo_graph"]

_DEFAULT = "default (Dynamo: 1)"
_ROLES: Mapping[str, Role] = {"prefill": "prefill", "decode": "decode"}
# What the operator turns a service's resource names into on the main container.
_RESOURCE_NAMES = {"gpu": "nvidia.com/gpu", "cpu": "cpu", "memory": "memory"}


def _resources(service: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """The service's ``resources`` as a container's (``gpu`` becomes ``nvidia.com/gpu``)."""
    out: dict[str, dict[str, object]] = {}
    for side in ("requests", "limits"):
        given = as_map(as_map(service.get("resources")).get(side))
        named = {_RESOURCE_NAMES[k]: v for k, v in given.items() if k in _RESOURCE_NAMES}
        if named:
            out[side] = named
    return out


def _role(name: str, service: Mapping[str, object], words: list[str]) -> Role:
    sub = (as_text(service.get("subComponentType")) or "").lower()
    if sub in _ROLES:
        return _ROLES[sub]
    if any("--is-prefill-worker" in w for w in words):
        return "prefill"
    lowered = name.lower()
    for word, role in _ROLES.items():
        if word in lowered:
            return role
    return "main"


def read_dynamo_graph(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """Every service of a DynamoGraphDeployment, each worker with its role and GPUs."""
    services = as_map(as_map(obj.get("spec")).get("services"))
    if not services:
        return ReadProblem(
            "spec.services",
            "a DynamoGraphDeployment needs services",
            "give spec.services with a service per component (Frontend, workers)",
        )
    for name, raw in services.items():
        service = as_map(raw)
        path = f"spec.services.{name}"
        extra = as_map(service.get("extraPodSpec"))
        main = as_map(extra.get("mainContainer"))
        if not main:
            out.problems.append(
                ReadProblem(f"{path}.extraPodSpec.mainContainer", "the service has no container")
            )
            continue
        container: dict[str, object] = {"name": name, **main}
        resources = _resources(service)
        if resources:
            container["resources"] = resources
        spec = {k: v for k, v in extra.items() if k != "mainContainer"}
        spec["containers"] = [container, *as_list(extra.get("containers"))]
        replicas = sourced_count(service.get("replicas"), f"{path}.replicas", 1, _DEFAULT)
        nodes = sourced_count(
            as_map(service.get("multinode")).get("nodeCount"),
            f"{path}.multinode.nodeCount",
            1,
            "one node (no multinode)",
        )
        gpu = sourced_count(as_map(resources.get("limits")).get("nvidia.com/gpu"), "", 0, "")
        words = [str(w) for w in (*as_list(main.get("command")), *as_list(main.get("args")))]
        read_pod(
            out,
            PodTemplate(
                out.kind,
                _role(name, service, words),
                f"{path}.extraPodSpec",
                spec,
                replicas,
                Sourced(nodes.value, nodes.source),
                (nodes.value - 1) * gpu.value,
            ),
        )
    return None
