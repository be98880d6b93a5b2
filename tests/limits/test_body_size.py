"""Body size: a body over `LLMMEM_MAX_BODY_BYTES` is a 413 problem, whether it announces its
length or arrives chunked, and the limit is the setting's value, not a hidden constant."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from bench import harness
from service.settings import Settings

PROBLEM = "application/problem+json"
INFERENCE = "/v1/estimate/inference"
VALID = {"parameter_count": 7e9, "estimator": "simple"}


def _padded(size: int) -> bytes:
    """A valid request body of exactly `size` bytes (JSON allows trailing whitespace)."""
    body = json.dumps(VALID).encode()
    return body + b" " * (size - len(body))


def test_body_at_the_limit_is_read(client: TestClient, app_settings: Settings) -> None:
    response = client.post(INFERENCE, content=_padded(app_settings.max_body_bytes))
    assert response.status_code == 200


def test_body_one_byte_over_the_limit_is_413(client: TestClient, app_settings: Settings) -> None:
    response = client.post(INFERENCE, content=_padded(app_settings.max_body_bytes + 1))
    assert response.status_code == 413
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == 413
    assert str(app_settings.max_body_bytes) in body["detail"]


def test_chunked_body_over_the_limit_is_413(client: TestClient, app_settings: Settings) -> None:
    # No Content-Length: the limit must be enforced while reading, not from the header alone.
    def chunks() -> Iterator[bytes]:
        sent = 0
        while sent <= app_settings.max_body_bytes:
            yield b" " * 65536
            sent += 65536

    response = client.post(INFERENCE, content=chunks())
    assert response.status_code == 413
    assert response.json()["status"] == 413


def test_batch_endpoint_has_the_same_limit(client: TestClient, app_settings: Settings) -> None:
    item = {"kind": "inference", "request": VALID}
    one = json.dumps(item, separators=(",", ":")).encode()
    body = b'{"items":[' + b",".join([one] * (app_settings.max_body_bytes // len(one) + 1)) + b"]}"
    assert len(body) > app_settings.max_body_bytes
    response = client.post("/v1/estimate/batch", content=body)
    assert response.status_code == 413


def test_live_server_answers_413_to_an_announced_oversized_body(
    live_server: harness.Server,
) -> None:
    """Over real HTTP: the client that sends 2 MiB gets its 413 (no reset before the answer)."""
    limit = Settings().max_body_bytes
    body = b" " * (limit * 2)
    with socket.create_connection((harness.HOST, live_server.port), timeout=10) as sock:
        sock.sendall(
            f"POST {INFERENCE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        # The server may stop reading once it has answered; the answer must still be there.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(body)
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]


def _count(metrics: str, route: str, status: int) -> float:
    prefix = f'llmmem_http_requests_total{{method="POST",route="{route}",status="{status}"}} '
    lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


@pytest.mark.parametrize("chunked", [False, True], ids=["announced", "chunked"])
def test_a_413_is_counted_under_its_route(
    client: TestClient, app_settings: Settings, chunked: bool
) -> None:
    """Refused before routing (announced length) or while reading (chunked): either way the
    413 belongs to the route that was asked, not to `unmatched`."""
    oversized = _padded(app_settings.max_body_bytes + 1)
    before = client.get("/metrics").text
    content: bytes | Iterator[bytes] = iter([oversized]) if chunked else oversized
    assert client.post(INFERENCE, content=content).status_code == 413
    after = client.get("/metrics").text
    assert _count(after, INFERENCE, 413) == _count(before, INFERENCE, 413) + 1
    assert _count(after, "unmatched", 413) == _count(before, "unmatched", 413)
