"""POST /v1/estimate/*: the contract's names, errors and the batch endpoint."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.catalog.model_catalog import load_model_catalog
from service.settings import Settings

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


def post(client: TestClient, kind: str, body: dict[str, Any]) -> Any:
    return client.post(f"/v1/estimate/{kind}", json=body)


def fields_of(response: Any) -> list[str]:
    return [e["field"] for e in response.json().get("errors") or []]


def test_inference_response_shape(client: TestClient) -> None:
    body = post(client, "inference", {"model": LLAMA_8B, "gpu": "h100-sxm-80gb"}).json()
    assert set(body["breakdown"]) == {"weights", "kv_cache", "activations", "overhead"}
    assert body["total_bytes"] == sum(body["breakdown"].values())
    assert body["per_gpu"]["total_bytes"] == sum(body["per_gpu"]["breakdown"].values())
    assert body["estimator"] == "detailed" and body["estimator_version"]
    assert body["model"]["parameter_count"] == 8_030_261_248
    assert body["fit"]["fits"] is True
    assert (
        body["fit"]["headroom_bytes"] == body["fit"]["usable_bytes"] - body["fit"]["required_bytes"]
    )
    assert body["assumptions"] and "GB" in body["summary"] and "fits 1 x" in body["summary"]


def test_finetune_response_shape(client: TestClient) -> None:
    body = post(client, "finetune", {"model": LLAMA_8B, "method": "lora"}).json()
    assert set(body["breakdown"]) == {
        "weights",
        "gradients",
        "optimizer_states",
        "activations",
        "overhead",
    }
    assert body["total_bytes"] == sum(body["breakdown"].values())


def test_case_insensitive_model_id(client: TestClient) -> None:
    a = post(client, "inference", {"model": LLAMA_8B}).json()
    b = post(client, "inference", {"model": LLAMA_8B.upper()}).json()
    assert a["total_bytes"] == b["total_bytes"]


def test_estimates_are_deterministic() -> None:
    """The same request gives the same bytes from a fresh computation: no response cache, and
    the estimator's own cache dropped between the two answers."""
    from service.estimator import memo

    request = {"model": "Qwen/Qwen3-30B-A3B", "engine": "vllm", "gpu": "h100-sxm-80gb"}
    app = create_app(Settings(access_log=False, cache_bytes=0))
    with TestClient(app) as fresh:
        first = post(fresh, "inference", request)
        memo.clear()
        second = post(fresh, "inference", request)
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    assert first.json() == second.json()


def test_posted_config_matches_the_catalog_entry(client: TestClient) -> None:
    entry = load_model_catalog().get(LLAMA_8B)
    from_config = post(client, "inference", {"hf_config": dict(entry.config)}).json()
    from_catalog = post(client, "inference", {"model": LLAMA_8B}).json()
    assert from_config["model"]["parameter_count"] == from_catalog["model"]["parameter_count"]
    assert from_config["breakdown"] == from_catalog["breakdown"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"model": LLAMA_8B, "parameter_count": 7e9},
        {"model": LLAMA_8B, "hf_config": {"model_type": "llama"}},
    ],
)
def test_exactly_one_model_selector(client: TestClient, body: dict[str, Any]) -> None:
    response = post(client, "inference", body)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "model" in detail and "hf_config" in detail and "parameter_count" in detail


def test_count_only_detailed_request_falls_back_and_says_so(client: TestClient) -> None:
    body = post(client, "inference", {"parameter_count": 7e9}).json()
    assert body["estimator"] == "simple"
    assert any("simple rules" in a for a in body["assumptions"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": LLAMA_8B, "batch_size": True}, "batch_size"),
        ({"model": LLAMA_8B, "batch_size": "7"}, "batch_size"),
        ({"model": LLAMA_8B, "batch_size": 0}, "batch_size"),
        ({"model": LLAMA_8B, "sequence_length": -5}, "sequence_length"),
        ({"model": LLAMA_8B, "engine": "tgi"}, "engine"),
        ({"model": LLAMA_8B, "bacth_size": 2}, "bacth_size"),
        (
            {"model": LLAMA_8B, "engine_options": {"gpu_memory_utilization": 1.5}},
            "engine_options.gpu_memory_utilization",
        ),
        ({"model": LLAMA_8B, "weight_format": "int3"}, "weight_format"),
    ],
)
def test_bad_fields_are_named(client: TestClient, body: dict[str, Any], field: str) -> None:
    response = post(client, "inference", body)
    assert response.status_code == 422
    assert field in fields_of(response)


def test_unknown_field_message_says_so(client: TestClient) -> None:
    response = post(client, "inference", {"model": LLAMA_8B, "bacth_size": 2})
    assert "Unknown field" in response.json()["errors"][0]["message"]


def test_token_bound(client: TestClient) -> None:
    response = post(
        client, "inference", {"model": LLAMA_8B, "batch_size": 100_000, "sequence_length": 100_000}
    )
    assert response.status_code == 422
    assert "1,000,000,000 tokens" in response.json()["detail"]
    assert fields_of(response) == ["concurrency"]


def test_unknown_ids_are_404(client: TestClient) -> None:
    assert post(client, "inference", {"model": "acme/none"}).status_code == 404
    response = post(client, "inference", {"model": LLAMA_8B, "gpu": "h900"})
    assert response.status_code == 404
    assert "gpu" in fields_of(response)


def test_unsupported_model_type_lists_supported(client: TestClient) -> None:
    config = {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12}
    response = post(client, "inference", {"hf_config": config})
    assert response.status_code == 422
    assert "llama" in response.json()["detail"] and "qwen3_moe" in response.json()["detail"]


def test_malformed_config_names_the_field(client: TestClient) -> None:
    config = dict(load_model_catalog().get(LLAMA_8B).config)
    config.update(num_key_value_heads=7)  # does not divide 32 heads
    response = post(client, "inference", {"hf_config": config})
    assert response.status_code == 422
    assert "num_key_value_heads" in str(response.json())


def test_invalid_tensor_parallel_size_names_valid_sizes(client: TestClient) -> None:
    response = post(client, "inference", {"model": LLAMA_8B, "tensor_parallel_size": 3})
    assert response.status_code == 422
    assert "tensor_parallel_size" in fields_of(response)
    assert "2" in response.json()["detail"] and "8" in response.json()["detail"]


def test_mig_slice_fit(client: TestClient) -> None:
    body = post(
        client, "inference", {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu": "h100-sxm-80gb/1g.10gb"}
    ).json()
    assert body["fit"]["gpu"] == "h100-sxm-80gb/1g.10gb"
    assert body["fit"]["usable_bytes"] < 10 * 2**30


def test_batch_answers_in_order_with_problems_in_slots(client: TestClient) -> None:
    items = [
        {"kind": "inference", "request": {"model": LLAMA_8B}},
        {"kind": "inference", "request": {"model": LLAMA_8B, "batch_size": 0}},
        {"kind": "finetune", "request": {"model": "acme/none"}},
        {"kind": "finetune", "request": {"parameter_count": 7e9, "estimator": "simple"}},
    ]
    response = client.post("/v1/estimate/batch", json={"items": items})
    assert response.status_code == 200
    body = response.json()
    assert [r["status"] for r in body["results"]] == [200, 422, 404, 200]
    assert body["succeeded"] == 2 and body["failed"] == 2
    assert body["results"][1]["problem"]["errors"][0]["field"] == "items.1.request.batch_size"
    single = post(client, "inference", {"model": LLAMA_8B}).json()
    assert body["results"][0]["estimate"]["breakdown"] == single["breakdown"]
    assert body["results"][3]["estimate"]["breakdown"]["optimizer_states"] == 56_000_000_000


def test_batch_over_limit_is_422(client: TestClient) -> None:
    items = [{"kind": "inference", "request": {"parameter_count": 7e9}}] * 1001
    response = client.post("/v1/estimate/batch", json={"items": items})
    assert response.status_code == 422
    assert "items" in fields_of(response)


def test_kbit_preparation_outside_qlora_names_the_field(client: TestClient) -> None:
    body = {"model": LLAMA_8B, "method": "lora", "kbit_preparation": "peft"}
    response = post(client, "finetune", body)
    assert response.status_code == 422
    assert "kbit_preparation" in fields_of(response)
    assert "qlora" in response.json()["detail"]


def test_kbit_preparation_defaults_to_peft_for_qlora(client: TestClient) -> None:
    base = {"model": LLAMA_8B, "method": "qlora", "gradient_checkpointing": "full"}
    default = post(client, "finetune", base).json()
    peft = post(client, "finetune", {**base, "kbit_preparation": "peft"}).json()
    plain = post(client, "finetune", {**base, "kbit_preparation": "none"}).json()
    assert default["total_bytes"] == peft["total_bytes"] > plain["total_bytes"]
