"""Names the catalog does not hold, through the estimate route: the answer says what the name
resolved to, by which rules and why, in `model.resolution` and in the assumptions."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_a_quantized_copy_by_name(client: TestClient) -> None:
    r = client.post(
        "/v1/estimate/inference",
        json={"model": "TheBloke/Llama-2-7B-GPTQ", "engine": "vllm", "gpu": "l4"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    resolution = body["model"]["resolution"]
    assert resolution["resolved_to"] == "meta-llama/Llama-2-7b-hf"
    assert (resolution["route"], resolution["exact"], resolution["format"]) == (
        "rules",
        False,
        "gptq-int4",
    )
    assert any(reason.startswith("format: -GPTQ") for reason in resolution["reasons"])
    assert body["model"]["id"] is None  # not the catalog record itself
    assert any("alias rules" in a for a in body["assumptions"])


def test_an_exact_id_says_so(client: TestClient) -> None:
    r = client.post("/v1/estimate/inference", json={"model": "Qwen/Qwen3-8B", "engine": "vllm"})
    assert r.status_code == 200, r.text
    resolution = r.json()["model"]["resolution"]
    assert resolution == {
        "requested": "Qwen/Qwen3-8B",
        "resolved_to": "Qwen/Qwen3-8B",
        "route": "catalog",
        "exact": True,
        "format": None,
        "reasons": [],
    }


def test_an_unpriced_format_is_a_problem_naming_the_field(client: TestClient) -> None:
    r = client.post(
        "/v1/estimate/inference",
        json={"model": "mlx-community/Llama-3.2-3B-Instruct-4bit", "engine": "vllm"},
    )
    assert r.status_code == 404
    problem = r.json()
    assert "MLX" in problem["detail"]
    assert r.headers["content-type"].startswith("application/problem+json")
