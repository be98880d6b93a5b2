"""HEAD is answered on every GET route like GET, without a body (RFC 9110 §9.3.2)."""

from __future__ import annotations

import inspect
import socket
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bench import harness
from service.api.routes import health

# A concrete path for each parameterised GET route.
_EXAMPLES = {
    "/v1/gpus/{gpu_id}": "/v1/gpus/h100-sxm-80gb",
    "/v1/models/{model_id}": "/v1/models/meta-llama/Llama-3.1-8B-Instruct",
}
# GET routes outside the schema: the page, its assets and the API docs.
_UNDOCUMENTED = ["/", "/static/app.js", "/docs", "/redoc", "/openapi.json"]
_VARYING = {"date", "x-request-id"}
# Answers that change between two calls (counters): only their framing is compared.
_DYNAMIC = {"/metrics"}


def _get_paths(client: TestClient) -> list[str]:
    schema = client.get("/openapi.json").json()
    documented = [path for path, ops in schema["paths"].items() if "get" in ops]
    return [_EXAMPLES.get(path, path) for path in documented] + _UNDOCUMENTED


def test_every_get_route_is_listed(client: TestClient) -> None:
    paths = _get_paths(client)
    assert {"/healthz", "/readyz", "/metrics", "/v1/gpus", "/v1/models"} <= set(paths)
    assert all("{" not in p for p in paths), paths
    # The OpenAPI document lists GET only (HEAD is implied for every GET).
    schema = client.get("/openapi.json").json()
    assert all("head" not in ops for ops in schema["paths"].values())


def test_head_answers_like_get_without_a_body(client: TestClient) -> None:
    for path in _get_paths(client):
        get = client.get(path)
        head = client.head(path)
        assert head.status_code == get.status_code == 200, path
        assert head.content == b"", path
        varying = _VARYING | ({"content-length"} if path in _DYNAMIC else set())
        if path not in _DYNAMIC:
            assert head.headers["content-length"] == str(len(get.content)), path
        same = {k: v for k, v in head.headers.items() if k not in varying}
        assert same == {k: v for k, v in get.headers.items() if k not in varying}, path


def test_head_on_a_missing_record_is_its_404_without_a_body(client: TestClient) -> None:
    head = client.head("/v1/gpus/no-such-gpu")
    assert head.status_code == 404 and head.content == b""
    assert head.headers["content-type"] == "application/problem+json"


def test_head_on_a_post_only_route_is_405(client: TestClient) -> None:
    assert client.head("/v1/estimate/inference").status_code == 405


def test_head_is_counted_as_head_under_the_get_route(client: TestClient) -> None:
    client.head("/v1/gpus")
    metrics = client.get("/metrics").text
    assert 'llmmem_http_requests_total{method="HEAD",route="/v1/gpus",status="200"}' in metrics


def test_head_over_the_real_server(tmp_path: Path) -> None:
    """uvicorn keeps HEAD's framing: the GET's Content-Length, no body bytes on the wire."""
    server = harness.start_service(tmp_path / "log", extra_env={"LLMMEM_ACCESS_LOG": "false"})
    with harness.running(server):
        with socket.create_connection((harness.HOST, server.port), timeout=10) as sock:
            sock.sendall(b"HEAD /v1/gpus HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        _, get_body = harness.request(server.url + "/v1/gpus")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert f"content-length: {len(get_body)}".encode() in head.lower()
    assert body == b""


@pytest.mark.parametrize("endpoint", [health.healthz, health.readyz, health.metrics])
def test_probe_routes_are_async(endpoint: object) -> None:
    """Probes run on the event loop, never queued behind a thread pool."""
    assert inspect.iscoroutinefunction(endpoint)
