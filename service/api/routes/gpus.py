"""GET /v1/gpus and /v1/gpus/{gpu_id}: the GPU catalog."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from service.api.deps import get_gpu_catalog
from service.api.problems import problem_responses
from service.api.schemas.common import ResponseModel
from service.catalog.gpu_catalog import Gpu, GpuCatalog

router = APIRouter(prefix="/v1/gpus", tags=["gpus"])


class GpuList(ResponseModel):
    gpus: list[Gpu] = Field(description="GPU records, in catalog order.")


@router.get(
    "",
    response_model=GpuList,
    summary="List the GPU catalog, optionally filtered",
    responses=problem_responses(422),
)
def list_gpus(
    catalog: Annotated[GpuCatalog, Depends(get_gpu_catalog)],
    vendor: Annotated[
        Literal["nvidia", "amd", "intel"] | None, Query(description="Only this vendor's GPUs.")
    ] = None,
    min_memory_bytes: Annotated[
        int | None,
        Query(ge=0, le=2**50, description="Only GPUs whose driver total is at least this."),
    ] = None,
    k8s_product_label: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=200,
            description="The node's `nvidia.com/gpu.product` label (MIG labels find the parent).",
            examples=["NVIDIA-H100-80GB-HBM3"],
        ),
    ] = None,
) -> GpuList:
    return GpuList(gpus=list(catalog.filter(vendor, min_memory_bytes, k8s_product_label)))


@router.get(
    "/{gpu_id}",
    response_model=Gpu,
    summary="One GPU by id (case-insensitive; aliases accepted)",
    responses=problem_responses(404),
)
def get_gpu(gpu_id: str, catalog: Annotated[GpuCatalog, Depends(get_gpu_catalog)]) -> Gpu:
    return catalog.get(gpu_id)
