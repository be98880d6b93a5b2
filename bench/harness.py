"""Shared plumbing of `make bench`, `make soak` and `make fuzz`: start the service the way
production runs it (`python -m service`: uvicorn, one worker, settings from `LLMMEM_*`), wait
until it is ready, read its resident memory, stop it.

Everything here talks to 127.0.0.1 only, and every wait is bounded in time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"

# A Llama-3.1-8B-shaped config.json, written out by hand with the public config's field names:
# the posted config of the load and hostile runs (each varies it to defeat the caches).
LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

# The request the bench and the soak treat as "a scheduler's pre-flight check": a detailed
# inference estimate of a catalog model on a named engine, with a GPU fit (which runs the
# inverse searches for the largest batch and sequence that fit).
PREFLIGHT = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "gpu": "h100-sxm-80gb",
    "engine": "vllm",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_bytes(self) -> int:
        return rss_bytes(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (psutil is not a runtime dependency)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def start(
    command: list[str],
    port: int,
    log_path: Path,
    env: Mapping[str, str] | None = None,
) -> Server:
    log = open(log_path, "wb")  # noqa: SIM115 - owned by the child for its lifetime
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    log.close()
    return Server(process, port, log_path)


def start_service(
    log_path: Path, port: int | None = None, extra_env: Mapping[str, str] | None = None
) -> Server:
    """`python -m service` on a free loopback port with production settings (access log on)."""
    port = port or free_port()
    env = {"LLMMEM_HOST": HOST, "LLMMEM_PORT": str(port), **(extra_env or {})}
    return start([sys.executable, "-m", "service"], port, log_path, env)


def wait_ready(
    server: Server, path: str = "/readyz", body: bytes | None = None, timeout_s: float = 90.0
) -> None:
    """Poll until `path` answers 200 (POST when `body` is given); fail if the process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"server exited with {server.process.returncode}:\n{server.log_tail()}"
            )
        try:
            status, _ = request(server.url + path, body=body, timeout=2)
            if status == 200:
                return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    raise RuntimeError(
        f"{server.url}{path} not ready after {timeout_s:.0f} s:\n{server.log_tail()}"
    )


def request(
    url: str,
    body: bytes | None = None,
    timeout: float = 30.0,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes]:
    """One HTTP request with the standard library; returns (status, body) for any status."""
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def post_json(url: str, payload: object, timeout: float = 60.0) -> tuple[int, object]:
    status, raw = request(url, json.dumps(payload).encode(), timeout=timeout)
    return status, json.loads(raw) if raw else None


def stop(server: Server, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
    """Signal the server and wait for it; kill it (by its own pid) if it outlives the timeout."""
    if server.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            server.process.send_signal(sig)
        try:
            server.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=10)
    return server.process.returncode


@contextlib.contextmanager
def running(server: Server, **ready: object) -> Iterator[Server]:
    try:
        wait_ready(server, **ready)  # type: ignore[arg-type]
        yield server
    finally:
        stop(server)


# How much the bench raises its own priority (its servers and wrk inherit it): on a shared
# machine other work then preempts the measured processes less. At 64 connections of distinct
# bodies beside other work, a run at normal priority measured a p99 of 440 ms of which the
# server itself saw at most 66 ms (from reading the request to sending the answer); at
# nice -15 the same run measured 54 ms.
PRIORITY_BOOST = 15


def raise_priority() -> str:
    """Raise this process's priority where permitted (root or CAP_SYS_NICE); says which."""
    try:
        os.nice(-PRIORITY_BOOST)
    except OSError:
        return "normal priority (raising it is not permitted here)"
    return f"raised priority (nice -{PRIORITY_BOOST}, servers and wrk alike)"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min, {os.cpu_count()} CPUs)"


HISTORY_HEADING = "\n## History"


def append_result(path: Path, section: str) -> None:
    """Add a run's section to a results file, above its hand-kept History section if any."""
    existing = path.read_text() if path.exists() else "# Benchmark and soak results\n"
    head, marker, history = existing.partition(HISTORY_HEADING)
    text = head.rstrip("\n") + "\n" + section.rstrip("\n") + "\n"
    if marker:
        text += "\n" + marker.lstrip("\n") + history
    path.write_text(text)
