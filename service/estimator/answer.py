"""Answers one estimate request: picks the estimator, runs it, checks the fit, writes the summary.

The HTTP layer resolves names (catalog model, posted config, GPU) into a :class:`ModelSpec` and
a :class:`GpuSpec`, builds the typed request (:class:`InferenceRequest` or
:class:`FinetuneRequest`) and calls :func:`answer_inference` or :func:`answer_finetune`;
everything after that is here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from service.estimator.checkpoint import CheckpointWeights
from service.estimator.engines import get_engine
from service.estimator.engines.base import DecidedBy, OptionValue
from service.estimator.engines.llamacpp import gguf_weights_for_preset
from service.estimator.errors import InvalidRequest
from service.estimator.formats import get_format
from service.estimator.gpu import GpuSpec
from service.estimator.inference import InferenceRequest, estimate_inference, fit_inference
from service.estimator.inference.fit import judge_request
from service.estimator.inference.request import resolved, validate_workload
from service.estimator.inference.verdict import Verdict
from service.estimator.memo import memoized
from service.estimator.model import Architecture, count_parameters
from service.estimator.performance import (
    NotServable,
    PerformanceAnswer,
    Slo,
    Traffic,
    estimate_performance,
)
from service.estimator.result import Estimate, Fit
from service.estimator.simple import (
    SimpleModel,
    estimate_finetune_simple,
    estimate_inference_simple,
    simple_fit,
)
from service.estimator.summary import summarize
from service.estimator.training import FinetuneRequest, estimate_finetune, fit_finetune
from service.estimator.units import normalize_dtype
from service.estimator.version import ESTIMATOR_VERSION

__all__ = [
    "ESTIMATOR_VERSION",
    "Answer",
    "GpuSpec",
    "ModelResolution",
    "ModelSpec",
    "UnusedField",
    "answer_finetune",
    "answer_inference",
    "judge_inference",
]

# A sequence-length search never goes past this many tokens (the API's own bound).
MAX_SEARCH_SEQUENCE = 16 * 1024 * 1024
# GPU counts the simple rules try for `min_gpu_count`.
SIMPLE_GPU_COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]

# Inference fields the simple rules (simple.py) do not read: they price parameters × bytes
# plus per-token rules, with no engine, KV dtype, attention kernel or prefill.
_SIMPLE_RULES_IGNORE = "the simple rules (PAI guide) price parameters and tokens only"
SIMPLE_DECIDES_INSTEAD: tuple[DecidedBy, ...] = tuple(
    DecidedBy(name, (), _SIMPLE_RULES_IGNORE)
    for name in ("engine", "engine_options", "kv_cache_dtype", "attention", "prompt_tokens")
)

# The request's defaults: a field holding its default was not given by the caller.
_REQUEST_DEFAULTS = {
    f.name: f.default
    for f in dataclasses.fields(InferenceRequest)
    if f.default is not dataclasses.MISSING
}


@dataclass(frozen=True, slots=True)
class ModelResolution:
    """How the name a request gave became the model estimated.

    ``route``: ``store`` (the model store's files), ``catalog`` (a catalog id or alias),
    ``catalog-gguf`` (a file of a catalog GGUF repository), ``rules`` (the alias rules read the
    name as a mirror, a quantized copy or a GGUF file of a catalog model: a guess, each rule
    with its reason in ``reasons``)."""

    requested: str
    resolved_to: str
    route: str
    format: str | None = None
    reasons: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return self.route != "rules"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A resolved model: an architecture when known, else a bare parameter count."""

    name: str
    id: str | None
    parameter_count: int
    active_parameter_count: int
    dtype: str
    architecture: Architecture | None
    # The checkpoint's own bytes (a model-store model read from its headers).
    checkpoint: CheckpointWeights | None = None
    # Where the model came from and what its files say, for the assumptions.
    notes: tuple[str, ...] = ()
    # How a named model was found (None: a posted config or a bare count).
    resolution: ModelResolution | None = None

    @classmethod
    def from_architecture(cls, name: str, model_id: str | None, arch: Architecture) -> ModelSpec:
        counts = count_parameters(arch)
        return cls(name, model_id, counts.total, counts.active, arch.dtype, arch)

    @classmethod
    def from_count(cls, total: int, active: int | None) -> ModelSpec:
        name = f"{total / 1e9:g}B-parameter model"
        return cls(name, None, total, active or total, "fp16", None)


@dataclass(frozen=True, slots=True)
class UnusedField:
    """A request field the chosen engine (or estimator) sizes nothing by: the engine options
    that decide in its place, with the values the estimate used, and whether the caller gave
    the field a value of its own."""

    field: str
    decided_by: tuple[str, ...]  # engine options, as engine_options.<name>
    engine_values: tuple[tuple[str, OptionValue | None], ...]
    why: str
    given: bool


@dataclass(frozen=True, slots=True)
class Answer:
    estimate: Estimate
    fit: Fit | None
    summary: str
    assumptions: tuple[str, ...]
    unused_fields: tuple[UnusedField, ...] = ()
    # Every option of the engine as the estimate resolved it, and the ones it defaulted
    # (empty for the simple rules, which use no engine).
    engine_options: tuple[tuple[str, OptionValue | None], ...] = ()
    engine_defaults: tuple[str, ...] = ()

    # Latency, throughput and SLO sizing, when the request gave a traffic.
    performance: PerformanceAnswer | None = None


def _given(request: InferenceRequest, name: str) -> bool:
    value = getattr(request, name)
    if name == "engine_options":
        return bool(value)
    return value is not None and value != _REQUEST_DEFAULTS.get(name)


def unused_fields(
    request: InferenceRequest,
    decided: tuple[DecidedBy, ...],
    settings: dict[str, OptionValue | None],
) -> tuple[tuple[UnusedField, ...], tuple[str, ...]]:
    """The fields of ``request`` that ``decided`` names, and an assumption line for each the
    caller gave (its value changes nothing; the options named decide)."""
    fields: list[UnusedField] = []
    lines: list[str] = []
    for d in decided:
        values = tuple((o, settings.get(o)) for o in d.options)
        given = _given(request, d.field)
        fields.append(
            UnusedField(
                d.field, tuple(f"engine_options.{o}" for o in d.options), values, d.why, given
            )
        )
        if not given:
            continue
        value = getattr(request, d.field)
        shown = "" if d.field == "engine_options" else f" {value}"
        if d.options:
            named = " and ".join(f"engine_options.{o} ({v})" for o, v in values)
            verb, them = ("decide", "them") if len(values) > 1 else ("decides", "it")
            lines.append(
                f"{d.field}{shown} is not used by {request.engine}: {named} {verb} instead: "
                f"{d.why}; set {them} to change the estimate"
            )
        else:
            lines.append(f"{d.field}{shown} changes nothing here: {d.why}")
    return tuple(fields), tuple(lines)


def _simple_model(model: ModelSpec, assumptions: list[str], estimator: str) -> SimpleModel:
    if estimator == "detailed":
        assumptions.append(
            "only a parameter count was given: answered with the simple rules (the detailed "
            "estimator needs `model` or `hf_config`)"
        )
    if model.architecture is None:
        assumptions.append("checkpoint dtype unknown: fp16 assumed (the guide's example)")
    return SimpleModel(
        model.parameter_count, model.active_parameter_count, normalize_dtype(model.dtype)
    )


# In the estimator's one byte-budgeted cache: a preset's tensor list is large.
_preset_weights = memoized(gguf_weights_for_preset)


def _preset_priced(
    arch: Architecture, request: InferenceRequest
) -> tuple[InferenceRequest, str | None, list[str]]:
    """A request naming a llama-quantize preset (``Q4_K_M``) as the GGUF file it makes from
    this model: every tensor in the type the preset's rule gives it, as a catalog GGUF model
    is priced (the checkpoint's bytes, its weight format left to the model's own). The
    preset's name, for the details; the request unchanged when no preset is named or the rule
    does not cover the model (then its bulk type prices every matrix, said in a note)."""
    fmt = get_format(request.weight_format) if request.weight_format is not None else None
    if fmt is None or fmt.preset is None:
        return request, None, []
    try:
        weights = _preset_weights(arch, fmt.preset, imatrix=False)
    except InvalidRequest as exc:
        return (
            request,
            None,
            [
                f"weight_format {fmt.name}: {exc.detail.split(':')[0]}; every matrix priced in "
                f"the preset's bulk type instead, without the tensors it gives more bits (a "
                "lower bound)"
            ],
        )
    note = (
        f"weight_format {fmt.name}: the file llama-quantize {fmt.preset} makes from this "
        f"model's 16-bit checkpoint, {weights.total_bytes} bytes of tensors, each in the type "
        "the preset's rule gives it (llama.cpp src/llama-quant.cpp), made without an "
        "importance matrix (one changes only IQ4_NL, IQ4_XS, Q4_0 and Q5_0: the first eighth "
        "of ffn_down)"
    )
    checkpoint = CheckpointWeights("gguf", (("text", weights.total_bytes),), gguf=weights)
    return dataclasses.replace(request, weight_format=None, checkpoint=checkpoint), fmt.name, [note]


def _finish(
    model: ModelSpec,
    estimate: Estimate,
    fit: Fit | None,
    gpu: GpuSpec | None,
    extra: list[str],
    *,
    unused: tuple[UnusedField, ...] = (),
    engine_options: tuple[tuple[str, OptionValue | None], ...] = (),
    engine_defaults: tuple[str, ...] = (),
    performance: PerformanceAnswer | None = None,
) -> Answer:
    assumptions = (*extra, *estimate.assumptions, *(fit.assumptions if fit else ()))
    if performance is not None:
        assumptions = (*assumptions, *performance.assumptions)
    assumptions = (*model.notes, *assumptions)
    if model.architecture is not None:
        assumptions = (*model.architecture.assumptions, *assumptions)
    summary = summarize(model.name, estimate, fit, gpu.name if gpu else None)
    return Answer(
        estimate,
        fit,
        summary,
        tuple(dict.fromkeys(assumptions)),
        unused,
        engine_options,
        engine_defaults,
        performance,
    )


def _on(model: ModelSpec, request: InferenceRequest, gpu: GpuSpec | None) -> InferenceRequest:
    """``request`` for ``model``'s architecture and checkpoint on ``gpu``."""
    return dataclasses.replace(
        request,
        architecture=model.architecture,
        gpu_memory_bytes=gpu.total_bytes if gpu else None,
        gpu=gpu,
        checkpoint=model.checkpoint,
    )


def judge_inference(
    model: ModelSpec, request: InferenceRequest, gpu: GpuSpec, gpu_count: int | None
) -> Verdict:
    """The verdict `answer_inference`'s ``fit`` gives ``request`` on ``gpu_count`` of ``gpu``
    (the same judgement, without the inverse searches): what the scheduler endpoints judge
    each GPU they are asked about with."""
    if model.architecture is None:
        raise InvalidRequest(
            "a verdict needs the model's architecture: name a catalog `model` or post its "
            "`hf_config`",
            field="model",
        )
    priced, _, _ = _preset_priced(model.architecture, _on(model, request, gpu))
    priced = resolved(priced)
    validate_workload(priced)
    return judge_request(priced, gpu_count).verdict


def answer_inference(
    model: ModelSpec,
    request: InferenceRequest,
    *,
    estimator: str,
    gpu: GpuSpec | None,
    gpu_count: int | None,
    traffic: Traffic | None = None,
    slo: Slo | None = None,
) -> Answer:
    """Estimate (and fit, with a GPU) ``request`` for ``model``; the request's architecture
    and GPU memory are set here from ``model`` and ``gpu``. With ``traffic``, also its latency
    and throughput (and with ``slo`` the replicas it needs: :mod:`.performance`)."""
    extra: list[str] = []
    if estimator == "simple" or model.architecture is None:
        if traffic is not None:
            raise InvalidRequest(
                "`traffic` needs the detailed estimator and the model's architecture: name a "
                "catalog `model` or post its `hf_config` (estimator `detailed`)",
                field="traffic",
            )
        simple = _simple_model(model, extra, estimator)
        model_gpus = request.tensor_parallel_size * request.pipeline_parallel_size

        def estimate_for(gpus: int, batch: int, seq: int) -> Estimate:
            return estimate_inference_simple(
                simple,
                weight_format=request.weight_format,
                batch_size=batch,
                sequence_length=seq,
                concurrency=request.concurrency,
                tensor_parallel_size=gpus,
            )

        batch, seq = request.batch_size, request.sequence_length or 2048
        estimate = estimate_for(model_gpus, batch, seq)
        fit = None
        if gpu is not None:
            fit = simple_fit(
                estimate_for,
                gpu=gpu,
                gpu_count=gpu_count or model_gpus,
                batch_size=batch,
                sequence_length=seq,
                max_sequence_length=MAX_SEARCH_SEQUENCE,
                gpu_counts=SIMPLE_GPU_COUNTS,
            )
        unused, lines = unused_fields(request, SIMPLE_DECIDES_INSTEAD, {})
        extra.extend(lines)
        return _finish(model, estimate, fit, gpu, extra, unused=unused)

    named = _on(model, request, gpu)
    request, preset, notes = _preset_priced(model.architecture, named)
    extra.extend(notes)
    estimate = estimate_inference(request)
    if preset is not None:
        estimate = dataclasses.replace(
            estimate, details={**estimate.details, "weight_format": preset}
        )
    fit = fit_inference(request, gpu.ref, gpu_count) if gpu is not None else None
    performance = None
    if traffic is not None:
        try:
            performance = estimate_performance(request, traffic, slo)
        except NotServable as e:
            extra.append(str(e))
    settings = resolved(request).settings()
    values = dict(settings.values)
    unused, lines = unused_fields(named, get_engine(request.engine).decided_elsewhere(), values)
    extra.extend(lines)
    return _finish(
        model,
        estimate,
        fit,
        gpu,
        extra,
        unused=unused,
        engine_options=settings.values,
        engine_defaults=tuple(n for n, _ in settings.values if n not in settings.explicit),
        performance=performance,
    )


def answer_finetune(
    model: ModelSpec,
    request: FinetuneRequest,
    *,
    estimator: str,
    gpu: GpuSpec | None,
) -> Answer:
    """Estimate (and fit, with a GPU) ``request`` for ``model``."""
    extra: list[str] = []
    if estimator == "simple" or model.architecture is None:
        simple = _simple_model(model, extra, estimator)

        def estimate_for(gpus: int, batch: int, seq: int) -> Estimate:
            return estimate_finetune_simple(
                simple,
                method=request.method,
                weight_format=request.weight_format,
                precision=request.precision,
                optimizer=request.optimizer,
                batch_size=batch,
                sequence_length=seq,
            )

        batch, seq = request.batch_size, request.sequence_length
        estimate = estimate_for(1, batch, seq)
        fit = None
        if gpu is not None:
            fit = simple_fit(
                estimate_for,
                gpu=gpu,
                gpu_count=request.gpu_count,
                batch_size=batch,
                sequence_length=seq,
                max_sequence_length=MAX_SEARCH_SEQUENCE,
                gpu_counts=[1],
            )
        return _finish(model, estimate, fit, gpu, extra)

    request = dataclasses.replace(request, architecture=model.architecture)
    if model.checkpoint is not None:
        extra.append(
            f"the checkpoint's headers give {model.checkpoint.total_bytes} bytes of weights; "
            "training holds them in the dtypes above, counted from the config"
        )
    estimate = estimate_finetune(request)
    fit = fit_finetune(request, gpu) if gpu is not None else None
    return _finish(model, estimate, fit, gpu, extra)
