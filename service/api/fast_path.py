"""Cheap estimates answered on the event loop, without the thread hop or FastAPI's routing.

Where the time of a distinct estimate body went (issue 28 §4, `make bench`, bench/profile.txt):
the estimate itself is about 200 µs for a catalog model whose engine setup is cached; handing it
to the pool thread and back cost about as much again (the hop, then the two threads passing
the GIL back and forth every switch interval), and FastAPI's routing and dependency solving
about 100 µs. So a request whose kind is known to be cheap runs here, on the loop, parsed,
estimated and serialized in one step, and anything else goes the usual way (the route, the
pool). The policy that decides is :class:`InlinePolicy`, measured rather than predicted:

* **a kind of request** (:func:`cost_class`: the route, the named model, engine, GPU and
  estimator) runs on the loop only once its measured cost, in CPU time of the thread that
  ran it (waiting for the GIL or for a core is not its cost), is at most ``max_inline_s``
  (1 ms). The cost of a kind is the median of its last ``SAMPLES`` (3) measurements, so that
  one outlier (a young collection of the garbage collector, 3 ms every few thousand requests;
  a cache filling) does not send the kind to the pool: when the last one decided, 2 % of
  distinct pre-flight bodies at 32 connections went to the pool after such an outlier and
  waited there behind the loop's inline work, 30-60 ms, which was the whole of the p99
  (`make bench`). A kind not yet measured runs on the pool and is measured there; a kind
  whose runs keep taking longer goes back to the pool after two of them. A posted
  ``hf_config`` never runs here: every new config is a new architecture whose engine setups
  are built from nothing (milliseconds).
* **the loop's turn**: between two polls of the loop's sockets, inline estimates may take
  at most ``max_turn_s`` (2 ms) together; past it, a request waits for a later turn. A probe
  or any other request waits for the loop's current turn to end, so this bounds that wait whatever
  the load (64 connections of 1 ms estimates would otherwise make a 64 ms turn). Waiting,
  rather than going to the pool, keeps the loop and the pool thread from taking the GIL from
  each other every switch interval: with 32 connections of 0.3 ms estimates, the requests that
  went to the pool past the turn's budget made the slowest percent wait 100 ms. The turn is
  short so that the loop reads its sockets often: a request then waits in the queue below,
  in order, instead of unread in the kernel's socket buffer while a long turn runs, where the
  order it is read in is the poll's. At 32 connections of distinct pre-flight bodies (one
  worker, `make bench`) the p99 was 36 ms with 10 ms turns and 18 ms with 2 ms turns, at the
  same throughput (2,240 and 2,300 answers a second).
* **first come, first served**: the waiting requests form one queue. Each new turn wakes
  them from its head, as many as the turn's budget holds by their kinds' costs (at least
  one), and a request that arrives while any wait queues behind them, even when the turn has
  room. When waiters polled for room instead, a new turn went to whoever the loop ran first,
  often the newest, and some waited several turns: at 32 connections of distinct bodies the
  p99 was twice the median (33 ms against 15 ms, `make bench`). At most ``max_waiting``
  requests wait at once; past that, the pool (which refuses when full).

A request the loop would answer with an error (a body that does not validate, an estimate that
raises) is handed to the route with its body, which answers it as always: errors have one
rendering, in the route's exception handlers.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Hashable
from typing import Any

import cachetools
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.bodies import parse_body
from service.api.response_cache import OBSERVATION_KEY
from service.application.estimate_service import app_catalogs, run_estimate
from service.application.render import response_json
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
# Measurements of a kind whose median is its cost.
SAMPLES = 3


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
    return response_json(rendered), observation


class InlinePolicy:
    """Which estimates run on the event loop (see the module docstring)."""

    def __init__(
        self,
        max_inline_s: float = 0.001,
        max_turn_s: float = 0.002,
        max_waiting: int = 256,
        classes: int = 4096,
    ) -> None:
        self.max_inline_s = max_inline_s
        self.max_turn_s = max_turn_s
        self.max_waiting = max_waiting
        # the requests waiting for a turn, first come first: the future that wakes each (its
        # result: the turn's budget reserved for it) and its kind's cost
        self.queue: deque[tuple[asyncio.Future[float], float]] = deque()
        self.reserved_s = 0.0  # budget of the current turn held for woken, not yet run waiters
        # kind -> its last SAMPLES measurements (thread CPU seconds), oldest first
        self.samples: cachetools.LRUCache[Hashable, tuple[float, ...]] = cachetools.LRUCache(
            classes
        )
        self.turn_s = 0.0  # inline time in the loop's current turn
        self.turn_open = False

    def cost(self, key: Hashable | None) -> float | None:
        """The cost of a kind: the median of its last measurements (of two, the lower), None
        while it has not been measured."""
        samples = self.samples.get(key) if key is not None else None
        if not samples:
            return None
        return sorted(samples)[(len(samples) - 1) // 2]

    def cheap(self, key: Hashable | None) -> bool:
        """Whether estimates of this kind run on the loop (their cost is low)."""
        cost = self.cost(key)
        return cost is not None and cost <= self.max_inline_s

    @property
    def waiting(self) -> int:
        """Requests waiting for a turn."""
        return len(self.queue)

    def has_turn(self) -> bool:
        """Whether the loop's current turn has room for another inline estimate."""
        return self.turn_s + self.reserved_s < self.max_turn_s

    def inline(self, key: Hashable | None) -> bool:
        """Whether an estimate of this kind runs on the loop now: cheap, nobody waiting
        before it, room in the turn."""
        return self.cheap(key) and not self.queue and self.has_turn()

    def may_wait(self, key: Hashable | None) -> bool:
        """Whether an estimate of this kind that cannot run now waits for a turn (rather than
        going to the pool)."""
        return self.cheap(key) and len(self.queue) < self.max_waiting

    async def wait_turn(self, key: Hashable | None) -> float:
        """Wait in the queue until a turn wakes this request; returns the budget reserved for
        it, given back with :meth:`spent`."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[float] = loop.create_future()
        self.queue.append((woken, self.cost(key) or self.max_inline_s))
        self._end_turn_after_poll(loop)
        try:
            return await woken
        except asyncio.CancelledError:  # the request was cancelled while it waited
            if woken.done() and not woken.cancelled():
                self.reserved_s -= woken.result()  # woken, never ran: its budget goes back
                self._end_turn_after_poll(loop)
            raise

    def spent(
        self, seconds: float, loop: asyncio.AbstractEventLoop, reserved_s: float = 0.0
    ) -> None:
        """Loop time an inline estimate took (and the budget reserved for it, when it had
        waited), counted until the loop polls its sockets again."""
        self.reserved_s -= reserved_s
        self.turn_s += seconds
        self._end_turn_after_poll(loop)

    def _end_turn_after_poll(self, loop: asyncio.AbstractEventLoop) -> None:
        # A callback scheduled now runs after the loop's next poll of its sockets.
        if not self.turn_open:
            self.turn_open = True
            loop.call_soon(self._new_turn)

    def _new_turn(self) -> None:
        self.turn_s, self.turn_open = 0.0, False
        while self.queue and (self.reserved_s == 0 or self.has_turn()):
            woken, cost = self.queue.popleft()
            if woken.done():  # cancelled while it waited
                continue
            woken.set_result(cost)
            self.reserved_s += cost

    def observe(self, key: Hashable | None, seconds: float) -> None:
        """The measured cost (thread CPU seconds) of one estimate of this kind, on the loop
        or the pool."""
        if key is not None:
            self.samples[key] = (*self.samples.get(key, ())[1 - SAMPLES :], seconds)


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
        # The turn's budget reserved for this request when it runs here; None: the route.
        reserved_s: float | None = None
        if body is not None and path in self.routes:
            if policy.inline(key):
                reserved_s = 0.0
            elif policy.may_wait(key):
                reserved_s = await policy.wait_turn(key)
        if body is None or reserved_s is None:
            await self.app(scope, _replaying(first, receive), send)
            if scope.get("route") is not None:
                self.routes[path] = scope["route"]
            return
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            content, observation = estimate_bytes(body, BODIES[path], state)
        except Exception:
            content = None  # the route computes it again and answers with its problem
        policy.spent(time.perf_counter() - started, asyncio.get_running_loop(), reserved_s)
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
