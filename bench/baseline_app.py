"""The bare FastAPI baselines of `make bench`: the same endpoint, written the plain FastAPI way,
with nothing of the service's own machinery (no middleware, pool, caches, metrics or logs).

`BENCH_BASELINE_MODE` picks what the endpoint does:

* `stored` (default): returns the exact bytes the real service gave for the benchmark request
  (read once from the file named by `BENCH_BASELINE_BODY`), so both servers move the same bytes:
  the service's throughput over this one's is the price of everything the service does beyond
  HTTP. An `async def` route when `BENCH_BASELINE_ASYNC=1` (as the service's routes), else a
  plain `def` (paying FastAPI's thread-pool hop).
* `compute`: computes the same answer as the service, the textbook FastAPI way: a plain `def`
  route (FastAPI's advice for blocking work: it runs in the thread pool) declaring the request
  model as its body (FastAPI parses and validates it) and returning the response model
  (FastAPI validates and serializes it), calling the service's own estimate function with the
  same catalogs and the same estimator cache budget. For bodies no cache has seen, the
  service's throughput over this one's is what its serving machinery (its own body parsing, one
  pool thread, direct serialization, response cache) is worth against plain FastAPI's doing the
  same work.

Both run under the same uvicorn configuration as the service (one worker, uvloop, httptools).
Run: `BENCH_BASELINE_BODY=path uvicorn bench.baseline_app:create_app --factory`.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, Response

# At module level: FastAPI reads the route's annotations (strings here) in this namespace.
from service.schemas.estimates import EstimateResponse, InferenceRequestBody

# FastAPI's OpenTelemetry bridge is off, as in the service, so the ratio prices only what
# the service does beyond HTTP.
_BARE = {
    "docs_url": None,
    "redoc_url": None,
    "openapi_url": None,
    "telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
}


def create_app() -> FastAPI:
    if os.environ.get("BENCH_BASELINE_MODE", "stored") == "compute":
        return _computing_app()
    body = Path(os.environ["BENCH_BASELINE_BODY"]).read_bytes()
    app = FastAPI(**_BARE)  # type: ignore[arg-type]

    if os.environ.get("BENCH_BASELINE_ASYNC") == "1":

        @app.post("/v1/estimate/inference")
        async def stored_async() -> Response:
            return Response(content=body, media_type="application/json")

    else:

        @app.post("/v1/estimate/inference")
        def stored() -> Response:
            return Response(content=body, media_type="application/json")

    return app


def _computing_app() -> FastAPI:
    from service.app import model_store
    from service.application.estimate_service import app_catalogs, run_estimate
    from service.application.metrics import Metrics
    from service.catalog.gpu_catalog import load_gpu_catalog
    from service.catalog.model_catalog import load_model_catalog
    from service.estimator import memo
    from service.settings import Settings

    settings = Settings()
    app = FastAPI(**_BARE)  # type: ignore[arg-type]
    app.state.gpu_catalog = load_gpu_catalog(settings.gpu_catalog_path)
    app.state.model_catalog = load_model_catalog(settings.model_catalog_path)
    app.state.metrics = Metrics()
    app.state.model_store = model_store(app, settings)  # empty: no LLMMEM_MODEL_DIRS
    memo.configure(settings.estimator_cache_bytes)  # the service's estimator cache budget
    memo.register_shared(e.architecture for e in app.state.model_catalog.all())
    catalogs = app_catalogs(app.state)

    @app.post("/v1/estimate/inference", response_model=EstimateResponse)
    def estimate(body: InferenceRequestBody) -> EstimateResponse:
        answer, _ = run_estimate(body, catalogs, app.state.metrics)
        return answer

    return app
