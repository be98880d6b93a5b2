"""`make bench`, issue 28 §4: every body distinct at 32 connections, against a bare FastAPI
app computing the same answers (`bench/baseline_app.py`, mode `compute`).

Distinct bodies defeat the response cache, so each request is parsed, estimated and
serialized. A bare app returning stored bytes does none of that; the fair comparison is one
doing the same work the plain FastAPI way: a `def` route (run in FastAPI's thread pool, as its
documentation advises for blocking work) taking the request model as its body and returning
the response model, over the service's own estimate function, catalogs and cache budget. Its
answer to the pre-flight body is checked byte for byte against the service's first.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import harness

INFERENCE_PATH = "/v1/estimate/inference"
TARGET_DISTINCT_RATIO = 1.5
TARGET_DISTINCT_P99_MS = 20.0
DISTINCT_CONNECTIONS = 32
DISTINCT_ROUNDS = 2


def run(
    tmp: Path,
    service: harness.Server,
    distinct: Path,
    request_body: bytes,
    duration_s: int,
    run_wrk: Callable[[str, Path, int, int], dict[str, Any]],
) -> dict[str, Any]:
    """Every body distinct, at DISTINCT_CONNECTIONS: the service and the bare FastAPI app
    computing the same answers, alternating for DISTINCT_ROUNDS rounds."""
    port = harness.free_port()
    computing = harness.start(
        uvicorn(port), port, tmp / "compute.log", env={"BENCH_BASELINE_MODE": "compute"}
    )
    try:
        harness.wait_ready(computing, INFERENCE_PATH, body=request_body)
        status, mine = harness.request(service.url + INFERENCE_PATH, request_body)
        status_b, theirs = harness.request(computing.url + INFERENCE_PATH, request_body)
        if (status, mine) != (status_b, theirs):
            raise RuntimeError("the computing baseline does not give the service's answer")
        run_wrk(computing.url + INFERENCE_PATH, distinct, 16, 2)  # warm-up, as the others
        rounds = []
        for _ in range(DISTINCT_ROUNDS):
            svc = run_wrk(service.url + INFERENCE_PATH, distinct, DISTINCT_CONNECTIONS, duration_s)
            base = run_wrk(
                computing.url + INFERENCE_PATH, distinct, DISTINCT_CONNECTIONS, duration_s
            )
            print(f"distinct c={DISTINCT_CONNECTIONS} service {svc} compute {base}", flush=True)
            rounds.append({"service": svc, "baseline": base})
    finally:
        harness.stop(computing)
    return {"rounds": rounds}


def uvicorn(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.baseline_app:create_app",
        "--factory",
        "--host",
        harness.HOST,
        "--port",
        str(port),
        "--workers",
        "1",
        "--no-access-log",
        "--log-level",
        "warning",
        "--timeout-keep-alive",
        "5",
    ]


def render(data: dict[str, Any], verdict: Callable[[bool], str]) -> list[str]:
    rounds = data["distinct_vs_compute"]["rounds"]
    svc = sum(r["service"]["rps"] for r in rounds)
    base = sum(r["baseline"]["rps"] for r in rounds)
    ratio = svc / base
    worst_p99 = max(r["service"]["p99_ms"] for r in rounds)
    errors = sum(
        r[k]["non_2xx"] + r[k]["socket_errors"] for r in rounds for k in ("service", "baseline")
    )
    lines = [
        "",
        f"Every body distinct at {DISTINCT_CONNECTIONS} connections (issue 28 §4), against a bare "
        "FastAPI app computing the same answers the plain FastAPI way (`bench/baseline_app.py`, "
        "mode `compute`: a `def` route taking the request model as its body and returning the "
        "response model, run by FastAPI in its thread pool; the same catalogs, estimator and "
        "cache budget; its answer checked byte for byte against the service's), the two "
        f"alternating, {len(rounds)} rounds of {data['duration_s']} s:",
        "",
        "| round | service req/s | p50 / p99 ms | computing bare FastAPI req/s | p50 / p99 ms | "
        "ratio |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(rounds, 1):
        s, b = r["service"], r["baseline"]
        lines.append(
            f"| {i} | {s['rps']:.0f} | {s['p50_ms']:.2f} / {s['p99_ms']:.2f} | {b['rps']:.0f} | "
            f"{b['p50_ms']:.2f} / {b['p99_ms']:.2f} | {s['rps'] / b['rps']:.2f} |"
        )
    lines += [
        "",
        f"Over the rounds: {ratio:.2f} x, service p99 at most {worst_p99:.2f} ms, {errors} "
        f"errors. Target >= {TARGET_DISTINCT_RATIO} x with p99 <= {TARGET_DISTINCT_P99_MS:.0f} "
        f"ms: {verdict(ratio >= TARGET_DISTINCT_RATIO and worst_p99 <= TARGET_DISTINCT_P99_MS)}.",
    ]
    return lines
