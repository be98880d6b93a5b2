"""The bare FastAPI baseline for `make bench`: one POST endpoint that returns a stored response.

It answers `POST /v1/estimate/inference` with the exact bytes the real service gave for the
benchmark request (read once from the file named by `BENCH_BASELINE_BODY`), so both servers
move the same number of bytes under the same uvicorn configuration (one worker, uvloop,
httptools). The endpoint is a plain `def` like the service's estimate routes (both pay the
thread-pool hop) unless `BENCH_BASELINE_ASYNC=1`, which `run_bench.py` sets when the service's
routes are `async def`. The service's throughput over this one's is the price of everything the
service does beyond HTTP: validation, resolution, estimate, fit search, rendering, metrics, logs.

Run: `BENCH_BASELINE_BODY=path uvicorn bench.baseline_app:create_app --factory`.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI, Response


def create_app() -> FastAPI:
    body = Path(os.environ["BENCH_BASELINE_BODY"]).read_bytes()
    # FastAPI's OpenTelemetry bridge is off, as in the service, so the ratio prices only what
    # the service does beyond HTTP.
    app = FastAPI(
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )

    if os.environ.get("BENCH_BASELINE_ASYNC") == "1":

        @app.post("/v1/estimate/inference")
        async def stored_async() -> Response:
            return Response(content=body, media_type="application/json")

    else:

        @app.post("/v1/estimate/inference")
        def stored() -> Response:
            return Response(content=body, media_type="application/json")

    return app
