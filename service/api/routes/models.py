"""GET /v1/models and /v1/models/{model_id}: the model catalog and the model store (which
shadows it), with parameter accounting."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from service.api.deps import get_model_catalog
from service.api.problems import problem_responses
from service.catalog.model_catalog import ModelCatalog, ModelEntry
from service.model_store import StoreEntry, StoreIndex
from service.schemas.models import (
    GgufFile,
    GgufRepository,
    ModelList,
    ModelRecord,
    StoreLocation,
)

router = APIRouter(prefix="/v1/models", tags=["models"])

MAX_COUNT = 100 * 10**12


def model_record(entry: ModelEntry) -> ModelRecord:
    arch, counts = entry.architecture, entry.counts
    return ModelRecord(
        id=entry.id,
        aliases=list(entry.aliases),
        model_type=arch.model_type,
        parameter_count=counts.total,
        active_parameter_count=counts.active,
        parameters_by_component=dict(counts.by_component),
        dtype=entry.dtype,
        max_position_embeddings=arch.max_position_embeddings,
        architecture=arch.as_dict(),
        source=entry.source,
        gguf=_gguf(entry),
    )


def _gguf(entry: ModelEntry) -> GgufRepository | None:
    repo = entry.gguf
    if repo is None or entry.base is None:
        return None
    return GgufRepository(
        base=entry.base,
        mix=repo.mix,
        imatrix=repo.imatrix,
        files=[GgufFile(id=f"{entry.id}:{tag}", tag=tag, file=name) for tag, name in repo.files],
    )


def store_record(entry: StoreEntry) -> ModelRecord:
    arch, counts = entry.architecture, entry.counts
    return ModelRecord(
        id=entry.id,
        aliases=[],
        model_type=arch.model_type,
        parameter_count=counts.total,
        active_parameter_count=counts.active,
        parameters_by_component=dict(counts.by_component),
        dtype=entry.dtype,
        max_position_embeddings=arch.max_position_embeddings,
        architecture=arch.as_dict(),
        source="store",
        store=StoreLocation(
            root_index=entry.root_index,
            path=entry.path,
            revision=entry.revision,
            format=entry.format,
            weight_bytes=entry.checkpoint.total_bytes if entry.checkpoint else None,
        ),
    )


def _store(request: Request) -> StoreIndex:
    return request.app.state.model_store.index  # type: ignore[no-any-return]


def _wanted(entry: StoreEntry, family: str | None, low: int | None, high: int | None) -> bool:
    arch = entry.architecture
    if family is not None and family.lower() not in (arch.family_name, arch.model_type):
        return False
    if low is not None and entry.counts.total < low:
        return False
    return high is None or entry.counts.total <= high


@router.get(
    "",
    response_model=ModelList,
    summary="List the model catalog, optionally filtered",
    responses=problem_responses(422),
)
def list_models(
    request: Request,
    catalog: Annotated[ModelCatalog, Depends(get_model_catalog)],
    family: Annotated[
        str | None,
        Query(
            min_length=1, max_length=64, description="A `model_type`, e.g. `llama`, `qwen3_moe`."
        ),
    ] = None,
    min_parameters: Annotated[
        int | None, Query(ge=0, le=MAX_COUNT, description="At least this many parameters.")
    ] = None,
    max_parameters: Annotated[
        int | None, Query(ge=0, le=MAX_COUNT, description="At most this many parameters.")
    ] = None,
) -> ModelList:
    store = _store(request)
    # A store model shadows the catalog entry of the same id.
    records = [
        model_record(e)
        for e in catalog.filter(family, min_parameters, max_parameters)
        if not any(store.get(name) for name in e.names)
    ]
    records += [
        store_record(e) for e in store.all() if _wanted(e, family, min_parameters, max_parameters)
    ]
    records.sort(key=lambda r: r.id.lower())
    return ModelList(models=records)


@router.get(
    "/{model_id:path}",
    response_model=ModelRecord,
    summary="One model by Hugging Face id (case-insensitive; may contain `/`)",
    responses=problem_responses(404, 422),
)
def get_model(
    model_id: str, request: Request, catalog: Annotated[ModelCatalog, Depends(get_model_catalog)]
) -> ModelRecord:
    found = _store(request).get(model_id)
    if found is not None:
        return store_record(found)
    gguf = catalog.gguf_file(model_id)
    return model_record(gguf[0] if gguf is not None else catalog.get(model_id))
