"""POST /v1/preflight takes what the estimate endpoint takes for the model (a posted
`hf_config`, a `weight_format`) and the GPU (`gpu`, `gpu_memory_bytes`), so the advice of
its own errors can be followed on it. Each answer is checked against the estimate endpoint
given the body the pre-flight result says it answered (`request`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.testclient import TestClient

from service.catalog.model_catalog import load_model_catalog
from tests.api.k8s_objects import container, pod, to_json

UNKNOWN = "acme-research/atlas-v2"  # an in-house model: in no catalog, read by no alias rule


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _config() -> dict[str, Any]:
    """A config.json to post: the catalog's OLMo 2 7B one stands in for an uncatalogued
    model (what is checked is the route, not the model)."""
    config = _plain(load_model_catalog().get("allenai/OLMo-2-1124-7B-Instruct").config)
    config.pop("_name_or_path", None)
    return config  # type: ignore[no-any-return]


def preflight(client: TestClient, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = client.post("/v1/preflight", json=body)
    assert response.status_code == status, response.text[:600]
    return response.json()  # type: ignore[no-any-return]


def same_as_estimate(client: TestClient, result: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/estimate/inference", json=result["request"])
    assert response.status_code == 200, response.text[:600]
    explicit = response.json()
    assert result["fit"] == explicit["fit"]
    assert result["estimate"]["total_bytes"] == explicit["total_bytes"]
    return explicit  # type: ignore[no-any-return]


def test_the_advice_of_an_unknown_model_is_followed_on_preflight(client: TestClient) -> None:
    command = f"vllm serve {UNKNOWN} --max-model-len 4096"
    refused = preflight(client, {"command": command, "gpu": "l4"}, status=422)
    assert "post its config.json as `hf_config`" in refused["detail"]
    answer = preflight(client, {"command": command, "gpu": "l4", "hf_config": _config()})
    (result,) = answer["results"]
    assert result["model"] == {"value": UNKNOWN, "source": "command word 2", "catalog_id": None}
    assert "model" not in result["request"] and "hf_config" in result["request"]
    assert result["estimate"]["summary"].startswith("atlas-v2, inference")
    assert result["verdict"] == "fits"
    same_as_estimate(client, result)


def test_a_manifest_takes_the_config_too(client: TestClient) -> None:
    obj = to_json(
        pod(
            container(
                "vllm",
                args=["--model", UNKNOWN, "--max-model-len=4096"],
                gpus={"nvidia.com/gpu": "1"},
            ),
            product="NVIDIA-L4",
        )
    )
    answer = preflight(client, {"object": obj, "hf_config": _config()})
    (result,) = answer["results"]
    assert result["fits"] is True
    same_as_estimate(client, result)


def test_weight_format_fills_in_where_the_workload_sets_none(client: TestClient) -> None:
    base = {"command": "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192"}
    answer = preflight(client, {**base, "gpu": "l4", "weight_format": "fp8"})
    (result,) = answer["results"]
    assert result["request"]["weight_format"] == "fp8"
    explicit = same_as_estimate(client, result)
    assert explicit["details"]["weight_format"] == "fp8"
    # llama.cpp's own names, as the estimate endpoint takes them.
    gguf = preflight(client, {**base, "gpu": "l4", "weight_format": "q4_k_m"})
    assert gguf["results"][0]["request"]["weight_format"] == "Q4_K_M"


def test_the_workloads_own_quantization_wins_with_a_note(client: TestClient) -> None:
    command = "vllm serve meta-llama/Llama-3.1-8B-Instruct --quantization fp8"
    answer = preflight(client, {"command": command, "gpu": "l4", "weight_format": "int8"})
    (result,) = answer["results"]
    assert result["request"]["weight_format"] == "fp8"
    assert any("weight_format int8 is not used" in n for n in result["notes"])


def test_a_pinned_gpu_outside_the_catalog_is_judged_by_the_memory_given(
    client: TestClient,
) -> None:
    obj = to_json(
        pod(
            container(
                "vllm",
                args=["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len=4096"],
                gpus={"nvidia.com/gpu": "1"},
            ),
            product="NVIDIA-Foo-9000",
        )
    )
    unknown = preflight(client, {"object": obj})["results"][0]
    (problem,) = unknown["problems"]
    assert "gpu_memory_bytes" in problem["fix"]
    # Following it: 80 GiB as GFD's nvidia.com/gpu.memory would give it (81920 MiB).
    answer = preflight(client, {"object": obj, "gpu_memory_bytes": 81920 * 2**20})
    (result,) = answer["results"]
    assert result["problems"] == []
    assert result["verdict"] == "fits"
    same_as_estimate(client, result)


def test_one_model_name_at_a_time(client: TestClient) -> None:
    body = {"command": f"vllm serve {UNKNOWN}", "model": UNKNOWN, "hf_config": _config()}
    problem = preflight(client, body, status=422)
    assert "`model` or `hf_config`" in problem["detail"]
