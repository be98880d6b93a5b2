"""Requests and GPUs the performance tests share (catalog models, catalog GPUs)."""

from __future__ import annotations

from functools import cache

from service.application.resolve import resolve_gpu
from service.catalog.gpu_catalog import load_gpu_catalog
from service.estimator.gpu import GpuSpec
from service.estimator.inference import InferenceRequest
from tests.estimator.conftest import LLAMA_8B, catalog_architecture


@cache
def gpu(ref: str) -> GpuSpec:
    return resolve_gpu(load_gpu_catalog(), ref)


def request(
    model: str = LLAMA_8B, gpu_ref: str = "h100-sxm-80gb", engine: str = "vllm", **fields: object
) -> InferenceRequest:
    """An inference request on a catalog GPU, the engine's default context."""
    spec = gpu(gpu_ref)
    return InferenceRequest(
        architecture=catalog_architecture(model),
        engine=engine,
        gpu=spec,
        gpu_memory_bytes=spec.total_bytes,
        sequence_length=None,
        **fields,  # type: ignore[arg-type]
    )
