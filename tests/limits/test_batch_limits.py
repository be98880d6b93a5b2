"""Batch size: at most 1000 items (API.md); more is one 422 naming `items`, and bad items
inside a batch fail alone."""

from __future__ import annotations

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
