"""The model store through the HTTP API: listing, estimates, shadowing, the 404's way out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from safetensors.numpy import save_file

from service.app import create_app
from service.settings import Settings
from tests.model_store.files import into_hub_cache, save_tiny_llama, write_gguf


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    root = tmp_path_factory.mktemp("store")
    saved = tmp_path_factory.mktemp("saved")
    sizes = {"tiny": save_tiny_llama(saved)}
    into_hub_cache(root, "acme/tiny-llama", saved, revision="feedbeef")
    # The same tiny model under a catalog id: the store shadows the catalog entry.
    into_hub_cache(root, "meta-llama/Llama-3.2-1B", saved, revision="1b1b1b1b")
    # A checkpoint whose files hold more than its config accounts for (an extra buffer).
    extra = root / "lab" / "with-extra"
    extra.mkdir(parents=True)
    for f in saved.iterdir():
        (extra / f.name).write_bytes(f.read_bytes())
    buffer = np.zeros(1000, dtype=np.float32)
    save_file({"model.extra_buffer": buffer}, str(extra / "extra.safetensors"))
    sizes["extra"] = sizes["tiny"] + buffer.nbytes
    gguf_repo = root / "bartowski" / "Tiny-GGUF"
    gguf_repo.mkdir(parents=True)
    sizes["gguf"] = sum(write_gguf(gguf_repo / "Tiny-Q8_0.gguf").values())
    return root, sizes


@pytest.fixture(scope="module")
def store_client(store: tuple[Path, dict[str, int]]) -> Iterator[TestClient]:
    settings = Settings(access_log=False, model_dirs=str(store[0]), response_cache_bytes=0)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        for _ in range(400):
            if client.get("/readyz").json()["store"]["scans"]:
                break
            time.sleep(0.05)
        yield client


def test_readiness_reports_the_store(store_client: TestClient) -> None:
    body = store_client.get("/readyz").json()
    assert body["status"] == "ready"
    assert body["store"] == {
        "enabled": True,
        "scans": body["store"]["scans"],  # how many rescans have run: compared below
        "models": 4,
        "skipped": 0,
        "complete": True,
    }
    assert body["store"]["scans"] >= 1  # the fixture waited for the first scan


def test_store_models_are_listed_with_where_they_were_found(
    store_client: TestClient, store: tuple[Path, dict[str, int]]
) -> None:
    listing = store_client.get("/v1/models")
    # Paths relative to their root only: the machine's own path of the root never shows.
    assert str(store[0]) not in listing.text
    models = {m["id"]: m for m in listing.json()["models"]}
    tiny = models["acme/tiny-llama"]
    assert tiny["source"] == "store"
    assert tiny["store"]["root_index"] == 0
    assert tiny["store"]["path"] == "models--acme--tiny-llama/snapshots/feedbeef"
    assert tiny["store"]["revision"] == "feedbeef"
    assert tiny["store"]["format"] == "safetensors"
    assert models["bartowski/Tiny-GGUF:Q8_0"]["store"]["format"] == "gguf"
    # Shadowing: the catalog's entry of that id is replaced, once.
    assert models["meta-llama/Llama-3.2-1B"]["source"] == "store"
    assert sum(1 for m in models if m == "meta-llama/Llama-3.2-1B") == 1
    one = store_client.get("/v1/models/meta-llama/llama-3.2-1b").json()
    assert one["source"] == "store" and one["parameter_count"] < 10**6


def test_a_store_model_resolves_in_both_estimates(
    store_client: TestClient, store: tuple[Path, dict[str, int]]
) -> None:
    r = store_client.post("/v1/estimate/inference", json={"model": "acme/tiny-llama"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"]["id"] == "acme/tiny-llama"
    assert body["per_gpu"]["breakdown"]["weights"] == store[1]["tiny"]
    assert any("from the store" in a for a in body["assumptions"])
    r = store_client.post(
        "/v1/estimate/finetune", json={"model": "acme/tiny-llama", "method": "lora"}
    )
    assert r.status_code == 200, r.text


def test_a_store_model_resolves_in_a_preflight_as_in_an_estimate(
    store_client: TestClient,
) -> None:
    # The scheduler-facing endpoints resolve models as the estimates do: the store's first,
    # shadowing the catalog entry of the same id (meta-llama/Llama-3.2-1B is the tiny model,
    # far smaller than the catalog's 1B).
    for model in ("acme/tiny-llama", "meta-llama/Llama-3.2-1B"):
        r = store_client.post("/v1/preflight", json={"command": f"vllm serve {model}", "gpu": "l4"})
        assert r.status_code == 200, r.text
        (result,) = r.json()["results"]
        explicit = store_client.post(
            "/v1/estimate/inference", json={"model": model, "engine": "vllm", "gpu": "l4"}
        ).json()
        assert any("from the store" in a for a in explicit["assumptions"]), model
        breakdown = result["estimate"]["per_gpu"]["breakdown"]
        assert breakdown == explicit["per_gpu"]["breakdown"], model
        assert breakdown["weights"] < 10**6, model  # the tiny model, not the catalog's 1B


def test_header_bytes_replace_the_config_count_and_say_so(
    store_client: TestClient, store: tuple[Path, dict[str, int]]
) -> None:
    r = store_client.post("/v1/estimate/inference", json={"model": "lab/with-extra"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["per_gpu"]["breakdown"]["weights"] == store[1]["extra"]
    note = next(a for a in body["assumptions"] if "headers" in a)
    assert str(store[1]["extra"]) in note and str(store[1]["tiny"]) in note


def test_a_gguf_model_on_llama_cpp(
    store_client: TestClient, store: tuple[Path, dict[str, int]]
) -> None:
    r = store_client.post(
        "/v1/estimate/inference",
        json={
            "model": "bartowski/tiny-gguf:q8_0",
            "engine": "llama.cpp",
            "engine_options": {"n_ctx": 4096, "n_parallel": 1},
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    # 2 layers, 2 KV heads × 64, f16 K and V, 4096 cells.
    assert body["per_gpu"]["breakdown"]["kv_cache"] == 2 * 4096 * 2 * 128 * 2
    # The token embedding (320 × 256 Q8_0) stays in host memory.
    assert body["cpu_bytes"] >= 320 * 256 // 32 * 34
    assert body["fit"] is None


def test_unknown_model_names_both_ways_out(store_client: TestClient) -> None:
    r = store_client.post("/v1/estimate/inference", json={"model": "nobody/nothing-7b"})
    assert r.status_code == 404
    detail = r.json()["detail"]
    assert "hf_config" in detail and "LLMMEM_MODEL_DIRS" in detail
