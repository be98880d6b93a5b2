"""Health, readiness, metrics, request ids and the error format, through the ASGI app."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings

CATALOG = Path(__file__).resolve().parents[2] / "service" / "catalog"

PROBLEM = "application/problem+json"


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_reports_loaded_catalogs(client: TestClient) -> None:
    body = client.get("/readyz").json()
    assert body["status"] == "ready"
    # What the catalogs hold, counted from their files with the standard library (not through
    # the loaders under test): every record loaded, none lost, none counted twice.
    with (CATALOG / "gpus.toml").open("rb") as f:
        gpu_records = len(tomllib.load(f)["gpu"])
    model_records = sum(
        len(json.loads(file.read_text(encoding="utf-8"))["models"])
        for file in (CATALOG / "models").glob("*.json")
    )
    assert (body["gpus"], body["models"]) == (gpu_records, model_records)
    assert gpu_records > 0 and model_records > 0


def test_readyz_is_503_before_startup() -> None:
    app = create_app(Settings(access_log=False))
    # No lifespan: the catalogs are not loaded, so the service must not take traffic.
    client = TestClient(app)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["status"] == "not-ready"


def test_request_id_generated_and_echoed(client: TestClient) -> None:
    generated = client.get("/healthz").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    echoed = client.get("/healthz", headers={"X-Request-ID": "sched-42.a"}).headers
    assert echoed["x-request-id"] == "sched-42.a"


def test_unsafe_request_id_is_replaced(client: TestClient) -> None:
    response = client.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces"})
    assert response.headers["x-request-id"] != "bad id\twith spaces"


def test_metrics_label_by_route_template_not_raw_path(client: TestClient) -> None:
    client.get("/v1/gpus/h100-sxm-80gb")
    client.get("/v1/gpus/no-such-gpu")
    client.get("/no/such/path/123")
    client.get("/no/such/path/456")
    text = client.get("/metrics").text
    assert 'route="/v1/gpus/{gpu_id}"' in text
    assert "no-such-gpu" not in text and "/no/such/path" not in text
    assert re.search(
        r'llmmem_http_requests_total\{method="GET",route="unmatched",status="404"\} [2-9]', text
    )
    assert "http_request_duration_seconds_bucket" in text
    assert "process_resident_memory_bytes" in text


def test_unknown_route_is_a_problem(client: TestClient) -> None:
    response = client.get("/v2/nothing")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == 404 and body["type"] and body["title"] and body["detail"]


def test_wrong_method_is_405_problem(client: TestClient) -> None:
    response = client.delete("/v1/gpus")
    assert response.status_code == 405
    assert response.headers["content-type"].startswith(PROBLEM)
    assert "GET" in response.headers["allow"]


def test_body_over_limit_is_413() -> None:
    app = create_app(Settings(access_log=False, max_body_bytes=2048))
    with TestClient(app) as small:
        response = small.post("/v1/estimate/inference", content=b"{" + b" " * 4096 + b"}")
    assert response.status_code == 413
    assert response.headers["content-type"].startswith(PROBLEM)
    assert "2048" in response.json()["detail"]


def test_malformed_json_is_400(client: TestClient) -> None:
    response = client.post("/v1/estimate/inference", content=b'{"model": ')
    assert response.status_code == 400
    assert response.headers["content-type"].startswith(PROBLEM)


def test_non_utf8_body_is_4xx(client: TestClient) -> None:
    response = client.post("/v1/estimate/inference", content=b'{"model": "\xff\xfe"}')
    assert response.status_code in (400, 422)
    assert response.headers["content-type"].startswith(PROBLEM)


def test_deeply_nested_body_is_4xx(client: TestClient) -> None:
    body = b'{"hf_config": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    response = client.post("/v1/estimate/inference", content=body)
    assert 400 <= response.status_code < 500


def test_body_without_content_type_is_read_as_json(client: TestClient) -> None:
    body = b'{"parameter_count": 7e9, "estimator": "simple"}'
    plain = client.post("/v1/estimate/inference", content=body, headers={"content-type": ""})
    form = client.post(
        "/v1/estimate/inference",
        content=body,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert plain.status_code == 200, plain.text
    assert form.status_code == 200, form.text


def test_unexpected_exception_is_a_500_problem_without_trace() -> None:
    app = create_app(Settings(access_log=False))

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("secret internal detail")

    with TestClient(app, raise_server_exceptions=False) as c:
        response = c.get("/boom")
        metrics = c.get("/metrics").text
    assert response.status_code == 500
    assert response.headers["content-type"].startswith(PROBLEM)
    assert "secret" not in response.text and "Traceback" not in response.text
    assert "x-request-id" in response.headers
    assert re.search(
        r'llmmem_http_requests_total\{method="GET",route="/boom",status="500"\} 1', metrics
    )
