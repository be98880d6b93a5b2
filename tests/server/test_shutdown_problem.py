"""A request still running when the graceful-shutdown period ends is cancelled by the server;
its client gets a 503 problem (`/problems/shutting-down`, Retry-After), not uvicorn's plain-text
500 "Internal Server Error"."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from bench import harness
from service.settings import Settings
from tests.server import apps


def _scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"s=60",
        "headers": [(b"host", b"x"), (b"x-request-id", b"cancel-1")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }


def test_a_cancelled_request_is_answered_with_a_503_problem() -> None:
    app = apps.create_test_app(Settings(access_log=False))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def scenario() -> None:
        task = asyncio.create_task(app(_scope("/test/sleep"), receive, send))
        await asyncio.sleep(0.2)
        task.cancel()  # what uvicorn does when the grace period runs out
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    start = sent[0]
    headers = dict(start["headers"])
    body = json.loads(sent[1]["body"])
    assert start["status"] == 503
    assert headers[b"content-type"] == b"application/problem+json"
    assert headers[b"retry-after"] == b"1" and headers[b"connection"] == b"close"
    assert headers[b"x-request-id"] == b"cancel-1"
    assert body["type"] == "/problems/shutting-down"


@pytest.mark.slow
def test_the_real_server_answers_a_request_cut_off_at_shutdown(tmp_path: Path) -> None:
    server = apps.start(tmp_path / "log", {"LLMMEM_GRACEFUL_SHUTDOWN_S": "1"})
    with (
        harness.running(server),
        socket.create_connection((harness.HOST, server.port), timeout=15) as sock,
    ):
        sock.sendall(b"GET /test/sleep?s=30 HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), data[:300]
    assert b"application/problem+json" in head
    assert json.loads(body)["type"] == "/problems/shutting-down"
