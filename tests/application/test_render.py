"""Answers are serialized straight from the rendered dict, not through the response model: this
checks, over a spread of requests, that every answer is exactly its validated form (no field
missing, extra or of another type), which is what re-validating each answer would enforce."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.routes.estimates import BatchResponse
from service.application.estimate_service import app_catalogs, run_estimate
from service.application.render import built, response_json
from service.schemas.estimates import (
    EstimateResponse,
    FinetuneRequestBody,
    InferenceRequestBody,
    LayoutOut,
)

MODELS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "deepseek-ai/DeepSeek-V2-Lite",
    "google/gemma-3-27b-it",
    "Qwen/Qwen3-30B-A3B",
    "openai/gpt-oss-20b",
]
INFERENCE = [
    {"engine": "vllm", "gpu": "h100-sxm-80gb"},
    {"engine": "transformers", "sequence_length": 8192},
    {"engine": "sglang", "gpu": "a100-sxm4-80gb", "gpu_count": 2},
    {"estimator": "simple", "gpu": "l4"},
]
FINETUNE = [
    {"method": "qlora", "gpu": "l4"},
    {"method": "full", "gpu": "h100-sxm-80gb", "gpu_count": 8, "zero_stage": 3},
    {"method": "lora", "estimator": "simple"},
]


def _same_as_validated(model: Any, answer: dict[str, Any]) -> None:
    assert model.model_validate(answer).model_dump(mode="json") == answer


@pytest.mark.parametrize("model", MODELS)
def test_estimate_answers_equal_their_validated_form(client: TestClient, model: str) -> None:
    for kind, variants in (("inference", INFERENCE), ("finetune", FINETUNE)):
        for extra in variants:
            response = client.post(f"/v1/estimate/{kind}", json={"model": model, **extra})
            assert response.status_code == 200, response.text
            _same_as_validated(EstimateResponse, response.json())


def test_answer_from_a_parameter_count(client: TestClient) -> None:
    response = client.post("/v1/estimate/inference", json={"parameter_count": 7_000_000_000})
    _same_as_validated(EstimateResponse, response.json())


def test_batch_answer_equals_its_validated_form(client: TestClient) -> None:
    items = [
        {"kind": "inference", "request": {"model": MODELS[0], "gpu": "l4"}},
        {"kind": "finetune", "request": {"model": "no/such-model"}},
        {"kind": "finetune", "request": {"model": MODELS[0], "method": "lora", "rank": 0}},
    ]
    response = client.post("/v1/estimate/batch", json={"items": items})
    assert response.status_code == 200
    _same_as_validated(BatchResponse, response.json())


@pytest.mark.parametrize("model", MODELS)
def test_response_json_is_pydantics_json_byte_for_byte(client: TestClient, model: str) -> None:
    state = client.app.state  # type: ignore[attr-defined]
    catalogs = app_catalogs(state)
    bodies = [InferenceRequestBody.model_validate({"model": model, **x}) for x in INFERENCE]
    bodies += [
        InferenceRequestBody.model_validate(
            {
                "model": model,
                "gpu": "h100-sxm-80gb",
                "traffic": {"input_tokens": 1000, "output_tokens": 200, "concurrency": 8},
                "slo": {"itl_ms": 50, "requests_per_s": 10},
            }
        )
    ]
    bodies += [FinetuneRequestBody.model_validate({"model": model, **x}) for x in FINETUNE]
    parts = set()
    for body in bodies:
        rendered, _ = run_estimate(body, catalogs, state.metrics)
        assert response_json(rendered) == rendered.model_dump_json().encode()
        parts |= {name for name, value in rendered if value is not None}
    # every optional part of a response was written at least once
    assert parts >= {"fit", "capacity", "performance", "sizing", "engine_options"}


def test_built_refuses_a_missing_field_or_another_order() -> None:
    whole = {
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "data_parallel_size": 1,
        "expert_parallel_size": 1,
    }
    assert built(LayoutOut, **whole) == LayoutOut(**whole)
    with pytest.raises(TypeError, match="give every field"):
        built(LayoutOut, tensor_parallel_size=2)
    with pytest.raises(TypeError, match="in order"):
        built(LayoutOut, **dict(reversed(whole.items())))
