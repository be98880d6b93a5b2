"""`make fuzz`, second part: the hostile corpus of issue 18, replayed against a live server.

schemathesis explores the schema; these are the requests it would not think of, each a
reproduction of a defect issue 18 found (its section in brackets), with what a correct answer
is:

* [1] real quantization configs (GPTQ/AWQ per-channel `group_size: -1`, compressed-tensors
  `channel` and `group` without a size, fp8 blocks, bitsandbytes, mxfp4), alone and inside a
  batch: never a 5xx, and one bad item never sinks the batch;
* [2] an answer whose byte counts pass 2^63: a 422 naming the field, not a 5xx;
* [5] a 1000-item batch of distinct 1024-layer configs whose client hangs up after 1 s: the
  worker's CPU time must stop growing (the work is cancelled), read from /proc with `--pid`;
* [6] a 64 MB header and a stalled head: refused (431, 408) within seconds;
* [7] the smaller ones: `gpu_count` up to the schema's own maximum, a 1 MB `model_type` not
  echoed into a megabyte problem, `weight_block_size: "128"` reported as given, HEAD on GET
  routes, malformed HTTP answered with a problem document, a 413 counted under its route.

Usage: `python -m bench.hostile URL [--pid PID] [--header-timeout-s S] [--report FILE]`;
prints one line per case and exits 1 if any fails. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench import harness
from bench.harness import LLAMA_CONFIG as LLAMA

# quantization_config shapes as checkpoints on the Hub carry them (the field names of
# transformers' GPTQConfig, AwqConfig, CompressedTensorsConfig, FineGrainedFP8Config,
# BitsAndBytesConfig and Mxfp4Config).
QUANTIZATION = {
    "gptq per-channel (group_size -1)": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": -1,
        "desc_act": False,
        "sym": True,
    },
    "gptq group 128": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True},
    "awq per-channel (group_size -1)": {
        "quant_method": "awq",
        "bits": 4,
        "group_size": -1,
        "version": "gemm",
        "zero_point": True,
    },
    "compressed-tensors int4 channel": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "channel"},
            }
        },
    },
    "compressed-tensors int4 group without group_size": {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group"},
            }
        },
    },
    "fp8 block 128x128": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    "bitsandbytes nf4": {
        "quant_method": "bitsandbytes",
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
    },
    "mxfp4": {"quant_method": "mxfp4"},
}


@dataclass
class Outcome:
    case: str
    section: str
    passed: bool
    detail: str


class Target:
    def __init__(self, url: str, pid: int | None, header_timeout_s: float) -> None:
        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        self.host, self.port = parts.hostname or harness.HOST, parts.port or 80
        self.pid = pid
        self.header_timeout_s = header_timeout_s

    def post(self, path: str, payload: object, timeout: float = 60) -> tuple[int, bytes]:
        return harness.request(self.url + path, json.dumps(payload).encode(), timeout=timeout)

    def raw(self, data: bytes, wait_s: float = 5) -> tuple[bytes, float]:
        """Send raw bytes; everything the server sends back until it closes, and how long."""
        started = time.monotonic()
        out = b""
        with socket.create_connection((self.host, self.port), timeout=wait_s) as sock:
            try:
                for i in range(0, len(data), 1 << 20):
                    sock.sendall(data[i : i + (1 << 20)])
                while chunk := sock.recv(65536):
                    out += chunk
            except OSError:
                pass
        return out, time.monotonic() - started

    def cpu_seconds(self) -> float | None:
        if self.pid is None:
            return None
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _problem(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def quantization_cases(t: Target) -> list[Outcome]:
    out = []
    for name, config in QUANTIZATION.items():
        body = {"hf_config": {**LLAMA, "quantization_config": config}, "gpu": "h100-sxm-80gb"}
        statuses = []
        for path, payload in (
            ("/v1/estimate/inference", body),
            ("/v1/estimate/finetune", {**body, "method": "qlora"}),
        ):
            status, _ = t.post(path, payload)
            statuses.append(status)
        status, raw = t.post(
            "/v1/estimate/batch",
            {
                "items": [
                    {"kind": "inference", "request": body},
                    {"kind": "inference", "request": {"model": "meta-llama/Llama-3.1-8B"}},
                ]
            },
        )
        results = _problem(raw).get("results") or [{}, {}]
        batch_ok = status == 200 and results[1].get("status") == 200
        passed = all(s in (200, 422) for s in statuses) and batch_ok
        detail = (
            f"inference/finetune {statuses}, batch {status} (other item {results[1].get('status')})"
        )
        out.append(Outcome(f"quantization: {name}", "1", passed, detail))
    return out


def overflow_cases(t: Target) -> list[Outcome]:
    out = []
    huge = {"model": "meta-llama/Llama-3.1-405B", "attention": "eager", "sequence_length": 16777216}
    for path, payload in (
        ("/v1/estimate/inference", {**huge, "batch_size": 59}),
        ("/v1/estimate/finetune", huge),
    ):
        status, raw = t.post(path, payload)
        fields = [e.get("field") for e in _problem(raw).get("errors") or []]
        out.append(
            Outcome(
                f"byte counts past 2^63 on {path}",
                "2",
                status == 422 and bool(fields),
                f"{status}, fields {fields}",
            )
        )
    return out


def hang_up_case(t: Target) -> list[Outcome]:
    # Distinct 1024-layer configs, each with an SGLang fit on an L4 at 32k tokens (about
    # 20 ms of estimate each on the dev machine: some 20 s for the batch).
    items = [
        {
            "kind": "inference",
            "request": {
                "hf_config": {**LLAMA, "num_hidden_layers": 1024, "hidden_size": 4096 + 32 * i},
                "gpu": "l4",
                "engine": "sglang",
                "sequence_length": 32768,
            },
        }
        for i in range(1000)
    ]
    body = json.dumps({"items": items}).encode()
    head = (
        f"POST /v1/estimate/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((t.host, t.port), timeout=10) as sock:
        sock.sendall(head + body)
        time.sleep(1.0)  # the client hangs up while the batch is computed
    start = t.cpu_seconds()
    time.sleep(3.0)
    end = t.cpu_seconds()
    if start is None or end is None:
        return [Outcome("batch abandoned by its client", "5", True, "skipped: no --pid")]
    burned = end - start
    return [
        Outcome(
            "batch abandoned by its client stops within 3 s",
            "5",
            burned < 1.0,
            f"worker CPU {burned:.2f} s in the 3 s after the hang-up",
        )
    ]


def header_cases(t: Target) -> list[Outcome]:
    out = []
    raw, seconds = t.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (64 << 20))
    refused = raw.startswith(b"HTTP/1.1 431") or raw == b""
    out.append(
        Outcome(
            "a 64 MB header", "6", refused and seconds < 2.0, f"{raw[:12]!r} after {seconds:.1f} s"
        )
    )
    raw, seconds = t.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: a", t.header_timeout_s + 5)
    out.append(
        Outcome(
            "a stalled head",
            "6",
            raw.startswith(b"HTTP/1.1 408") and seconds <= t.header_timeout_s + 3,
            f"{raw[:12]!r} after {seconds:.1f} s",
        )
    )
    return out


def small_cases(t: Target) -> list[Outcome]:
    out = []
    schema = json.loads(harness.request(t.url + "/openapi.json")[1])
    props = schema["components"]["schemas"]["InferenceRequestBody"]["properties"]
    gpu_count = props.get("gpu_count", {})
    maximum = next(
        (int(v["maximum"]) for v in [gpu_count, *gpu_count.get("anyOf", [])] if "maximum" in v),
        None,
    )
    if maximum is not None:
        status, raw = t.post(
            "/v1/estimate/inference",
            {"model": "meta-llama/Llama-3.1-8B", "gpu": "h100-sxm-80gb", "gpu_count": maximum},
        )
        out.append(
            Outcome(
                f"gpu_count at the schema's maximum ({maximum})",
                "7",
                status == 200,
                f"{status} {_problem(raw).get('detail', '')[:80]}",
            )
        )
    status, raw = t.post(
        "/v1/estimate/inference", {"hf_config": {**LLAMA, "model_type": "x" * 1_000_000}}
    )
    out.append(
        Outcome(
            "a 1 MB model_type",
            "7",
            status == 422 and len(raw) < 65536,
            f"{status}, {len(raw)} bytes",
        )
    )
    fp8 = {"quant_method": "fp8", "weight_block_size": "128"}
    status, raw = t.post(
        "/v1/estimate/inference", {"hf_config": {**LLAMA, "quantization_config": fp8}}
    )
    detail = str(_problem(raw).get("detail", ""))
    out.append(
        Outcome(
            'weight_block_size "128" reported as given',
            "7",
            status == 422 and "128" in detail and "'1'" not in detail,
            f"{status} {detail[:100]}",
        )
    )
    raw, _ = t.raw(b"HEAD /v1/gpus HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out.append(
        Outcome(
            "HEAD on a GET route",
            "7",
            raw.startswith(b"HTTP/1.1 200") and raw.endswith(b"\r\n\r\n"),
            repr(raw[:15]),
        )
    )
    raw, _ = t.raw(b"GET /\x00 HTTP/1.1\r\n\r\n")
    head, _, body = raw.partition(b"\r\n\r\n")
    out.append(
        Outcome(
            "malformed HTTP answered with a problem",
            "7",
            b"application/problem+json" in head and bool(_problem(body)),
            repr(head[:40]),
        )
    )
    before = _count_413(t)
    t.raw(
        b"POST /v1/estimate/inference HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Length: 99999999\r\n\r\n"
    )
    out.append(
        Outcome(
            "a 413 counted under its route",
            "7",
            _count_413(t) == before + 1,
            f"{before} -> {_count_413(t)}",
        )
    )
    return out


def _count_413(t: Target) -> float:
    metrics = harness.request(t.url + "/metrics")[1].decode()
    prefix = (
        'llmmem_http_requests_total{method="POST",route="/v1/estimate/inference",status="413"} '
    )
    return next(
        (float(line[len(prefix) :]) for line in metrics.splitlines() if line.startswith(prefix)),
        0.0,
    )


SUITES: list[Callable[[Target], list[Outcome]]] = [
    quantization_cases,
    overflow_cases,
    small_cases,
    header_cases,
    hang_up_case,
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--pid", type=int)
    parser.add_argument("--header-timeout-s", type=float, default=10.0)
    parser.add_argument("--report", type=Path)
    args = parser.parse_args()
    target = Target(args.url, args.pid, args.header_timeout_s)
    outcomes: list[Outcome] = []
    for suite in SUITES:
        for outcome in suite(target):
            outcomes.append(outcome)
            mark = "pass" if outcome.passed else "FAIL"
            print(
                f"hostile [{outcome.section}] {mark}: {outcome.case}: {outcome.detail}", flush=True
            )
    if args.report:
        args.report.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
    failed = [o for o in outcomes if not o.passed]
    print(f"hostile: {len(outcomes) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
