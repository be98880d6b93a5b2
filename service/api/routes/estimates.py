"""POST /v1/estimate/inference, /v1/estimate/finetune and /v1/estimate/batch.

Parse, answer (service/api/estimate_service.py), serialize. The arithmetic is in
service/estimator, the names are resolved in service/api/resolve.py.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from service.api.estimate_service import Catalogs, Observation, run_estimate
from service.api.problems import (
    domain_error_parts,
    problem_body,
    problem_responses,
    summarize,
    validation_errors,
)
from service.api.response_cache import OBSERVATION_KEY
from service.api.schemas.batch import BatchRequest, BatchResponse, BatchResult
from service.api.schemas.estimates import (
    EstimateResponse,
    FinetuneRequestBody,
    InferenceRequestBody,
)
from service.estimator.errors import EstimatorError, InvalidRequest

router = APIRouter(prefix="/v1/estimate", tags=["estimates"])

ERRORS = problem_responses(400, 404, 413, 422)

_BODIES: dict[str, type[InferenceRequestBody] | type[FinetuneRequestBody]] = {
    "inference": InferenceRequestBody,
    "finetune": FinetuneRequestBody,
}


def _catalogs(request: Request) -> Catalogs:
    # Straight from the app state, not as FastAPI dependencies: solving two dependencies cost
    # more per request than the estimate (bench/profile.txt).
    state = request.app.state
    return Catalogs(state.model_catalog, state.gpu_catalog, state.model_store.index)


def _answer(
    body: InferenceRequestBody | FinetuneRequestBody, request: Request
) -> tuple[EstimateResponse, Observation]:
    return run_estimate(body, _catalogs(request), request.app.state.metrics)


def json_response(content: EstimateResponse | BatchResponse | dict[str, Any]) -> Response:
    """Serialized once, by pydantic's serializer for a model (orjson for a plain dict)."""
    if isinstance(content, dict):
        return Response(orjson.dumps(content), media_type="application/json")
    return Response(content.model_dump_json(), media_type="application/json")


def _single(body: InferenceRequestBody | FinetuneRequestBody, request: Request) -> Response:
    rendered, observation = _answer(body, request)
    # For the response cache: a replayed answer counts in the domain metrics like this one.
    setattr(request.state, OBSERVATION_KEY, observation)
    return json_response(rendered)


# `async def`: the estimate runs on the event loop, with no thread-pool hop. Its worst case is
# bounded (bench/results.md), so it cannot stall the loop for long. The batch route stays a
# plain `def` (thread pool): 1000 cold items take longer.
@router.post(
    "/inference",
    response_model=EstimateResponse,
    summary="Memory to serve a model, per GPU and in total, with fit and engine capacity",
    responses=ERRORS,
)
async def estimate_inference(body: InferenceRequestBody, request: Request) -> Response:
    return _single(body, request)


@router.post(
    "/finetune",
    response_model=EstimateResponse,
    summary="Peak memory of a fine-tuning step, per GPU and in total, with fit",
    responses=ERRORS,
)
async def estimate_finetune(body: FinetuneRequestBody, request: Request) -> Response:
    return _single(body, request)


@router.post(
    "/batch",
    response_model=BatchResponse,
    summary="Up to 1000 inference and fine-tune estimates in one call, answered in order",
    responses=ERRORS,
)
def estimate_batch(body: BatchRequest, request: Request) -> Response:
    results: list[dict[str, Any]] = []
    for index, item in enumerate(body.items):
        instance = f"{request.url.path}#items/{index}"
        try:
            body_type = _BODIES.get(item.kind)
            if body_type is None:
                raise InvalidRequest(
                    f"kind must be one of {', '.join(_BODIES)}; got {item.kind[:40]!r}",
                    field="kind",
                )
            parsed = body_type.model_validate(item.request)
            rendered, _ = _answer(parsed, request)
            results.append({"status": 200, "estimate": rendered, "problem": None})
        except ValidationError as exc:
            errors = validation_errors(exc.errors())
            for e in errors:
                e["field"] = f"items.{index}.request.{e['field']}"
            problem = problem_body(422, summarize(errors), errors=errors, instance=instance)
            results.append({"status": 422, "estimate": None, "problem": problem})
        except EstimatorError as exc:
            prefix = f"items.{index}." if exc.field == "kind" else f"items.{index}.request."
            status, field_errors = domain_error_parts(exc, prefix)
            problem = problem_body(status, exc.detail, errors=field_errors, instance=instance)
            results.append({"status": status, "estimate": None, "problem": problem})
    failed = sum(1 for r in results if r["status"] != 200)
    response = BatchResponse.model_construct(
        results=[BatchResult.model_construct(**r) for r in results],
        succeeded=len(results) - failed,
        failed=failed,
    )
    return json_response(response)
