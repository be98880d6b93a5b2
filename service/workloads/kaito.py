"""Reader of KAITO's ``Workspace`` (kaito-project/kaito, ``kaito.sh/v1beta1`` and
``v1alpha1``; ``api/v1beta1/workspace_types.go``).

A Workspace keeps ``resource`` and ``inference`` at the top level, beside ``metadata``:

- ``resource.instanceType``: the node's instance type, hence its GPU and GPU count
  (:mod:`.cloud_gpus`; KAITO's own table is ``pkg/sku/*_sku_handler.go``); ``resource.count``
  nodes (default 1), one pod each, which KAITO gives every GPU of its node
  (``pkg/workspace/inference/preset_inferences.go``: requests and limits of
  ``nvidia.com/gpu`` = the SKU's GPU count). Without an instance type (bring-your-own nodes
  chosen by ``resource.labelSelector``) the GPU is left open.
- ``inference.preset.name``: a model KAITO ships (the Hugging Face repository of each preset:
  ``kaito_presets.toml``), served by vLLM unless the annotation ``kaito.sh/runtime`` says
  ``transformers`` (``api/v1beta1/labels.go`` ``GetWorkspaceRuntimeName``). KAITO's vLLM
  command (``pkg/model/interface.go`` ``buildVLLMInferenceCommand``,
  ``configureParallelism``): ``--max-model-len=auto``, ``--gpu-memory-utilization`` 0.84
  (0.82 on an A10), ``--tensor-parallel-size`` = the node's GPUs and, on several nodes,
  ``--pipeline-parallel-size`` = the nodes. A model under half of one GPU's memory KAITO runs
  as data parallel (DP = GPUs, TP 1) on one node instead; that choice needs the model's size,
  so it is noted, and it changes no fit verdict (the model then fits one GPU).
- ``inference.template``: a pod template of the user's own, read like a Pod.
- ``inference.config``: a ConfigMap of vLLM options, which is not in the object (noted).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

from service.workloads.cloud_gpus import INSTANCE_TYPE_LABELS, InstanceType, instance_type
from service.workloads.commands import find_engine_command
from service.workloads.gpus import GpuRequest, ProductSelector
from service.workloads.models import model_ref
from service.workloads.pods import (
    Collector,
    OtherContainer,
    PodTemplate,
    as_map,
    as_text,
    read_pod,
    sourced_count,
    subtree,
)
from service.workloads.sources import ReadProblem, Sourced, Token, WorkloadError

__all__ = ["PRESETS", "read_workspace"]

_PRESETS_FILE = Path(__file__).with_name("kaito_presets.toml")
_DATA = tomllib.loads(_PRESETS_FILE.read_text(encoding="utf-8"))
PRESETS: Mapping[str, str] = {name: row["repo"] for name, row in _DATA["presets"].items()}
_PRESETS_SOURCE: str = _DATA["source"]
_RUNTIME_ANNOTATION = "kaito.sh/runtime"
_KAITO_COMMAND = "kaito-project/kaito pkg/model/interface.go buildVLLMInferenceCommand"
# KAITO's --gpu-memory-utilization (pkg/model/interface.go defaultGPUMemoryUtilization and
# gpuMemoryUtilizationByGPUModel: 0.82 for "NVIDIA A10").
_UTILIZATION = {"NVIDIA-A10": "0.82"}
_DEFAULT_UTILIZATION = "0.84"


def read_workspace(obj: Mapping[str, object], out: Collector) -> ReadProblem | None:
    """A KAITO Workspace: its preset (or pod template) on its instance type's GPUs."""
    resource = as_map(obj.get("resource"))
    inference = as_map(obj.get("inference"))
    if not inference:
        return ReadProblem(
            "inference", "the Workspace serves no model", "give inference.preset.name"
        )
    nodes = sourced_count(resource.get("count"), "resource.count", 1, "default (KAITO: 1)")
    sku_name = as_text(resource.get("instanceType"))
    sku = instance_type(sku_name) if sku_name else None
    replicas = Sourced(1, "a Workspace is one serving group")
    pods = Sourced(nodes.value, f"{nodes.source} (one pod per node)")
    template = subtree(inference, "template.spec")
    if template is not None:
        read_pod(
            out, PodTemplate(out.kind, "main", "inference.template.spec", template, replicas, pods)
        )
        return None
    preset = as_text(as_map(inference.get("preset")).get("name"))
    if not preset:
        return ReadProblem("inference.preset.name", "neither a preset nor a pod template")
    runtime = as_map(as_map(obj.get("metadata")).get("annotations")).get(_RUNTIME_ANNOTATION)
    if runtime == "transformers":
        out.others.append(
            OtherContainer(
                "inference.preset",
                preset,
                f"metadata.annotations[{_RUNTIME_ANNOTATION}] selects the transformers runtime",
            )
        )
        return None
    repo = PRESETS.get(preset)
    if repo is None:
        return ReadProblem(
            "inference.preset.name",
            f"preset {preset!r} is not one of KAITO's text-generation presets ({_PRESETS_SOURCE})",
        )
    notes: list[str] = []
    if inference.get("config"):
        notes.append(
            f"inference.config names ConfigMap {inference.get('config')!r}, whose vLLM options "
            "are not in the object: KAITO's defaults are assumed"
        )
    if sku is None:
        notes.append(
            "resource.instanceType "
            + (f"{sku_name!r} is not in the instance-type table" if sku_name else "is not given")
            + ": the GPU and the GPUs per node are not known"
        )
    words = _command(preset, repo, sku, nodes.value)
    try:
        command = find_engine_command(words)
    except WorkloadError as exc:
        out.problems.append(exc.problem)
        return None
    if command is None:  # pragma: no cover - the words start with vllm serve
        return ReadProblem("inference.preset", "no engine command")
    gpus = None
    product = None
    if sku is not None:
        source = f"resource.instanceType ({sku.name}: {sku.gpus} x {sku.product}, all of them)"
        gpus = GpuRequest("nvidia.com/gpu", sku.gpus, source)
        product = ProductSelector(
            (sku.product,), f'resource.instanceType ({INSTANCE_TYPE_LABELS[0]}="{sku.name}")'
        )
        if nodes.value == 1 and sku.gpus > 1:
            notes.append(
                "KAITO runs a model under half of one GPU's memory as DP "
                f"{sku.gpus} x TP 1 instead (configureParallelism); the fit is the same"
            )
    # Every node's pod holds all of that node's GPUs: the group's other pods hold the rest.
    others = (nodes.value - 1) * sku.gpus if sku is not None else 0
    pod = PodTemplate(out.kind, "main", "inference.preset", {}, replicas, pods, others)
    out.add(
        pod,
        path="inference.preset",
        container=preset,
        command=command,
        engine_source=f"inference.preset.name (KAITO serves presets with vLLM: {_KAITO_COMMAND})",
        gpus=gpus,
        model=model_ref(repo, f"inference.preset.name ({preset} = {repo}: {_PRESETS_SOURCE})"),
        product=product,
        notes=notes,
    )
    return None


def _command(preset: str, repo: str, sku: InstanceType | None, nodes: int) -> list[Token]:
    """The vLLM command KAITO builds for a preset (``buildVLLMInferenceCommand``)."""
    where = f"KAITO's vLLM command for preset {preset} ({_KAITO_COMMAND})"
    words = ["vllm", "serve", repo, "--max-model-len=auto"]
    product = sku.product if sku is not None else ""
    words += ["--gpu-memory-utilization", _UTILIZATION.get(product, _DEFAULT_UTILIZATION)]
    if sku is not None:
        words += ["--tensor-parallel-size", str(sku.gpus)]
    if nodes > 1:
        words += ["--pipeline-parallel-size", str(nodes)]
    return [Token(word, where) for word in words]
