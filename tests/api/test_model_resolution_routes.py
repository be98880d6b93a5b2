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


def test_qwen2_5_vl_72b_resolves_with_its_vision_tower(client: TestClient) -> None:
    """The Qwen2.5-VL wrapper (a flat Hub config: the decoder's keys beside vision_config)
    resolves on vLLM with its tower counted; the count itself is checked against transformers
    in tests/estimator/model/test_parameters_reference.py."""
    r = client.post(
        "/v1/estimate/inference",
        json={"model": "Qwen/Qwen2.5-VL-72B-Instruct", "engine": "vllm", "gpu": "h100",
              "gpu_count": 4},
    )  # fmt: skip
    assert r.status_code == 200, r.text
    model = r.json()["model"]
    assert model["resolution"]["resolved_to"] == "Qwen/Qwen2.5-VL-72B-Instruct"
    arch = model["architecture"]
    assert (arch["family"], arch["wrapper_model_type"]) == ("qwen2_5_vl", "qwen2_5_vl")
    # Tower width 1280 in 32 blocks, merged 2 x 2 into the decoder's 8192 (the config).
    vision = arch["vision"]
    assert (vision["kind"], vision["hidden_size"], vision["num_layers"]) == ("qwen2_5_vl", 1280, 32)
    assert vision["projector_out"] == arch["hidden_size"] == 8192
    assert not any("not counted" in a for a in r.json()["assumptions"])
