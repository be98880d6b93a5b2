"""Regenerate the README's curl session: start the service, run each command, paste the output.

`make readme-examples` runs it, so the outputs shown in the README are what the service really
answers (the README block between the `examples` markers is rewritten in place).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
START, END = "<!-- examples:start -->", "<!-- examples:end -->"
SHOWN_BASE = "http://127.0.0.1:8000"

# (heading, text, shell command using $BASE). Long outputs are trimmed with jq, in the command.
EXAMPLES: list[tuple[str, str, str]] = [
    ("Liveness and readiness", "", "curl -s $BASE/healthz; echo; curl -s $BASE/readyz"),
    (
        "The GPU catalog",
        "All GPUs (first shown), filtered by vendor, by memory, or by the node label a "
        "Kubernetes node carries:",
        "curl -s $BASE/v1/gpus | jq '.gpus | length, .[0]'",
    ),
    (
        "",
        "",
        "curl -s '$BASE/v1/gpus?k8s_product_label=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb' "
        "| jq -c '.gpus[] | {id, memory_bytes, mig: [.mig_profiles[] | .name]}'",
    ),
    (
        "",
        "",
        "curl -s '$BASE/v1/gpus?vendor=amd&min_memory_bytes=200000000000' | jq -c '.gpus[].id'",
    ),
    ("One GPU", "", "curl -s $BASE/v1/gpus/h100-sxm-80gb | jq 'del(.source, .notes)'"),
    (
        "The model catalog",
        "Models by family and size, and one model with its parameter accounting:",
        "curl -s '$BASE/v1/models?family=qwen3_moe' "
        "| jq -c '.models[] | {id, parameter_count, active_parameter_count}'",
    ),
    (
        "",
        "",
        "curl -s $BASE/v1/models/meta-llama/Llama-3.1-8B-Instruct "
        "| jq '{id, model_type, parameter_count, parameters_by_component, dtype}'",
    ),
    (
        "Inference: the PAI guide's example with the simple rules",
        "7B parameters in FP16 at batch 1 and 2048 tokens (a plain `curl -d` body is read as "
        "JSON):",
        "curl -s $BASE/v1/estimate/inference "
        '-d \'{"parameter_count": 7e9, "estimator": "simple", "weight_format": "fp16"}\' '
        "| jq '{breakdown, total_bytes, summary}'",
    ),
    (
        "Inference: sizing a vLLM deployment of Llama-3.1-8B on one H100",
        "The KV-cache pool vLLM would allocate, in bytes and tokens, how many 8k-token "
        "requests it serves at once, and the fit:",
        'curl -s $BASE/v1/estimate/inference -d \'{"model": "meta-llama/Llama-3.1-8B-Instruct", '
        '"engine": "vllm", "sequence_length": 8192, "gpu": "h100-sxm-80gb"}\' '
        "| jq '{summary, capacity, fit}'",
    ),
    (
        "Inference: latency, throughput and the replicas an SLO needs",
        "Time to first token, inter-token latency and throughput of that H100 at 32 requests "
        "of 1024 prompt and 256 output tokens in flight, and the replicas that serve 50 "
        "requests/s within 500 ms TTFT and 30 ms ITL ([docs/performance.md]"
        "(docs/performance.md)):",
        "curl -s $BASE/v1/estimate/inference -d '{\"model\": \"meta-llama/Llama-3.1-8B-Instruct\", "
        "\"engine\": \"vllm\", \"gpu\": \"h100-sxm-80gb\", \"traffic\": {\"input_tokens\": "
        "1024, \"output_tokens\": 256, \"concurrency\": 32}, \"slo\": {\"ttft_ms\": 500, "
        "\"itl_ms\": 30, \"requests_per_s\": 50}}' | jq '{performance, sizing}'",
    ),
    (
        "Inference: a production deployment (data and expert parallelism)",
        "DeepSeek-V3 as vLLM's DP 8 + EP layout on 8 H200s with DeepEP's low-latency "
        "dispatch: each GPU holds an eighth of the routed experts and a copy of the rest "
        "([docs/inference.md](docs/inference.md), \"Production deployments\"):",
        'curl -s $BASE/v1/estimate/inference -d \'{"model": "deepseek-ai/DeepSeek-V3", '
        '"engine": "vllm", "gpu": "h200", "data_parallel_size": 8, "expert_parallel": true, '
        '"engine_options": {"all2all_backend": "deepep_low_latency"}}\' '
        "| jq '{summary, weights_per_gpu: .per_gpu.breakdown.weights, layout: .fit.layout}'",
    ),
    (
        "Inference: several engines on one GPU",
        "Two vLLM servers at 0.45 of an H100 each, time-sliced: what each holds and whether "
        "both start:",
        "curl -s $BASE/v1/estimate/colocated -d '{\"gpu\": \"h100-sxm-80gb\", \"workloads\": "
        "[{\"model\": \"meta-llama/Llama-3.1-8B-Instruct\", \"engine\": \"vllm\", "
        "\"engine_options\": {\"gpu_memory_utilization\": 0.45}}, {\"model\": "
        "\"Qwen/Qwen2.5-7B-Instruct\", \"engine\": \"vllm\", \"engine_options\": "
        "{\"gpu_memory_utilization\": 0.45}}]}' | jq '{summary, held_bytes, "
        "workloads: [.workloads[] | {sees_bytes, held_bytes, fits}]}'",
    ),
    (
        "Fine-tuning: the PAI guide's example with the simple rules",
        "7B in FP16, full fine-tuning with Adam, batch 1, 2048 tokens:",
        "curl -s $BASE/v1/estimate/finetune "
        '-d \'{"parameter_count": 7e9, "estimator": "simple", "weight_format": "fp16", '
        '"optimizer": "adam"}\' | jq \'.breakdown\'',
    ),
    (
        "Fine-tuning: QLoRA of Llama-3.1-8B on a 24 GB GPU",
        "The fit on an L4 (24 GB), the longest sequence that fits, and what full fine-tuning "
        "would need instead:",
        'curl -s $BASE/v1/estimate/finetune -d \'{"model": "meta-llama/Llama-3.1-8B-Instruct", '
        '"method": "qlora", "gradient_checkpointing": "full", "gpu": "l4"}\' '
        "| jq '{summary, fit}'",
    ),
    (
        "",
        "",
        'curl -s $BASE/v1/estimate/finetune -d \'{"model": "meta-llama/Llama-3.1-8B-Instruct", '
        '"method": "full", "gradient_checkpointing": "full", "zero_stage": 3, '
        '"gpu_count": 8, "gpu": "l4"}\' | jq \'{summary, fit}\'',
    ),
    (
        "Batch",
        "Up to 1000 items in one call, answered in order; a bad item gets a problem in its slot:",
        'curl -s $BASE/v1/estimate/batch -d \'{"items": ['
        '{"kind": "inference", "request": {"model": "Qwen/Qwen2.5-7B-Instruct", '
        '"gpu": "l4"}}, '
        '{"kind": "inference", "request": {"model": "Qwen/Qwen2.5-7B-Instruct", '
        "\"batch_size\": 0}}]}' | jq -c '.succeeded, .failed, (.results[] | [.status, "
        "(.estimate.summary // .problem.detail)])'",
    ),
    (
        "Errors",
        "RFC 9457 problem documents that name the field and the fix:",
        'curl -s $BASE/v1/estimate/inference -d \'{"model": "meta-llama/Llama-3.1-8B", '
        '"tensor_parallel_size": 3, "batch_size": "2"}\'',
    ),
    ("", "", "curl -s -i $BASE/v1/gpus/h100-sxm-8gb | grep -iv '^date\\|^server'"),
    (
        "Metrics",
        "Prometheus text format; requests are labelled by route template. These metrics and the "
        "JSON access log are the service's telemetry (FastAPI's OpenTelemetry bridge is off):",
        "curl -s $BASE/metrics | grep -E '^llmmem_(http_requests_total|estimates_total)' "
        "| head -5",
    ),
    (
        "OpenAPI",
        "The schema (the same document is committed as `openapi/openapi.json`):",
        "curl -s $BASE/openapi.json | jq -c '.info.title, (.paths | keys)'",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def render(base: str) -> str:
    parts: list[str] = []
    for heading, text, command in EXAMPLES:
        if heading:
            parts.append(f"### {heading}\n")
        if text:
            parts.append(f"{text}\n")
        result = subprocess.run(
            ["bash", "-c", command.replace("$BASE", base)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        output = re.sub(r"\b[0-9a-f]{32}\b", "<request-id>", result.stdout.strip())
        output = output.replace(base, SHOWN_BASE)
        parts.append(f"```console\n$ {command.replace('$BASE', SHOWN_BASE)}\n{output}\n```\n")
    return "\n".join(parts)


def main() -> None:
    port = free_port()
    env = {**os.environ, "LLMMEM_PORT": str(port), "LLMMEM_ACCESS_LOG": "false"}
    server = subprocess.Popen([sys.executable, "-m", "service"], cwd=REPO, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        block = render(base)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    text = README.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{START}\n{block}\n{END}{tail}")


if __name__ == "__main__":
    main()
