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
from service.estimator.errors import InvalidRequest
from service.estimator.gpu import GpuSpec
from service.estimator.inference import InferenceRequest, estimate_inference, fit_inference
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
    "answer_finetune",
    "answer_inference",
]

# A sequence-length search never goes past this many tokens (the API's own bound).
MAX_SEARCH_SEQUENCE = 16 * 1024 * 1024
# GPU counts the simple rules try for `min_gpu_count`.
SIMPLE_GPU_COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


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
class Answer:
    estimate: Estimate
    fit: Fit | None
    summary: str
    assumptions: tuple[str, ...]
    # Latency, throughput and SLO sizing, when the request gave a traffic.
    performance: PerformanceAnswer | None = None


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


def _finish(
    model: ModelSpec,
    estimate: Estimate,
    fit: Fit | None,
    gpu: GpuSpec | None,
    extra: list[str],
    performance: PerformanceAnswer | None = None,
) -> Answer:
    assumptions = (*extra, *estimate.assumptions, *(fit.assumptions if fit else ()))
    if performance is not None:
        assumptions = (*assumptions, *performance.assumptions)
    assumptions = (*model.notes, *assumptions)
    if model.architecture is not None:
        assumptions = (*model.architecture.assumptions, *assumptions)
    summary = summarize(model.name, estimate, fit, gpu.name if gpu else None)
    return Answer(estimate, fit, summary, tuple(dict.fromkeys(assumptions)), performance)


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
        return _finish(model, estimate, fit, gpu, extra)

    request = dataclasses.replace(
        request,
        architecture=model.architecture,
        gpu_memory_bytes=gpu.total_bytes if gpu else None,
        gpu=gpu,
        checkpoint=model.checkpoint,
    )
    estimate = estimate_inference(request)
    fit = fit_inference(request, gpu.ref, gpu_count) if gpu is not None else None
    performance = None
    if traffic is not None:
        try:
            performance = estimate_performance(request, traffic, slo)
        except NotServable as e:
            extra.append(str(e))
    return _finish(model, estimate, fit, gpu, extra, performance)


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
