"""The scheduler-facing endpoints in `make bench`: pre-flight, the admission webhook and the
scheduler extender, driven like the estimate route and reported as ratios to the bare-FastAPI
baseline measured in the same run (same connections, same uvicorn settings).

Bodies are what each caller sends: a pre-flight of a command line pinned to a GPU (estimate,
fit and the catalog-wide `fits_on` scan), an AdmissionReview of a pinned vLLM pod (warn mode),
and ExtenderArgs with a vLLM pod and 16 nodes of four GPU types (full Node objects, as a
scheduler that is not `nodeCacheCapable` sends them).
"""

from __future__ import annotations

import json
from typing import Any

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NODE_PRODUCTS = ("NVIDIA-L4", "Tesla-T4", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")
NODES = 16


def _pod(product: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai:v0.10.1",
                "args": ["--model", MODEL, "--max-model-len", "8192"],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
            }
        ]
    }
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llm"}, "spec": spec}


def bodies() -> list[tuple[str, str, bytes]]:
    """(name, path, body) of each scheduler-facing request benched."""
    preflight = {
        "command": f"vllm serve {MODEL} --max-model-len 8192",
        "gpu": "NVIDIA-H100-80GB-HBM3",
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "bench",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "object": _pod("NVIDIA-L4"),
        },
    }
    nodes = [
        {
            "metadata": {
                "name": f"node-{i}",
                "labels": {"nvidia.com/gpu.product": NODE_PRODUCTS[i % len(NODE_PRODUCTS)]},
            }
        }
        for i in range(NODES)
    ]
    args = {"Pod": _pod(None), "Nodes": {"items": nodes}}
    return [
        ("pre-flight (command line, pinned GPU)", "/v1/preflight", json.dumps(preflight).encode()),
        ("admission review (pinned pod)", "/v1/admission", json.dumps(review).encode()),
        (f"extender filter ({NODES} nodes)", "/v1/extender/filter", json.dumps(args).encode()),
        (
            f"extender prioritize ({NODES} nodes)",
            "/v1/extender/prioritize",
            json.dumps(args).encode(),
        ),
    ]


def in_process(count: int = 300) -> dict[str, float]:
    """µs per request through the ASGI app (no sockets), each body repeated."""
    from bench import asgi_driver

    app = asgi_driver.build_app(access_log=False)
    return {
        path: asgi_driver.run_many(app, "POST", path, body, count) / count * 1e6
        for _, path, body in bodies()
    }


def render(data: dict[str, Any]) -> list[str]:
    """The section's lines: wrk figures with their ratio to the baseline, and in-process µs."""
    base = {b["connections"]: b for b in data["baseline"]}
    lines = [
        "",
        "Scheduler-facing endpoints (`bench/scheduling_bench.py`), same run: wrk, one thread, "
        f"{data['duration_s']} s per point; ratio = the endpoint's requests/s over the "
        "baseline's at the same connections (the baseline returns stored bytes, so the ratio "
        "is the share of a do-nothing server's throughput the endpoint keeps while doing its "
        "work). In-process: µs per request through the ASGI app, no sockets.",
        "",
        "| endpoint | connections | req/s | ratio to baseline | p50 / p99 ms | errors | "
        "in-process µs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in data["scheduling"]:
        baseline = base[row["connections"]]
        lines.append(
            f"| `POST {row['path']}`: {row['name']} | {row['connections']} | {row['rps']:.0f} | "
            f"{row['rps'] / baseline['rps']:.2f} | {row['p50_ms']:.2f} / {row['p99_ms']:.2f} | "
            f"{row['non_2xx'] + row['socket_errors']} | "
            f"{data['scheduling_in_process'][row['path']]:.0f} |"
        )
    return lines
