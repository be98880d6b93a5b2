"""The same request over HTTP and in the validation harness gives the same pool.

Each scored public vLLM row whose GPU is a catalog record taken as it is (no printed total to
substitute) is posted to /v1/estimate/inference with the fields and engine options the harness
uses (bench/validate/public_logs.py: _request, ROW_OPTIONS): the image-dependent defaults such
as the sampler must resolve the same way on both paths.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from bench.validate import public_logs as p
from service.estimator.inference import estimate_inference


def _parity_rows() -> list[dict[str, str]]:
    out = []
    for row in p.rows():
        model = p._model_id(row)
        version, _ = p._version(row)
        if model is None or version is None or row["row_id"] in p.PARTIAL_ONLY:
            continue
        if p.GPU_REF.get(row["gpu"]) is None or p.number(row["total_gpu_memory_printed"]):
            continue
        if row["row_id"] in p.NOT_MODELLED:
            continue
        out.append(row)
    return out


def _body(row: dict[str, str], req: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": p.MODEL_REF.get(row["model"], row["model"]),
        "engine": "vllm",
        "engine_options": dict(req.engine_options),
        "tensor_parallel_size": req.tensor_parallel_size,
        "gpu": p.GPU_REF[row["gpu"]],
        "kv_cache_dtype": req.kv_cache_dtype,
    }
    if req.weight_format is not None:
        body["weight_format"] = req.weight_format
    return body


def test_http_and_harness_give_the_same_pool(client: TestClient) -> None:
    rows = _parity_rows()
    assert len(rows) >= 20
    compared = 0
    for row in rows:
        model = p._model_id(row)
        version, _ = p._version(row)
        assert model is not None and version is not None
        req = p._request(row, model, version, p._gpu(row))
        harness = estimate_inference(req).capacity
        response = client.post("/v1/estimate/inference", json=_body(row, req))
        assert response.status_code == 200, (row["row_id"], response.text[:300])
        served = response.json()["capacity"]
        assert harness is not None and served is not None, row["row_id"]
        assert served["kv_cache_pool_bytes"] == harness.kv_cache_pool_bytes, row["row_id"]
        compared += 1
    assert compared == len(rows)
