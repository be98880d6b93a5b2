"""Readers of AIBrix's serving objects (vllm-project/aibrix, ``orchestration.aibrix.ai/v1alpha1``).

- ``StormService`` (``api/orchestration/v1alpha1/stormservice_types.go`` and
  ``roleset_types.go``): ``spec.replicas`` RoleSets, each running every role of
  ``spec.template.spec.roles[]``; a role has ``replicas`` instances of ``podGroupSize`` pods
  (default 1; more for multi-node serving), each from the role's pod ``template``. A role named
  ``prefill`` or ``decode`` is that side of disaggregated serving; a role whose containers run
  no engine (a router) is listed among the other containers. The controller puts its own
  variables first in every container's ``env`` (``pkg/controller/roleset/utils.go``
  ``injectContainerEnvVars``; ``pkg/controller/podset/podset_controller.go`` for a pod group;
  names in ``pkg/controller/constants/stormservice.go``): ``STORM_SERVICE_NAME``,
  ``ROLE_NAME``, ``ROLE_REPLICA_INDEX``, and in a pod group ``POD_GROUP_SIZE`` and
  ``POD_GROUP_INDEX``; they are read with the values the object gives them (index 0).
- ``RayClusterFleet`` (``api/orchestration/v1alpha1/rayclusterfleet_types.go``): a
  Deployment-like set of ``spec.replicas`` KubeRay clusters from ``spec.template.spec`` (a
  ``RayClusterSpec``), read as :mod:`.kuberay` reads a RayCluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from service.workloads.kuberay import read_ray_cluster_spec
from service.workloads.pods import (
    Collector,
    PodTemplate,
    Role,
    as_list,
    as_map,
    as_text,
    pod_gpus,
    read_pod,
    sourced_count,
    subtree,
)
from service.workloads.sources import ReadProblem, Sourced

__all__ = ["read_ray_cluster_fleet", "read_storm_service"]

_ROLES: Mapping[str, Role] = {"prefill": "prefill", "decode": "decode"}
_DEFAULT = "default (AIBrix: 1)"


def _injected(
    out: Collector, role: str, path: str, group: Sourced[int] | None
) -> dict[str, Sourced[str]]:
    where = "set by the StormService controller"
    env = {
        "ROLE_NAME": Sourced(role, f"ROLE_NAME = {path}.name ({where})"),
        "ROLE_REPLICA_INDEX": Sourced("0", f"ROLE_REPLICA_INDEX = 0, the first replica ({where})"),
    }
    if out.name:
        env["STORM_SERVICE_NAME"] = Sourced(
            out.name, f"STORM_SERVICE_NAME = metadata.name ({where})"
        )
    if group is not None:
        env["POD_GROUP_SIZE"] = Sourced(str(group.value), f"POD_GROUP_SIZE = {group.source}")
        env["POD_GROUP_INDEX"] = Sourced(
            "0", f"POD_GROUP_INDEX = 0, the group's first pod ({where})"
        )
    return env


def read_storm_service(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """A StormService: every role with a serving container, multiplied by the RoleSets."""
    roles = as_list(as_map(subtree(obj, "spec.template.spec")).get("roles"))
    if not roles:
        return ReadProblem(
            "spec.template.spec.roles",
            "a StormService needs roles",
            "give spec.template.spec.roles[] with a pod template each",
        )
    sets = sourced_count(as_map(obj.get("spec")).get("replicas"), "spec.replicas", 1, _DEFAULT)
    for index, raw in enumerate(roles):
        role = as_map(raw)
        path = f"spec.template.spec.roles[{index}]"
        spec = subtree(role, "template.spec")
        if spec is None:
            out.problems.append(
                ReadProblem(f"{path}.template.spec", "the role has no pod template")
            )
            continue
        name = as_text(role.get("name")) or ""
        copies = sourced_count(role.get("replicas"), f"{path}.replicas", 1, _DEFAULT)
        replicas = Sourced(copies.value * sets.value, f"{copies.source} × {sets.source} (RoleSets)")
        group = (
            sourced_count(role.get("podGroupSize"), f"{path}.podGroupSize", 1, _DEFAULT)
            if "podGroupSize" in role
            else None
        )
        pods = group or Sourced(1, "one pod per role replica")
        # Every pod of a group runs the same template: the others hold as many GPUs again.
        others = (pods.value - 1) * pod_gpus(spec, f"{path}.template.spec")
        read_pod(
            out,
            PodTemplate(
                out.kind,
                _ROLES.get(name, "main"),
                f"{path}.template.spec",
                spec,
                replicas,
                pods,
                others,
                _injected(out, name, path, group),
            ),
        )
    return None


def read_ray_cluster_fleet(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """A RayClusterFleet: ``spec.replicas`` copies of the RayCluster in ``spec.template.spec``."""
    spec = subtree(obj, "spec.template.spec")
    if spec is None:
        return ReadProblem(
            "spec.template.spec", "a RayClusterFleet needs a RayCluster spec in its template"
        )
    replicas = sourced_count(as_map(obj.get("spec")).get("replicas"), "spec.replicas", 1, _DEFAULT)
    return read_ray_cluster_spec(out, spec, "spec.template.spec", replicas)
