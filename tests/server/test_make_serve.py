"""Start the real server with the README's command (`make serve`) and talk to it over HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import httpx

from tests.conftest import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(base: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited early with {process.returncode}")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("server did not become ready")


def test_make_serve_answers_over_http() -> None:
    port = free_port()
    process = subprocess.Popen(
        ["make", "--no-print-directory", "serve", f"PORT={port}", "HOST=127.0.0.1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "LLMMEM_ACCESS_LOG": "true"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, process)
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        gpu = httpx.get(f"{base}/v1/gpus/H100-SXM-80GB").json()
        assert gpu["memory_bytes"] == 81559 * 2**20
        response = httpx.post(
            f"{base}/v1/estimate/inference",
            content=b'{"parameter_count": 7e9, "estimator": "simple"}',
            headers={"X-Request-ID": "live-test-1"},
        )
        assert response.status_code == 200
        assert response.headers["x-request-id"] == "live-test-1"
        assert response.json()["breakdown"]["weights"] == 14_000_000_000
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        output = process.communicate(timeout=30)[0].decode()
    # The access log is structured JSON carrying the request id.
    assert '"request_id":"live-test-1"' in output
