"""Batch size: at most 1000 items (API.md); more is one 422 naming `items`, and bad items
inside a batch fail alone."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

BATCH = "/v1/estimate/batch"
CHEAP = {"kind": "inference", "request": {"parameter_count": 7e9, "estimator": "simple"}}
CONTRACT_MAX_ITEMS = 1000  # API.md: "up to 1000 inference/finetune requests in one call"


def test_batch_of_the_contract_maximum_is_answered(client: TestClient) -> None:
    response = client.post(BATCH, json={"items": [CHEAP] * CONTRACT_MAX_ITEMS})
    assert response.status_code == 200
    body = response.json()
    assert len(body["results"]) == CONTRACT_MAX_ITEMS
    assert body["succeeded"] == CONTRACT_MAX_ITEMS and body["failed"] == 0


def test_batch_over_the_maximum_is_422_naming_items(client: TestClient) -> None:
    response = client.post(BATCH, json={"items": [CHEAP] * (CONTRACT_MAX_ITEMS + 1)})
    assert response.status_code == 422
    body = response.json()
    assert any(e["field"].startswith("items") for e in body["errors"])


def test_empty_batch_is_422(client: TestClient) -> None:
    assert client.post(BATCH, json={"items": []}).status_code == 422


def test_bad_items_fail_alone(client: TestClient) -> None:
    items = [
        CHEAP,
        {"kind": "inference", "request": {"model": "no-such/model"}},
        {"kind": "inference", "request": {"parameter_count": 7e9, "batch_size": 10**30}},
        {"kind": "finetune", "request": {"parameter_count": 7e9, "estimator": "simple"}},
    ]
    response = client.post(BATCH, json={"items": items})
    assert response.status_code == 200
    statuses = [r["status"] for r in response.json()["results"]]
    assert statuses == [200, 404, 422, 200]


# --------------------------------------------------------------------------------------------
# The colocated route: up to 16 estimates in one request, bounded as a batch is

COLOCATED = "/v1/estimate/colocated"
LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"  # 80 layers (its config.json)


def test_colocated_is_held_to_the_batch_cost_budget() -> None:
    from service.app import create_app
    from service.settings import Settings

    settings = Settings(access_log=False, batch_cost_budget=1024)
    workload = {"model": LLAMA_70B, "engine": "vllm"}
    # 16 × 80 layers = 1280 layer-items, over a budget of 1024; 12 × 80 = 960 within it.
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        over = client.post(COLOCATED, json={"gpu": "h100-sxm-80gb", "workloads": [workload] * 16})
        within = client.post(COLOCATED, json={"gpu": "h100-sxm-80gb", "workloads": [workload] * 12})
    assert over.status_code == 413, over.text[:300]
    assert "1280 layer-items" in over.json()["detail"]
    assert within.status_code == 200, within.text[:300]


def test_colocated_stops_between_workloads_past_its_deadline(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.application import colocation
    from service.application.estimate_service import app_catalogs
    from service.estimator.cancel import Cancelled, CancelToken, running
    from service.schemas.colocation import ColocatedRequest

    token = CancelToken(deadline=float("inf"))
    calls = 0
    answer_body = colocation.answer_body

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        result = answer_body(*args, **kwargs)
        if calls == 2:
            token.cancel("deadline")
        return result

    monkeypatch.setattr(colocation, "answer_body", counted)
    body = ColocatedRequest.model_validate(
        {"gpu": "h100-sxm-80gb", "workloads": [{"model": LLAMA_70B, "engine": "vllm"}] * 5}
    )
    state = client.app.state  # type: ignore[attr-defined]
    with running(token), pytest.raises(Cancelled):
        colocation.run_colocated(body, app_catalogs(state), state.metrics)
    assert calls == 2  # the second workload finished; the third never began
