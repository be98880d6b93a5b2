"""Readers of KubeRay's objects (ray-project/kuberay, ``ray.io/v1``) and of the Ray Serve LLM
configuration a RayService carries.

- ``RayClusterSpec`` (``ray-operator/apis/ray/v1/raycluster_types.go``): a head pod from
  ``headGroupSpec.template`` and, per ``workerGroupSpecs[]``, ``replicas`` (KubeRay's default 0)
  times ``numOfHosts`` (default 1) worker pods from its ``template``. One Ray cluster is one
  group: an engine started with the Ray executor in the head pod (``vllm serve …
  --distributed-executor-backend ray``, AIBrix's RayClusterFleet sample) uses the GPUs of every
  pod of the cluster. Containers that only run ``ray start`` are listed with their GPUs.
- ``RayCluster``: that spec in ``spec``.
- ``RayService`` (``ray-operator/apis/ray/v1/rayservice_types.go``): the cluster in
  ``spec.rayClusterConfig`` and the Serve applications in ``spec.serveConfigV2`` (a YAML
  document in a string). An application built by Ray Serve LLM
  (``import_path: ray.serve.llm:build_openai_app``, ray-project/ray
  ``python/ray/llm/_internal/serve/configs/server_models.py`` ``LLMConfig``) is read per
  ``args.llm_configs[]``: the model from ``model_loading_config.model_source`` (else
  ``model_id``), vLLM's engine arguments from ``engine_kwargs`` (the keyword names of vLLM's
  ``EngineArgs``, read as the flags they are on the command line), the GPU from
  ``accelerator_type`` (Ray's accelerator names, :mod:`.cloud_gpus`) or the worker pods' node
  selection, and the copies from ``deployment_config`` (``num_replicas``, else
  ``autoscaling_config.min_replicas``, ``initial_replicas``). Each copy runs one vLLM engine on
  tensor × pipeline parallel GPUs that Ray places on the cluster's GPU workers. An application
  importing code of its own is reported as not read: what its code runs is not in the object.

The YAML is read with aliases refused and its size bounded (`MAX_SERVE_CONFIG_CHARS`), so a
small document cannot expand into a large one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs in the lint extras

from service.workloads.cloud_gpus import ray_accelerator_products
from service.workloads.commands import parse_engine_args
from service.workloads.gpus import GpuRequest, ProductSelector, product_selector
from service.workloads.models import model_ref
from service.workloads.pods import (
    Collector,
    PodTemplate,
    as_list,
    as_map,
    as_text,
    pod_gpus,
    read_pod,
    sourced_count,
    subtree,
)
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError

__all__ = [
    "MAX_SERVE_CONFIG_CHARS",
    "read_ray_cluster",
    "read_ray_cluster_spec",
    "read_ray_service",
]

MAX_SERVE_CONFIG_CHARS = 65536
_LLM_APP = "ray.serve.llm:build_openai_app"
_ONE = "default (KubeRay: 1)"


def read_ray_cluster_spec(
    out: Collector, spec: Mapping[str, object], path: str, replicas: Sourced[int]
) -> ReadProblem | None:
    """Read the pods of one Ray cluster; ``replicas`` copies of it run."""
    head_path = f"{path}.headGroupSpec.template.spec"
    head = subtree(spec, "headGroupSpec.template.spec")
    if head is None:
        return ReadProblem(head_path, "a Ray cluster needs a head pod template")
    workers: list[tuple[str, Mapping[str, object], int]] = []
    for index, raw in enumerate(as_list(spec.get("workerGroupSpecs"))):
        group = as_map(raw)
        group_path = f"{path}.workerGroupSpecs[{index}]"
        template = subtree(group, "template.spec")
        if template is None:
            out.problems.append(ReadProblem(f"{group_path}.template.spec", "no pod template"))
            continue
        count = sourced_count(group.get("replicas"), f"{group_path}.replicas", 0, "0")
        hosts = sourced_count(group.get("numOfHosts"), f"{group_path}.numOfHosts", 1, _ONE)
        workers.append((f"{group_path}.template.spec", template, count.value * hosts.value))
    total = 1 + sum(n for _, _, n in workers)
    group_pods = Sourced(total, f"the Ray cluster: 1 head + {total - 1} worker pods")
    head_gpus = pod_gpus(head, head_path)
    worker_gpus = [n * pod_gpus(t, p) for p, t, n in workers]
    read_pod(
        out,
        PodTemplate(out.kind, "leader", head_path, head, replicas, group_pods, sum(worker_gpus)),
    )
    for index, (worker_path, template, pods) in enumerate(workers):
        if not pods:
            continue
        own = worker_gpus[index] // pods
        others = head_gpus + sum(worker_gpus) - own
        read_pod(
            out,
            PodTemplate(out.kind, "worker", worker_path, template, replicas, group_pods, others),
        )
    return None


def read_ray_cluster(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """A RayCluster: one cluster from ``spec``."""
    spec = subtree(obj, "spec")
    if spec is None:
        return ReadProblem("spec", "a RayCluster needs a spec")
    return read_ray_cluster_spec(out, spec, "spec", Sourced(1, "a RayCluster is one cluster"))


class _NoAliasLoader(yaml.SafeLoader):  # type: ignore[misc]
    """YAML without anchors' aliases: each node is read once."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("YAML aliases are not read")
        return super().compose_node(parent, index)


def _serve_config(text: str) -> object | ReadProblem:
    field = "spec.serveConfigV2"
    if len(text) > MAX_SERVE_CONFIG_CHARS:
        return ReadProblem(field, f"longer than {MAX_SERVE_CONFIG_CHARS} characters: not read")
    try:
        loaded: object = yaml.load(text, Loader=_NoAliasLoader)
        return loaded
    except yaml.YAMLError as exc:
        return ReadProblem(field, f"not a YAML document the service reads: {str(exc)[:160]}")


def read_ray_service(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """A RayService: its Ray cluster, and the Ray Serve LLM deployments of ``serveConfigV2``."""
    cluster = subtree(obj, "spec.rayClusterConfig")
    if cluster is None:
        return ReadProblem("spec.rayClusterConfig", "a RayService needs a Ray cluster")
    one = Sourced(1, "a RayService runs one cluster")
    problem = read_ray_cluster_spec(out, cluster, "spec.rayClusterConfig", one)
    if problem is not None:
        return problem
    text = as_text(as_map(obj.get("spec")).get("serveConfigV2"))
    if not text:
        return None
    config = _serve_config(text)
    if isinstance(config, ReadProblem):
        out.problems.append(config)
        return None
    for index, raw in enumerate(as_list(as_map(config).get("applications"))):
        application = as_map(raw)
        app_path = f"spec.serveConfigV2 applications[{index}]"
        imported = as_text(application.get("import_path")) or ""
        if imported != _LLM_APP:
            out.problems.append(
                ReadProblem(
                    f"{app_path}.import_path",
                    f"{imported or 'no import_path'}: the application's own code decides what "
                    "it serves, which the object does not say",
                    "serve with ray.serve.llm:build_openai_app and llm_configs to be checked",
                )
            )
            continue
        for k, llm in enumerate(as_list(as_map(application.get("args")).get("llm_configs"))):
            if isinstance(llm, Mapping):
                _read_llm_config(out, llm, f"{app_path}.args.llm_configs[{k}]", cluster)
            else:
                out.problems.append(
                    ReadProblem(
                        f"{app_path}.args.llm_configs[{k}]",
                        "an LLM config kept in a file is not in the object",
                    )
                )
    return None


def _flag_words(kwargs: Mapping[str, object], path: str) -> list[Token]:
    """``engine_kwargs`` as the command-line flags vLLM's ``EngineArgs`` reads them from."""
    words: list[Token] = []
    for key, value in kwargs.items():
        source = f"{path}.{key}"
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            words.append(Token(flag if value else "--no-" + flag[2:], source))
        elif isinstance(value, int | float | str):
            words += [Token(flag, source), Token(str(value), source)]
        elif value is not None:
            words += [Token(flag, source), Token(json.dumps(value), source)]
    return words


def _llm_replicas(llm: Mapping[str, object], path: str) -> Sourced[int]:
    deployment = as_map(llm.get("deployment_config"))
    scaling = as_map(deployment.get("autoscaling_config"))
    base = f"{path}.deployment_config"
    if "num_replicas" in deployment and deployment["num_replicas"] != "auto":
        return sourced_count(deployment.get("num_replicas"), f"{base}.num_replicas", 1, "1")
    for key in ("min_replicas", "initial_replicas"):
        if key in scaling:
            return sourced_count(scaling.get(key), f"{base}.autoscaling_config.{key}", 1, "1")
    return Sourced(1, "default (Ray Serve: 1)")


def _llm_product(
    llm: Mapping[str, object], path: str, cluster: Mapping[str, object]
) -> ProductSelector | None:
    accelerator = as_text(llm.get("accelerator_type"))
    if accelerator:
        products = ray_accelerator_products(accelerator)
        source = f"{path}.accelerator_type ({accelerator} = {', '.join(products)})"
        return ProductSelector(products, source)
    for index, raw in enumerate(as_list(cluster.get("workerGroupSpecs"))):
        group_path = f"spec.rayClusterConfig.workerGroupSpecs[{index}].template.spec"
        found = product_selector(subtree(as_map(raw), "template.spec"), group_path)
        if found is not None:
            return found
    return None


def _read_llm_config(
    out: Collector, llm: Mapping[str, object], path: str, cluster: Mapping[str, object]
) -> None:
    loading = as_map(llm.get("model_loading_config"))
    name = as_text(loading.get("model_source")) or as_text(loading.get("model_id"))
    key = "model_source" if loading.get("model_source") else "model_id"
    if not name:
        out.problems.append(ReadProblem(f"{path}.model_loading_config", "no model named"))
        return
    kwargs = as_map(llm.get("engine_kwargs"))
    try:
        command = parse_engine_args(
            "vllm",
            _flag_words(kwargs, f"{path}.engine_kwargs"),
            entrypoint="Ray Serve LLM (vLLM engine)",
            entrypoint_source=f"{path} (ray.serve.llm runs vLLM)",
        )
    except WorkloadError as exc:
        out.problems.append(exc.problem)
        return
    layout = command.layout()
    gpus = layout["tensor"].value * layout["pipeline"].value
    request = GpuRequest(
        "nvidia.com/gpu",
        gpus,
        f"{path}.engine_kwargs: tensor × pipeline parallel GPUs, placed by Ray on the workers",
    )
    pod = PodTemplate(
        out.kind, "main", path, {}, _llm_replicas(llm, path), Sourced(1, "one Ray Serve replica")
    )
    out.add(
        pod,
        path=path,
        container=as_text(loading.get("model_id")),
        command=command,
        engine_source=f"{path} (ray.serve.llm:build_openai_app runs vLLM)",
        gpus=request,
        model=model_ref(name, f"{path}.model_loading_config.{key}"),
        product=_llm_product(llm, path, cluster),
        notes=("the engine runs in a Ray actor on the cluster's GPU workers",),
    )
