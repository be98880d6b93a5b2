"""A serving workload as the estimate request it stands for: model, engine, layout, options, GPU.

`plan_workload` turns one `ServingWorkload` (or a bare engine command line) into the body of
``POST /v1/estimate/inference`` that asks the same question the engine answers at start-up:
one sequence of the context it is configured for, on the layout its flags give, on the GPU
the pod is pinned to. The body is kept as plain JSON so that a caller can post it back and
get the same verdict; every field says where it was read (an argv position, a container
field, the engine's default).

What each engine flag sets is read from the engine's own declaration of the option
(``Option.role`` in ``service/estimator/engines/<engine>_options.py``, the same table the flag
reader and the API schema derive from): an engine option of the estimate, a request field, a
JSON object whose keys set some of those, or nothing (with the reason). Options the estimator
does not price are reported as read and "not priced", never dropped silently.

Plain Python: no HTTP types; the catalogs are asked only for names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.estimator.engines import all_options, get_engine
from service.estimator.engines.base import Option
from service.estimator.speculative import speculative_method
from service.workloads.commands import EngineCommand
from service.workloads.engine_flags import OptionValue
from service.workloads.gpus import GpuRequest, mig_profile_nvml_name
from service.workloads.kubernetes import ServingWorkload
from service.workloads.models import ModelRef
from service.workloads.sources import ReadProblem, Sourced

__all__ = [
    "POD_MODEL_FIX",
    "OptionReading",
    "Plan",
    "engine_version",
    "kv_cache_dtype_of",
    "online_weight_format",
    "plan_command",
    "plan_workload",
]

# What a Pod's author does when the service cannot tell the model from the Pod (a path, a
# storage URI, an unexpanded variable): vLLM and SGLang take a Hugging Face id and load it
# from a mounted Hugging Face cache (HF_HOME) without downloading under HF_HUB_OFFLINE=1.
POD_MODEL_FIX = (
    "name it by its Hugging Face id; with HF_HOME on the volume and HF_HUB_OFFLINE=1 the "
    "engine loads it from there"
)

# What the estimate does with options read that no engine declares (environment switches).
_ENV_NOTES: Mapping[str, str] = {
    "allow_long_max_model_len": "a context beyond the model's derived one",
    "allow_overwrite_longer_context_len": "a context beyond the model's derived one",
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
    # False for an option the engine declares without memory effect (``inert``): not
    # priced, and nothing to price.
    affects_memory: bool = True

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
    short_gpus: int | None = None
    """GPUs the whole deployment gets when its pods request fewer than the layout uses."""

    @property
    def engine_gpus(self) -> int:
        """GPUs the engine's layout uses: TP × PP × DP."""
        return self.tensor * self.pipeline * self.data

    @property
    def gpus_given(self) -> int:
        """GPUs the deployment gets: the layout's, or fewer when its pods request fewer than
        their ranks use (the estimate then finds ``too_few_gpus``)."""
        short = self.short_gpus
        return self.engine_gpus if short is None else short

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
        body["gpu_count"] = self.gpus_given
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


def _mapped(name: str, value: OptionValue) -> tuple[OptionValue | None, str]:
    """A request field's value from the engine's word for it (None: not modelled, and why)."""
    if name == "kv_cache_dtype":
        mapped = kv_cache_dtype_of(str(value))
        return mapped, "" if mapped else f"KV-cache dtype {value!r} is not modelled"
    if name == "weight_format":
        online = online_weight_format(str(value))
        return online, "" if online else (
            "the checkpoint's own quantization_config gives the weight format"
        )
    if name == "speculative.method":
        method = speculative_method(str(value))
        return method, "" if method else f"speculative method {value!r} is not modelled"
    return value, ""


def _number_text(value: Any) -> Any:
    """A JSON string that spells a number as the number (vLLM's pydantic configs coerce
    ``"num_redundant_experts": "32"``)."""
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value


def _json_targets(option: Option, text: str) -> list[tuple[str, OptionValue]]:
    """What a JSON-valued flag sets: each declared key found, scaled, to its target."""
    obj = json.loads(text)
    out: list[tuple[str, OptionValue]] = []
    for path, target, factor in option.json_keys:
        value: Any = obj
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None or isinstance(value, dict | list):
            continue
        value = _number_text(value)
        if factor != 1 and isinstance(value, int | float) and not isinstance(value, bool):
            value = int(value * factor)
        out.append((target, value))
    if option.field == "speculative" and not any(t == "speculative.method" for t, _ in out):
        model = obj.get("model")
        out.append(("speculative.method", str(model) if isinstance(model, str) else "ngram"))
    return out


@dataclass
class _Body:
    """The estimate body being built from options read, with where each value came from."""

    body: dict[str, Any]
    sources: dict[str, str]
    engine_options: dict[str, Any] = field(default_factory=dict)

    def set(self, target: str, value: OptionValue, source: str) -> None:
        head, _, key = target.partition(".")
        if head == "speculative" and key:
            self.body.setdefault("speculative", {})[key] = value
            self.sources[target] = source
        elif head in ("field", "body"):
            self.body[key] = value
            self.sources[key] = source
        else:
            self.engine_options[target] = value
            self.sources[f"engine_options.{target}"] = source


def _read_option(
    engine: str, name: str, value: OptionValue, source: str, out: _Body
) -> OptionReading:
    """Apply one option read to the body by its declaration, and say what was done."""
    declared = {o.name: o for o in get_engine(engine).declared}
    option = declared.get(name)
    if option is None:
        note = _ENV_NOTES.get(name, "not modelled by the estimator")
        return OptionReading(name, value, source, False, note)
    if option.role == "inert":
        return OptionReading(
            name, value, source, False, option.note or "no memory effect", affects_memory=False
        )
    if option.role == "unpriced":
        return OptionReading(name, value, source, False, option.note)
    if option.cli_kind == "json":
        targets = _json_targets(option, str(value))
        for target, item in targets:
            mapped, why = _mapped(target, item)
            if mapped is None:
                return OptionReading(name, value, source, False, why)
            out.set(target, mapped, source)
        read = ", ".join(t for t, _ in targets) or "nothing the estimate prices"
        return OptionReading(name, value, source, bool(targets), f"sets {read}")
    if option.role == "option":
        if name == "max_model_len" and value == -1:
            return OptionReading(
                name,
                value,
                source,
                False,
                "auto: vLLM picks the longest context that fits; judged at the model's derived "
                "maximum, fit.max_sequence_length is the length it would pick",
            )
        out.set(name, value, source)
        if option.priced_values and value not in option.priced_values:
            return OptionReading(
                name, value, source, False, f"{value}: its buffers are not priced (they add memory)"
            )
        return OptionReading(name, value, source, True)
    assert option.field is not None
    if option.field == "model":
        return OptionReading(name, value, source, True, "the model")
    mapped, why = _mapped(option.field, value)
    if mapped is None:
        return OptionReading(name, value, source, False, why)
    target = option.field if "." in option.field else f"field.{option.field}"
    out.set(target, mapped, source)
    return OptionReading(name, value, source, True)


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
            pod_fix=POD_MODEL_FIX,
        )
    if ref.repo_id is not None:
        return Sourced(ref.repo_id, ref.source), None
    return None, ReadProblem(
        ref.source,
        f"the model is given as {ref.given!r} ({ref.scheme}), which does not say which model it is",
        "give the Hugging Face id as `model` in the request",
        pod_fix=POD_MODEL_FIX,
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
    built = _Body(body, sources)
    readings = [
        _read_option(engine, name, read.value, read.source, built)
        for name, read in command.options.items()
    ]
    engine_options = built.engine_options
    layout = get_engine(engine).command_layout(body, engine_options)
    body.update(layout)
    local = command.options.get("data_parallel_size_local")
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
    data = int(body.get("data_parallel_size", 1))
    data_local = int(local.value) if local is not None and isinstance(local.value, int) else data

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
    # A deployment whose data-parallel ranks span pods (--data-parallel-size-local) needs the
    # local ranks' GPUs in each pod; the estimate judges all of them.
    needed = tensor * pipeline * data_local
    if data_local != data:
        notes.append(
            f"{data_local} of the {data} data-parallel ranks run in this pod "
            "(--data-parallel-size-local); the estimate judges all of them"
        )
    short_gpus: int | None = None
    if requested is not None:
        if requested.value < needed:
            # Each pod of the deployment holds data_local of its data ranks.
            short_gpus = max(1, requested.value * data // max(1, data_local))
            problems.append(
                ReadProblem(
                    requested.source,
                    f"{requested.value} GPU(s) given, but the engine's layout (TP {tensor} × "
                    f"PP {pipeline} × DP {data_local}) needs {needed}: it will not start",
                    f"set {requested.source} to {needed}, or lower the engine's parallel sizes",
                )
            )
        elif requested.value > needed and requested.value != tensor * pipeline * data:
            notes.append(
                f"{requested.value} GPUs given; the engine's layout (TP {tensor} × PP {pipeline}"
                f" × DP {data}) uses {needed}: set --tensor-parallel-size (or the data-parallel "
                "size) to use the rest"
            )
    if workload is not None:
        notes += workload.notes
        limit = workload.memory_limit
        if limit is not None:
            pods = max(1, workload.pods_per_group.value)
            body["host_memory_bytes"] = limit.value * pods
            sources["host_memory_bytes"] = (
                limit.source if pods == 1 else f"{limit.source} × {pods} pods of the group"
            )
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
            short_gpus=short_gpus,
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
