"""POST /v1/estimate/inference, /v1/estimate/finetune and /v1/estimate/batch.

Parse, resolve names, call the planner, render. All the arithmetic is in service/estimator.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import ConfigDict, Field, ValidationError

from service.api.problems import (
    domain_error_parts,
    problem_body,
    problem_responses,
    summarize,
    validation_errors,
)
from service.api.resolve import estimate_params, resolve_gpu, resolve_model
from service.api.response_cache import OBSERVATION_KEY
from service.api.schemas.common import STRICT_REQUEST, RequestModel, ResponseModel
from service.api.schemas.estimates import (
    EstimateResponse,
    FinetuneRequestBody,
    InferenceRequestBody,
)
from service.catalog.gpu_catalog import GpuCatalog
from service.catalog.model_catalog import ModelCatalog
from service.estimator.errors import EstimatorError, NotFound
from service.estimator.planner import ESTIMATOR_VERSION, Answer, answer_finetune, answer_inference

router = APIRouter(prefix="/v1/estimate", tags=["estimates"])

ERRORS = problem_responses(400, 404, 413, 422)
_INFERENCE_EXCLUDE = frozenset({"gpu", "gpu_count"})
_FINETUNE_EXCLUDE = frozenset({"gpu"})
# Domain-metric labels of one answer: kind, estimator, engine, fit verdict (None: no fit asked).
Observation = tuple[str, str, str, bool | None]


def _render(kind: str, model_spec: Any, answer: Answer) -> dict[str, Any]:
    est, fit, cap = answer.estimate, answer.fit, answer.estimate.capacity
    arch = model_spec.architecture
    return {
        "kind": kind,
        "estimator": est.estimator,
        "estimator_version": ESTIMATOR_VERSION,
        "model": {
            "id": model_spec.id,
            "model_type": arch.model_type if arch else None,
            "parameter_count": model_spec.parameter_count,
            "active_parameter_count": model_spec.active_parameter_count,
            "architecture": _architecture_fields(arch) if arch else None,
        },
        "breakdown": dict(est.total),
        "total_bytes": est.total_bytes,
        "per_gpu": {
            "gpu_count": est.gpu_count,
            "breakdown": dict(est.per_gpu),
            "total_bytes": est.per_gpu_bytes,
        },
        "fit": None
        if fit is None
        else {
            "gpu": fit.gpu,
            "gpu_count": fit.gpu_count,
            "usable_bytes": fit.usable_bytes,
            "required_bytes": fit.required_bytes,
            "fits": fit.fits,
            "headroom_bytes": fit.headroom_bytes,
            "min_gpu_count": fit.min_gpu_count,
            "max_batch_size": fit.max_batch_size,
            "max_sequence_length": fit.max_sequence_length,
        },
        "capacity": None
        if cap is None
        else {
            "kv_cache_bytes_per_token": cap.kv_cache_bytes_per_token,
            "kv_cache_pool_bytes": cap.kv_cache_pool_bytes,
            "kv_cache_tokens": cap.kv_cache_tokens,
            "max_concurrency": cap.max_concurrency,
            "sequence_length": cap.sequence_length,
            "budget_bytes": cap.budget_bytes,
            "subtracted": dict(cap.subtracted),
        },
        "cpu_bytes": est.cpu_bytes,
        "details": dict(est.details),
        "assumptions": list(answer.assumptions),
        "summary": answer.summary,
    }


@lru_cache(maxsize=512)
def _architecture_fields(arch: Any) -> dict[str, Any]:
    # Cached: an Architecture is frozen, and rendering it walks every field (about 40 µs,
    # a tenth of a whole request; bench/profile.txt). Nothing mutates the returned dict.
    from service.api.schemas.models import architecture_fields

    return architecture_fields(arch)


def run_estimate(
    body: InferenceRequestBody | FinetuneRequestBody, request: Request
) -> tuple[dict[str, Any], Observation]:
    """Resolve, answer, count: the rendered answer and its domain-metric labels."""
    started = time.perf_counter()
    kind = "inference" if isinstance(body, InferenceRequestBody) else "finetune"
    # The catalogs straight from the app state, not as FastAPI dependencies: solving two
    # dependencies cost more per request than the estimate (bench/profile.txt).
    state = request.app.state
    models: ModelCatalog = state.model_catalog
    gpus: GpuCatalog = state.gpu_catalog
    model = resolve_model(body, models)
    gpu = resolve_gpu(gpus, body.gpu) if body.gpu else None
    if isinstance(body, InferenceRequestBody):
        if body.gpu_count is not None and gpu is None:
            raise NotFound("`gpu_count` needs a `gpu` to check the fit on", field="gpu")
        params = estimate_params(body, _INFERENCE_EXCLUDE)
        answer = answer_inference(
            model, params, estimator=body.estimator, gpu=gpu, gpu_count=body.gpu_count
        )
        engine = body.engine
    else:
        params = estimate_params(body, _FINETUNE_EXCLUDE)
        answer = answer_finetune(model, params, estimator=body.estimator, gpu=gpu)
        engine = "training"
    metrics = state.metrics
    metrics.observe_estimate_latency(kind, time.perf_counter() - started)
    fits = answer.fit.fits if answer.fit is not None else None
    observation = (kind, answer.estimate.estimator, engine, fits)
    metrics.observe_estimate(*observation)
    return _render(kind, model, answer), observation


def _single(body: InferenceRequestBody | FinetuneRequestBody, request: Request) -> Response:
    rendered, observation = run_estimate(body, request)
    # For the response cache: a replayed answer counts in the domain metrics like this one.
    setattr(request.state, OBSERVATION_KEY, observation)
    return json_response(rendered)


def json_response(content: dict[str, Any]) -> Response:
    """Serialized once, straight from the rendered dict, by orjson (a tenth of json.dumps's
    time for a 3 KB answer, the same bytes). The route's `response_model` documents the shape;
    validating every answer against it again would cost more than the estimate, so
    tests/api/test_render.py checks that rendered answers equal their validated form instead.
    """
    return Response(orjson.dumps(content), media_type="application/json")


# `async def`: the estimate runs on the event loop, with no thread-pool hop. Its worst case is
# bounded (bench/results.md: cold estimates of every catalog model × GPU × engine, the slowest
# under 0.1 s; repeated ones tens of µs), so it cannot stall the loop for long. The batch route
# stays a plain `def` (thread pool): 1000 cold items take longer.
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


# ---------------------------------------------------------------------------------------------
# Batch


class BatchItem(RequestModel):
    kind: Literal["inference", "finetune"] = Field(description="Which estimate this item asks.")
    request: dict[str, Any] = Field(
        description="The body of the matching single-estimate endpoint, validated per item."
    )


class BatchRequest(RequestModel):
    model_config = ConfigDict(
        **STRICT_REQUEST,
        json_schema_extra={
            "example": {
                "items": [
                    {
                        "kind": "inference",
                        "request": {"model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "l4"},
                    },
                    {
                        "kind": "finetune",
                        "request": {"model": "meta-llama/Llama-3.2-1B", "method": "lora"},
                    },
                ]
            }
        },
    )

    items: list[BatchItem] = Field(
        min_length=1, max_length=1000, description="Up to 1000 estimate requests."
    )


class BatchResult(ResponseModel):
    status: int = Field(description="200, or the status the item alone would have had.")
    estimate: EstimateResponse | None = Field(None, description="The answer, on success.")
    problem: dict[str, Any] | None = Field(None, description="A problem document, on failure.")


class BatchResponse(ResponseModel):
    results: list[BatchResult] = Field(description="One per item, in order.")
    succeeded: int
    failed: int


_BODIES: dict[str, type[InferenceRequestBody] | type[FinetuneRequestBody]] = {
    "inference": InferenceRequestBody,
    "finetune": FinetuneRequestBody,
}


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
            parsed = _BODIES[item.kind].model_validate(item.request)
            rendered, _ = run_estimate(parsed, request)
            results.append({"status": 200, "estimate": rendered, "problem": None})
        except ValidationError as exc:
            errors = validation_errors(exc.errors())
            for e in errors:
                e["field"] = f"items.{index}.request.{e['field']}"
            results.append(
                {
                    "status": 422,
                    "estimate": None,
                    "problem": problem_body(
                        422, summarize(errors), errors=errors, instance=instance
                    ),
                }
            )
        except EstimatorError as exc:
            status, field_errors = domain_error_parts(exc, f"items.{index}.request.")
            problem = problem_body(status, exc.detail, errors=field_errors, instance=instance)
            results.append({"status": status, "estimate": None, "problem": problem})
    failed = sum(1 for r in results if r["status"] != 200)
    return json_response({"results": results, "succeeded": len(results) - failed, "failed": failed})
