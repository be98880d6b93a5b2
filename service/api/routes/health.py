"""Operations endpoints: liveness, readiness and Prometheus metrics.

All three are `async def`: they run on the event loop itself, never waiting for a thread (the
estimate pool's or the framework's), so kubelet's probes are answered whenever the loop is
free, which service/api/concurrency.py keeps it.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from service.api.problems import problem_responses

router = APIRouter(tags=["operations"])


class Health(BaseModel):
    status: str = Field(description="`ok` when the check passes.", examples=["ok"])


class StoreStatus(BaseModel):
    enabled: bool = Field(description="Whether LLMMEM_MODEL_DIRS names any directory.")
    scans: int = Field(description="Completed scans (0: the first is still running).")
    models: int = Field(description="Models in the current index.")
    skipped: int = Field(description="Files or directories skipped by the last scan.")
    complete: bool = Field(description="False when a scan bound stopped the last scan early.")


class Readiness(BaseModel):
    status: str = Field(description="`ready` or `not-ready`.", examples=["ready"])
    gpus: int = Field(description="GPU catalog entries loaded.", examples=[31])
    models: int = Field(description="Model catalog entries loaded.", examples=[52])
    store: StoreStatus = Field(description="The model store (indexed in the background).")


@router.get("/healthz", response_model=Health, summary="Liveness: the process is serving")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: both catalogs are loaded and valid",
    responses={503: {"model": Readiness, "description": "Catalogs not loaded yet"}},
)
async def readyz(request: Request) -> Response:
    state = request.app.state
    store = state.model_store
    index = store.index
    status = StoreStatus(
        enabled=store.enabled,
        scans=store.scans,
        models=len(index.entries),
        skipped=len(index.skipped),
        complete=index.complete,
    )
    if not getattr(state, "ready", False):
        body = Readiness(status="not-ready", gpus=0, models=0, store=status)
        return JSONResponse(body.model_dump(), status_code=503)
    # Ready without waiting for the store: its models resolve once the first scan is done.
    body = Readiness(
        status="ready",
        gpus=len(state.gpu_catalog.all()),
        models=len(state.model_catalog.all()),
        store=status,
    )
    return JSONResponse(body.model_dump())


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **problem_responses(500),
    },
)
async def metrics(request: Request) -> Response:
    registry = request.app.state.metrics.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
