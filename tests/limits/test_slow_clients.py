"""Slow clients cannot hold the worker: a client that sends its headers and then trickles the
body (or sends nothing more) is answered 408 and disconnected once
`LLMMEM_REQUEST_READ_TIMEOUT_S` has passed, and while it trickles every other request is served
as usual. Runs against a real `python -m service` (see conftest.py: a 2 s read timeout)."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time
from typing import Any

import pytest

from bench import harness
from service.api.timeouts import RequestReadTimeoutMiddleware
from service.app import create_app, load_catalogs
from service.settings import Settings
from tests.limits.conftest import KEEP_ALIVE_S, READ_TIMEOUT_S

pytestmark = pytest.mark.slow

ESTIMATE = json.dumps({"parameter_count": 7e9, "estimator": "simple"}).encode()
HEAD = (
    "POST /v1/estimate/inference HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    "Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
)
# Slack for a loaded 2-core machine on top of the configured timeout.
SLACK_S = 3.0


def _connect(server: harness.Server) -> socket.socket:
    return socket.create_connection((harness.HOST, server.port), timeout=READ_TIMEOUT_S + 10)


def _read_response(sock: socket.socket, deadline_s: float) -> bytes:
    """Everything the server sends until it closes or a full response is in (bounded)."""
    data = b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        ready, _, _ = select.select([sock], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                None,
            )
            if length is not None and len(body) >= length:
                break
    return data


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready, _, _ = select.select([sock], [], [], max(0.0, end - time.monotonic()))
        if ready:
            try:
                if sock.recv(65536) == b"":
                    return True
            except ConnectionResetError:
                return True
    return False


def _served_promptly(server: harness.Server, count: int = 10) -> list[float]:
    """Latencies of ordinary requests made meanwhile; each must succeed."""
    latencies = []
    for _ in range(count):
        started = time.monotonic()
        status, _ = harness.request(server.url + "/v1/estimate/inference", ESTIMATE, timeout=5)
        latencies.append(time.monotonic() - started)
        assert status == 200
        time.sleep(0.05)
    return latencies


def test_trickled_body_is_cut_off_and_others_are_served(live_server: harness.Server) -> None:
    sock = _connect(live_server)
    sock.sendall(HEAD.format(length=1000).encode() + b"{")
    started = time.monotonic()
    outcome: dict[str, Any] = {}

    def trickle() -> None:
        # One byte every 0.1 s: far too slow to finish 1000 bytes within the timeout.
        response = b""
        end = started + READ_TIMEOUT_S + SLACK_S
        while time.monotonic() < end:
            try:
                sock.sendall(b" ")
            except OSError:
                break
            ready, _, _ = select.select([sock], [], [], 0.1)
            if ready:
                response = _read_response(sock, 2)
                break
        outcome["response"], outcome["at"] = response, time.monotonic() - started

    thread = threading.Thread(target=trickle)
    thread.start()
    latencies = _served_promptly(live_server)
    thread.join(READ_TIMEOUT_S + SLACK_S + 5)
    try:
        assert max(latencies) < 1.0, latencies
        assert outcome["response"].startswith(b"HTTP/1.1 408"), outcome["response"][:200]
        assert READ_TIMEOUT_S * 0.9 <= outcome["at"] <= READ_TIMEOUT_S + SLACK_S
        assert b"connection: close" in outcome["response"].lower()
        assert b"application/problem+json" in outcome["response"]
        assert _closed_within(sock, 2.0)
    finally:
        sock.close()


def test_headers_then_silence_is_cut_off(live_server: harness.Server) -> None:
    with _connect(live_server) as sock:
        sock.sendall(HEAD.format(length=100).encode())
        started = time.monotonic()
        response = _read_response(sock, READ_TIMEOUT_S + SLACK_S)
        elapsed = time.monotonic() - started
        assert response.startswith(b"HTTP/1.1 408"), response[:200]
        assert READ_TIMEOUT_S * 0.9 <= elapsed <= READ_TIMEOUT_S + SLACK_S
        assert _closed_within(sock, 2.0)


def test_many_slow_clients_do_not_block_others(live_server: harness.Server) -> None:
    socks = [_connect(live_server) for _ in range(30)]
    try:
        for sock in socks:
            sock.sendall(HEAD.format(length=500).encode() + b'{"param')
        started = time.monotonic()
        latencies = _served_promptly(live_server, count=10)
        assert max(latencies) < 1.0, latencies
        remaining = READ_TIMEOUT_S + SLACK_S - (time.monotonic() - started)
        for sock in socks:
            response = _read_response(sock, max(remaining, 0.5))
            assert response.startswith(b"HTTP/1.1 408"), response[:200]
    finally:
        for sock in socks:
            sock.close()


def test_slow_header_client_does_not_block_others(live_server: harness.Server) -> None:
    # Such a client holds one socket until the head deadline (tests/limits/test_headers.py),
    # never the worker.
    with _connect(live_server) as sock:
        sock.sendall(b"POST /v1/estimate/inference HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        latencies = _served_promptly(live_server, count=5)
        assert max(latencies) < 1.0, latencies


def test_idle_keep_alive_connection_is_closed(live_server: harness.Server) -> None:
    with _connect(live_server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _read_response(sock, 5).startswith(b"HTTP/1.1 200")
        assert _closed_within(sock, KEEP_ALIVE_S + SLACK_S)


def test_a_complete_body_is_processed_however_long_the_work_takes() -> None:
    """The deadline covers reading the body only: slow work after it is not cut off."""

    async def slow_app(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        assert message["body"] == b"done"
        await asyncio.sleep(0.3)  # longer than the timeout below
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"done", "more_body": False}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    app = RequestReadTimeoutMiddleware(slow_app, timeout_s=0.1)
    asyncio.run(app({"type": "http"}, receive, send))
    assert sent[0]["status"] == 200


def test_the_app_answers_a_stalled_body_with_a_408_problem() -> None:
    """In-process through the whole app: a body that stops arriving gets a 408 problem with
    the request id and `Connection: close`, at the configured time."""
    settings = Settings(access_log=False, request_read_timeout_s=0.3)
    app = create_app(settings)
    load_catalogs(app, settings)
    chunks = [{"type": "http.request", "body": b'{"parameter', "more_body": True}]

    async def receive() -> dict[str, Any]:
        if chunks:
            return chunks.pop()
        await asyncio.sleep(60)
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/estimate/inference",
        "raw_path": b"/v1/estimate/inference",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"x"), (b"content-length", b"100"), (b"x-request-id", b"slow-1")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    started = time.monotonic()
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 10))
    elapsed = time.monotonic() - started
    start = sent[0]
    headers = {k.lower(): v for k, v in start["headers"]}
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert start["status"] == 408
    assert headers[b"connection"] == b"close"
    assert headers[b"x-request-id"] == b"slow-1"
    assert headers[b"content-type"].startswith(b"application/problem+json")
    assert body["status"] == 408 and "0.3" in body["detail"]
    assert 0.25 <= elapsed < 3
