"""POST /v1/estimate/colocated: several engines on one GPU, judged together.

The expected figures come from how each engine sizes its budget, not from the service:
vLLM requests ``total × gpu_memory_utilization`` of the device and refuses to start when that
much is not free beside its CUDA context (``gpu_worker.init_device``); SGLang takes
``mem_fraction_static`` of the memory free when it starts; an MPS client sees its pinned limit
as the device."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

GPU = "h100-sxm-80gb"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def vllm(util: float) -> dict[str, Any]:
    return {
        "model": MODEL,
        "engine": "vllm",
        "engine_options": {"gpu_memory_utilization": util, "max_model_len": 8192},
    }


def sglang(fraction: float) -> dict[str, Any]:
    return {
        "model": MODEL,
        "engine": "sglang",
        "engine_options": {"mem_fraction_static": fraction, "context_length": 8192},
    }


def gpu_bytes(client: TestClient) -> int:
    # The memory a CUDA process sees (cudaMemGetInfo total), not nvidia-smi's figure.
    return int(client.get(f"/v1/gpus/{GPU}").json()["cuda_total_bytes"])


def post(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/estimate/colocated", json={"gpu": GPU, **body})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_two_vllm_at_045_fit_and_hold_their_budgets(client: TestClient) -> None:
    total = gpu_bytes(client)
    body = post(client, {"workloads": [vllm(0.45), vllm(0.45)]})
    budget = int(total * 0.45)
    assert body["gpu_bytes"] == total
    for tenant in body["workloads"]:
        assert tenant["sees_bytes"] == total  # each sees the whole device
        # It holds its whole budget however small its workload: the KV pool fills it.
        assert abs(tenant["held_bytes"] - budget) <= 1
        assert tenant["fits"] is True
    assert abs(body["held_bytes"] - 2 * budget) <= 2
    assert body["headroom_bytes"] == total - body["held_bytes"]
    assert body["fits"] is True and body["reason_detail"] == ""
    assert "fit" in body["summary"] and "GB" in body["summary"]


def test_third_vllm_refused_by_its_start_check(client: TestClient) -> None:
    total = gpu_bytes(client)
    body = post(client, {"workloads": [vllm(0.45), vllm(0.45), vllm(0.45)]})
    budget = int(total * 0.45)
    # After two budgets, total − 2 × 0.45 × total = 10% of the GPU is free: less than 45%.
    assert total - 2 * budget < budget
    first, second, third = body["workloads"]
    assert first["fits"] and second["fits"] and not third["fits"]
    assert body["fits"] is False
    assert "#2" in body["reason_detail"]
    assert any("checks at start" in line for line in body["assumptions"])


def test_sglang_after_vllm_sees_what_vllm_left(client: TestClient) -> None:
    total = gpu_bytes(client)
    # SGLang listed first still starts after vLLM: its budget reads the free memory.
    body = post(client, {"workloads": [sglang(0.8), vllm(0.5)]})
    sg, vl = body["workloads"]
    assert abs(vl["held_bytes"] - int(total * 0.5)) <= 1
    assert sg["sees_bytes"] == total - vl["held_bytes"]
    # SGLang's pool is a fraction of what it sees, so it holds less than what it sees.
    assert sg["held_bytes"] < sg["sees_bytes"]
    assert body["held_bytes"] == sg["held_bytes"] + vl["held_bytes"]
    assert body["fits"] is (body["held_bytes"] <= total)


def test_mps_clients_see_their_limit(client: TestClient) -> None:
    total = gpu_bytes(client)
    body = post(client, {"sharing": "mps", "workloads": [vllm(0.9), vllm(0.9)]})
    for tenant in body["workloads"]:
        # The device plugin's default: the GPU's memory over its replicas.
        assert tenant["sees_bytes"] == total // 2
        # 0.9 of what it sees, never more than its limit.
        assert abs(tenant["held_bytes"] - int(total // 2 * 0.9)) <= 1
        assert tenant["held_bytes"] <= total // 2
    assert body["fits"] is True
    assert any("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in line for line in body["assumptions"])


def test_mps_limits_over_the_gpu_name_the_field(client: TestClient) -> None:
    total = gpu_bytes(client)
    response = client.post(
        "/v1/estimate/colocated",
        json={
            "gpu": GPU,
            "sharing": "mps",
            "mps_memory_limit_bytes": total // 2 + 1,
            "workloads": [vllm(0.9), vllm(0.9)],
        },
    )
    assert response.status_code == 422, response.text
    assert "mps_memory_limit_bytes" in response.text


def test_a_workload_naming_its_own_gpu_is_refused(client: TestClient) -> None:
    response = client.post(
        "/v1/estimate/colocated",
        json={"gpu": GPU, "workloads": [{**vllm(0.4), "gpu": "a100-sxm-80gb"}]},
    )
    assert response.status_code == 422
    assert "workloads[0]" in response.text


def test_a_workload_on_several_gpus_is_refused(client: TestClient) -> None:
    response = client.post(
        "/v1/estimate/colocated",
        json={"gpu": GPU, "workloads": [{**vllm(0.4), "tensor_parallel_size": 2}]},
    )
    assert response.status_code == 422
    assert "spans several GPUs" in response.text
