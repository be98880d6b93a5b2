"""`make soak`: hostile phases, a minute of mixed load, then SIGTERM under load.

First the hostile phases of bench/soak_phases.py (issue 18): huge headers, slow headers and
64 connections of heavy distinct configs, each on a fresh worker held to the production
memory limit (a 256 MiB memory cgroup) with /healthz probed throughout; each phase reports
pass or fail against its target (/healthz p99 < 100 ms, RSS < 200 MiB, no 5xx). `--phases`
picks them (`headers,slow,heavy,mixed`).

Then the minute: starts the service as production runs it (`python -m service`, one uvicorn
worker, access log on, to a file, the same memory limit) and drives it from this separate
process with httpx for `--duration` seconds (60 by default) with a weighted mix of:

* valid estimates of every kind: catalog inference on each engine with a GPU fit, a posted
  `hf_config`, a bare parameter count (simple rules), fine-tunes of each method, small batches;
* the read endpoints (catalogs, one record, health, readiness, metrics);
* malformed bodies (not JSON, not an object, wrong types, unknown fields, deep nesting),
  unknown model and GPU ids, oversized bodies (over the 1 MiB limit);
* bursts: every few seconds 100 requests at once on fresh connections.

Pass criteria: zero 5xx other than load shedding (a 503 with Retry-After, after which the
client waits as told, as production clients do; the count is reported), zero dropped
connections (any transport error), every answer the
status its scenario expects, resident memory growth under 10% (last 10 s against the 10 s
after warm-up). Then the shutdown check: requests in flight (1000-item batches, single
estimates, and requests whose bodies are still arriving when the signal lands) when SIGTERM is
sent must all complete with 200, and the server must exit within its grace period.

The results are appended to bench/results.md. Loopback only; every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime as dt
import json
import random
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import harness, soak_load, soak_phases, soak_store
from bench.harness import LLAMA_CONFIG

RESULTS = harness.REPO / "bench" / "results.md"
GROWTH_LIMIT = 0.10
WORKERS = 12
BURST_SIZE = 100
BURST_EVERY_S = 7.0
MiB = 2**20
# In flight at SIGTERM: as many as one worker admits (service/api/concurrency.py: 1 thread
# and 32 waiting, of which one batch per thread), less the 4 held requests.
SHUTDOWN_BATCHES = 1
SHUTDOWN_SINGLES = 27


@dataclass
class Scenario:
    name: str
    weight: int
    expect: frozenset[int]
    make: Callable[[random.Random], tuple[str, str, bytes | None]]  # method, path, body


@dataclass
class Tally:
    statuses: collections.Counter[tuple[str, int]] = field(default_factory=collections.Counter)
    unexpected: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)
    shed: int = 0  # 503 with Retry-After: the replica shedding load, by design
    latencies: list[float] = field(default_factory=list)
    count: int = 0


def _j(value: Any) -> bytes:
    return json.dumps(value).encode()


def scenarios(
    models: list[str], gpus: list[str], limit_bytes: int, contexts: dict[str, int] | None = None
) -> list[Scenario]:
    """The mix. ``contexts``: each model's trained context, so inference lengths stay within
    what an engine accepts (a longer one is a correct 422, not load)."""
    contexts = contexts or {}
    ok = frozenset({200})
    bad = frozenset({400, 422})
    missing = frozenset({404})
    engines = ["vllm", "sglang", "transformers", "generic"]
    small_models = [m for m in models if any(s in m for s in ("1B", "3B", "7B", "8B", "0.5B"))]
    small_models = small_models or models

    def inference(r: random.Random) -> tuple[str, str, bytes | None]:
        body = {
            "model": r.choice(models),
            "gpu": r.choice(gpus),
            "engine": r.choice(engines),
            "batch_size": r.randint(1, 8),
        }
        context = contexts.get(str(body["model"]), 2048)
        lengths = [n for n in (512, 2048, 8192, 32768) if n <= context // 2] or [512]
        body["sequence_length"] = r.choice(lengths)
        return "POST", "/v1/estimate/inference", _j(body)

    def posted_config(r: random.Random) -> tuple[str, str, bytes | None]:
        config = {**LLAMA_CONFIG, "num_hidden_layers": r.choice([16, 24, 32, 40])}
        body = {"hf_config": config, "gpu": r.choice(gpus), "engine": "vllm"}
        return "POST", "/v1/estimate/inference", _j(body)

    def simple(r: random.Random) -> tuple[str, str, bytes | None]:
        body = {
            "parameter_count": r.choice([1e9, 7e9, 70e9]),
            "estimator": "simple",
            "gpu": r.choice(gpus),
        }
        return "POST", "/v1/estimate/inference", _j(body)

    def finetune(r: random.Random) -> tuple[str, str, bytes | None]:
        body = {
            "model": r.choice(small_models),
            "gpu": r.choice(gpus),
            "method": r.choice(["full", "lora", "qlora"]),
            "batch_size": r.randint(1, 4),
            "sequence_length": r.choice([512, 2048, 4096]),
        }
        return "POST", "/v1/estimate/finetune", _j(body)

    def batch(r: random.Random) -> tuple[str, str, bytes | None]:
        items = []
        for _ in range(20):
            _, path, raw = r.choice([inference, finetune, simple])(r)
            items.append({"kind": path.rsplit("/", 1)[1], "request": json.loads(raw or b"{}")})
        return "POST", "/v1/estimate/batch", _j({"items": items})

    def reads(r: random.Random) -> tuple[str, str, bytes | None]:
        path = r.choice(
            [
                "/v1/gpus",
                "/v1/models",
                f"/v1/gpus/{r.choice(gpus)}",
                f"/v1/models/{r.choice(models)}",
                "/healthz",
                "/readyz",
                "/metrics",
            ]
        )
        return "GET", path, None

    def malformed(r: random.Random) -> tuple[str, str, bytes | None]:
        body = r.choice(
            [
                b"{not json",
                b"[1, 2, 3]",
                b'"a string"',
                b"",
                b"null",
                b"{}",
                _j({"model": 42}),
                _j({"model": "meta-llama/Llama-3.1-8B", "batch_size": "8"}),
                _j({"model": "meta-llama/Llama-3.1-8B", "bogus_field": 1}),
                _j({"parameter_count": -5}),
                b"[" * 50_000 + b"]" * 50_000,
                b'{"model": "meta-llama/Llama-3.1-8B", "sequence_length": 1e400}',
                b'{"model": "\\ud800"}',
                b"\xff\xfe\x00garbage",
            ]
        )
        path = r.choice(["/v1/estimate/inference", "/v1/estimate/finetune", "/v1/estimate/batch"])
        return "POST", path, body

    def unknown(r: random.Random) -> tuple[str, str, bytes | None]:
        return r.choice(
            [
                ("POST", "/v1/estimate/inference", _j({"model": "nobody/no-such-model"})),
                ("POST", "/v1/estimate/inference", _j({"model": models[0], "gpu": "no-such-gpu"})),
                (
                    "POST",
                    "/v1/estimate/finetune",
                    _j({"model": "nobody/nothing", "method": "lora"}),
                ),
                ("GET", "/v1/models/nobody/no-such-model", None),
                ("GET", "/v1/gpus/no-such-gpu", None),
            ]
        )

    def oversized(r: random.Random) -> tuple[str, str, bytes | None]:
        return "POST", "/v1/estimate/inference", b" " * (limit_bytes + r.randint(1, limit_bytes))

    return [
        Scenario("inference (catalog, engine, fit)", 30, ok, inference),
        Scenario("inference (posted hf_config)", 6, ok, posted_config),
        Scenario("inference (parameter count, simple)", 6, ok, simple),
        Scenario("finetune (full/lora/qlora, fit)", 15, ok, finetune),
        Scenario("batch (20 mixed items)", 3, ok, batch),
        Scenario("reads (catalogs, records, health, metrics)", 12, ok, reads),
        Scenario("malformed bodies", 12, bad, malformed),
        Scenario("unknown ids", 8, missing, unknown),
        Scenario("oversized bodies", 2, frozenset({413}), oversized),
    ]


async def one(
    client: httpx.AsyncClient, scenario: Scenario, r: random.Random, tally: Tally
) -> None:
    method, path, body = scenario.make(r)
    started = time.perf_counter()
    try:
        response = await client.request(method, path, content=body)
        await response.aread()
    except httpx.TransportError as err:
        tally.dropped.append(f"{scenario.name}: {method} {path}: {type(err).__name__}: {err}")
        return
    tally.count += 1
    tally.latencies.append(time.perf_counter() - started)
    tally.statuses[(scenario.name, response.status_code)] += 1
    retry_after = response.headers.get("retry-after")
    if response.status_code == 503 and retry_after is not None:
        tally.shed += 1
        await asyncio.sleep(float(retry_after))
    elif response.status_code >= 500:
        tally.server_errors.append(f"{scenario.name}: {method} {path}: {response.text[:300]}")
    elif response.status_code not in scenario.expect and len(tally.unexpected) < 50:
        tally.unexpected.append(
            f"{scenario.name}: {method} {path} {(body or b'')[:120]!r} -> "
            f"{response.status_code} {response.text[:200]}"
        )


async def mixed_load(
    url: str, pid: int, duration_s: float, seed: int, mix: list[Scenario]
) -> tuple[Tally, list[tuple[float, int]], int]:
    tally = Tally()
    rss: list[tuple[float, int]] = []
    weights = [s.weight for s in mix]
    deadline = time.monotonic() + duration_s
    start = time.monotonic()
    bursts = 0
    timeout = httpx.Timeout(30.0)

    async def worker(index: int) -> None:
        r = random.Random(seed * 1000 + index)
        limits = httpx.Limits(max_connections=2, max_keepalive_connections=2)
        async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
            while time.monotonic() < deadline:
                await one(client, r.choices(mix, weights)[0], r, tally)

    async def burster() -> None:
        nonlocal bursts
        r = random.Random(seed)
        while time.monotonic() + BURST_EVERY_S < deadline:
            await asyncio.sleep(BURST_EVERY_S)
            limits = httpx.Limits(max_connections=BURST_SIZE)
            async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
                chosen = r.choices(mix, weights, k=BURST_SIZE)
                await asyncio.gather(*(one(client, s, r, tally) for s in chosen))
            bursts += 1

    async def sampler() -> None:
        while time.monotonic() < deadline:
            rss.append((time.monotonic() - start, harness.rss_bytes(pid)))
            await asyncio.sleep(1.0)

    await asyncio.gather(sampler(), burster(), *(worker(i) for i in range(WORKERS)))
    return tally, rss, bursts


async def fill_caches(
    url: str, mix: list[Scenario], seed: int, cache_bytes: int, limit_s: float
) -> int:
    """Distinct single estimates until the response cache holds its bound (or `limit_s`).

    The service's caches are bounded but start empty; filling them first makes the RSS
    criterion a leak test (memory must stay flat once every cache is at its bound) rather
    than a measure of how fast the bounded caches happen to fill during the minute."""
    estimates = [s for s in mix if s.name.startswith(("inference (catalog", "finetune"))]
    r = random.Random(seed + 7919)
    sent = 0
    deadline = time.monotonic() + limit_s
    limits = httpx.Limits(max_connections=WORKERS)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:
        while time.monotonic() < deadline:
            requests = []
            for _ in range(200):
                _, path, body = r.choice(estimates).make(r)
                requests.append(client.post(path, content=body))
            await asyncio.gather(*requests)
            sent += len(requests)
            metrics = (await client.get("/metrics")).text
            held = re.search(r"^llmmem_estimate_response_cache_bytes (\S+)$", metrics, re.MULTILINE)
            if held and float(held.group(1)) >= 0.97 * cache_bytes:
                break
    return sent


def rss_growth(rss: list[tuple[float, int]], duration_s: float) -> dict[str, float]:
    warm = [v for t, v in rss if 5 <= t < 15] or [v for _, v in rss[:5]]
    last = [v for t, v in rss if t >= duration_s - 10] or [v for _, v in rss[-5:]]
    base, end = statistics.mean(warm), statistics.mean(last)
    return {
        "start": rss[0][1],
        "warm": base,
        "end": end,
        "max": max(v for _, v in rss),
        "growth": (end - base) / base,
    }


async def shutdown_under_load(server: harness.Server, grace_s: int) -> dict[str, Any]:
    """SIGTERM while batches, single estimates and half-sent requests are in flight."""
    url = server.url
    models = json.loads(harness.request(url + "/v1/models")[1])["models"]
    model_ids = [m["id"] for m in models][:10]
    big_batch = {
        "items": [
            {
                "kind": "inference",
                "request": {
                    "model": model_ids[i % len(model_ids)],
                    "gpu": "h100-sxm-80gb",
                    "engine": "vllm",
                    "sequence_length": 1024 << (i % 4),
                },
            }
            for i in range(1000)
        ]
    }
    single = harness.PREFLIGHT
    held_body = _j(single)
    loop = asyncio.get_running_loop()

    def held_request() -> socket.socket:
        sock = socket.create_connection((harness.HOST, server.port), timeout=30)
        sock.sendall(
            f"POST /v1/estimate/inference HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(held_body)}\r\n\r\n".encode()
            + held_body[:10]
        )
        return sock

    def finish_held(sock: socket.socket) -> int:
        with sock:
            sock.sendall(held_body[10:])
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    return -1
                data += chunk
            return int(data.split(b" ", 2)[1])

    held = [held_request() for _ in range(4)]
    async with httpx.AsyncClient(
        base_url=url, timeout=60, limits=httpx.Limits(max_connections=64)
    ) as client:
        finished: list[float] = []

        async def timed(path: str, payload: Any) -> httpx.Response:
            response = await client.post(path, json=payload)
            finished.append(time.monotonic())
            return response

        tasks = [
            asyncio.create_task(timed("/v1/estimate/batch", big_batch))
            for _ in range(SHUTDOWN_BATCHES)
        ]
        # As many as one worker admits (1 thread + 32 waiting by default, of which one batch
        # per thread, less the batch and the 4 held requests): more would be shed with 503 by
        # design, not lost.
        tasks += [
            asyncio.create_task(timed("/v1/estimate/inference", single))
            for _ in range(SHUTDOWN_SINGLES)
        ]
        await asyncio.sleep(0.3)  # let them reach the server
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)
        held_statuses = await asyncio.gather(
            *(loop.run_in_executor(None, finish_held, s) for s in held)
        )
        results = await asyncio.gather(*tasks, return_exceptions=True)
    statuses: collections.Counter[str] = collections.Counter()
    for result in results:
        if isinstance(result, BaseException):
            statuses[type(result).__name__] += 1
        else:
            statuses[str(result.status_code)] += 1
            if result.status_code == 200:
                result.json()  # complete and parseable
    for status in held_statuses:
        statuses[f"held {status}"] += 1
    try:
        code = await loop.run_in_executor(None, lambda: server.process.wait(grace_s + 10))
    except Exception:
        code = None
    exit_s = time.monotonic() - signalled
    ok = (
        all(k in ("200", "held 200") for k in statuses)
        and code is not None
        and exit_s <= grace_s + 1
    )
    return {
        "statuses": dict(statuses),
        "in_flight": len(tasks) + len(held),
        "completed_after_signal": sum(1 for t in finished if t > signalled) + len(held),
        "exit_code": code,
        "exit_s": exit_s,
        "grace_s": grace_s,
        "ok": ok,
    }


def render(data: dict[str, Any], mix: list[Scenario]) -> str:
    tally: Tally = data["tally"]
    growth = data["rss"]
    lat = sorted(tally.latencies)
    p50 = lat[len(lat) // 2] * 1e3 if lat else 0.0
    p99 = lat[int(len(lat) * 0.99)] * 1e3 if lat else 0.0
    shutdown = data["shutdown"]
    lines = [
        "",
        f"## Soak (`make soak`), {data['when']}",
        "",
        f"{data['duration_s']:.0f} s of mixed load on `python -m service` (one worker, "
        f"production settings, memory {data['limit']}): {WORKERS} keep-alive clients plus a "
        f"burst of {BURST_SIZE} "
        f"concurrent requests on fresh connections every {BURST_EVERY_S:.0f} s "
        f"({data['bursts']} bursts). Load average before {data['load_before']}, after "
        f"{data['load_after']}.",
        "",
        f"- Before the minute, {data['prefill']} distinct single estimates filled the "
        f"service's bounded caches (response cache to its {data['cache_bytes'] / MiB:.0f} MiB "
        "bound, plan caches); worker "
        f"RSS then {data['rss_prefilled'] / MiB:.1f} MiB. The growth below is measured with "
        "every cache at its bound, so it is what a leak would show.",
        f"- Requests answered: {tally.count} ({tally.count / data['duration_s']:.0f}/s), "
        f"latency p50 {p50:.1f} ms, p99 {p99:.1f} ms.",
        f"- Shed (503 with Retry-After, retried after it): {tally.shed}.",
        f"- 5xx: **{len(tally.server_errors)}**; dropped connections (transport errors): "
        f"**{len(tally.dropped)}**; answers with a status other than expected: "
        f"**{len(tally.unexpected)}**.",
        f"- Worker RSS: {growth['start'] / MiB:.1f} MiB at start, {growth['warm'] / MiB:.1f} MiB "
        f"after warm-up (5-15 s), {growth['end'] / MiB:.1f} MiB over the last 10 s, max "
        f"{growth['max'] / MiB:.1f} MiB: growth **{growth['growth'] * 100:+.1f}%** "
        f"(limit +{GROWTH_LIMIT * 100:.0f}%).",
        f"- SIGTERM with {shutdown['in_flight']} requests in flight "
        f"({SHUTDOWN_BATCHES} batch of 1000, "
        f"{SHUTDOWN_SINGLES} single estimates, 4 requests with half-sent bodies finished after "
        "the signal): "
        f"{shutdown['statuses']}, {shutdown['completed_after_signal']} of them completed after "
        f"the signal; exit code {shutdown['exit_code']} after "
        f"{shutdown['exit_s']:.1f} s (grace {shutdown['grace_s']} s).",
        "",
        "| scenario | expected | answered (status: count) |",
        "|---|---|---|",
    ]
    for s in mix:
        counts = {st: n for (name, st), n in tally.statuses.items() if name == s.name}
        shown = ", ".join(f"{st}: {n}" for st, n in sorted(counts.items()))
        lines.append(f"| {s.name} | {', '.join(map(str, sorted(s.expect)))} | {shown} |")
    for title, items in (
        ("5xx", tally.server_errors),
        ("Dropped", tally.dropped),
        ("Unexpected statuses", tally.unexpected),
    ):
        if items:
            lines += ["", f"{title} (first 10):", ""]
            lines += [f"- `{line[:300]}`" for line in items[:10]]
    lines += ["", f"Verdict: **{'pass' if data['passed'] else 'FAIL'}**.", ""]
    return "\n".join(lines)


def hostile_phases(
    tmp: Path, limit: soak_phases.MemoryLimit, args: argparse.Namespace, header_timeout_s: float
) -> list[soak_phases.Phase]:
    """The phases of bench/soak_phases.py, each on a fresh worker (an OOM kill in one must not
    hide the next) held to the production memory limit."""
    runs = {
        "headers": lambda server: soak_phases.huge_headers(server, limit),
        "slow": lambda server: soak_phases.slow_headers(server, limit, header_timeout_s),
        "heavy": lambda server: soak_phases.heavy_distinct(
            server, limit, args.heavy_duration, args.seed
        ),
        "store": lambda server: soak_store.store_files(server, limit, tmp, args.heavy_duration),
        "mix": lambda server: soak_load.heavy_mix(server, limit, args.heavy_duration, args.seed),
        "admission": lambda server: soak_load.large_review(server, limit),
    }
    # Phases whose worker needs files or settings of its own: name -> its environment.
    setups = {"store": soak_store.prepare}
    phases = []
    for name in args.phases:
        if name not in runs:
            continue
        env = setups[name](tmp) if name in setups else None
        server = soak_phases.start_limited(tmp / f"{name}.log", limit, env)
        try:
            harness.wait_ready(server)
            print(f"soak: phase {name} against {server.url} (pid {server.pid})", flush=True)
            phase = runs[name](server)
        finally:
            harness.stop(server)
        print(f"soak: phase {name}: {'pass' if phase.passed else 'FAIL'}", flush=True)
        phases.append(phase)
    return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--heavy-duration", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--phases",
        type=lambda text: text.split(","),
        default=["headers", "slow", "heavy", "store", "mix", "admission", "mixed"],
        help="comma-separated: headers, slow, heavy (bench/soak_phases.py), store "
        "(bench/soak_store.py), mix, admission (bench/soak_load.py), mixed (the minute)",
    )
    parser.add_argument("--label", default="", help="added to the results headings")
    parser.add_argument("--no-memory-limit", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from service.settings import Settings

    defaults = Settings()
    limit = soak_phases.MemoryLimit(soak_phases.PROD_MEMORY_LIMIT, enabled=not args.no_memory_limit)
    print(f"soak: worker memory {limit.describe()}", flush=True)
    when = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    sections: list[str] = []
    passed = True
    try:
        with tempfile.TemporaryDirectory(prefix="llmmem-soak-") as tmp:
            load_before = harness.load_average()
            phases = hostile_phases(Path(tmp), limit, args, defaults.header_read_timeout_s)
            if phases:
                passed = all(phase.passed for phase in phases)
                load = (load_before, harness.load_average())
                sections.append(soak_phases.render(phases, limit, args.label, when, load))
            if "mixed" in args.phases:
                section, mixed_passed = mixed_minute(Path(tmp), limit, args, defaults, when)
                sections.append(section)
                passed = passed and mixed_passed
    finally:
        limit.remove()
    text = "".join(sections)
    print(text)
    if not args.no_write and text:
        harness.append_result(RESULTS, text)
        print(f"appended to {RESULTS.relative_to(harness.REPO)}")
    return 0 if passed else 1


def mixed_minute(
    tmp: Path,
    limit: soak_phases.MemoryLimit,
    args: argparse.Namespace,
    defaults: Any,
    when: str,
) -> tuple[str, bool]:
    """The minute of mixed load, then SIGTERM under load; its section and verdict."""
    data: dict[str, Any] = {
        "when": when + (f": {args.label}" if args.label else ""),
        "load_before": harness.load_average(),
        "duration_s": args.duration,
        "limit": limit.describe(),
    }
    server = soak_phases.start_limited(tmp / "service.log", limit)
    try:
        harness.wait_ready(server)
        records = json.loads(harness.request(server.url + "/v1/models")[1])["models"]
        models = [m["id"] for m in records]
        contexts = {m["id"]: m.get("max_position_embeddings") or 2048 for m in records}
        gpus = [g["id"] for g in json.loads(harness.request(server.url + "/v1/gpus")[1])["gpus"]]
        mix = scenarios(models, gpus, defaults.max_body_bytes, contexts)
        print(f"soak: {args.duration:.0f} s against {server.url} (pid {server.pid})", flush=True)
        data["prefill"] = asyncio.run(
            fill_caches(server.url, mix, args.seed, defaults.response_cache_bytes, 120.0)
        )
        data["cache_bytes"] = defaults.response_cache_bytes
        data["rss_prefilled"] = harness.rss_bytes(server.pid)
        print(f"soak: caches filled with {data['prefill']} distinct estimates", flush=True)
        tally, rss, bursts = asyncio.run(
            mixed_load(server.url, server.pid, args.duration, args.seed, mix)
        )
        data.update(tally=tally, rss=rss_growth(rss, args.duration), bursts=bursts)
        print(
            f"soak: {tally.count} answered, {len(tally.server_errors)} 5xx, "
            f"{len(tally.dropped)} dropped, RSS growth {data['rss']['growth']:+.1%}",
            flush=True,
        )
        data["shutdown"] = asyncio.run(shutdown_under_load(server, defaults.graceful_shutdown_s))
        print(f"soak: shutdown {data['shutdown']}", flush=True)
        log_errors = [
            line for line in server.log_tail(100000).splitlines() if '"level":"error"' in line
        ]
    finally:
        harness.stop(server)
    data["load_after"] = harness.load_average()
    data["passed"] = (
        not tally.server_errors
        and not tally.dropped
        and not tally.unexpected
        and data["rss"]["growth"] < GROWTH_LIMIT
        and data["shutdown"]["ok"]
    )
    section = render(data, mix)
    if log_errors:
        section += (
            "\nError lines in the service log (first 5):\n\n"
            + "\n".join(f"- `{line[:300]}`" for line in log_errors[:5])
            + "\n"
        )
    return section, bool(data["passed"])


if __name__ == "__main__":
    sys.exit(main())
