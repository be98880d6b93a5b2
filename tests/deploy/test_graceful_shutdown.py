"""SIGTERM while requests are in flight: they complete, then the server exits 0 within the grace.

Starts the image's entrypoint (`python -m service`: uvicorn serving `service.app:create_app`)
as a subprocess on a free loopback port, with the container's settings from the Dockerfile.
Requests are held genuinely in flight with raw sockets: each sends its headers and a
Content-Length but only part of the JSON body, so the server has accepted the request and the
endpoint is waiting for the rest. Then SIGTERM; the test checks the listener closes, idle
keep-alive connections are dropped, each held request still gets a complete response once its
body is finished, and the process exits 0 before LLMMEM_GRACEFUL_SHUTDOWN_S runs out.

Exit status: after a signal-initiated graceful shutdown uvicorn re-raises the signal with its
default disposition, so an ordinary process ends "killed by SIGTERM" (143). In the container
the server is PID 1, and the kernel drops a default-disposition signal that PID 1 sends to
itself, so it exits 0. The test therefore runs the server as PID 1 of a new PID namespace
(`unshare --pid --fork`, as root), like the container; where that is impossible it runs it
directly and accepts the re-raised SIGTERM as the clean outcome.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.deploy.support import DOCKERFILE, REPO, env_pairs, exec_form, parse_dockerfile

pytestmark = pytest.mark.slow

IN_FLIGHT = 4
PREFLIGHT = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "engine": "vllm",
    "gpu": "h100-sxm-80gb",
    "sequence_length": 8192,
}


def _container_command_and_env() -> tuple[list[str], dict[str, str]]:
    """The final stage's ENTRYPOINT and ENV, as the container would run them."""
    instructions = parse_dockerfile(DOCKERFILE.read_text())
    last = max(i.stage for i in instructions)
    env: dict[str, str] = {}
    entrypoint: list[str] = []
    for i in instructions:
        if i.stage == last and i.keyword == "ENV":
            env.update(env_pairs(i.args))
        if i.stage == last and i.keyword == "ENTRYPOINT":
            entrypoint = exec_form(i.args)
    assert entrypoint[1:] == ["-m", "service"], entrypoint
    env.pop("PATH", None)
    return [sys.executable, *entrypoint[1:]], env


def _pid_namespace_prefix() -> list[str]:
    """`unshare --pid --fork --kill-child` if this machine lets us make a PID namespace."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return []
    prefix = [unshare, "--pid", "--fork", "--kill-child"]
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return prefix if probe.returncode == 0 and probe.stdout.strip() == "1" else []


def _server_pid(launcher: subprocess.Popen[bytes], namespaced: bool) -> int:
    """The host pid of the server: the launcher itself, or unshare's forked child (PID 1)."""
    if not namespaced:
        return launcher.pid
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pids = children.read_text().split() if children.exists() else []
        if pids:
            return int(pids[0])
        time.sleep(0.02)
    pytest.fail("unshare did not start the server", pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()}", pytrace=False)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                conn.close()
                return
            conn.close()
        except OSError:
            pass
        time.sleep(0.1)
    pytest.fail(f"server not ready within {deadline_s} s:\n{log.read_text()}", pytrace=False)


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one HTTP/1.1 response until the server closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, sep, body = data.partition(b"\r\n\r\n")
    assert sep, f"incomplete response: {data[:200]!r}"
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def _connection_refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return True
    return False


def test_sigterm_drains_in_flight_requests_and_exits_cleanly() -> None:
    if not (REPO / "service" / "app.py").is_file():
        pytest.fail("service/app.py (create_app) is missing", pytrace=False)
    command, container_env = _container_command_and_env()
    grace_s = int(container_env["LLMMEM_GRACEFUL_SHUTDOWN_S"])
    port = _free_port()
    env = {
        **os.environ,
        **container_env,
        "LLMMEM_HOST": "127.0.0.1",
        "LLMMEM_PORT": str(port),
        "LLMMEM_ACCESS_LOG": "false",
        "PYTHONPATH": str(REPO),
    }
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        prefix = _pid_namespace_prefix()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*prefix, *command], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            server_pid = _server_pid(proc, namespaced=bool(prefix))
            _wait_ready(port, proc, log, deadline_s=20)

            body = json.dumps(PREFLIGHT).encode()
            split = len(body) // 2
            held = []
            for _ in range(IN_FLIGHT):
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                sock.sendall(
                    b"POST /v1/estimate/inference HTTP/1.1\r\nHost: estimator\r\n"
                    b"Content-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body[:split]
                )
                held.append(sock)
            # An idle keep-alive connection that has finished its request.
            idle = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            idle.request("GET", "/healthz")
            assert idle.getresponse().read()
            time.sleep(0.5)  # let the server parse the headers and start the endpoints
            assert proc.poll() is None

            sent_at = time.monotonic()
            os.kill(server_pid, signal.SIGTERM)

            # The listener closes at once: new connections are refused while draining.
            deadline = time.monotonic() + 5
            while not _connection_refused(port):
                assert time.monotonic() < deadline, "still accepting connections after SIGTERM"
                time.sleep(0.05)
            assert proc.poll() is None, "exited before the in-flight requests finished"
            idle_sock = idle.sock
            assert idle_sock is not None
            idle_sock.settimeout(5)
            assert idle_sock.recv(1) == b"", "idle keep-alive connection not closed on SIGTERM"

            for sock in held:
                sock.sendall(body[split:])
            for sock in held:
                status, headers, payload = _read_response(sock)
                sock.close()
                assert 200 <= status < 500, (status, payload[:500])
                assert len(payload) == int(headers["content-length"]), "truncated body"
                assert headers.get("connection") == "close"
                json.loads(payload)

            returncode = proc.wait(timeout=grace_s + 5)
            elapsed = time.monotonic() - sent_at
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        output = log.read_text()
    clean = {0} if prefix else {0, -signal.SIGTERM}
    assert returncode in clean, f"exit status {returncode}:\n{output}"
    assert elapsed < grace_s, f"took {elapsed:.1f} s of a {grace_s} s grace period"
    assert "timeout graceful shutdown exceeded" not in output, output
