"""GET /v1/gpus and /v1/models through the ASGI app."""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_gpu_list_has_the_fixed_fields(client: TestClient) -> None:
    gpus = client.get("/v1/gpus").json()["gpus"]
    assert len(gpus) >= 25
    for gpu in gpus:
        for field in (
            "id",
            "name",
            "vendor",
            "memory_bytes",
            "marketed_memory_gb",
            "memory_bandwidth_gbps",
            "bf16_tflops",
            "fp8",
            "k8s_product_label",
            "mig_profiles",
        ):
            assert field in gpu, (gpu["id"], field)


def test_gpu_filters(client: TestClient) -> None:
    amd = client.get("/v1/gpus", params={"vendor": "amd"}).json()["gpus"]
    assert amd and all(g["vendor"] == "amd" for g in amd)
    big = client.get("/v1/gpus", params={"min_memory_bytes": 100 * 2**30}).json()["gpus"]
    assert big and all(g["memory_bytes"] >= 100 * 2**30 for g in big)
    by_label = client.get("/v1/gpus", params={"k8s_product_label": "NVIDIA-H100-80GB-HBM3"})
    assert [g["id"] for g in by_label.json()["gpus"]] == ["h100-sxm-80gb"]
    mig = client.get("/v1/gpus", params={"k8s_product_label": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"})
    assert [g["id"] for g in mig.json()["gpus"]] == ["h100-sxm-80gb"]


def test_gpu_filter_rejects_bad_values(client: TestClient) -> None:
    response = client.get("/v1/gpus", params={"vendor": "acme"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "vendor"
    assert client.get("/v1/gpus", params={"min_memory_bytes": "-1"}).status_code == 422


def test_one_gpu_and_unknown_gpu(client: TestClient) -> None:
    h100 = client.get("/v1/gpus/H100-SXM-80GB").json()
    assert h100["memory_bytes"] == 81559 * 2**20  # nvidia-smi's 81559 MiB
    assert h100["k8s_product_label"] == "NVIDIA-H100-80GB-HBM3"
    missing = client.get("/v1/gpus/h101")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert "h10" in missing.json()["detail"]  # suggests close ids


def test_model_list_and_filters(client: TestClient) -> None:
    models = client.get("/v1/models").json()["models"]
    assert len(models) >= 40
    llama = client.get("/v1/models", params={"family": "llama"}).json()["models"]
    assert llama and all(m["model_type"] == "llama" for m in llama)
    small = client.get("/v1/models", params={"max_parameters": 2_000_000_000}).json()["models"]
    assert small and all(m["parameter_count"] <= 2_000_000_000 for m in small)


def test_model_record_with_slash_in_id_case_insensitive(client: TestClient) -> None:
    record = client.get("/v1/models/META-LLAMA/llama-3.1-8b").json()
    assert record["id"] == "meta-llama/Llama-3.1-8B"
    # Published: the safetensors checkpoint holds 8,030,261,248 parameters (model card, 8.03B).
    assert record["parameter_count"] == 8_030_261_248
    assert record["active_parameter_count"] == record["parameter_count"]
    assert sum(record["parameters_by_component"].values()) == record["parameter_count"]
    assert record["dtype"] and record["source"] and record["architecture"]["num_kv_heads"] == 8


def test_moe_model_record(client: TestClient) -> None:
    record = client.get("/v1/models/deepseek-ai/DeepSeek-R1").json()
    # The model card: 671B total, 37B activated.
    assert 670e9 < record["parameter_count"] < 672e9
    assert 36e9 < record["active_parameter_count"] < 38e9


def test_unknown_model_is_404_with_suggestions(client: TestClient) -> None:
    response = client.get("/v1/models/meta-llama/Llama-3.1-9B")
    assert response.status_code == 404
    assert "Llama-3.1-8B" in response.json()["detail"]
