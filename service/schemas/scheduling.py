"""Schemas of the scheduler-facing endpoints: pre-flight, the admission webhook and the
kube-scheduler extender.

The admission and extender bodies are the Kubernetes wire types (``admission.k8s.io/v1``
AdmissionReview; ``k8s.io/kube-scheduler/extender/v1`` with Go field names); their routes read
the JSON themselves (the API server and the scheduler must always get an answer in their own
shape), so those schemas document the shape rather than validate it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from service.estimator.result import FitReason
from service.schemas.common import (
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_KEYS,
    STRICT_REQUEST,
    RequestModel,
    ResponseModel,
    json_depth_and_size,
)
from service.schemas.estimates import (
    GPU_DESCRIPTION,
    GPU_MEMORY_DESCRIPTION,
    MAX_GPU_MEMORY,
    MAX_GPUS,
    MIN_GPU_MEMORY,
    EstimateResponse,
    FitOut,
    LayoutOut,
    WeightFormat,
)
from service.schemas.limits import LIMITS, object_problem
from service.workloads.extender import MAX_EXTENDER_PRIORITY, MIN_EXTENDER_PRIORITY

Verdict = Literal["fits", "does_not_fit", "fits_some", "will_not_start", "unknown"]


class PreflightRequest(RequestModel):
    """A workload to check before it is deployed: an engine command line or a manifest."""

    model_config = ConfigDict(
        **STRICT_REQUEST,
        json_schema_extra={
            "oneOf": [{"required": ["command"]}, {"required": ["object"]}],
            "examples": [
                {
                    "command": "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32k",
                    "gpu": "NVIDIA-L4",
                },
                {
                    "object": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "llama"},
                        "spec": {
                            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                            "containers": [
                                {
                                    "name": "vllm",
                                    "image": "vllm/vllm-openai:v0.10.1",
                                    "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct"],
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                }
                            ],
                        },
                    }
                },
            ],
        },
    )

    command: (
        Annotated[str, Field(min_length=1, max_length=LIMITS.command_chars)]
        | Annotated[
            list[Annotated[str, Field(max_length=LIMITS.command_chars)]],
            Field(min_length=1, max_length=LIMITS.argv),
        ]
    ) = Field(  # type: ignore[assignment]
        None,
        description="An engine command line: a shell string (`vllm serve <model> -tp 2`, "
        "`sh -c '...'`) or an argv list as `exec` receives it.",
    )
    object: dict[str, Any] = Field(
        None,  # type: ignore[arg-type]
        description="A Kubernetes object (Pod, Deployment, StatefulSet, ReplicaSet, Job, "
        "CronJob, LeaderWorkerSet, KServe InferenceService or LLMInferenceService) or the vLLM "
        "production-stack Helm values (`servingEngineSpec`), as JSON; for training jobs also "
        "a Kubeflow PyTorchJob or TrainJob, a JobSet, a RayJob or a Kueue Workload, or a "
        "`List` holding one with the ConfigMaps (and a TrainJob's runtime) it uses.",
    )
    model: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="The catalog model id, where the workload names its model by a path or a "
        "storage URI (`/mnt/models`, `s3://...`); it replaces what the workload names.",
    )
    hf_config: dict[str, Any] | None = Field(
        None,
        description="The model's Hugging Face `config.json`, posted as is (as the estimate "
        "endpoint takes it), where the model the workload names is in neither the catalog nor "
        "the model store; it replaces that model, whose name labels the answer. Not with "
        "`model`.",
    )
    weight_format: WeightFormat | None = Field(
        None,
        description="The checkpoint's storage format, as the estimate endpoint's "
        "`weight_format` (llama.cpp's `Q4_K_M` names accepted), where the workload does not "
        "say (no `--quantization`); the workload's own flag wins, with a note.",
    )
    gpu: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description=GPU_DESCRIPTION + " Used where the workload pins no GPU product.",
        examples=["NVIDIA-H100-80GB-HBM3", "l4"],
    )
    gpu_memory_bytes: int | None = Field(
        None,
        ge=MIN_GPU_MEMORY,
        le=MAX_GPU_MEMORY,
        description=GPU_MEMORY_DESCRIPTION + " Used where the workload pins no GPU product.",
    )
    gpu_count: int | None = Field(
        None,
        ge=1,
        le=MAX_GPUS,
        description="GPUs one copy of the workload gets, where it requests none (a command "
        "line); default: what its engine layout uses.",
    )

    files: (
        dict[
            Annotated[str, Field(min_length=1, max_length=4096)],
            Annotated[str, Field(max_length=LIMITS.file_chars)],
        ]
        | None
    ) = Field(
        None,
        max_length=LIMITS.files,
        description="Config files a training job names, by the path the job opens them at "
        "(`ds_z3.json`, `/etc/config/fsdp.yaml`, `examples/train_lora/llama3_lora_sft.yaml`): "
        "DeepSpeed JSON, accelerate configs, LLaMA-Factory, axolotl and torchtune recipes. A "
        "path is matched as written, against the container's working directory, then by its "
        "file name. A file a job names that is not here is reported as unknown. ConfigMaps "
        "sent with the object in a `List` are read where the container mounts them.",
    )

    @field_validator("object")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = None if value is None else object_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("hf_config")
    @classmethod
    def _bounded_config(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            depth, size = json_depth_and_size(value)
            if depth > MAX_CONFIG_DEPTH or size > MAX_CONFIG_KEYS:
                raise ValueError(
                    f"config too deep or too large (at most {MAX_CONFIG_DEPTH} levels and "
                    f"{MAX_CONFIG_KEYS} keys); post the model's config.json as is"
                )
        return value

    @field_validator("files")
    @classmethod
    def _bounded_files(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        chars = LIMITS.files_chars
        if value is not None and sum(len(text) for text in value.values()) > chars:
            raise ValueError(f"the files hold more than {chars} characters together")
        return value

    @model_validator(mode="after")
    def _one_input(self) -> PreflightRequest:
        if (self.command is None) == (self.object is None):
            raise ValueError("give exactly one of `command` or `object`")
        if self.gpu is not None and self.gpu_memory_bytes is not None:
            raise ValueError("name the GPU with one of `gpu` or `gpu_memory_bytes`, not both")
        if self.model is not None and self.hf_config is not None:
            raise ValueError("name the model with one of `model` or `hf_config`, not both")
        return self


class SourcedText(ResponseModel):
    value: str = Field(description="The value read.")
    source: str = Field(description="Where it was read: a JSON path, an argv position.")


class SourcedCount(ResponseModel):
    value: int = Field(description="The value read.")
    source: str = Field(description="Where it was read, or `default (...)`.")


class ModelRead(ResponseModel):
    value: str | None = Field(description="The model as the workload names it.")
    source: str | None = Field(description="Where it was read.")
    catalog_id: str | None = Field(description="The catalog model the estimate is for.")


class OptionRead(ResponseModel):
    name: str = Field(description="The engine's own option name (`tensor_parallel_size`).")
    value: int | float | str | bool | list[str] = Field(description="The value read.")
    source: str = Field(description="Where it was read.")
    priced: bool = Field(description="Whether the estimate takes it into account.")
    note: str = Field(description="Why it is not priced, or how it was read.")


class GpusRead(ResponseModel):
    resource: str = Field(description="The extended resource (`nvidia.com/gpu`, a MIG one).")
    count: int = Field(description="Per pod.")
    source: str = Field(description="Where it was read.")


class GpuPinned(ResponseModel):
    values: list[str] = Field(description="GPU products the workload may run on.")
    source: str | None = Field(description="Where they were read.")


class GpuVerdictOut(ResponseModel):
    gpu: str = Field(description="The GPU product (or reference) judged.")
    fits: bool = Field(description="Whether the engine starts and serves one sequence there.")
    reason: FitReason | None = Field(description="As `fit.reason`; null when not judged.")
    reason_detail: str = Field(description="The figures behind the reason.")


class IgnoredArg(ResponseModel):
    text: str = Field(description="The words of the command line no flag table models.")
    source: str = Field(description="Where they were.")


class WorkloadProblem(ResponseModel):
    field: str = Field(description="Where the problem is (a JSON path, an argv position).")
    detail: str = Field(description="What is wrong.")
    fix: str | None = Field(description="How to fix it.")


class PreflightResult(ResponseModel):
    """One serving container: what was read and where, the estimate and the verdict."""

    container: str | None = Field(description="The container's name.")
    path: str | None = Field(description="JSON path of the container or model spec read.")
    role: str = Field(description="`main`; `leader`/`worker`; `prefill`/`decode`.")
    engine: SourcedText = Field(description="vllm or sglang, and what says so.")
    engine_version: SourcedText | None = Field(
        description="The engine release the image tag names (`vllm/vllm-openai:v0.10.1`)."
    )
    model: ModelRead
    options: list[OptionRead] = Field(description="Every modelled engine option read.")
    layout: LayoutOut = Field(description="The engine's parallel layout, as its flags give it.")
    gpus: GpusRead | None = Field(description="GPUs per pod; null when none is requested.")
    gpus_per_group: SourcedCount | None = Field(
        description="GPUs of one copy (a LeaderWorkerSet group: size × GPUs per pod)."
    )
    replicas: SourcedCount | None = Field(description="Copies of the workload.")
    gpu: GpuPinned | None = Field(description="The GPU products judged on.")
    request: dict[str, Any] = Field(
        description="The `POST /v1/estimate/inference` body that `estimate` answers."
    )
    estimate: EstimateResponse | None = Field(description="The estimate, with `fit` on one GPU.")
    fit: FitOut | None = Field(description="The estimate's `fit` (the same object).")
    verdict: Verdict = Field(
        description="`fits` on every allowed GPU; `does_not_fit` on none; `fits_some`; "
        "`will_not_start` (fewer GPUs than the layout uses); `unknown` (no GPU to judge)."
    )
    fits: bool | None = Field(description="true / false for a definite verdict, else null.")
    gpu_verdicts: list[GpuVerdictOut] = Field(description="A verdict per allowed GPU.")
    fits_on: list[str] = Field(
        description="Catalog GPUs it fits on at its layout, as `nvidia.com/gpu.product` values "
        "(what a nodeSelector, or a Kueue admission check's podSetUpdates, takes)."
    )
    fits_on_mig: list[str] = Field(
        description="For a one-GPU layout: MIG single-strategy products it fits on "
        "(`<product>-MIG-<profile>`)."
    )
    engine_args: list[str] | None = Field(
        description="The engine flags that fit on the pinned GPU (as `fit.engine_args`)."
    )
    ignored_args: list[IgnoredArg] = Field(description="Flags no table models (never errors).")
    notes: list[str] = Field(description="What was assumed or could not be read.")
    problems: list[WorkloadProblem] = Field(
        description="Why the engine would not start for reasons other than memory, and GPUs "
        "the catalog does not know."
    )


class OtherContainerOut(ResponseModel):
    path: str = Field(description="JSON path of the container.")
    name: str | None = Field(description="Its name.")
    reason: str = Field(description="Why it was not read as a serving workload.")


class TrainerRead(ResponseModel):
    value: str = Field(description="`trl`, `transformers`, `llamafactory`, `axolotl`, `torchtune`.")
    source: str = Field(description="Where the trainer's entrypoint was read.")


class LauncherRead(ResponseModel):
    name: str = Field(description="`torchrun`, `accelerate launch`, `deepspeed`, `python`, ...")
    nproc_per_node: SourcedCount = Field(description="Processes (ranks) per node.")
    nnodes: SourcedCount = Field(description="Nodes (pods) that run the launcher.")
    world_size: int = Field(description="Ranks of the job: processes per node × nodes.")


class TrainerOptionRead(ResponseModel):
    name: str = Field(description="The trainer's own key (flag or recipe key).")
    value: int | float | str | bool | list[str] | None = Field(description="The value read.")
    source: str = Field(description="Where it was read.")
    priced: bool = Field(description="Whether the estimate models it as the trainer runs it.")
    note: str = Field(description="How it was read, or why it is not priced.")
    target: str | None = Field(description="The fine-tune field it sets.")


class SettingRead(ResponseModel):
    field: str = Field(description="The `/v1/estimate/finetune` field (`lora.rank`).")
    value: int | float | str | bool | list[str] | None = Field(description="The value priced.")
    source: str = Field(description="Where it was read, or the trainer default it takes.")
    priced: bool = Field(description="false: the trainer does something not modelled.")
    note: str = Field(description="How it was read, or what is not modelled.")


class ConfigRead(ResponseModel):
    path: str = Field(description="The file as the job names it.")
    named_at: str = Field(description="Where the job names it.")
    role: str = Field(description="`deepspeed`, `accelerate`, `fsdp_config`, a recipe, ...")
    read_from: str | None = Field(description="Where its text came from; null: not carried.")


class HostMemoryOut(ResponseModel):
    offload_bytes: int = Field(description="This node's share of what CPU offload holds.")
    pinned_bytes: int = Field(description="Batches pinned by the data loaders of the node.")
    needed_bytes: int = Field(description="At least what the pod holds in host memory.")
    limit: SourcedCount | None = Field(description="The container's memory limit, in bytes.")
    fits: bool | None = Field(description="needed ≤ limit; null without a limit.")


class SuggestionOut(ResponseModel):
    change: str = Field(description="What changes.")
    how: str = Field(description="In the trainer's own words.")
    per_gpu_bytes: int = Field(description="One rank's bytes with the change.")
    fits: bool | None = Field(description="Whether it then fits the judged GPU.")
    request: dict[str, Any] = Field(description="The `/v1/estimate/finetune` body it prices.")


class TrainingPreflightResult(ResponseModel):
    """One trainer container: what was read and where, the fine-tune estimate, the verdict."""

    container: str | None = Field(description="The container's name.")
    path: str | None = Field(description="JSON path of the container read.")
    role: str = Field(description="`main`, PyTorchJob `Master`/`Worker`, a replicated job...")
    trainer: TrainerRead
    entrypoint: str = Field(description="How the trainer was started (`trl sft`, ...).")
    model: ModelRead
    launcher: LauncherRead
    options: list[TrainerOptionRead] = Field(description="Every trainer key read.")
    settings: list[SettingRead] = Field(description="The fine-tune fields, with sources.")
    configs: list[ConfigRead] = Field(description="Config files the job names.")
    gpus: GpusRead | None = Field(description="GPUs per pod; null when none is requested.")
    pods: SourcedCount | None = Field(description="Pods of this template.")
    gpu: GpuPinned | None = Field(description="The GPU products judged on.")
    request: dict[str, Any] = Field(
        description="The `POST /v1/estimate/finetune` body that `estimate` answers."
    )
    estimate: EstimateResponse | None = Field(description="The estimate, with `fit` on one GPU.")
    fit: FitOut | None = Field(description="The estimate's `fit` (the same object).")
    verdict: Verdict = Field(
        description="As for serving; `does_not_fit` also when the host "
        "memory limit is below what the pod needs."
    )
    fits: bool | None = Field(description="true / false for a definite verdict, else null.")
    exact: bool = Field(description="Every setting read is priced as the trainer runs it.")
    unpriced: list[str] = Field(description="Settings, options and files not priced.")
    floor_request: dict[str, Any] | None = Field(
        description="The body with every unpriced field at the least it could need; null when "
        "some has no such bound."
    )
    refusable: bool = Field(
        description="Whether a `does_not_fit` holds for the unpriced settings too (the floor "
        "does not fit, or the host memory does not): what admission refuses under `deny`."
    )
    gpu_verdicts: list[GpuVerdictOut] = Field(description="A verdict per allowed GPU.")
    fits_on: list[str] = Field(description="Catalog GPUs one rank fits on (GFD product labels).")
    host_memory: HostMemoryOut | None = Field(description="Host memory against the limit.")
    suggestions: list[SuggestionOut] = Field(description="What to change to fit.")
    ignored_args: list[IgnoredArg] = Field(description="Flags no table models (never errors).")
    notes: list[str] = Field(description="What was assumed or could not be read.")
    problems: list[WorkloadProblem] = Field(description="Why the job would not start.")


class PreflightResponse(ResponseModel):
    kind: str = Field(description="The object's kind, or `command`.")
    name: str | None = Field(description="`metadata.name`.")
    namespace: str | None = Field(description="`metadata.namespace`.")
    results: list[PreflightResult] = Field(description="One per serving container.")
    training: list[TrainingPreflightResult] = Field(
        default_factory=list, description="One per trainer container (training jobs)."
    )
    others: list[OtherContainerOut] = Field(description="Containers not read, and why.")


# ---------------------------------------------------------------------------------------------
# admission.k8s.io/v1 AdmissionReview (k8s.io/api admission/v1/types.go)

ADMISSION_REQUEST_SCHEMA: dict[str, Any] = {
    "description": "An admission.k8s.io/v1 AdmissionReview as the API server sends it "
    "(`request.uid`, `kind`, `operation`, `object`, `dryRun`). Any body gets a 200 "
    "AdmissionReview: one that cannot be read is allowed with a warning.",
    "example": {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
        },
    },
}


class AdmissionStatus(ResponseModel):
    status: Literal["Success", "Failure"]
    message: str | None = None
    reason: str | None = None
    code: int | None = None


class AdmissionResponseOut(ResponseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    uid: str = Field(description="The request's uid, echoed.")
    allowed: bool
    status: AdmissionStatus | None = Field(None, description="Read when denied.")
    warnings: list[str] | None = Field(None, description="Shown to the client (kubectl).")
    audit_annotations: dict[str, str] | None = Field(None, alias="auditAnnotations")


class AdmissionReviewOut(ResponseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    response: AdmissionResponseOut


# ---------------------------------------------------------------------------------------------
# k8s.io/kube-scheduler extender/v1: Go field names, no JSON tags

EXTENDER_ARGS_SCHEMA: dict[str, Any] = {
    "description": "ExtenderArgs (k8s.io/kube-scheduler extender/v1; keys are the Go field "
    "names): the Pod and the candidate Nodes (`nodeCacheCapable: false`) or NodeNames.",
    "type": "object",
    "required": ["Pod"],
    "properties": {
        "Pod": {"type": "object", "description": "The pod being scheduled (a v1 Pod)."},
        "Nodes": {
            "type": ["object", "null"],
            "description": 'A v1 NodeList: `{"items": [Node, ...]}`.',
            "properties": {"items": {"type": ["array", "null"], "items": {"type": "object"}}},
        },
        "NodeNames": {"type": ["array", "null"], "items": {"type": "string"}},
    },
}


class NodeListOut(ResponseModel):
    items: list[dict[str, Any]]


class ExtenderFilterResultOut(ResponseModel):
    """ExtenderFilterResult, as kube-scheduler decodes it."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    nodes: NodeListOut | None = Field(alias="Nodes", description="The nodes that pass.")
    node_names: list[str] | None = Field(alias="NodeNames", description="Or their names.")
    failed_nodes: dict[str, str] = Field(alias="FailedNodes")
    failed_and_unresolvable: dict[str, str] = Field(
        alias="FailedAndUnresolvableNodes",
        description="Nodes whose GPU is too small for the model, with the reason: preemption "
        "cannot help.",
    )
    error: str = Field(alias="Error")


class HostPriorityOut(ResponseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    host: str = Field(alias="Host")
    score: int = Field(alias="Score", ge=MIN_EXTENDER_PRIORITY, le=MAX_EXTENDER_PRIORITY)
