"""The event loop stays free while CPU-bound work saturates the worker (issue 18 §4).

A real server (the production runner, tests/server/apps.py) with a dummy CPU-bound route on the
estimate pool; 64 keep-alive clients in another process post to it as fast as they are
answered, far more than the pool admits. Meanwhile /healthz is probed the way kubelet does
(a new connection each time). The same load on a route that runs on the loop shows what the
pool prevents: probes then wait behind the work.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import harness
from tests.server import apps

pytestmark = pytest.mark.slow

CLIENTS = 64
SPIN_MS = 20


def _probe_ms(port: int) -> float:
    started = time.perf_counter()
    conn = http.client.HTTPConnection(harness.HOST, port, timeout=10)
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 200
    return (time.perf_counter() - started) * 1000


def _under_load(server: harness.Server, path: str, seconds: float) -> tuple[list[float], dict]:
    load = subprocess.Popen(
        [sys.executable, "-m", "tests.server.load", server.url, path, str(CLIENTS), str(seconds)],
        cwd=harness.REPO,
        stdout=subprocess.PIPE,
    )
    time.sleep(1.0)  # let every client connect and the pool fill
    probes = []
    end = time.monotonic() + seconds - 1.5
    while time.monotonic() < end:
        probes.append(_probe_ms(server.port))
        time.sleep(0.02)
    out, _ = load.communicate(timeout=seconds + 30)
    return sorted(probes), json.loads(out)


def _p99(values: list[float]) -> float:
    return values[min(len(values) - 1, int(len(values) * 0.99))]


def test_probes_answer_while_64_clients_saturate_the_pool(tmp_path: Path) -> None:
    """The same load twice in one run: on the pool, then on the loop itself (what the estimate
    routes did before the pool). Compared as a ratio, not against a wall-clock figure: the
    absolute p99 under the production mix is measured by `make soak` (bench/results.md)."""
    server = apps.start(tmp_path / "log")
    with harness.running(server):
        pooled, tally = _under_load(server, f"/test/spin?ms={SPIN_MS}", 8.0)
        _, metrics = harness.request(server.url + "/metrics")
        inline, _ = _under_load(server, f"/test/spin-inline?ms={SPIN_MS}", 5.0)
    assert tally.get("200", 0) > 50, tally  # the work was done...
    assert tally.get("503", 0) > 0, tally  # ...and the excess refused, not queued
    assert tally.get("retry-after 1", 0) == tally["503"], tally
    assert tally.get("error", 0) == 0, tally
    assert b'llmmem_estimate_pool_rejected_total{reason="overloaded"}' in metrics
    assert len(pooled) > 100
    # Work on the loop makes a probe wait behind it: one 20 ms spin per queued request.
    # On the pool, the probe waits only for GIL handoffs (about a millisecond each).
    assert _p99(inline) > 5 * _p99(pooled), (
        f"p99 on the pool {_p99(pooled):.1f} ms, on the loop {_p99(inline):.1f} ms"
    )
