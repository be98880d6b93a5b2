"""POST /v1/estimate/inference, /v1/estimate/finetune, /v1/estimate/colocated and
/v1/estimate/batch.

Parse, answer (service/application/estimate_service.py) on the CPU pool
(service/api/concurrency.py), serialize. The arithmetic is in service/estimator, the names are
resolved in service/application/resolve.py; a batch's cost is checked against its budget first
(service/api/cost.py).
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from service.api.bodies import documented_body, parse_body
from service.api.concurrency import Cancelled, checkpoint, run_on_body
from service.api.cost import BatchOverBudget, batch_cost
from service.api.fast_path import cost_class, estimate_bytes
from service.api.problems import (
    KINDS,
    domain_error_parts,
    problem_body,
    problem_responses,
    summarize,
    validation_errors,
)
from service.api.response_cache import OBSERVATION_KEY
from service.application.colocation import run_colocated
from service.application.estimate_service import Catalogs, Observation, app_catalogs, run_estimate
from service.application.metrics import Metrics
from service.estimator.errors import EstimatorError, InvalidRequest
from service.schemas.batch import BatchItem, BatchRequest, BatchResponse, BatchResult
from service.schemas.colocation import ColocatedRequest, ColocatedResponse
from service.schemas.estimates import (
    EstimateResponse,
    FinetuneRequestBody,
    InferenceRequestBody,
)

router = APIRouter(prefix="/v1/estimate", tags=["estimates"])

ERRORS = problem_responses(400, 404, 413, 422, 503)

EstimateBody = InferenceRequestBody | FinetuneRequestBody
#: The request bodies these routes parse themselves (documented in the OpenAPI components).
BODY_MODELS = (InferenceRequestBody, FinetuneRequestBody, BatchRequest, ColocatedRequest)

_BODIES: dict[str, type[EstimateBody]] = {
    "inference": InferenceRequestBody,
    "finetune": FinetuneRequestBody,
}


def _catalogs(request: Request) -> Catalogs:
    # Straight from the app state, not as FastAPI dependencies: solving two dependencies cost
    # more per request than the estimate (bench/profile.txt).
    return app_catalogs(request.app.state)


def _estimate(
    raw: bytes, body_type: type[EstimateBody], state: Any, path: str
) -> tuple[bytes, Observation, Hashable | None, float]:
    """Parse, answer and serialize one estimate; runs on a pool thread (service/api/bodies.py
    says why the parsing is there too). Also its cost class and the CPU time it took, for the
    inline policy (service/api/fast_path.py)."""
    started = time.thread_time()
    body = parse_body(raw, body_type)
    content, observation = estimate_bytes(body, body_type, state)
    return content, observation, cost_class(path, body), time.thread_time() - started


async def _single(body_type: type[EstimateBody], request: Request) -> Response:
    # Off the event loop, under the pool's admission control and deadline, so probes and
    # metrics answer while estimates run (service/api/concurrency.py). Requests of a kind
    # measured cheap are answered on the loop before they get here (service/api/fast_path.py).
    state = request.app.state
    content, observation, key, seconds = await run_on_body(
        request, _estimate, body_type, state, request.url.path
    )
    state.inline_policy.observe(key, seconds)
    # For the response cache: a replayed answer counts in the domain metrics like this one.
    setattr(request.state, OBSERVATION_KEY, observation)
    return Response(content, media_type="application/json")


@router.post(
    "/inference",
    response_model=EstimateResponse,
    summary="Memory to serve a model, per GPU and in total, with fit and engine capacity",
    responses=ERRORS,
    openapi_extra=documented_body(InferenceRequestBody),
)
async def estimate_inference(request: Request) -> Response:
    return await _single(InferenceRequestBody, request)


@router.post(
    "/finetune",
    response_model=EstimateResponse,
    summary="Peak memory of a fine-tuning step, per GPU and in total, with fit",
    responses=ERRORS,
    openapi_extra=documented_body(FinetuneRequestBody),
)
async def estimate_finetune(request: Request) -> Response:
    return await _single(FinetuneRequestBody, request)


@router.post(
    "/colocated",
    response_model=ColocatedResponse,
    summary="Several engines on one GPU (time-slicing or MPS): what each holds, and whether "
    "they fit together",
    responses=ERRORS,
    openapi_extra=documented_body(ColocatedRequest),
)
async def estimate_colocated(request: Request) -> Response:
    # Up to 16 estimates, each possibly a posted config: pooled and bounded as a batch is (a
    # batch slot, the cost budget, a checkpoint between workloads in run_colocated).
    content = await run_on_body(
        request,
        _colocated,
        _catalogs(request),
        request.app.state.metrics,
        request.app.state.settings.batch_cost_budget,
        kind="batch",
    )
    return Response(content, media_type="application/json")


def _colocated(raw: bytes, catalogs: Catalogs, metrics: Metrics, budget: int) -> bytes:
    """Parse, check the cost, answer and serialize a shared-GPU request; runs on a pool
    thread."""
    body = parse_body(raw, ColocatedRequest)
    requests = ({"hf_config": w.hf_config, "model": w.model} for w in body.workloads)
    cost = batch_cost(requests, catalogs.models, catalogs.store)
    if cost > budget:
        raise BatchOverBudget(cost, budget)
    return run_colocated(body, catalogs, metrics).model_dump_json().encode()


@router.post(
    "/batch",
    response_model=BatchResponse,
    summary="Up to 1000 inference and fine-tune estimates in one call, answered in order",
    responses=ERRORS,
    openapi_extra=documented_body(BatchRequest),
)
async def estimate_batch(request: Request) -> Response:
    content = await run_on_body(
        request,
        _batch,
        _catalogs(request),
        request.app.state.metrics,
        request.app.state.settings.batch_cost_budget,
        request.url.path,
        grace_s=_BATCH_GRACE_S,
        kind="batch",
    )
    return Response(content, media_type="application/json")


def _batch(raw: bytes, catalogs: Catalogs, metrics: Metrics, budget: int, path: str) -> bytes:
    """Parse, check the cost, answer and serialize a batch; runs on a pool thread."""
    body = parse_body(raw, BatchRequest)
    cost = batch_cost((item.request for item in body.items), catalogs.models, catalogs.store)
    if cost > budget:
        raise BatchOverBudget(cost, budget)
    results = _answer_items(body.items, catalogs, metrics, path)
    failed = sum(1 for r in results if r["status"] != 200)
    response = BatchResponse.model_construct(
        results=[BatchResult.model_construct(**r) for r in results],
        succeeded=len(results) - failed,
        failed=failed,
    )
    return response.model_dump_json().encode()


# How long a batch past its deadline may take to hand back what it finished: the item in
# progress completes first (bench/results.md: a cold 1024-layer item takes tens of ms).
_BATCH_GRACE_S = 2.0


def _answer_items(
    items: list[BatchItem], catalogs: Catalogs, metrics: Metrics, path: str
) -> list[dict[str, Any]]:
    """Each item's outcome in order; runs on a pool thread. Past the deadline, the items not
    started are answered with a 503 problem each; after a disconnect, the work just stops."""
    results: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        instance = f"{path}#items/{index}"
        try:
            checkpoint()
        except Cancelled as exc:
            if str(exc) != "deadline":
                raise
            results.extend(_unfinished(path, len(results), len(items)))
            break
        results.append(_answer_item(index, item, catalogs, metrics, instance))
    return results


def _unfinished(path: str, start: int, stop: int) -> list[dict[str, Any]]:
    kind = KINDS["deadline-exceeded"]
    detail = (
        "not estimated before the request deadline (LLMMEM_ESTIMATE_DEADLINE_S); send this "
        "item again, in a smaller batch"
    )
    return [
        {
            "status": 503,
            "estimate": None,
            "problem": problem_body(503, detail, instance=f"{path}#items/{i}", kind=kind),
        }
        for i in range(start, stop)
    ]


def _answer_item(
    index: int, item: BatchItem, catalogs: Catalogs, metrics: Metrics, instance: str
) -> dict[str, Any]:
    try:
        body_type = _BODIES.get(item.kind)
        if body_type is None:
            raise InvalidRequest(
                f"kind must be one of {', '.join(_BODIES)}; got {item.kind[:40]!r}",
                field="kind",
            )
        parsed = body_type.model_validate(item.request)
        rendered, _ = run_estimate(parsed, catalogs, metrics)
        return {"status": 200, "estimate": rendered, "problem": None}
    except ValidationError as exc:
        errors = validation_errors(exc.errors())
        for e in errors:
            e["field"] = f"items.{index}.request.{e['field']}"
        problem = problem_body(422, summarize(errors), errors=errors, instance=instance)
        return {"status": 422, "estimate": None, "problem": problem}
    except EstimatorError as exc:
        prefix = f"items.{index}." if exc.field == "kind" else f"items.{index}.request."
        status, field_errors = domain_error_parts(exc, prefix)
        problem = problem_body(status, exc.detail, errors=field_errors, instance=instance)
        return {"status": status, "estimate": None, "problem": problem}
