"""Answers one estimate request: picks the estimator, runs it, checks the fit, writes the summary.

The HTTP layer resolves names (catalog model, posted config, GPU id) into the plain values
below and calls `answer_inference` or `answer_finetune`; everything after that is here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.estimator.architecture import Architecture
from service.estimator.finetune import FinetuneRequest, LoraSpec, estimate_finetune, fit_finetune
from service.estimator.inference import InferenceRequest, estimate_inference, fit_inference
from service.estimator.parameters import count_parameters
from service.estimator.result import Estimate, Fit
from service.estimator.simple import (
    SimpleModel,
    estimate_finetune_simple,
    estimate_inference_simple,
    simple_fit,
)
from service.estimator.summary import summarize
from service.estimator.version import ESTIMATOR_VERSION

__all__ = [
    "ESTIMATOR_VERSION",
    "Answer",
    "GpuTarget",
    "ModelSpec",
    "answer_finetune",
    "answer_inference",
]

# A sequence-length search never goes past this many tokens (the API's own bound).
MAX_SEARCH_SEQUENCE = 16 * 1024 * 1024
# GPU counts the simple rules try for `min_gpu_count`.
SIMPLE_GPU_COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A resolved model: an architecture when known, else a bare parameter count."""

    name: str
    id: str | None
    parameter_count: int
    active_parameter_count: int
    dtype: str
    architecture: Architecture | None

    @classmethod
    def from_architecture(cls, name: str, model_id: str | None, arch: Architecture) -> ModelSpec:
        counts = count_parameters(arch)
        return cls(name, model_id, counts.total, counts.active, arch.dtype, arch)

    @classmethod
    def from_count(cls, total: int, active: int | None) -> ModelSpec:
        name = f"{total / 1e9:g}B-parameter model"
        return cls(name, None, total, active or total, "fp16", None)


@dataclass(frozen=True, slots=True)
class GpuTarget:
    ref: str  # the catalog id, with `/profile` for a MIG slice
    name: str  # for people
    memory_bytes: int  # what the driver reports as total for it


@dataclass(frozen=True, slots=True)
class Answer:
    estimate: Estimate
    fit: Fit | None
    summary: str
    assumptions: tuple[str, ...]


def _simple_model(model: ModelSpec, assumptions: list[str], estimator: str) -> SimpleModel:
    if estimator == "detailed":
        assumptions.append(
            "only a parameter count was given: answered with the simple rules (the detailed "
            "estimator needs `model` or `hf_config`)"
        )
    if model.architecture is None:
        assumptions.append("checkpoint dtype unknown: fp16 assumed (the guide's example)")
    return SimpleModel(model.parameter_count, model.active_parameter_count, _dtype(model))


def _dtype(model: ModelSpec) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(model.dtype, model.dtype)


def _finish(
    model: ModelSpec, estimate: Estimate, fit: Fit | None, gpu: GpuTarget | None, extra: list[str]
) -> Answer:
    assumptions = (*extra, *estimate.assumptions, *(fit.assumptions if fit else ()))
    if model.architecture is not None:
        assumptions = (*model.architecture.assumptions, *assumptions)
    summary = summarize(model.name, estimate, fit, gpu.name if gpu else None)
    return Answer(estimate, fit, summary, tuple(dict.fromkeys(assumptions)))


def answer_inference(
    model: ModelSpec,
    params: Mapping[str, Any],
    *,
    estimator: str,
    gpu: GpuTarget | None,
    gpu_count: int | None,
) -> Answer:
    """`params` holds InferenceRequest's fields (all but architecture and gpu_memory_bytes)."""
    extra: list[str] = []
    if estimator == "simple" or model.architecture is None:
        simple = _simple_model(model, extra, estimator)
        fixed = {k: params[k] for k in ("weight_format", "concurrency") if k in params}

        def estimate_for(gpus: int, batch: int, seq: int) -> Estimate:
            return estimate_inference_simple(
                simple,
                batch_size=batch,
                sequence_length=seq,
                tensor_parallel_size=gpus,
                **fixed,
            )

        tp = params.get("tensor_parallel_size", 1) * params.get("pipeline_parallel_size", 1)
        batch, seq = params.get("batch_size", 1), params.get("sequence_length", 2048)
        estimate = estimate_for(tp, batch, seq)
        fit = None
        if gpu is not None:
            fit = simple_fit(
                estimate_for,
                gpu_label=gpu.ref,
                gpu_memory_bytes=gpu.memory_bytes,
                gpu_count=gpu_count or tp,
                batch_size=batch,
                sequence_length=seq,
                max_sequence_length=MAX_SEARCH_SEQUENCE,
                gpu_counts=SIMPLE_GPU_COUNTS,
            )
        return _finish(model, estimate, fit, gpu, extra)

    request = InferenceRequest(
        architecture=model.architecture,
        gpu_memory_bytes=gpu.memory_bytes if gpu else None,
        **params,
    )
    estimate = estimate_inference(request)
    fit = fit_inference(request, gpu.ref, gpu_count) if gpu is not None else None
    return _finish(model, estimate, fit, gpu, extra)


def answer_finetune(
    model: ModelSpec,
    params: Mapping[str, Any],
    *,
    estimator: str,
    gpu: GpuTarget | None,
) -> Answer:
    """`params` holds FinetuneRequest's fields (all but architecture); `lora` as a mapping."""
    extra: list[str] = []
    fields = dict(params)
    lora = fields.pop("lora", None) or {}
    if estimator == "simple" or model.architecture is None:
        simple = _simple_model(model, extra, estimator)
        fixed = {
            k: fields[k]
            for k in ("method", "weight_format", "precision", "optimizer")
            if k in fields
        }

        def estimate_for(gpus: int, batch: int, seq: int) -> Estimate:
            return estimate_finetune_simple(simple, batch_size=batch, sequence_length=seq, **fixed)

        batch, seq = fields.get("batch_size", 1), fields.get("sequence_length", 2048)
        estimate = estimate_for(1, batch, seq)
        fit = None
        if gpu is not None:
            fit = simple_fit(
                estimate_for,
                gpu_label=gpu.ref,
                gpu_memory_bytes=gpu.memory_bytes,
                gpu_count=fields.get("gpu_count", 1),
                batch_size=batch,
                sequence_length=seq,
                max_sequence_length=MAX_SEARCH_SEQUENCE,
                gpu_counts=[1],
            )
        return _finish(model, estimate, fit, gpu, extra)

    target = lora.get("target_modules", "all-linear")
    spec = LoraSpec(
        rank=lora.get("rank", 16),
        alpha=lora.get("alpha"),
        target_modules=target if isinstance(target, str) else tuple(target),
    )
    request = FinetuneRequest(architecture=model.architecture, lora=spec, **fields)
    estimate = estimate_finetune(request)
    fit = fit_finetune(request, gpu.memory_bytes, gpu.ref) if gpu is not None else None
    return _finish(model, estimate, fit, gpu, extra)
