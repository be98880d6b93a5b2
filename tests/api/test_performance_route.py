"""`traffic` and `slo` on POST /v1/estimate/inference and in a batch: the wire names, the
bounds, and the 422s that name the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
BODY: dict[str, Any] = {
    "model": LLAMA_8B,
    "engine": "vllm",
    "gpu": "h100-sxm-80gb",
    "traffic": {"input_tokens": 1024, "output_tokens": 256, "concurrency": 32},
    "slo": {"ttft_ms": 500, "itl_ms": 30, "requests_per_s": 50},
}


def fields_of(response: Any) -> list[str]:
    return [e["field"] for e in response.json().get("errors") or []]


def test_performance_and_sizing_names(client: TestClient) -> None:
    response = client.post("/v1/estimate/inference", json=BODY)
    assert response.status_code == 200, response.text
    body = response.json()
    perf, sizing = body["performance"], body["sizing"]
    for name in ("ttft_ms", "itl_ms", "output_tokens_per_s", "requests_per_s"):
        assert perf[name] > 0
    assert perf["bound"] in ("memory", "compute", "communication")
    assert perf["calibrated"] is True and perf["saturated"] is False and perf["band"] is None
    assert perf["output_tokens_per_s"] == pytest.approx(perf["requests_per_s"] * 256, rel=1e-3)
    assert sizing["slo_met"] is True
    assert sizing["replicas"] * sizing["per_replica_requests_per_s"] >= 50 * 0.999
    assert sizing["gpus"] == sizing["replicas"]
    assert any(line.startswith("performance: closed loop") for line in body["assumptions"])


def test_without_traffic_no_performance(client: TestClient) -> None:
    body = client.post("/v1/estimate/inference", json={"model": LLAMA_8B}).json()
    assert body["performance"] is None and body["sizing"] is None


def test_uncalibrated_gpu_gives_a_band(client: TestClient) -> None:
    body = client.post("/v1/estimate/inference", json={**BODY, "gpu": "l40s"}).json()
    perf = body["performance"]
    assert perf["calibrated"] is False
    band = perf["band"]["itl_ms"]
    assert band["low"] < perf["itl_ms"] < band["high"]


def test_saturated_past_the_kv_pool(client: TestClient) -> None:
    traffic = {"input_tokens": 1024, "output_tokens": 256, "concurrency": 100_000}
    body = client.post("/v1/estimate/inference", json={**BODY, "traffic": traffic}).json()
    perf = body["performance"]
    assert perf["saturated"] is True and perf["running"] == perf["max_concurrency"]
    assert perf["queue_wait_ms"] > 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"traffic": None, "slo": {"requests_per_s": 1}}, "body"),
        ({"traffic": {"input_tokens": 0, "output_tokens": 1}}, "traffic.input_tokens"),
        ({"traffic": {"input_tokens": True, "output_tokens": 1}}, "traffic.input_tokens"),
        (
            {"traffic": {"input_tokens": 1, "output_tokens": 1, "concurrency": 2**21}},
            "traffic.concurrency",
        ),
        ({"traffic": {"input_tokens": 10_000_000, "output_tokens": 10_000_000}}, "traffic"),
        ({"traffic": {"input_tokens": 1, "output_tokens": 1, "extra": 1}}, "traffic.extra"),
        ({"slo": {"requests_per_s": 0}}, "slo.requests_per_s"),
        ({"slo": {"requests_per_s": 1, "itl_ms": -1}}, "slo.itl_ms"),
        ({"gpu": None, "gpu_memory_bytes": 80 * 2**30}, "gpu"),
        ({"gpu": None}, "gpu"),
        ({"model": None, "parameter_count": 7e9}, "traffic"),
        ({"traffic": {"input_tokens": 200_000, "output_tokens": 1}}, "traffic"),
    ],
)
def test_bad_traffic_names_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    body = {k: v for k, v in {**BODY, **change}.items() if v is not None}
    response = client.post("/v1/estimate/inference", json=body)
    assert response.status_code == 422, response.text
    assert field in fields_of(response) or response.json().get("field") == field, response.json()


def test_batch_answers_performance(client: TestClient) -> None:
    items = [{"kind": "inference", "request": BODY}]
    body = client.post("/v1/estimate/batch", json={"items": items}).json()
    single = client.post("/v1/estimate/inference", json=BODY).json()
    assert body["results"][0]["estimate"]["performance"] == single["performance"]
