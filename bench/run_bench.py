"""`make bench`: throughput and latency of the service against a bare FastAPI baseline, the
estimator's own cost in-process, batch throughput, resident memory, and a profile.

1. Starts the service as production runs it (`python -m service`: uvicorn, one worker, access
   log on) and fetches its answer to the pre-flight request (detailed inference, vLLM, GPU fit).
2. Starts `bench/baseline_app.py` (bare FastAPI, one endpoint returning those same bytes) under
   the same uvicorn configuration.
3. Drives both with wrk (a separate process, one thread) at 1, 16 and 64 connections, the two
   servers alternating so background load hits both alike; records requests/s, p50 and p99.
   The service is driven twice: with the pre-flight body repeated (what a scheduler sends;
   answered from the response cache after the first) and with every body distinct (a new
   sequence length each request: every one a cache miss, computed and serialized).
4. Times 1000-item batches over HTTP, reads the worker's RSS, stops both servers.
5. In-process (no sockets): microseconds per detailed inference and fine-tune estimate with a
   fit (which runs the inverse searches), and per whole request through the ASGI app; profiles
   the ASGI path with cProfile (and pyinstrument when installed) into bench/profile.txt.
6. Rewrites its section of bench/results.md (the soak appends its own sections below).

7. Distinct bodies at 32 connections against a bare FastAPI app computing the same answers
   the plain FastAPI way (`baseline_app.py`, mode `compute`: a `def` route with the request
   model as its body and the response model as its return), the two alternating, two rounds.

Targets (the issues', for this 2-core machine): service >= 0.8 x baseline throughput; an
in-process estimate with fit and inverse search < 200 us; a 1000-item batch < 0.5 s;
RSS < 150 MiB per worker; distinct bodies at 32 connections >= 1.5 x the computing bare
FastAPI app with p99 <= 20 ms (issue 28 §4).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime as dt
import io
import json
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import distinct_bench, harness, scheduling_bench

RESULTS = harness.REPO / "bench" / "results.md"
PROFILE = harness.REPO / "bench" / "profile.txt"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
INFERENCE_PATH = "/v1/estimate/inference"
FINETUNE_REQUEST = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "method": "lora",
    "gpu": "h100-sxm-80gb",
}
TARGET_RATIO = 0.8
TARGET_ESTIMATE_US = 200.0
TARGET_BATCH_S = 0.5
TARGET_RSS_MIB = 150.0
# The scheduler-facing endpoints are driven at this many connections (one of --connections).
SCHEDULING_CONNECTIONS = 16
MiB = 2**20


# --------------------------------------------------------------------------------------------
# wrk


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not match:
        raise ValueError(f"unparsed wrk duration {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def wrk_script(directory: Path, body: bytes) -> Path:
    script = directory / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(body.decode())}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    return script


def wrk_distinct_script(directory: Path, body: dict[str, Any]) -> Path:
    """Every request a new body: the pre-flight with sequence_length 1024, 1025, ..."""
    template = json.dumps({**body, "sequence_length": 999_999}).replace("999999", "%d")
    script = directory / "post_distinct.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        "local n = 1023\n"
        "request = function()\n"
        "  n = n + 1\n"
        f"  return wrk.format(nil, nil, nil, string.format({json.dumps(template)}, n))\n"
        "end\n"
    )
    return script


def run_wrk(url: str, script: Path, connections: int, duration_s: int) -> dict[str, Any]:
    command = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{duration_s}s",
        "--latency",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
    out = subprocess.run(
        command, capture_output=True, text=True, timeout=duration_s + 60, check=True
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "connections": connections,
        "rps": rps,
        "p50_ms": p50,
        "p99_ms": p99,
        "requests": requests,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(g) for g in errors.groups()) if errors else 0,
    }


# --------------------------------------------------------------------------------------------
# Batch workloads


def batch_items(models: list[str], gpus: list[str], count: int = 1000) -> list[dict[str, Any]]:
    """A mixed, deterministic batch: inference on each engine and fine-tunes of each method,
    cycling over catalog models and GPUs, sequence lengths and batch sizes."""
    engines = ["vllm", "sglang", "transformers", "generic"]
    methods = ["full", "lora", "qlora", "freeze"]
    items: list[dict[str, Any]] = []
    for i in range(count):
        model, gpu = models[i % len(models)], gpus[(i // len(models)) % len(gpus)]
        if i % 4 == 3:
            request: dict[str, Any] = {
                "model": model,
                "gpu": gpu,
                "method": methods[(i // 4) % len(methods)],
                "batch_size": 1 + i % 4,
                "sequence_length": 512 << (i % 4),
            }
            items.append({"kind": "finetune", "request": request})
        else:
            request = {
                "model": model,
                "gpu": gpu,
                "engine": engines[i % len(engines)],
                "sequence_length": 1024 << (i % 5),
                "batch_size": 1 + i % 8,
            }
            items.append({"kind": "inference", "request": request})
    return items


def time_batch(url: str, items: list[dict[str, Any]], repeats: int = 5) -> dict[str, Any]:
    body = json.dumps({"items": items}).encode()
    seconds: list[float] = []
    summary: dict[str, Any] = {}
    for _ in range(repeats):
        start = time.perf_counter()
        status, raw = harness.request(url + "/v1/estimate/batch", body, timeout=120)
        seconds.append(time.perf_counter() - start)
        if status != 200:
            raise RuntimeError(f"batch answered {status}: {raw[:500]!r}")
        payload = json.loads(raw)
        summary = {
            "succeeded": payload["succeeded"],
            "failed": payload["failed"],
            "response_bytes": len(raw),
        }
    median = statistics.median(seconds)
    return {
        "items": len(items),
        "median_s": median,
        "best_s": min(seconds),
        "estimates_per_s": len(items) / median,
        "request_bytes": len(body),
        **summary,
    }


# --------------------------------------------------------------------------------------------
# In-process costs


def per_call_us(fn: Any, min_time_s: float = 0.3, repeats: int = 5) -> float:
    """Median over `repeats` runs of the mean time per call, each run at least `min_time_s`."""
    fn()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - start >= min_time_s / 4:
            break
        n *= 2
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n * 4):
            fn()
        runs.append((time.perf_counter() - start) / (n * 4))
    return statistics.median(runs) * 1e6


def in_process() -> dict[str, Any]:
    from bench import asgi_driver
    from service.application.convert import finetune_request, inference_request
    from service.application.resolve import resolve_gpu
    from service.catalog.gpu_catalog import load_gpu_catalog
    from service.catalog.model_catalog import load_model_catalog
    from service.estimator.answer import ModelSpec, answer_finetune, answer_inference
    from service.schemas.estimates import FinetuneRequestBody, InferenceRequestBody

    models, gpus = load_model_catalog(None), load_gpu_catalog(None)
    entry = models.get(harness.PREFLIGHT["model"].lower())
    spec = ModelSpec.from_architecture(entry.id.split("/")[-1], entry.id, entry.architecture)
    gpu = resolve_gpu(gpus, harness.PREFLIGHT["gpu"])
    inf_body = InferenceRequestBody.model_validate(harness.PREFLIGHT)
    inf_params = inference_request(inf_body)
    ft_body = FinetuneRequestBody.model_validate(FINETUNE_REQUEST)
    ft_params = finetune_request(ft_body)

    out: dict[str, Any] = {}
    out["inference_fit_us"] = per_call_us(
        lambda: answer_inference(spec, inf_params, estimator="detailed", gpu=gpu, gpu_count=None)
    )
    out["inference_nofit_us"] = per_call_us(
        lambda: answer_inference(spec, inf_params, estimator="detailed", gpu=None, gpu_count=None)
    )
    out["finetune_fit_us"] = per_call_us(
        lambda: answer_finetune(spec, ft_params, estimator="detailed", gpu=gpu)
    )
    out["resolve_uncached_us"] = per_call_us(
        lambda: ModelSpec.from_architecture(entry.id, entry.id, entry.architecture)
    )
    out["validate_body_us"] = per_call_us(
        lambda: InferenceRequestBody.model_validate(harness.PREFLIGHT)
    )

    app = asgi_driver.build_app(access_log=False)
    body = json.dumps(harness.PREFLIGHT).encode()
    count = 2000
    out["asgi_request_us"] = (
        asgi_driver.run_many(app, "POST", INFERENCE_PATH, body, count) / (count) * 1e6
    )
    distinct = [
        json.dumps({**harness.PREFLIGHT, "sequence_length": 1024 + i}).encode()
        for i in range(count)
    ]
    out["asgi_request_miss_us"] = (
        asgi_driver.run_bodies(app, "POST", INFERENCE_PATH, distinct) / count * 1e6
    )
    ft = json.dumps(FINETUNE_REQUEST).encode()
    out["asgi_finetune_us"] = (
        asgi_driver.run_many(app, "POST", "/v1/estimate/finetune", ft, count) / count * 1e6
    )
    out["route_is_async"] = _route_is_async()
    return out


def _route_is_async() -> bool:
    from service.api.routes import estimates

    return asyncio.iscoroutinefunction(estimates.estimate_inference)


def _public_paths(text: str) -> str:
    """The profile with this machine's paths made relative: the repository's files as
    repository paths, installed packages under `<site-packages>/`, Python's own under
    `<stdlib>/` (no file of the repository carries a path of a build machine)."""
    import site
    import sysconfig

    prefixes = [(str(harness.REPO) + "/", "")]
    prefixes += [(p + "/", "<site-packages>/") for p in site.getsitepackages()]
    prefixes.append((sysconfig.get_paths()["stdlib"] + "/", "<stdlib>/"))
    for prefix, replacement in sorted(prefixes, key=lambda x: -len(x[0])):
        text = text.replace(prefix, replacement)
    return text


def profile(count: int = 3000) -> str:
    """cProfile (and pyinstrument, when installed) of the in-process ASGI path."""
    from bench import asgi_driver

    app = asgi_driver.build_app(access_log=True)  # production logs; sent to a null stream
    import logging

    for name in ("service", "uvicorn", "uvicorn.error"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(io.StringIO())
    body = json.dumps(harness.PREFLIGHT).encode()
    # Profilers see one thread: run `def` routes and dependencies inline instead of in the
    # thread pool, so the whole request is on the profiled thread (the hop itself is not).
    import fastapi.dependencies.utils
    import fastapi.routing

    async def inline(func: Any, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    fastapi.routing.run_in_threadpool = inline  # type: ignore[assignment]
    fastapi.dependencies.utils.run_in_threadpool = inline  # type: ignore[assignment]
    asgi_driver.run_many(app, "POST", INFERENCE_PATH, body, 200)  # warm caches
    profiler = cProfile.Profile()
    profiler.enable()
    asgi_driver.run_many(app, "POST", INFERENCE_PATH, body, count)
    profiler.disable()
    text = io.StringIO()
    text.write(f"# cProfile: {count} x POST {INFERENCE_PATH} {json.dumps(harness.PREFLIGHT)}\n")
    text.write("# in-process ASGI (no sockets), access log on (to a null stream), thread-pool\n")
    text.write("# calls run inline so that the profiler sees them\n\n")
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(45)
    try:
        from pyinstrument import Profiler
    except ImportError:
        text.write("\n(pyinstrument not installed)\n")
    else:
        sampler = Profiler(interval=0.0001)
        sampler.start()
        asgi_driver.run_many(app, "POST", INFERENCE_PATH, body, count)
        sampler.stop()
        text.write("\n# pyinstrument (same loop)\n")
        text.write(sampler.output_text(unicode=False, color=False, show_all=False))
    return text.getvalue()


# --------------------------------------------------------------------------------------------
# Report


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def render(data: dict[str, Any]) -> str:
    lines = [
        BEGIN,
        "## Bench (`make bench`)",
        "",
        f"Run {data['when']} on {data['machine']}; load average before {data['load_before']}, "
        f"after {data['load_after']}; {data.get('priority', 'normal priority')}. "
        f"wrk {data['wrk_version']}, one wrk thread, "
        f"{data['duration_s']} s per point, service and baseline alternating. Request: "
        f"`POST {INFERENCE_PATH}` `{json.dumps(harness.PREFLIGHT)}` "
        f"({data['request_bytes']} B in, {data['response_bytes']} B out). The baseline is a bare "
        f"FastAPI app returning those stored bytes from a "
        f"{'`async def`' if data['in_process']['route_is_async'] else 'plain `def`'} route "
        "(like the service's), same uvicorn settings. The service runs with production "
        "settings (access log on, written to a file).",
        "",
        "| connections | service req/s | baseline req/s | ratio | service p50 / p99 ms | "
        "baseline p50 / p99 ms | errors (svc/base) | every body distinct (cache misses): "
        "req/s, ratio, p50 / p99 ms, errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for svc, base, cold in zip(data["service"], data["baseline"], data["distinct"], strict=True):
        ratio = svc["rps"] / base["rps"]
        lines.append(
            f"| {svc['connections']} | {svc['rps']:.0f} | {base['rps']:.0f} | {ratio:.2f} | "
            f"{svc['p50_ms']:.2f} / {svc['p99_ms']:.2f} | "
            f"{base['p50_ms']:.2f} / {base['p99_ms']:.2f} | "
            f"{svc['non_2xx'] + svc['socket_errors']} / "
            f"{base['non_2xx'] + base['socket_errors']} | "
            f"{cold['rps']:.0f}, {cold['rps'] / base['rps']:.2f}, "
            f"{cold['p50_ms']:.2f} / {cold['p99_ms']:.2f}, "
            f"{cold['non_2xx'] + cold['socket_errors']} |"
        )
    lines += [
        "",
        "The service columns send the pre-flight body over and over, as a scheduler does: "
        "after the first, each is answered from the response cache "
        "(`service/api/response_cache.py`; still with its own request id, access-log line "
        "and metrics). The last column sends a new body every request (the pre-flight with "
        "sequence_length 1024, 1025, ...): every one is parsed, estimated with its fit and "
        "inverse searches, rendered and serialized, which is the cost of an answer the "
        "cache has not seen.",
    ]
    ip = data["in_process"]
    batch, same = data["batch_mixed"], data["batch_same"]
    worst_ratio = min(
        s["rps"] / b["rps"] for s, b in zip(data["service"], data["baseline"], strict=True)
    )
    cold_ratio = min(
        s["rps"] / b["rps"] for s, b in zip(data["distinct"], data["baseline"], strict=True)
    )
    estimate_us = max(ip["inference_fit_us"], ip["finetune_fit_us"])
    lines += [
        "",
        "In-process (this process, no sockets; median of 5 runs):",
        "",
        "| what | µs per call |",
        "|---|---:|",
        f"| detailed inference estimate + fit (inverse searches for batch and sequence) | "
        f"{ip['inference_fit_us']:.1f} |",
        f"| detailed inference estimate, no fit | {ip['inference_nofit_us']:.1f} |",
        f"| detailed fine-tune estimate (LoRA) + fit | {ip['finetune_fit_us']:.1f} |",
        f"| resolving the catalog model uncached (parameter count) | "
        f"{ip['resolve_uncached_us']:.1f} |",
        f"| validating the request body (pydantic) | {ip['validate_body_us']:.1f} |",
        f"| whole inference request through the ASGI app, repeated body (cache hit; no access "
        f"log) | {ip['asgi_request_us']:.1f} |",
        f"| whole inference request through the ASGI app, distinct bodies (cache miss; no "
        f"access log) | {ip['asgi_request_miss_us']:.1f} |",
        f"| whole fine-tune request through the ASGI app, repeated body (no access log) | "
        f"{ip['asgi_finetune_us']:.1f} |",
        "",
        "Batch over HTTP (median of 5 calls):",
        "",
        "| batch | items | median s | estimates/s | failed items | response |",
        "|---|---:|---:|---:|---:|---:|",
        f"| mixed (3/4 inference on 4 engines, 1/4 fine-tunes of 4 methods; catalog models x "
        f"GPUs, all with fit) | {batch['items']} | {batch['median_s']:.3f} | "
        f"{batch['estimates_per_s']:.0f} | {batch['failed']} | "
        f"{batch['response_bytes'] / MiB:.1f} MiB |",
        f"| the pre-flight request x {same['items']} | {same['items']} | {same['median_s']:.3f} | "
        f"{same['estimates_per_s']:.0f} | {same['failed']} | "
        f"{same['response_bytes'] / MiB:.1f} MiB |",
        "",
        f"Worker RSS: {data['rss_idle'] / MiB:.1f} MiB after start-up, "
        f"{data['rss_loaded'] / MiB:.1f} MiB after the wrk runs, "
        f"{data['rss_after_batch'] / MiB:.1f} MiB after the batches.",
        "",
        "| target | measured | |",
        "|---|---|---|",
        f"| service >= {TARGET_RATIO} x bare FastAPI throughput | worst ratio {worst_ratio:.2f} "
        f"(repeated pre-flight body); {cold_ratio:.2f} with every body distinct | "
        f"{verdict(worst_ratio >= TARGET_RATIO)} |",
        f"| in-process estimate with fit and inverse search < {TARGET_ESTIMATE_US:.0f} µs | "
        f"inference {ip['inference_fit_us']:.0f} µs, fine-tune {ip['finetune_fit_us']:.0f} µs | "
        f"{verdict(estimate_us < TARGET_ESTIMATE_US)} |",
        f"| 1000-item batch < {TARGET_BATCH_S} s | mixed {batch['median_s']:.3f} s, "
        f"same request {same['median_s']:.3f} s | "
        f"{verdict(max(batch['median_s'], same['median_s']) < TARGET_BATCH_S)} |",
        f"| RSS < {TARGET_RSS_MIB:.0f} MiB per worker | "
        f"{max(data['rss_loaded'], data['rss_after_batch']) / MiB:.1f} MiB | "
        f"{verdict(max(data['rss_loaded'], data['rss_after_batch']) < TARGET_RSS_MIB * MiB)} |",
        "",
        *distinct_bench.render(data, verdict),
        "",
        *scheduling_bench.render(data),
        "",
        "Profile of the in-process request path: `bench/profile.txt`.",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_results(section: str) -> None:
    existing = RESULTS.read_text() if RESULTS.exists() else ""
    header = "# Benchmark and soak results\n\nWritten by `make bench` and `make soak`.\n\n"
    if BEGIN in existing and END in existing:
        before, rest = existing.split(BEGIN, 1)
        after = rest.split(END, 1)[1].lstrip("\n")
        text = before + section + ("\n" + after if after else "")
    else:
        text = (existing or header) + ("\n" if existing else "") + section
    RESULTS.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk point")
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch results.md")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not found: `apt-get install -y wrk` (mk/bench.mk does it)", file=sys.stderr)
        return 2
    connections = [int(c) for c in args.connections.split(",")]
    data: dict[str, Any] = {
        "when": dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "machine": f"{_cpu_model()}",
        "load_before": harness.load_average(),
        "priority": harness.raise_priority(),
        "duration_s": args.duration,
        "wrk_version": _wrk_version(),
    }
    print(f"load average: {data['load_before']}", flush=True)
    # In-process first, while no server competes for the CPUs.
    data["in_process"] = in_process()
    data["scheduling_in_process"] = scheduling_bench.in_process()
    print(json.dumps(data["in_process"], indent=1), flush=True)
    with tempfile.TemporaryDirectory(prefix="llmmem-bench-") as tmp_name:
        tmp = Path(tmp_name)
        service = harness.start_service(tmp / "service.log")
        baseline = None
        try:
            harness.wait_ready(service)
            data["rss_idle"] = service.rss_bytes()
            request_body = json.dumps(harness.PREFLIGHT).encode()
            status, answer = harness.request(service.url + INFERENCE_PATH, request_body)
            if status != 200:
                raise RuntimeError(f"pre-flight answered {status}: {answer[:500]!r}")
            data["request_bytes"], data["response_bytes"] = len(request_body), len(answer)
            (tmp / "answer.json").write_bytes(answer)
            port = harness.free_port()
            baseline = harness.start(
                distinct_bench.uvicorn(port),
                port,
                tmp / "baseline.log",
                env={
                    "BENCH_BASELINE_BODY": str(tmp / "answer.json"),
                    "BENCH_BASELINE_ASYNC": "1" if data["in_process"]["route_is_async"] else "0",
                },
            )
            harness.wait_ready(baseline, INFERENCE_PATH, body=request_body)
            script = wrk_script(tmp, request_body)
            distinct = wrk_distinct_script(tmp, harness.PREFLIGHT)
            runs = (
                ("service", service, script),
                ("baseline", baseline, script),
                ("distinct", service, distinct),
            )
            for _, server, lua in runs[:2]:  # warm-up: caches, thread pool
                run_wrk(server.url + INFERENCE_PATH, lua, 16, 2)
            data["service"], data["baseline"], data["distinct"] = [], [], []
            for c in connections:
                for name, server, lua in runs:
                    result = run_wrk(server.url + INFERENCE_PATH, lua, c, args.duration)
                    data[name].append(result)
                    print(f"{name:8s} c={c:3d} {result}", flush=True)
            data["distinct_vs_compute"] = distinct_bench.run(
                tmp, service, distinct, request_body, args.duration, run_wrk
            )
            data["scheduling"] = []
            for name, path, body in scheduling_bench.bodies():
                script_dir = tmp / path.strip("/").replace("/", "-")
                script_dir.mkdir(exist_ok=True)
                lua = wrk_script(script_dir, body)
                result = run_wrk(service.url + path, lua, SCHEDULING_CONNECTIONS, args.duration)
                data["scheduling"].append({"name": name, "path": path, **result})
                print(f"{path} c={SCHEDULING_CONNECTIONS} {result}", flush=True)
            data["rss_loaded"] = service.rss_bytes()
            models = [m["id"] for m in _get(service.url + "/v1/models")["models"]]
            gpus = [g["id"] for g in _get(service.url + "/v1/gpus")["gpus"]]
            data["batch_mixed"] = time_batch(service.url, batch_items(models, gpus))
            data["batch_same"] = time_batch(
                service.url, [{"kind": "inference", "request": harness.PREFLIGHT}] * 1000
            )
            print("batch", data["batch_mixed"], data["batch_same"], flush=True)
            data["rss_after_batch"] = service.rss_bytes()
        finally:
            for server in (service, baseline):
                if server is not None:
                    harness.stop(server)
    data["load_after"] = harness.load_average()
    PROFILE.write_text(_public_paths(profile()))
    section = render(data)
    print(section)
    if not args.no_write:
        write_results(section)
        print(f"wrote {RESULTS.relative_to(harness.REPO)} and {PROFILE.relative_to(harness.REPO)}")
    return 0


def _get(url: str) -> Any:
    status, raw = harness.request(url)
    if status != 200:
        raise RuntimeError(f"{url} answered {status}")
    return json.loads(raw)


def _wrk_version() -> str:
    out = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=10)
    words = (out.stdout + out.stderr).split()
    return words[1] if len(words) > 1 else "?"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x {_ncpu()}"
    except OSError:
        pass
    return f"{_ncpu()} CPUs"


def _ncpu() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    sys.exit(main())
