"""A request's cost before it runs (service/api/cost.py), and the batch route's budget and
deadline: refused up front over budget, per-item 503 problems past the deadline."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api import cost
from service.api.concurrency import Cancelled
from service.api.routes import estimates
from service.app import create_app
from service.catalog.model_catalog import load_model_catalog
from service.settings import Settings

MODELS = load_model_catalog()


def _config(**layers: Any) -> dict[str, Any]:
    return {"hf_config": {"model_type": "llama", "hidden_size": 64, **layers}}


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        (_config(num_hidden_layers=48), 48),
        (_config(n_layer=12), 12),  # a GPT-2 style name for the same key
        ({"hf_config": {"text_config": {"num_hidden_layers": 40}, "num_hidden_layers": 2}}, 40),
        (_config(num_hidden_layers=10**9), 1024),  # the config reader's bound
        (_config(num_hidden_layers="many"), 1),  # fails validation later, costs one
        (_config(num_hidden_layers=True), 1),
        ({"parameter_count": 7e9, "estimator": "simple"}, 1),
        ({"model": "no/such-model"}, 1),
        # Published shapes: Llama 3.1 8B has 32 decoder layers, Qwen2.5-7B 28.
        ({"model": "meta-llama/Llama-3.1-8B-Instruct"}, 32),
        ({"model": "Qwen/Qwen2.5-7B-Instruct"}, 28),
        ({"model": " meta-llama/Llama-3.1-8B-Instruct "}, 32),  # resolved as the estimate does
        # A catalog GGUF file: Llama 3.2 1B has 16 decoder layers.
        ({"model": "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"}, 16),
    ],
)
def test_item_cost_is_the_layer_count_the_request_names(
    request_body: dict[str, Any], expected: int
) -> None:
    assert cost.item_cost(request_body, MODELS) == expected


class _Store:
    """A store index holding one model of ``layers`` layers under ``model_id``."""

    def __init__(self, model_id: str, layers: int) -> None:
        self.model_id, self.layers = model_id, layers

    def get(self, model_id: str) -> Any:
        if model_id.strip().lower() != self.model_id.lower():
            return None
        return SimpleNamespace(architecture=SimpleNamespace(num_layers=self.layers))


def test_a_store_model_costs_its_own_layers_and_shadows_the_catalog() -> None:
    store: Any = _Store("meta-llama/Llama-3.1-8B-Instruct", 80)
    assert cost.item_cost({"model": "meta-llama/Llama-3.1-8B-Instruct"}, MODELS, store) == 80
    assert cost.item_cost({"model": "Qwen/Qwen2.5-7B-Instruct"}, MODELS, store) == 28
    store_only: Any = _Store("local/deep-model", 1024)
    items = [{"model": "local/deep-model"}] * 3
    assert cost.batch_cost(items, MODELS, store_only) == 3 * 1024


def test_batch_cost_sums_its_items() -> None:
    items = [_config(num_hidden_layers=n) for n in (1, 2, 3)] + [{"estimator": "simple"}]
    assert cost.batch_cost(items, MODELS) == 1 + 2 + 3 + 1


def _heavy_item(i: int) -> dict[str, Any]:
    config = {
        "model_type": "llama",
        "hidden_size": 512 + 64 * i,
        "num_hidden_layers": 1024,
        "num_attention_heads": 8,
        "intermediate_size": 1024,
        "vocab_size": 32000,
    }
    return {"kind": "inference", "request": {"hf_config": config}}


def test_a_batch_over_budget_is_refused_before_any_estimate_runs() -> None:
    settings = Settings(access_log=False, batch_cost_budget=4096)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        items = [_heavy_item(i) for i in range(5)]  # 5 × 1024 layer-items > 4096
        response = client.post("/v1/estimate/batch", json={"items": items})
        assert response.status_code == 413
        body = response.json()
        assert body["type"] == "/problems/over-budget"
        assert body["errors"][0]["field"] == "items"
        assert "5120" in body["detail"] and "4096" in body["detail"]
        metrics = client.get("/metrics").text
        assert "llmmem_estimates_total{" not in metrics
        # Four of them fit the same budget and are answered.
        ok = client.post("/v1/estimate/batch", json={"items": items[:4]})
        assert ok.status_code == 200 and ok.json()["succeeded"] == 4


class _DeadlineAfter:
    """Stands in for the pool's checkpoint: passes `n` times, then reports `reason`."""

    def __init__(self, n: int, reason: str) -> None:
        self.n = n
        self.reason = reason

    def __call__(self) -> None:
        if self.n == 0:
            raise Cancelled(self.reason)
        self.n -= 1


def _items(n: int) -> list[dict[str, Any]]:
    return [{"kind": "inference", "request": {"model": "meta-llama/Llama-3.2-1B", "gpu": "l4"}}] * n


def test_items_not_reached_by_the_deadline_get_a_503_problem_each(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(estimates, "checkpoint", _DeadlineAfter(2, "deadline"))
    response = client.post("/v1/estimate/batch", json={"items": _items(5)})
    assert response.status_code == 200
    body = response.json()
    assert [r["status"] for r in body["results"]] == [200, 200, 503, 503, 503]
    assert body["succeeded"] == 2 and body["failed"] == 3
    problem = body["results"][3]["problem"]
    assert problem["type"] == "/problems/deadline-exceeded"
    assert problem["instance"].endswith("#items/3")


def test_a_disconnect_stops_the_batch(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimates, "checkpoint", _DeadlineAfter(1, "disconnected"))
    response = client.post("/v1/estimate/batch", json={"items": _items(3)})
    # Nobody reads this answer in production (the client left); the work stopped after one item.
    assert response.status_code == 499
