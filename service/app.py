"""The application factory: settings, catalogs, middleware, error handlers and routers.

`uvicorn service.app:create_app --factory` runs it. Catalogs are loaded and validated in the
lifespan, once; `/readyz` answers 200 only after that succeeded.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute

from service import __version__
from service.api.access_log import AccessLog
from service.api.auth import ALWAYS_OPEN, AuthMiddleware, TokenStore
from service.api.bodies import add_body_schemas
from service.api.concurrency import CpuPool
from service.api.fast_path import EstimateFastPath, InlinePolicy
from service.api.middleware import (
    RequestContextMiddleware,
    SheddingMiddleware,
    configure_logging,
)
from service.api.problems import install_problem_handlers
from service.api.response_cache import ResponseCacheMiddleware
from service.api.routes import docs, estimates, gpus, health, models, scheduling, ui
from service.api.timeouts import RequestReadTimeoutMiddleware
from service.application.metrics import Metrics
from service.catalog.gpu_catalog import load_gpu_catalog
from service.catalog.model_catalog import load_model_catalog
from service.estimator import memo
from service.estimator.engines import REGISTRY as ENGINE_REGISTRY
from service.estimator.model.families import FAMILIES
from service.model_store import ModelStore, ScanLimits, StoreIndex, WalkLimits, root_paths
from service.settings import Settings, get_settings

DESCRIPTION = """\
Estimates the GPU memory needed to **serve** or **fine-tune** a large language model, to the
byte, and whether and how it fits on a given GPU type and count.

* Memory figures are integer **bytes**. Human figures say their unit: GB = 10^9 bytes,
  GiB = 2^30 bytes.
* Errors are RFC 9457 problem documents (`application/problem+json`).
* Every response carries `X-Request-ID` (echoed when sent).
"""


def _operation_id(route: APIRoute) -> str:
    # Stable, readable operationIds (the route's function name) keep the committed schema's
    # diffs clean and give generated clients good method names.
    return route.name


def load_catalogs(app: FastAPI, settings: Settings) -> None:
    """Load and validate both catalogs; raises on any invalid record (start-up fails loudly)."""
    app.state.gpu_catalog = load_gpu_catalog(settings.gpu_catalog_path)
    app.state.model_catalog = load_model_catalog(settings.model_catalog_path)
    # One byte budget for every estimator cache; what lives anyway is not charged to it.
    memo.configure(settings.estimator_cache_bytes)
    memo.register_shared(e.architecture for e in app.state.model_catalog.all())
    memo.register_shared(FAMILIES.values())
    memo.register_shared(ENGINE_REGISTRY.values())  # one instance per engine, for the process
    metrics: Metrics = app.state.metrics
    metrics.catalog_entries.labels("gpus").set(len(app.state.gpu_catalog.all()))
    metrics.catalog_entries.labels("models").set(len(app.state.model_catalog.all()))
    # Part of every response-cache key: answers from an earlier catalog load never replay.
    app.state.catalog_generation = getattr(app.state, "catalog_generation", 0) + 1
    # The catalogs live as long as the process: moved out of the collector's generations, a
    # full collection (triggered by a large posted config) no longer walks their hundreds of
    # thousands of objects while holding the GIL, which stalled the event loop for tens of ms.
    gc.collect()
    gc.freeze()
    app.state.ready = True


def _cpu_pool(settings: Settings, metrics: Metrics) -> CpuPool:
    return CpuPool(
        settings.cpu_threads, settings.cpu_queue, settings.estimate_deadline_s, metrics=metrics
    )


def model_store(app: FastAPI, settings: Settings) -> ModelStore:
    """The model store of ``settings.model_dirs``; each new index bumps the catalog
    generation, so the response cache never replays an answer from an older index."""

    def changed(index: StoreIndex) -> None:
        memo.register_shared(e.architecture for e in index.all())
        app.state.catalog_generation = getattr(app.state, "catalog_generation", 0) + 1
        app.state.metrics.catalog_entries.labels("store").set(len(index.entries))

    limits = ScanLimits(
        walk=WalkLimits(max_entries=settings.model_store_max_entries),
        max_safetensors_header_bytes=settings.model_store_max_header_bytes,
        max_gguf_metadata_bytes=settings.model_store_max_gguf_metadata_bytes,
        max_models=settings.model_store_max_models,
        read_timeout_s=settings.model_store_read_timeout_s,
    )
    return ModelStore(
        root_paths(settings.model_dirs), settings.model_store_rescan_s, limits, changed
    )


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    load_catalogs(app, app.state.settings)
    # A fresh pool per lifespan: an app started again after a shutdown (tests do) gets threads.
    app.state.cpu_pool = _cpu_pool(app.state.settings, app.state.metrics)
    # In the background: readiness never waits for a large store to be indexed.
    app.state.model_store.start()
    yield
    app.state.model_store.stop()
    app.state.ready = False
    app.state.cpu_pool.shutdown()
    if app.state.access_log is not None:
        app.state.access_log.flush()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    log_handler = configure_logging(settings.log_level)
    app = FastAPI(
        title="GPU Memory Estimator for LLMs",
        version=__version__,
        description=DESCRIPTION,
        lifespan=_lifespan,
        generate_unique_id_function=_operation_id,
        strict_content_type=False,
        docs_url=None,
        redoc_url=None,
        # The service's telemetry is its Prometheus metrics and JSON access log; FastAPI's
        # OpenTelemetry bridge would otherwise look up the global providers on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.state.settings = settings
    app.state.max_body_bytes = settings.max_body_bytes
    app.state.ready = False
    app.state.metrics = Metrics()
    app.state.access_log = AccessLog(log_handler) if settings.access_log else None
    app.state.model_store = model_store(app, settings)
    app.state.cpu_pool = _cpu_pool(settings, app.state.metrics)
    app.state.inline_policy = InlinePolicy(max_inline_s=settings.inline_estimate_max_ms / 1000)
    install_problem_handlers(app)
    add_body_schemas(app, estimates.BODY_MODELS)
    # Estimates first: routes are matched in order, and they are most of the traffic.
    routers = (
        estimates.router,
        health.router,
        gpus.router,
        models.router,
        ui.router,
        docs.router,
        scheduling.router,
    )
    for router in routers:
        app.include_router(router)
    # Innermost: cheap estimates answered on the loop (a miss of the response cache).
    app.add_middleware(EstimateFastPath)
    # Then: a replayed answer still gets the read deadline, request id, metrics and log.
    app.add_middleware(
        ResponseCacheMiddleware,
        metrics=app.state.metrics,
        max_bytes=settings.response_cache_bytes,
        max_request_bytes=settings.response_cache_max_request_bytes,
    )
    # Outer ones: a 408 for a trickled body still gets the request id, metrics and log.
    app.add_middleware(RequestReadTimeoutMiddleware, timeout_s=settings.request_read_timeout_s)
    # Before anything reads the body: a request the pool has no slot for costs a 503.
    app.add_middleware(SheddingMiddleware)
    if settings.auth_enabled:
        # Before anything reads the body: an unauthenticated caller costs a header scan.
        open_paths = ALWAYS_OPEN | ({"/metrics"} if not settings.metrics_require_auth else set())
        tokens = TokenStore(settings.auth_tokens_path) if settings.auth_tokens_path else None
        app.add_middleware(
            AuthMiddleware,
            tokens=tokens,
            client_certs=settings.tls_client_ca_file is not None,
            open_paths=frozenset(open_paths),
        )
    app.add_middleware(
        RequestContextMiddleware,
        metrics=app.state.metrics,
        max_body_bytes=settings.max_body_bytes,
        access_log=app.state.access_log,
        # What a request answered before routing (401, 408, 413) is counted under.
        routes=tuple(route for router in routers for route in router.routes),
    )
    return app
