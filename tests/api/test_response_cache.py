"""The response cache: a repeated estimate body replays the same bytes, and everything around
the answer (request id, metrics, limits, errors) behaves as for a computed one."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app, load_catalogs
from service.settings import Settings

BODY = b'{"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100-sxm-80gb", "engine": "vllm"}'
INFERENCE = "/v1/estimate/inference"


@pytest.fixture
def fresh() -> Iterator[TestClient]:
    """An app of its own: these tests read counters from zero."""
    with TestClient(create_app(Settings(access_log=False)), raise_server_exceptions=False) as c:
        yield c


def _counter(metrics: str, name: str, labels: str) -> float:
    """The value of `name{labels}` (labels as `a="x",b="y"`, any order); 0 if absent."""
    wanted = dict(re.findall(r'(\w+)="([^"]*)"', labels))
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == name and sample.labels == wanted:
                return float(sample.value)
    return 0.0


def test_repeat_replays_the_same_bytes_with_its_own_request_id(fresh: TestClient) -> None:
    first = fresh.post(INFERENCE, content=BODY)
    second = fresh.post(INFERENCE, content=BODY)
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    assert first.headers["content-type"] == second.headers["content-type"]
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    metrics = fresh.get("/metrics").text
    assert _counter(metrics, "llmmem_estimate_cache_total", 'result="miss"') == 1
    assert _counter(metrics, "llmmem_estimate_cache_total", 'result="hit"') == 1


def test_a_hit_counts_in_the_domain_and_http_metrics(fresh: TestClient) -> None:
    for _ in range(3):
        assert fresh.post(INFERENCE, content=BODY).status_code == 200
    metrics = fresh.get("/metrics").text
    labels = 'kind="inference",estimator="detailed",engine="vllm"'
    assert _counter(metrics, "llmmem_estimates_total", labels) == 3
    fits = fresh.post(INFERENCE, content=BODY).json()["fit"]["fits"]
    outcome = f'kind="inference",fits="{str(fits).lower()}"'
    assert _counter(fresh.get("/metrics").text, "llmmem_fit_outcomes_total", outcome) == 4
    # The hits are labelled by their route template, not "unmatched".
    http = f'method="POST",route="{INFERENCE}",status="200"'
    assert _counter(fresh.get("/metrics").text, "llmmem_http_requests_total", http) == 4


def test_different_bytes_are_a_different_entry(fresh: TestClient) -> None:
    a = fresh.post(INFERENCE, content=BODY)
    b = fresh.post(INFERENCE, content=BODY.replace(b", ", b","))
    assert a.content == b.content  # same request, so the same answer ...
    metrics = fresh.get("/metrics").text
    assert (
        _counter(metrics, "llmmem_estimate_cache_total", 'result="miss"') == 2
    )  # ... computed twice


def test_errors_are_never_stored(fresh: TestClient) -> None:
    bad = b'{"model": "no/such-model"}'
    for _ in range(2):
        assert fresh.post(INFERENCE, content=bad).status_code == 404
    metrics = fresh.get("/metrics").text
    assert _counter(metrics, "llmmem_estimate_cache_total", 'result="hit"') == 0


def test_the_cache_stays_within_its_byte_budget() -> None:
    budget = 12_000  # room for about three answers of ~3 KB
    app = create_app(Settings(access_log=False, cache_bytes=4 * budget))
    with TestClient(app) as c:
        for batch in range(1, 9):
            body = {"model": "meta-llama/Llama-3.1-8B-Instruct", "batch_size": batch}
            assert c.post(INFERENCE, json=body).status_code == 200
        cache = _find_cache(app)
        assert 0 < len(cache.entries) < 8
        assert cache.size == sum(e.size for e in cache.entries.values()) <= budget
        gauge = _counter(c.get("/metrics").text, "llmmem_estimate_response_cache_bytes", "")
        assert gauge == cache.size
        # The most recent answer is still there; the first was evicted.
        c.post(INFERENCE, json={"model": "meta-llama/Llama-3.1-8B-Instruct", "batch_size": 8})
        c.post(INFERENCE, json={"model": "meta-llama/Llama-3.1-8B-Instruct", "batch_size": 1})
        metrics = c.get("/metrics").text
    assert _counter(metrics, "llmmem_estimate_cache_total", 'result="hit"') == 1
    assert _counter(metrics, "llmmem_estimate_cache_total", 'result="miss"') == 9


def test_zero_bytes_turns_it_off() -> None:
    with TestClient(create_app(Settings(access_log=False, cache_bytes=0))) as c:
        first, second = c.post(INFERENCE, content=BODY), c.post(INFERENCE, content=BODY)
        metrics = c.get("/metrics").text
    assert first.content == second.content
    assert "llmmem_estimate_cache_total{" not in metrics


def test_large_bodies_are_computed_not_stored() -> None:
    app = create_app(Settings(access_log=False, response_cache_max_request_bytes=256))
    padded = BODY[:-1] + b" " * 300 + b"}"
    with TestClient(app) as c:
        for _ in range(2):
            assert c.post(INFERENCE, content=padded).status_code == 200
        metrics = c.get("/metrics").text
    assert _counter(metrics, "llmmem_estimate_cache_total", 'result="hit"') == 0


def test_a_streamed_body_over_the_limit_is_still_413() -> None:
    """The cache reads the body before the app does: the body limit's 413 must survive that."""
    app = create_app(Settings(access_log=False, max_body_bytes=2048))

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"model": "meta-llama/Llama-3.1-8B-Instruct", "x": "'
        for _ in range(8):
            yield b"a" * 1024
        yield b'"}'

    with TestClient(app, raise_server_exceptions=False) as c:
        response = c.post(INFERENCE, content=chunks())
    assert response.status_code == 413
    assert "2048" in response.json()["detail"]


def test_a_catalog_reload_never_replays_an_old_answer(fresh: TestClient) -> None:
    fresh.post(INFERENCE, content=BODY)
    app = fresh.app
    load_catalogs(app, app.state.settings)  # type: ignore[attr-defined]
    fresh.post(INFERENCE, content=BODY)
    metrics = fresh.get("/metrics").text
    assert _counter(metrics, "llmmem_estimate_cache_total", 'result="miss"') == 2


def _find_cache(app: object) -> object:
    from service.api.response_cache import ResponseCacheMiddleware

    layer = app.middleware_stack  # type: ignore[attr-defined]
    while not isinstance(layer, ResponseCacheMiddleware):
        layer = layer.app
    return layer
