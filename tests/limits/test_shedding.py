"""Issue 28 §3: under the heavy mix the worker spent its CPU answering 503s (over 2,600 a
second through the whole stack) and answered 4 requests a second.

Three rules, each checked by what it does, not by how long it takes: a pooled request the pool
has no slot for is refused before routing and before its body is read; batches hold at most one
slot per pool thread; a connection that comes back before its Retry-After is held until then,
and admitted if a slot has freed meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.concurrency import CpuPool, Overloaded
from service.api.middleware import _Refusals
from service.app import create_app
from service.settings import Settings

INFERENCE = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "l4"}


def test_batches_hold_at_most_one_slot_per_thread() -> None:
    pool = CpuPool(threads=1, queue=4, deadline_s=5)
    pool.reserve("batch")
    assert pool.full("batch") and not pool.full("single")
    with pytest.raises(Overloaded, match="1 batch is already running"):
        pool.reserve("batch")
    for _ in range(4):
        pool.reserve("single")
    assert pool.full("single")
    pool.release_reservation("batch")
    assert not pool.full("batch")  # the batch's slot is free again, for anything
    pool.reserve("batch")
    assert pool.full("single")


@pytest.fixture
def app() -> Iterator[Any]:
    settings = Settings(access_log=False, cpu_threads=1, cpu_queue=0)
    application = create_app(settings)
    with TestClient(application):  # the lifespan: catalogs, the pool
        yield application


def _call(
    app: Any, path: str, body: bytes, client: tuple[str, int], meanwhile: Any = None
) -> tuple[int, dict[str, Any], int]:
    """One request through the ASGI app; (status, headers, how often the body was read).
    ``meanwhile(loop)`` runs on the request's loop as it starts."""
    reads = 0
    never = asyncio.Event()
    status = 0
    headers: dict[str, str] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal reads
        if reads:
            await never.wait()  # after the body, the client only waits for its answer
        reads += 1
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.update({k.decode(): v.decode() for k, v in message["headers"]})
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "client": client,
        "server": ("127.0.0.1", 8000),
        "app": app,
        "state": {},
    }

    async def run() -> None:
        if meanwhile is not None:
            meanwhile(asyncio.get_running_loop())
        await app(scope, receive, send)

    asyncio.run(run())
    return status, {**headers, "body": json.loads(b"".join(chunks))}, reads


def test_a_full_pool_refuses_before_routing_without_reading_the_body(app: Any) -> None:
    pool = app.state.cpu_pool
    pool.reserve()  # the only slot, taken
    try:
        body = json.dumps(INFERENCE).encode()
        status, answer, reads = _call(app, "/v1/estimate/inference", body, ("10.0.0.1", 1))
    finally:
        pool.release_reservation()
    assert status == 503
    assert reads == 0
    assert answer["retry-after"] == "1"
    assert answer["body"]["type"] == "/problems/overloaded"
    assert answer["body"]["instance"] == "/v1/estimate/inference"
    metrics = app.state.metrics.registry
    labels = {"method": "POST", "route": "/v1/estimate/inference", "status": "503"}
    assert metrics.get_sample_value("llmmem_http_requests_total", labels) == 1
    assert (
        metrics.get_sample_value("llmmem_estimate_pool_rejected_total", {"reason": "overloaded"})
        == 1
    )


def test_a_colocated_request_takes_a_batch_slot(app: Any) -> None:
    # Up to 16 estimates in one request: refused as a batch is while the batch slot is taken.
    pool = app.state.cpu_pool
    pool.reserve("batch")
    try:
        body = json.dumps({"gpu": "l4", "workloads": [INFERENCE]}).encode()
        status, answer, reads = _call(app, "/v1/estimate/colocated", body, ("10.0.0.9", 1))
    finally:
        pool.release_reservation("batch")
    assert (status, reads) == (503, 0)
    assert "batch is already running" in answer["body"]["detail"]
    labels = {"method": "POST", "route": "/v1/estimate/colocated", "status": "503"}
    assert app.state.metrics.registry.get_sample_value("llmmem_http_requests_total", labels) == 1


def test_a_connection_back_before_its_retry_after_is_held_then_admitted(app: Any) -> None:
    middleware = app.middleware_stack  # built by the lifespan
    while not hasattr(middleware, "refusals"):
        middleware = middleware.app  # down the stack to the shedding middleware
    middleware.refusals.retry_after_s = 0.2  # short, so that the test waits little
    pool = app.state.cpu_pool
    client = ("10.0.0.2", 40000)
    body = json.dumps(INFERENCE).encode()
    pool.reserve()
    status, _, _ = _call(app, "/v1/estimate/inference", body, client)
    assert status == 503
    # Back at once, with the pool still full: held, and the slot frees while it waits (a
    # tenth into its 0.2 s), so it is answered instead of refused again.
    status, _, reads = _call(
        app,
        "/v1/estimate/inference",
        body,
        client,
        meanwhile=lambda loop: loop.call_later(0.02, pool.release_reservation),
    )
    assert status == 200 and reads == 1
    # Another connection that was never refused is not held.
    assert middleware.refusals.hold_s(("10.0.0.3", 1), 0.0) == 0.0


def test_refusals_are_remembered_per_connection_and_bounded() -> None:
    refusals = _Refusals(retry_after_s=1.0, max_entries=3)
    refusals.note(("a", 1), now=10.0)
    assert refusals.hold_s(("a", 1), now=10.25) == pytest.approx(0.75)
    assert refusals.hold_s(("a", 1), now=11.5) == 0.0
    assert refusals.hold_s(("a", 2), now=10.25) == 0.0  # another connection of the same host
    for port in range(2, 6):
        refusals.note(("a", port), now=12.0)
    assert len(refusals.last) == 3
    assert ("a", 1) not in refusals.last  # the oldest went first


def test_authentication_comes_before_shedding(tmp_path: Any) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token-for-the-shedding-test\n")
    settings = Settings(access_log=False, cpu_threads=1, cpu_queue=0, auth_tokens_path=tokens)
    application = create_app(settings)
    with TestClient(application) as client:
        pool = application.state.cpu_pool
        pool.reserve()
        try:
            anonymous = client.post("/v1/estimate/inference", json=INFERENCE)
            known = client.post(
                "/v1/estimate/inference",
                json=INFERENCE,
                headers={"Authorization": "Bearer s3cret-token-for-the-shedding-test"},
            )
        finally:
            pool.release_reservation()
    assert anonymous.status_code == 401
    assert known.status_code == 503
