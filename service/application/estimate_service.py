"""Answering one estimate body: resolve the names, build the typed request, answer, observe.

What the estimate routes and the batch route share; the routes only parse and serialize.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from service.application.convert import finetune_request, inference_request, performance_request
from service.application.metrics import Metrics
from service.application.render import render_estimate
from service.application.resolve import (
    ad_hoc_gpu,
    resolve_gpu,
    resolve_model,
    resolve_speculative,
)
from service.catalog.gpu_catalog import GpuCatalog
from service.catalog.model_catalog import ModelCatalog
from service.estimator.answer import Answer, ModelSpec, answer_finetune, answer_inference
from service.estimator.errors import InvalidRequest
from service.estimator.gpu import GpuSpec
from service.model_store import StoreIndex
from service.schemas.estimates import (
    EstimateResponse,
    FinetuneRequestBody,
    InferenceRequestBody,
)

__all__ = ["Catalogs", "Observation", "run_estimate"]

# Domain-metric labels of one answer: kind, estimator, engine, fit verdict (None: no fit asked).
Observation = tuple[str, str, str, bool | None]

# The largest integer the wire format carries for every client (a signed 64-bit integer): an
# answer with a larger byte figure is refused, naming the workload fields that drive it.
MAX_WIRE_INTEGER = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Catalogs:
    models: ModelCatalog
    gpus: GpuCatalog
    store: StoreIndex | None  # the model store's current index (shadows `models`)


def app_catalogs(state: Any) -> Catalogs:
    """The catalogs a request resolves against, from the app state (read per request: the
    store's index is replaced by each rescan)."""
    return Catalogs(state.model_catalog, state.gpu_catalog, state.model_store.index)


def run_estimate(
    body: InferenceRequestBody | FinetuneRequestBody, catalogs: Catalogs, metrics: Metrics
) -> tuple[EstimateResponse, Observation]:
    """Resolve, answer, count: the rendered answer and its domain-metric labels."""
    started = time.perf_counter()
    model = resolve_model(body, catalogs.models, catalogs.store)
    gpu = None
    if body.gpu is not None:
        gpu = resolve_gpu(catalogs.gpus, body.gpu)
    elif body.gpu_memory_bytes is not None:
        gpu = ad_hoc_gpu(body.gpu_memory_bytes)
    if isinstance(body, InferenceRequestBody):
        kind = "inference"
        if body.gpu_count is not None and gpu is None:
            raise InvalidRequest(
                "`gpu_count` needs a GPU to check the fit on: name it with `gpu` (or give "
                "`gpu_memory_bytes`)",
                field="gpu",
            )
        answer = answer_body(body, model, gpu, catalogs)
        engine = body.engine
    else:
        kind = "finetune"
        answer = answer_finetune(model, finetune_request(body), estimator=body.estimator, gpu=gpu)
        engine = "training"
    _check_wire_size(answer, kind)
    metrics.observe_estimate_latency(kind, time.perf_counter() - started)
    fits = answer.fit.fits if answer.fit is not None else None
    observation = (kind, answer.estimate.estimator, engine, fits)
    metrics.observe_estimate(*observation)
    return render_estimate(kind, model, answer), observation


def answer_body(
    body: InferenceRequestBody, model: ModelSpec, gpu: GpuSpec | None, catalogs: Catalogs
) -> Answer:
    """The estimator's answer to an inference body whose model and GPU are resolved."""
    speculative = resolve_speculative(body.speculative, catalogs.models, catalogs.store)
    traffic, slo = performance_request(body)
    return answer_inference(
        model,
        inference_request(body, speculative),
        estimator=body.estimator,
        gpu=gpu,
        gpu_count=body.gpu_count,
        traffic=traffic,
        slo=slo,
    )


def _check_wire_size(answer: Answer, kind: str) -> None:
    est, fit = answer.estimate, answer.fit
    figures = [est.total_bytes, est.per_gpu_bytes, est.cpu_bytes]
    if fit is not None:
        figures += [fit.required_bytes, abs(fit.headroom_bytes)]
    if est.capacity is not None:
        figures += [est.capacity.kv_cache_pool_bytes, est.capacity.kv_cache_tokens]
    if max(figures) > MAX_WIRE_INTEGER:
        drivers = (
            "batch_size, sequence_length or concurrency"
            if kind == "inference"
            else ("batch_size or sequence_length")
        )
        raise InvalidRequest(
            f"the answer's byte figures exceed 2^63 - 1, the largest integer the response "
            f"carries; reduce {drivers}",
            field="sequence_length",
        )
