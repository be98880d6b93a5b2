"""GET /v1/gpus and /v1/gpus/{gpu_id}: the GPU catalog."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BeforeValidator

from service.api.deps import get_gpu_catalog
from service.api.problems import problem_responses
from service.catalog.gpu_catalog import GpuCatalog
from service.catalog.gpu_record import Gpu
from service.estimator.errors import NotFound
from service.schemas.gpus import GpuLabelMatch, GpuList

router = APIRouter(prefix="/v1/gpus", tags=["gpus"])

LIST_PARAMETERS = ("vendor", "min_memory_bytes", "k8s_product_label")


def _lowercase(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _query_error(name: str, message: str, kind: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("query", name), "msg": message, "type": kind}])


def only_query_parameters(*allowed: str) -> Callable[[Request], None]:
    """A dependency that rejects query parameters the route does not take.

    A typo (`k8s_label`) must not silently widen the answer to every GPU.
    """

    def check(request: Request) -> None:
        unknown = [name for name in request.query_params if name not in allowed]
        if unknown:
            expected = ", ".join(allowed) if allowed else "none"
            raise RequestValidationError(
                [
                    {
                        "loc": ("query", name),
                        "msg": f"Unknown query parameter {name!r}; allowed: {expected}",
                        "type": "unknown_query_parameter",
                    }
                    for name in unknown
                ]
            )

    return check


@router.get(
    "",
    response_model=GpuList,
    summary="List the GPU catalog, optionally filtered",
    responses=problem_responses(422),
    dependencies=[Depends(only_query_parameters(*LIST_PARAMETERS))],
)
def list_gpus(
    catalog: Annotated[GpuCatalog, Depends(get_gpu_catalog)],
    vendor: Annotated[
        Literal["nvidia", "amd", "intel"] | None,
        BeforeValidator(_lowercase),
        Query(description="Only this vendor's GPUs (case-insensitive)."),
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
            description=(
                "The node's `nvidia.com/gpu.product` label. Its `-MIG-<profile>` form finds the "
                "parent GPU and reports the profile in `match`; a profile the GPU lacks is a "
                "422 naming the profiles it has. A `-SHARED` suffix is accepted."
            ),
            examples=["NVIDIA-H100-80GB-HBM3"],
        ),
    ] = None,
) -> GpuList:
    match = None
    if k8s_product_label is not None:
        try:
            found = catalog.match_label(k8s_product_label)
        except NotFound as error:
            raise _query_error("k8s_product_label", error.detail, "unknown_mig_profile") from None
        if found is not None:
            match = GpuLabelMatch(
                gpu_id=found.gpu.id,
                matched_by=found.matched_by,
                mig_profile=found.mig_profile,
                shared=found.shared,
            )
    gpus = catalog.filter(vendor, min_memory_bytes, k8s_product_label)
    return GpuList(gpus=list(gpus), match=match)


@router.get(
    "/{gpu_id}",
    response_model=Gpu,
    summary="One GPU by id (case-insensitive; aliases accepted)",
    responses=problem_responses(404, 422),
    dependencies=[Depends(only_query_parameters())],
)
def get_gpu(gpu_id: str, catalog: Annotated[GpuCatalog, Depends(get_gpu_catalog)]) -> Gpu:
    return catalog.get(gpu_id)
