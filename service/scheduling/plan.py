"""A serving workload as the estimate request it stands for: model, engine, layout, options, GPU.

`plan_workload` turns one `ServingWorkload` (or a bare engine command line) into the body of
``POST /v1/estimate/inference`` that asks the same question the engine answers at start-up:
one sequence of the context it is configured for, on the layout its flags give, on the GPU
the pod is pinned to. The body is kept as plain JSON so that a caller can post it back and
get the same verdict; every field says where it was read (an argv position, a container
field, the engine's default).

Which estimate field each engine flag sets is a table (`_TARGETS`), one row per option of
`service.workloads.engine_flags`. Options the estimator does not price (LoRA adapters,
``--kv-cache-memory-bytes``, ``--cpu-offload-gb``, expert parallelism, SGLang's token caps)
are reported as read and "not priced", never dropped silently.

Plain Python: no HTTP types; the catalogs are asked only for names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from service.estimator.engines import all_options, get_engine
from service.workloads.commands import EngineCommand
from service.workloads.engine_flags import OptionValue
from service.workloads.gpus import GpuRequest, mig_profile_nvml_name
from service.workloads.kubernetes import ServingWorkload
from service.workloads.models import ModelRef
from service.workloads.sources import ReadProblem, Sourced

__all__ = [
    "OptionReading",
    "Plan",
    "engine_version",
    "kv_cache_dtype_of",
    "online_weight_format",
    "plan_command",
    "plan_workload",
]

Target = Literal["field", "engine_option", "data_parallel", "not_priced", "no_memory_effect"]

# Engine option -> (where it goes in the estimate body, the body's name for it).
_TARGETS: Mapping[str, Mapping[str, tuple[Target, str]]] = {
    "vllm": {
        "tensor_parallel_size": ("field", "tensor_parallel_size"),
        "pipeline_parallel_size": ("field", "pipeline_parallel_size"),
        "data_parallel_size": ("data_parallel", "data_parallel_size"),
        "max_model_len": ("engine_option", "max_model_len"),
        "gpu_memory_utilization": ("engine_option", "gpu_memory_utilization"),
        "max_num_seqs": ("engine_option", "max_num_seqs"),
        "max_num_batched_tokens": ("engine_option", "max_num_batched_tokens"),
        "block_size": ("engine_option", "block_size"),
        "enforce_eager": ("engine_option", "enforce_eager"),
        "dtype": ("engine_option", "dtype"),
        "kv_cache_dtype": ("field", "kv_cache_dtype"),
        "quantization": ("field", "weight_format"),
        "kv_cache_memory_bytes": ("not_priced", "a fixed KV-cache size instead of the budget"),
        "cpu_offload_gb": ("not_priced", "weights offloaded to CPU memory (GPU figure is high)"),
        "enable_lora": ("not_priced", "LoRA adapter slots (GPU figure is low)"),
        "max_loras": ("not_priced", "LoRA adapter slots (GPU figure is low)"),
        "max_lora_rank": ("not_priced", "LoRA adapter slots (GPU figure is low)"),
        "enable_expert_parallel": ("not_priced", "experts sharded by expert parallelism"),
        "allow_long_max_model_len": ("not_priced", "a context beyond the model's derived one"),
        "served_model_name": ("no_memory_effect", ""),
        "trust_remote_code": ("no_memory_effect", ""),
    },
    "sglang": {
        "tp_size": ("field", "tensor_parallel_size"),
        "pp_size": ("field", "pipeline_parallel_size"),
        "dp_size": ("data_parallel", "data_parallel_size"),
        "context_length": ("engine_option", "context_length"),
        "mem_fraction_static": ("engine_option", "mem_fraction_static"),
        "chunked_prefill_size": ("engine_option", "chunked_prefill_size"),
        "max_running_requests": ("engine_option", "max_running_requests"),
        "dtype": ("engine_option", "dtype"),
        "kv_cache_dtype": ("field", "kv_cache_dtype"),
        "quantization": ("field", "weight_format"),
        "ep_size": ("not_priced", "experts sharded by expert parallelism"),
        "max_total_tokens": ("not_priced", "a cap on the KV pool's tokens"),
        "max_prefill_tokens": ("not_priced", "a cap on prefill tokens per step"),
        "page_size": ("not_priced", "KV pages of several tokens"),
        "enable_lora": ("not_priced", "LoRA adapter slots (GPU figure is low)"),
        "max_lora_rank": ("not_priced", "LoRA adapter slots (GPU figure is low)"),
        "max_loras_per_batch": ("not_priced", "LoRA adapter slots (GPU figure is low)"),
        "cpu_offload_gb": ("not_priced", "weights offloaded to CPU memory (GPU figure is high)"),
        "allow_overwrite_longer_context_len": (
            "not_priced",
            "a context beyond the model's derived one",
        ),
        "served_model_name": ("no_memory_effect", ""),
        "trust_remote_code": ("no_memory_effect", ""),
    },
}

# Engine words for a KV-cache dtype -> the estimate's `kv_cache_dtype` (vLLM CacheDType,
# SGLang --kv-cache-dtype choices); a word not here is reported as not priced.
_KV_CACHE_DTYPES = {
    "auto": "auto",
    "fp8": "fp8",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
}
# --quantization words that change the weights' format on load (online quantization of a
# 16-bit checkpoint). Any other method names the checkpoint's own format, which the estimator
# reads from its quantization_config.
_ONLINE_QUANTIZATION = {"fp8": "fp8"}

# An image whose repository names the engine, tagged with a release: vllm/vllm-openai:v0.10.1,
# lmsysorg/sglang:v0.4.6.post1-cu124.
_IMAGE_VERSION = re.compile(
    r"(?:^|/)(?P<repo>[a-z0-9._-]*(?:vllm|sglang)[a-z0-9._-]*):v?(?P<version>\d+\.\d+(?:\.\d+)?"
    r"(?:\.post\d+|rc\d+)?)(?:[-+@].*)?$",
    re.IGNORECASE,
)


def kv_cache_dtype_of(word: str) -> str | None:
    """The estimate's ``kv_cache_dtype`` for an engine's ``--kv-cache-dtype`` word (None: not
    modelled)."""
    return _KV_CACHE_DTYPES.get(word)


def online_weight_format(method: str) -> str | None:
    """The weight format a ``--quantization`` method gives a 16-bit checkpoint as it loads
    (None: the checkpoint's own quantization_config gives it)."""
    return _ONLINE_QUANTIZATION.get(method)


@dataclass(frozen=True)
class OptionReading:
    """One engine option as read, and what the estimate does with it."""

    name: str
    value: OptionValue
    source: str
    priced: bool
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        value = list(self.value) if isinstance(self.value, tuple) else self.value
        return {
            "name": self.name,
            "value": value,
            "source": self.source,
            "priced": self.priced,
            "note": self.note,
        }


@dataclass(frozen=True)
class Plan:
    """What to ask the estimator for one serving container, and where each part came from."""

    engine: Sourced[str]
    model: Sourced[str] | None
    """The catalog id to ask for; None when the workload names no model the service knows."""
    model_given: ModelRef | None
    body: Mapping[str, Any]
    """The ``/v1/estimate/inference`` body, without the GPU (see `with_gpu`)."""
    sources: Mapping[str, str]
    """Body field -> where its value was read (``engine_options.max_model_len`` -> argv[5])."""
    tensor: int
    pipeline: int
    data: int
    requested_gpus: Sourced[int] | None
    """GPUs of one copy of the workload (a pod, or a LeaderWorkerSet group)."""
    gpu_refs: tuple[str, ...]
    """GPU references to judge on: the pinned products (catalog resolvable), or the request's
    `gpu`; several when the node selection allows several products."""
    gpu_source: str | None
    gpu_request: GpuRequest | None
    options: tuple[OptionReading, ...]
    version: Sourced[str] | None
    notes: tuple[str, ...] = ()
    problems: tuple[ReadProblem, ...] = ()
    """Reasons the engine would not start that are not about memory (too few GPUs)."""
    ignored: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def engine_gpus(self) -> int:
        """GPUs the engine's layout uses: TP × PP × DP."""
        return self.tensor * self.pipeline * self.data

    def with_gpu(self, ref: str | None = None, memory_bytes: int | None = None) -> dict[str, Any]:
        """The estimate body judged on ``ref`` (or a GPU of ``memory_bytes``) at the engine's
        layout, or without a GPU when neither is given."""
        body = dict(self.body)
        if ref is not None:
            body["gpu"] = ref
        elif memory_bytes is not None:
            body["gpu_memory_bytes"] = memory_bytes
        else:
            return body
        body["gpu_count"] = self.engine_gpus
        return body


def engine_version(image: str | None, engine: str) -> str | None:
    """The engine release an image tag names (``vllm/vllm-openai:v0.10.1`` -> ``0.10.1``)."""
    if not image:
        return None
    match = _IMAGE_VERSION.search(image.strip())
    if match is None or engine not in match.group("repo").lower():
        return None
    return match.group("version")


def _version_option(engine: str) -> bool:
    """Whether the estimator's option table has a ``version`` option for this engine."""
    found = all_options().get("version")
    return found is not None and engine in found[1]


def _option_value(
    engine: str, name: str, value: OptionValue, target: tuple[Target, str]
) -> tuple[Target, str, OptionValue, str]:
    """(target kind, body name, body value, note) of one option read."""
    kind, name_or_note = target
    if kind in ("not_priced", "no_memory_effect"):
        return kind, "", value, name_or_note
    if kind == "engine_option" and name_or_note not in get_engine(engine).option_table():
        return "not_priced", "", value, f"the {engine} model has no {name_or_note} option"
    if name_or_note == "kv_cache_dtype":
        mapped = kv_cache_dtype_of(str(value))
        if mapped is None:
            return "not_priced", "", value, f"KV-cache dtype {value!r} is not modelled"
        return kind, name_or_note, mapped, ""
    if name_or_note == "weight_format":
        online = online_weight_format(str(value))
        if online is None:
            return (
                "not_priced",
                "",
                value,
                "the checkpoint's own quantization_config gives the weight format",
            )
        return kind, name_or_note, online, ""
    if name == "max_model_len" and value == -1:
        return (
            "not_priced",
            "",
            value,
            "auto: vLLM picks the longest context that fits; judged at the model's derived "
            "maximum, fit.max_sequence_length is the length it would pick",
        )
    return kind, name_or_note, value, ""


def _model(
    ref: ModelRef | None, override: str | None
) -> tuple[Sourced[str] | None, ReadProblem | None]:
    if override is not None:
        return Sourced(override, "request model"), None
    if ref is None:
        return None, ReadProblem(
            "model",
            "the workload names no model",
            "give the model in the command line, or `model` in the request",
        )
    if ref.repo_id is not None:
        return Sourced(ref.repo_id, ref.source), None
    return None, ReadProblem(
        ref.source,
        f"the model is given as {ref.given!r} ({ref.scheme}), which does not say which model it is",
        "give the Hugging Face id as `model` in the request",
    )


def _gpu_refs(
    request: GpuRequest | None,
    products: tuple[str, ...],
    product_source: str | None,
    override: str | None,
) -> tuple[tuple[str, ...], str | None, list[str]]:
    """GPU references to judge on and where they came from, with notes."""
    notes: list[str] = []
    if request is not None and request.vendor != "nvidia":
        notes.append(f"{request.resource}: only NVIDIA node labels are read")
    if products:
        if override is not None:
            notes.append(f"the workload pins {', '.join(products)}; the request's `gpu` is unused")
        refs = products
        if request is not None and request.mig_profile is not None:
            # Mixed strategy: the product label names the parent GPU, the resource the slice.
            profile = mig_profile_nvml_name(request.mig_profile)
            refs = tuple(f"{p}-MIG-{profile}" for p in products)
        return refs, product_source, notes
    if override is not None:
        return (override,), "request gpu", notes
    return (), None, notes


def plan_command(
    command: EngineCommand,
    *,
    model_override: str | None = None,
    gpu: str | None = None,
    gpu_count: int | None = None,
    image: Sourced[str] | None = None,
    workload: ServingWorkload | None = None,
) -> tuple[Plan | None, ReadProblem | None]:
    """The plan of one engine invocation; a problem when its model cannot be named."""
    engine = command.engine
    given = command.model if workload is None else workload.model
    model, model_problem = _model(given, model_override)
    if model is None:
        return None, model_problem
    body: dict[str, Any] = {"model": model.value, "engine": engine}
    sources: dict[str, str] = {"model": model.source, "engine": command.entrypoint_source}
    engine_options: dict[str, Any] = {}
    readings: list[OptionReading] = []
    table = _TARGETS[engine]
    data = 1
    for name, read in command.options.items():
        target = table.get(name, ("not_priced", "not modelled by the estimator"))
        kind, body_name, value, note = _option_value(engine, name, read.value, target)
        priced = kind in ("field", "engine_option", "data_parallel")
        readings.append(OptionReading(name, read.value, read.source, priced, note))
        if kind == "field":
            body[body_name] = value
            sources[body_name] = read.source
        elif kind == "engine_option":
            engine_options[body_name] = value
            sources[f"engine_options.{body_name}"] = read.source
        elif kind == "data_parallel" and isinstance(value, int):
            data = value
    notes: list[str] = list(command.notes)
    version: Sourced[str] | None = None
    if image is not None:
        found = engine_version(image.value, engine)
        if found is not None:
            version = Sourced(found, image.source)
            if _version_option(engine):
                engine_options["version"] = found
                sources["engine_options.version"] = image.source
            else:
                notes.append(
                    f"{engine} {found} read from the image; the estimate models the engine's "
                    "current behaviour (it has no per-version option)"
                )
    if engine_options:
        body["engine_options"] = engine_options
    tensor = int(body.get("tensor_parallel_size", 1))
    pipeline = int(body.get("pipeline_parallel_size", 1))

    request = workload.gpus if workload is not None else None
    requested: Sourced[int] | None = None
    if workload is not None and workload.gpus_per_group is not None:
        requested = workload.gpus_per_group
    elif gpu_count is not None:
        requested = Sourced(gpu_count, "request gpu_count")
    selector = workload.gpu_product if workload is not None else None
    products = selector.values if selector is not None else ()
    refs, gpu_source, gpu_notes = _gpu_refs(
        request, products, selector.source if selector is not None else None, gpu
    )
    notes += gpu_notes
    if selector is not None and not products and selector.excluded:
        notes.append(f"the node selection only excludes products: {', '.join(selector.excluded)}")
    if request is not None and request.shared:
        notes.append(
            "nvidia.com/gpu.shared: a time-sliced or MPS replica; the verdict assumes the whole "
            "GPU (time-slicing isolates no memory)"
        )
    problems: list[ReadProblem] = []
    needed = tensor * pipeline * data
    if requested is not None:
        if requested.value < needed:
            problems.append(
                ReadProblem(
                    requested.source,
                    f"{requested.value} GPU(s) given, but the engine's layout (TP {tensor} × "
                    f"PP {pipeline} × DP {data}) needs {needed}: it will not start",
                    f"request {needed} GPUs or lower the parallel sizes",
                )
            )
        elif requested.value > needed:
            notes.append(
                f"{requested.value} GPUs given; the engine's layout (TP {tensor} × PP {pipeline}"
                f" × DP {data}) uses {needed}: set --tensor-parallel-size (or the data-parallel "
                "size) to use the rest"
            )
    if workload is not None:
        notes += workload.notes
    return (
        Plan(
            engine=Sourced(engine, command.entrypoint_source),
            model=model,
            model_given=given,
            body=body,
            sources=sources,
            tensor=tensor,
            pipeline=pipeline,
            data=data,
            requested_gpus=requested,
            gpu_refs=refs,
            gpu_source=gpu_source,
            gpu_request=request,
            options=tuple(readings),
            version=version,
            notes=tuple(dict.fromkeys(notes)),
            problems=tuple(problems),
            ignored=tuple((arg.text, arg.source) for arg in command.ignored_args),
        ),
        None,
    )


def plan_workload(
    workload: ServingWorkload,
    *,
    image: Sourced[str] | None,
    model_override: str | None = None,
    gpu: str | None = None,
    gpu_count: int | None = None,
) -> tuple[Plan | None, ReadProblem | None]:
    """The plan of one serving container read from a Kubernetes object."""
    return plan_command(
        workload.command,
        model_override=model_override,
        gpu=gpu,
        gpu_count=gpu_count,
        image=image,
        workload=workload,
    )
