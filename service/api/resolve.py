"""Turn what a request names (catalog ids, a posted config, a GPU ref) into domain values.

Resolutions are cached: a scheduler asks about the same few models and GPUs over and over,
and a batch names each distinct model once however many items use it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from service.api.schemas.estimates import ModelSelector
from service.catalog.gpu_catalog import GpuCatalog
from service.catalog.model_catalog import ModelCatalog
from service.estimator.architecture import Architecture
from service.estimator.planner import GpuTarget, ModelSpec

_SELECTOR_FIELDS = frozenset(ModelSelector.model_fields)


def resolve_model(body: ModelSelector, catalog: ModelCatalog) -> ModelSpec:
    if body.model is not None:
        return _catalog_model(catalog, body.model.lower())
    if body.hf_config is not None:
        return _config_model(json.dumps(body.hf_config, sort_keys=True, separators=(",", ":")))
    assert body.parameter_count is not None  # the schema enforces exactly one
    active = body.active_parameter_count
    return ModelSpec.from_count(int(body.parameter_count), int(active) if active else None)


@lru_cache(maxsize=512)
def _catalog_model(catalog: ModelCatalog, key: str) -> ModelSpec:
    entry = catalog.get(key)
    return ModelSpec.from_architecture(entry.id.split("/")[-1], entry.id, entry.architecture)


@lru_cache(maxsize=256)
def _config_model(config_json: str) -> ModelSpec:
    config: dict[str, Any] = json.loads(config_json)
    arch = Architecture.from_hf_config(config)
    name = config.get("_name_or_path")
    label = name.split("/")[-1] if isinstance(name, str) and name else f"posted {arch.model_type}"
    return ModelSpec.from_architecture(label, None, arch)


@lru_cache(maxsize=512)
def resolve_gpu(catalog: GpuCatalog, ref: str) -> GpuTarget:
    gpu, mig = catalog.resolve(ref)
    if mig is None:
        return GpuTarget(gpu.id, gpu.name, gpu.memory_bytes)
    return GpuTarget(f"{gpu.id}/{mig.name}", f"{gpu.name} MIG {mig.name}", mig.memory_bytes)


def estimate_params(body: ModelSelector, exclude: frozenset[str]) -> dict[str, Any]:
    """The body's estimate fields as plain values, for the domain request dataclasses."""
    skip = _SELECTOR_FIELDS | exclude
    params: dict[str, Any] = {}
    for name in type(body).model_fields:
        if name in skip:
            continue
        value = getattr(body, name)
        if hasattr(value, "model_dump"):
            value = value.model_dump(exclude_none=True)
        params[name] = value
    return params
