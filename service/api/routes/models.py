"""GET /v1/models and /v1/models/{model_id}: the model catalog with parameter accounting."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from service.api.deps import get_model_catalog
from service.api.problems import problem_responses
from service.api.schemas.models import ModelList, ModelRecord
from service.catalog.model_catalog import ModelCatalog, ModelEntry

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
    )


@router.get(
    "",
    response_model=ModelList,
    summary="List the model catalog, optionally filtered",
    responses=problem_responses(422),
)
def list_models(
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
    entries = catalog.filter(family, min_parameters, max_parameters)
    return ModelList(models=[model_record(e) for e in entries])


@router.get(
    "/{model_id:path}",
    response_model=ModelRecord,
    summary="One model by Hugging Face id (case-insensitive; may contain `/`)",
    responses=problem_responses(404, 422),
)
def get_model(
    model_id: str, catalog: Annotated[ModelCatalog, Depends(get_model_catalog)]
) -> ModelRecord:
    return model_record(catalog.get(model_id))
