"""Cheap estimates answered on the event loop, without the thread hop or FastAPI's routing.

Where the time of a distinct estimate body went (issue 28 §4, `make bench`, bench/profile.txt):
the estimate itself is about 200 µs for a catalog model whose engine setup is cached; handing it
to the pool thread and back cost about as much again (the hop, then the two threads passing
the GIL back and forth every switch interval), and FastAPI's routing and dependency solving
about 100 µs. So a request whose kind is known to be cheap runs here, on the loop, parsed,
estimated and serialized in one step, and anything else goes the usual way (the route, the
pool). The policy that decides is :class:`InlinePolicy`, measured rather than predicted:

* **a kind of request** (:func:`cost_class`: the route, the named model, engine, GPU and
  estimator) runs on the loop only once its last measured cost, in CPU time of the thread that
  ran it (waiting for the GIL or for a core is not its cost), is at most ``max_inline_s``
  (1 ms). A kind not yet measured runs on the pool and is measured there; a kind whose inline
  run took longer goes back to the pool. A posted ``hf_config`` never runs here: every new
  config is a new architecture whose engine setups are built from nothing (milliseconds).
* **the loop's turn**: between two polls of the loop's sockets, inline estimates may take
  at most ``max_turn_s`` (10 ms) together; past it, a request waits for a later turn (the
  loop polls its sockets first, and the waiting requests go first, in order). A probe or any
  other request waits for the loop's current turn to end, so this bounds that wait whatever
  the load (64 connections of 1 ms estimates would otherwise make a 64 ms turn). Waiting,
  rather than going to the pool, keeps the loop and the pool thread from taking the GIL from
  each other every switch interval: with 32 connections of 0.3 ms estimates, the requests that
  went to the pool past the turn's budget made the slowest percent wait 100 ms. At most
  ``max_waiting`` requests wait at once; past that, the pool (which refuses when full).

A request the loop would answer with an error (a body that does not validate, an estimate that
raises) is handed to the route with its body, which answers it as always: errors have one
rendering, in the route's exception handlers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Any

import cachetools
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.bodies import parse_body
from service.api.response_cache import OBSERVATION_KEY
from service.application.estimate_service import app_catalogs, run_estimate
from service.schemas.estimates import FinetuneRequestBody, InferenceRequestBody

__all__ = ["EstimateFastPath", "InlinePolicy", "cost_class", "estimate_bytes"]

EstimateBody = InferenceRequestBody | FinetuneRequestBody
BODIES: dict[str, type[EstimateBody]] = {
    "/v1/estimate/inference": InferenceRequestBody,
    "/v1/estimate/finetune": FinetuneRequestBody,
}
# Larger bodies are posted configs or worse: never answered on the loop.
MAX_INLINE_BODY = 16_384
_HEADERS = [(b"content-type", b"application/json")]


def cost_class(path: str, body: EstimateBody) -> Hashable | None:
    """What the cost of an estimate depends on, beyond numbers the engine setup is cached
    across (sequence length, batch size, ...); None for a posted config (never inline)."""
    if body.hf_config is not None:
        return None
    engine = getattr(body, "engine", None) or getattr(body, "method", None)
    return (path, body.model, body.parameter_count is not None, engine, body.gpu, body.estimator)


def estimate_bytes(
    raw: bytes | EstimateBody, body_type: type[EstimateBody], state: Any
) -> tuple[bytes, Any]:
    """Parse (unless parsed), answer and serialize one estimate: the response bytes and the
    domain-metric observation."""
    body = raw if isinstance(raw, InferenceRequestBody | FinetuneRequestBody) else None
    if body is None:
        assert isinstance(raw, bytes)
        body = parse_body(raw, body_type)
    rendered, observation = run_estimate(body, app_catalogs(state), state.metrics)
    return rendered.model_dump_json().encode(), observation


class InlinePolicy:
    """Which estimates run on the event loop (see the module docstring)."""

    def __init__(
        self,
        max_inline_s: float = 0.001,
        max_turn_s: float = 0.01,
        max_waiting: int = 64,
        classes: int = 4096,
    ) -> None:
        self.max_inline_s = max_inline_s
        self.max_turn_s = max_turn_s
        self.max_waiting = max_waiting
        self.waiting = 0  # requests waiting for a turn
        self.costs: cachetools.LRUCache[Hashable, float] = cachetools.LRUCache(classes)
        self.turn_s = 0.0  # inline time in the loop's current turn
        self.turn_open = False

    def cheap(self, key: Hashable | None) -> bool:
        """Whether estimates of this kind run on the loop (their last cost was low)."""
        cost = self.costs.get(key) if key is not None else None
        return cost is not None and cost <= self.max_inline_s

    def has_turn(self) -> bool:
        """Whether the loop's current turn has room for another inline estimate."""
        return self.turn_s < self.max_turn_s

    def inline(self, key: Hashable | None) -> bool:
        """Whether an estimate of this kind runs on the loop now."""
        return self.cheap(key) and self.has_turn()

    def spent(self, seconds: float, loop: asyncio.AbstractEventLoop) -> None:
        """Loop time an inline estimate took, counted until the loop polls its sockets again
        (a callback scheduled now runs after that poll)."""
        self.turn_s += seconds
        if not self.turn_open:
            self.turn_open = True
            loop.call_soon(self._new_turn)

    def _new_turn(self) -> None:
        self.turn_s, self.turn_open = 0.0, False

    def observe(self, key: Hashable | None, seconds: float) -> None:
        """The measured cost (thread CPU seconds) of one estimate of this kind, on the loop
        or the pool."""
        if key is not None:
            self.costs[key] = seconds


class EstimateFastPath:
    """Pure ASGI, inside the response cache: answers POST /v1/estimate/{inference,finetune}
    on the loop when the :class:`InlinePolicy` of the app state says so."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # path -> its APIRoute (the metrics' label), as the router matched it for a request
        # that went the usual way (a kind is measured there before it ever runs here).
        self.routes: dict[str, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] != "POST" or path not in BODIES:
            await self.app(scope, receive, send)
            return
        try:
            first = await receive()
        except HTTPException as exc:  # 408 or 413 from the outer middleware: the route's
            await self.app(scope, _raising(exc), send)  # handlers answer it
            return
        raw = first.get("body", b"") if first["type"] == "http.request" else b""
        state = scope["app"].state
        policy: InlinePolicy = state.inline_policy
        body = None
        whole = first["type"] == "http.request" and not first.get("more_body", False)
        if whole and len(raw) <= MAX_INLINE_BODY:
            try:
                body = parse_body(raw, BODIES[path])
            except Exception:  # the route answers it, with its 422
                body = None
        key = cost_class(path, body) if body is not None else None
        if (
            body is not None
            and policy.cheap(key)
            and not policy.has_turn()
            and policy.waiting < policy.max_waiting
        ):
            policy.waiting += 1
            try:
                while not policy.has_turn():
                    await asyncio.sleep(0)  # a later turn, after the loop polled its sockets
            finally:
                policy.waiting -= 1
        if body is None or not policy.inline(key) or path not in self.routes:
            await self.app(scope, _replaying(first, receive), send)
            if scope.get("route") is not None:
                self.routes[path] = scope["route"]
            return
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            content, observation = estimate_bytes(body, BODIES[path], state)
        except Exception:
            content = None  # the route computes it again and answers with its problem
        policy.spent(time.perf_counter() - started, asyncio.get_running_loop())
        policy.observe(key, time.thread_time() - cpu)
        if content is None:
            await self.app(scope, _replaying(first, receive), send)
            return
        scope["route"] = self.routes[path]
        scope.setdefault("state", {})[OBSERVATION_KEY] = observation
        headers = [(b"content-length", str(len(content)).encode()), *_HEADERS]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": content})


def _replaying(first: Message, receive: Receive) -> Receive:
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return first
        return await receive()

    return replay


def _raising(exc: HTTPException) -> Receive:
    async def receive() -> Message:
        raise exc

    return receive
