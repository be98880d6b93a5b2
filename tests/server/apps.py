"""The service's app with test-only routes, and a way to run it under the real server.

`create_test_app(settings)` is `create_app` plus:

* `POST /test/spin?ms=N`: N ms of pure-Python work on the estimate pool
  (service/api/concurrency.py), like an estimate, with a checkpoint every millisecond;
* `POST /test/spin-inline?ms=N`: the same work on the event loop (what the estimate routes
  did before the pool);
* `GET /test/sleep?s=N`: an async route that sleeps (a request that outlives the shutdown
  grace period).

`start(settings_env, log)` runs it with `python -m tests.server.apps` under the production
server runner (service/api/server.py), like `python -m service`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from bench import harness
from service.api.concurrency import checkpoint, run_cpu_bound
from service.app import create_app
from service.settings import Settings

SPIN_COUNT: dict[str, int] = {"checkpoints": 0}


def spin(ms: float) -> int:
    """Burn `ms` of CPU in Python, calling checkpoint() every millisecond; returns the count."""
    end = time.perf_counter() + ms / 1000
    steps = 0
    while time.perf_counter() < end:
        checkpoint()
        SPIN_COUNT["checkpoints"] += 1
        slice_end = min(end, time.perf_counter() + 0.001)
        while time.perf_counter() < slice_end:
            steps += 1
    return steps


def create_test_app(settings: Settings) -> FastAPI:
    app = create_app(settings)

    @app.post("/test/spin")
    async def spin_on_pool(request: Request, ms: float = 50) -> JSONResponse:
        return JSONResponse({"steps": await run_cpu_bound(request, spin, ms)})

    @app.post("/test/spin-inline")
    async def spin_inline(ms: float = 50) -> JSONResponse:
        return JSONResponse({"steps": spin(ms)})

    @app.get("/test/sleep")
    async def sleep(s: float = 1) -> JSONResponse:
        await asyncio.sleep(s)
        return JSONResponse({"slept": s})

    @app.get("/test/checkpoints")
    async def checkpoints() -> JSONResponse:
        return JSONResponse(SPIN_COUNT)

    return app


def start(log_path: Path, extra_env: Mapping[str, str] | None = None) -> harness.Server:
    port = harness.free_port()
    env = {"LLMMEM_HOST": harness.HOST, "LLMMEM_PORT": str(port), **(extra_env or {})}
    return harness.start([sys.executable, "-m", "tests.server.apps"], port, log_path, env)


if __name__ == "__main__":
    from service.api.server import run

    os.environ.setdefault("LLMMEM_ACCESS_LOG", "false")
    run(Settings(), create_test_app)
