"""Catalog GGUF files through the API: `<repo>:<tag>` in estimates and in GET /v1/models."""

from __future__ import annotations

from fastapi.testclient import TestClient

LLAMA_1B_Q8 = "bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"


def test_a_catalog_gguf_file_on_llama_cpp_by_hand(client: TestClient) -> None:
    r = client.post(
        "/v1/estimate/inference",
        json={"model": LLAMA_1B_Q8, "engine": "llama.cpp", "engine_options": {"n_ctx": 4096}},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    # Llama-3.2-1B (16 layers, 2048 wide, 8 KV heads × 64, MLP 8192, vocabulary 128256,
    # tied): Q8_0 (34 bytes per 32) for every matrix, the tied embedding included (the output
    # rule keeps Q8_0); norms F32. Per layer: q, o 2048²; k, v 512 × 2048; gate, up, down
    # 8192 × 2048 = 60817408 weights -> 64618496 bytes, + 2 norms of 8192 bytes.
    layer = 60_817_408 // 32 * 34 + 2 * 2048 * 4
    embd = 128256 * 2048 // 32 * 34
    # On the GPU: the layers, the output (a copy of the tied embedding) and the final norm;
    # every tensor is whole 512-element rows and a multiple of 128 bytes.
    assert body["per_gpu"]["breakdown"]["weights"] == 16 * layer + embd + 2048 * 4
    assert body["cpu_bytes"] >= embd
    assert any("Llama-3.2-1B-Instruct-Q8_0.gguf" in a for a in body["assumptions"])


def test_unknown_tag_and_custom_mixes(client: TestClient) -> None:
    r = client.post(
        "/v1/estimate/inference",
        json={"model": "bartowski/Llama-3.2-1B-Instruct-GGUF:IQ1_S", "engine": "llama.cpp"},
    )
    assert r.status_code == 404
    assert "Q4_K_M" in r.json()["detail"]
    r = client.post(
        "/v1/estimate/inference",
        json={"model": "unsloth/Qwen3-8B-GGUF:Q4_K_M", "engine": "llama.cpp"},
    )
    assert r.status_code == 200, r.text
    assert any(a.startswith("approximate:") for a in r.json()["assumptions"])


def test_the_bare_repo_is_its_q4_k_m_file_and_smaller_than_q8_0(client: TestClient) -> None:
    def weights(model: str) -> int:
        r = client.post("/v1/estimate/inference", json={"model": model, "engine": "llama.cpp"})
        assert r.status_code == 200, r.text
        return int(r.json()["per_gpu"]["breakdown"]["weights"])

    repo = "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"
    assert weights(repo) == weights(f"{repo}:Q4_K_M") < weights(f"{repo}:Q8_0")


def test_gguf_repositories_are_listed_with_their_files(client: TestClient) -> None:
    models = {m["id"]: m for m in client.get("/v1/models").json()["models"]}
    record = models["bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"]
    assert record["gguf"]["base"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert record["gguf"]["mix"] == "stock"
    ids = [f["id"] for f in record["gguf"]["files"]]
    assert "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q4_K_M" in ids
    assert models["meta-llama/Llama-3.1-8B-Instruct"]["gguf"] is None
    one = client.get("/v1/models/bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q5_K_M")
    assert one.status_code == 200 and one.json()["id"] == record["id"]
