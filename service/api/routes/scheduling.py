"""POST /v1/preflight, /v1/admission and /v1/extender/{filter,prioritize}: the service in the
forms schedulers already speak.

Parse, run on the estimate pool (`run_cpu_bound`), serialize; the work is in
`service/scheduling/`. docs/scheduling.md says how to wire each one.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from service.api.concurrency import DeadlineExceeded, Overloaded, run_cpu_bound
from service.api.problems import problem_responses
from service.application.estimate_service import Catalogs, app_catalogs
from service.scheduling import admission, extender
from service.scheduling.preflight import Overrides, preflight
from service.schemas.scheduling import (
    ADMISSION_REQUEST_SCHEMA,
    EXTENDER_ARGS_SCHEMA,
    AdmissionReviewOut,
    ExtenderFilterResultOut,
    HostPriorityOut,
    PreflightRequest,
    PreflightResponse,
)
from service.workloads.extender import filter_result_json, host_priority_list_json

router = APIRouter(tags=["scheduling"])


def _catalogs(request: Request) -> Catalogs:
    return app_catalogs(request.app.state)


def _default(value: object) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _json(content: object) -> Response:
    return Response(orjson.dumps(content, default=_default), media_type="application/json")


async def _json_body(request: Request) -> object:
    """The body as JSON; a 400 problem when it is not."""
    raw = await request.body()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise HTTPException(400) from None


@router.post(
    "/v1/preflight",
    response_model=PreflightResponse,
    summary="Check a command line or a manifest before deploying it: what was read, the "
    "estimate, the verdict, the GPU products it fits on",
    responses=problem_responses(400, 404, 413, 422),
)
async def preflight_workload(body: PreflightRequest, request: Request) -> Response:
    overrides = Overrides(
        body.model,
        body.gpu,
        body.gpu_memory_bytes,
        body.gpu_count,
        hf_config=body.hf_config,
        weight_format=body.weight_format,
    )
    answer = await run_cpu_bound(
        request,
        _preflight,
        body,
        overrides,
        _catalogs(request),
        request.app.state.metrics,
    )
    return _json(answer)


def _preflight(
    body: PreflightRequest, overrides: Overrides, catalogs: Catalogs, metrics: Any
) -> dict[str, Any]:
    return preflight(
        command=body.command,
        obj=body.object,
        overrides=overrides,
        catalogs=catalogs,
        metrics=metrics,
        files=body.files,
    )


# How long a review past its deadline may take to hand back what it checked: the container in
# progress finishes first (a cold vLLM container with its fit on every catalog GPU: tens of ms).
_ADMISSION_GRACE_S = 0.5


async def _review(request: Request, mode: admission.Mode) -> Response:
    raw = await request.body()
    try:
        body: object = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None  # answered allowed, with a warning that the review could not be read
    settings = request.app.state.settings
    policy = settings.admission_unchecked
    try:
        answer = await run_cpu_bound(
            request,
            admission.review,
            body,
            mode,
            _catalogs(request),
            request.app.state.metrics,
            policy,
            deadline_s=settings.admission_deadline_s,
            grace_s=_ADMISSION_GRACE_S,
        )
    except (DeadlineExceeded, Overloaded) as exc:
        # The API server waits timeoutSeconds at most: an answer now, saying why, beats a 503.
        why = (
            "the replica is saturated"
            if isinstance(exc, Overloaded)
            else f"the review did not start or finish within {settings.admission_deadline_s:g} s"
        )
        answer = admission.unchecked_review(body, why, policy)
        request.app.state.metrics.observe_admission(mode, "unchecked")
    return _json(answer)


ADMISSION_DOC = {
    "requestBody": {"content": {"application/json": {"schema": ADMISSION_REQUEST_SCHEMA}}}
}


@router.post(
    "/v1/admission",
    response_model=AdmissionReviewOut,
    summary="Validating admission webhook (AdmissionReview v1); mode from the object's "
    f"`{admission.MODE_KEY}` annotation or label, default warn",
    responses=problem_responses(413),
    openapi_extra=ADMISSION_DOC,
)
async def admission_review(request: Request) -> Response:
    return await _review(request, admission.DEFAULT_MODE)


@router.post(
    "/v1/admission/{mode}",
    response_model=AdmissionReviewOut,
    summary="The admission webhook with another default mode (one webhook entry per namespace "
    "selector); the object's annotation or label still decides first",
    responses=problem_responses(404, 413, 422),
    openapi_extra=ADMISSION_DOC,
)
async def admission_review_with_mode(
    request: Request,
    mode: Annotated[admission.Mode, Path(description="The default mode: deny, warn or off.")],
) -> Response:
    return await _review(request, mode)


EXTENDER_DOC = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": EXTENDER_ARGS_SCHEMA}},
    }
}


@router.post(
    "/v1/extender/filter",
    response_model=ExtenderFilterResultOut,
    summary="kube-scheduler extender filter: nodes whose GPU is too small for the pod's model "
    "are FailedAndUnresolvableNodes; a pod it cannot judge is named in Error",
    responses=problem_responses(400, 413, 422),
    openapi_extra=EXTENDER_DOC,
)
async def extender_filter(request: Request) -> Response:
    body = await _json_body(request)
    args = extender.read_args(body)
    result = await run_cpu_bound(
        request, extender.filter_nodes, args, _catalogs(request), request.app.state.metrics
    )
    return _json(filter_result_json(result))


@router.post(
    "/v1/extender/prioritize",
    response_model=list[HostPriorityOut],
    summary="kube-scheduler extender prioritize: scores 0-10, the node that fits with the "
    "least memory left idle first; a pod it cannot judge is a 422 (no score)",
    responses=problem_responses(400, 413, 422),
    openapi_extra=EXTENDER_DOC,
)
async def extender_prioritize(request: Request) -> Response:
    body = await _json_body(request)
    args = extender.read_args(body)
    scores = await run_cpu_bound(
        request, extender.prioritize_nodes, args, _catalogs(request), request.app.state.metrics
    )
    return _json(host_priority_list_json(scores))
