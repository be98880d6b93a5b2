"""JSON nesting depth: however deep a body nests, the answer is a 4xx problem, quickly; the
parser's recursion limit is never a 5xx, and deep structures inside fields are rejected."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

INFERENCE = "/v1/estimate/inference"
# Real config.json files nest 3 levels deep; 40 is far past anything legitimate.
DEEP = 40


def _nested_arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _nested_objects(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("depth", [64, 2_000, 200_000])
@pytest.mark.parametrize("shape", [_nested_arrays, _nested_objects])
def test_deep_body_is_a_4xx_problem(client: TestClient, shape: object, depth: int) -> None:
    body = shape(depth)  # type: ignore[operator]
    started = time.monotonic()
    response = client.post(INFERENCE, content=body)
    assert 400 <= response.status_code < 500, response.text[:300]
    assert response.headers["content-type"].startswith("application/problem+json")
    assert time.monotonic() - started < 5


def _deep_value(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def test_deep_value_in_an_unknown_field_is_422(client: TestClient) -> None:
    body = {"parameter_count": 7e9, "x": _deep_value(DEEP)}
    assert client.post(INFERENCE, json=body).status_code == 422


def test_deep_hf_config_is_422_naming_it(client: TestClient) -> None:
    config = {"model_type": "llama", "extra": _deep_value(DEEP)}
    response = client.post(INFERENCE, json={"hf_config": config})
    assert response.status_code == 422
    assert any(e["field"].startswith("hf_config") for e in response.json()["errors"])


def test_deep_batch_item_fails_alone(client: TestClient) -> None:
    deep = {"model_type": "llama", "extra": _deep_value(DEEP)}
    items = [
        {"kind": "inference", "request": {"hf_config": deep}},
        {"kind": "inference", "request": {"parameter_count": 7e9, "estimator": "simple"}},
    ]
    response = client.post("/v1/estimate/batch", json={"items": items})
    assert response.status_code == 200
    assert [r["status"] for r in response.json()["results"]] == [422, 200]


def test_very_wide_config_is_422(client: TestClient) -> None:
    # Wide rather than deep: 100 000 keys in a posted config (about 1.5 MB would be over the
    # body limit, so 50 000 short keys, well under it).
    config = {f"k{i}": i for i in range(50_000)}
    config["model_type"] = "llama"
    response = client.post(INFERENCE, json={"hf_config": config})
    assert response.status_code == 422
