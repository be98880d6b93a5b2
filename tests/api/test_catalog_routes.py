"""GET /v1/gpus and /v1/models through the ASGI app."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


def test_gpu_list_has_the_fixed_fields(client: TestClient) -> None:
    gpus = client.get("/v1/gpus").json()["gpus"]
    assert len(gpus) >= 50
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
            # added: the runtime-visible total and the capability facts
            "cuda_total_bytes",
            "cuda_total_measured",
            "cuda_total_source",
            "architecture",
            "compute_capability",
            "bf16",
            "fp4",
        ):
            assert field in gpu, (gpu["id"], field)


def test_gpu_record_carries_both_totals(client: TestClient) -> None:
    h100 = client.get("/v1/gpus/h100").json()
    assert h100["memory_bytes"] == 81559 * 2**20  # nvidia-smi
    assert h100["cuda_total_bytes"] == round(79.19 * 2**30)  # vLLM's total_gib 79.19
    assert h100["cuda_total_measured"] is True
    assert h100["compute_capability"] == "9.0"
    assert h100["multiprocessors"] == 132  # deviceQuery "(132) Multiprocessors"
    assert client.get("/v1/gpus/mi300x").json()["multiprocessors"] is None
    profile = h100["mig_profiles"][0]
    assert profile["cuda_total_bytes"] == profile["memory_bytes"]


def test_gpu_filters(client: TestClient) -> None:
    amd = client.get("/v1/gpus", params={"vendor": "amd"}).json()["gpus"]
    assert amd and all(g["vendor"] == "amd" for g in amd)
    big = client.get("/v1/gpus", params={"min_memory_bytes": 100 * 2**30}).json()["gpus"]
    assert big and all(g["memory_bytes"] >= 100 * 2**30 for g in big)
    by_label = client.get("/v1/gpus", params={"k8s_product_label": "NVIDIA-H100-80GB-HBM3"})
    assert [g["id"] for g in by_label.json()["gpus"]] == ["h100-sxm-80gb"]
    assert by_label.json()["match"] == {
        "gpu_id": "h100-sxm-80gb",
        "matched_by": "k8s_product_label",
        "mig_profile": None,
        "shared": False,
    }
    assert client.get("/v1/gpus").json()["match"] is None


def test_gpu_filter_by_mig_label_says_which_profile(client: TestClient) -> None:
    body = client.get(
        "/v1/gpus", params={"k8s_product_label": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}
    ).json()
    assert [g["id"] for g in body["gpus"]] == ["a100-sxm4-80gb"]  # the fixed shape is kept
    profile = body["match"]["mig_profile"]
    assert profile["name"] == "1g.10gb"
    assert profile["max_instances"] == 7  # MIG user guide, A100 80GB
    assert profile["memory_bytes"] == 9728 * 2**20  # nvidia-smi mig -lgip: 9.50 GiB


def test_gpu_filter_by_shared_label(client: TestClient) -> None:
    body = client.get("/v1/gpus", params={"k8s_product_label": "NVIDIA-L4-SHARED"}).json()
    assert [g["id"] for g in body["gpus"]] == ["l4"]
    assert body["match"]["shared"] is True


def test_gpu_filter_rejects_an_unknown_mig_profile(client: TestClient) -> None:
    response = client.get(
        "/v1/gpus", params={"k8s_product_label": "NVIDIA-H100-80GB-HBM3-MIG-9g.99gb"}
    )
    assert response.status_code == 422
    body = response.json()
    assert body["title"] == "Invalid query parameters"
    assert body["errors"][0]["field"] == "k8s_product_label"
    for valid in ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"):
        assert valid in body["detail"]


def test_gpu_filter_rejects_bad_values(client: TestClient) -> None:
    response = client.get("/v1/gpus", params={"vendor": "acme"})
    assert response.status_code == 422
    body = response.json()
    assert body["errors"][0]["field"] == "vendor"
    # A bad query, not a request that "cannot be estimated".
    assert body["title"] == "Invalid query parameters"
    assert "nvidia" in body["detail"]
    assert client.get("/v1/gpus", params={"min_memory_bytes": "-1"}).status_code == 422


@pytest.mark.parametrize("vendor", ["NVIDIA", "Nvidia", "nvidia"])
def test_vendor_is_case_insensitive(client: TestClient, vendor: str) -> None:
    response = client.get("/v1/gpus", params={"vendor": vendor})
    assert response.status_code == 200
    gpus = response.json()["gpus"]
    assert gpus and all(g["vendor"] == "nvidia" for g in gpus)


def test_unknown_query_parameter_is_named(client: TestClient) -> None:
    # A typo must not silently return every GPU.
    response = client.get("/v1/gpus", params={"k8s_label": "NVIDIA-H100-80GB-HBM3"})
    assert response.status_code == 422
    body = response.json()
    assert body["title"] == "Invalid query parameters"
    assert body["errors"][0]["field"] == "k8s_label"
    for allowed in ("vendor", "min_memory_bytes", "k8s_product_label"):
        assert allowed in body["detail"]
    assert client.get("/v1/gpus/h100", params={"verbose": "1"}).status_code == 422


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
