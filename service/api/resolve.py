"""Turn what a request names (a catalog id, a posted config, a GPU ref) into domain values.

A posted config is parsed on every request (cheap next to reading its JSON) and what follows
is cached on the parsed architecture, so equal configs share entries whatever their bytes,
and no cache holds a request's raw body.
"""

from __future__ import annotations

from functools import lru_cache

from service.api.schemas.estimates import ModelSelector
from service.catalog.gpu_catalog import GpuCatalog
from service.catalog.model_catalog import ModelCatalog
from service.estimator.answer import GpuTarget, ModelSpec
from service.estimator.memo import memoized
from service.estimator.model import Architecture, read_config

__all__ = ["resolve_gpu", "resolve_model"]


def resolve_model(body: ModelSelector, catalog: ModelCatalog) -> ModelSpec:
    if body.model is not None:
        entry = catalog.get(body.model)
        counts = entry.counts
        return ModelSpec(
            entry.id.split("/")[-1],
            entry.id,
            counts.total,
            counts.active,
            entry.dtype,
            entry.architecture,
        )
    if body.hf_config is not None:
        name = body.hf_config.get("_name_or_path")
        label = name.split("/")[-1][:100] if isinstance(name, str) and name else None
        return _posted_model(read_config(body.hf_config), label)
    assert body.parameter_count is not None  # the schema enforces exactly one
    active = body.active_parameter_count
    return ModelSpec.from_count(int(body.parameter_count), int(active) if active else None)


@memoized
def _posted_model(arch: Architecture, label: str | None) -> ModelSpec:
    return ModelSpec.from_architecture(label or f"posted {arch.model_type}", None, arch)


@lru_cache(maxsize=512)
def resolve_gpu(catalog: GpuCatalog, ref: str) -> GpuTarget:
    gpu, mig = catalog.resolve(ref)
    if mig is None:
        return GpuTarget(gpu.id, gpu.name, gpu.memory_bytes)
    return GpuTarget(f"{gpu.id}/{mig.name}", f"{gpu.name} MIG {mig.name}", mig.memory_bytes)
