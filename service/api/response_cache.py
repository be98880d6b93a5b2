"""A cache of whole estimate answers, keyed by the exact request bytes.

Why it is sound: an estimate is a pure function of the request body, the catalogs and the
estimator version (API.md: the same request gives the same bytes), and all three are fixed for
the life of a catalog load. Schedulers send the same few pre-flight bodies over and over, so a
200 answer is replayed byte for byte instead of being parsed, estimated and serialized again.

It sits inside the request-id/metrics/log middleware and the body-read deadline, so a hit still
gets its own X-Request-ID, access-log line, HTTP metrics and 408/413 handling; routing,
validation, the estimate and serialization are what a hit skips. The domain metrics a route
records (`llmmem_estimates_total`, fit outcomes) are replayed for hits from what the miss
recorded, and `llmmem_estimate_cache_total{result}` counts hits and misses.

Bounded by bytes (a quarter of `LLMMEM_CACHE_BYTES`, least recently used out first); bodies larger
than `LLMMEM_RESPONSE_CACHE_MAX_REQUEST_BYTES` and non-200 answers are never stored. Keys
include the catalog generation, so a catalog reload can never replay an old answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cachetools
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.application.metrics import Metrics

CACHED_PATHS = frozenset({"/v1/estimate/inference", "/v1/estimate/finetune"})
# Where a route leaves the domain-metric labels of the answer it computed (scope["state"]).
OBSERVATION_KEY = "estimate_observation"
# Bookkeeping bytes charged per entry on top of its key and payload (dict slot, tuples, headers).
_ENTRY_OVERHEAD = 512


@dataclass(frozen=True, slots=True)
class _Entry:
    headers: tuple[tuple[bytes, bytes], ...]
    payload: bytes
    route: Any  # the matched route, so HTTP metrics of a hit carry the route template
    observation: tuple[Any, ...] | None
    size: int


class ResponseCacheMiddleware:
    def __init__(
        self, app: ASGIApp, metrics: Metrics, max_bytes: int, max_request_bytes: int
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_bytes = max_bytes
        self.max_request_bytes = max_request_bytes
        # Least recently used out, bounded in bytes: cachetools' LRU charging each entry its size.
        self.entries: cachetools.LRUCache[tuple[Any, ...], _Entry] = cachetools.LRUCache(
            maxsize=max(max_bytes, 1), getsizeof=lambda e: e.size
        )

    @property
    def size(self) -> int:
        return int(self.entries.currsize)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.max_bytes <= 0
            or scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] not in CACHED_PATHS
        ):
            await self.app(scope, receive, send)
            return
        try:
            body, more, first = await _read_body(receive, self.max_request_bytes)
        except HTTPException as exc:
            # A 408 (read deadline) or 413 (body limit) from the outer middleware: handed to
            # the app, whose exception handler renders it as for any other request.
            self.metrics.cache_result("miss")
            await self.app(scope, _raising(exc), send)
            return
        key: tuple[Any, ...] | None = None
        if not more and first is None and len(body) <= self.max_request_bytes:
            generation = getattr(scope["app"].state, "catalog_generation", 0)
            key = (generation, scope["path"], scope.get("query_string", b""), body)
            entry = self.entries.get(key)  # a hit becomes the most recently used
            if entry is not None:
                await self._replay(scope, send, entry)
                return
        self.metrics.cache_result("miss")
        await self._compute_and_store(scope, receive, send, key, body, more, first)

    async def _replay(self, scope: Scope, send: Send, entry: _Entry) -> None:
        self.metrics.cache_result("hit")
        scope["route"] = entry.route
        if entry.observation is not None:
            self.metrics.observe_estimate(*entry.observation)
        await send({"type": "http.response.start", "status": 200, "headers": list(entry.headers)})
        await send({"type": "http.response.body", "body": entry.payload})

    async def _compute_and_store(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: tuple[Any, ...] | None,
        body: bytes,
        more: bool,
        first: Message | None,
    ) -> None:
        replayed = False

        async def replay_body() -> Message:
            # The app reads the body this middleware already took, then the rest (if any).
            nonlocal replayed
            if not replayed:
                replayed = True
                if first is not None:
                    return first
                return {"type": "http.request", "body": body, "more_body": more}
            return await receive()

        status = 0
        headers: tuple[tuple[bytes, bytes], ...] = ()
        parts: list[bytes] = []
        finished = False

        async def capture(message: Message) -> None:
            nonlocal status, headers, finished
            if message["type"] == "http.response.start":
                status = message["status"]
                # Copied now: the outer middleware appends this request's X-Request-ID to it.
                headers = tuple(message.get("headers", ()))
            elif message["type"] == "http.response.body" and status == 200:
                parts.append(message.get("body", b""))
                finished = not message.get("more_body", False)
            await send(message)

        await self.app(scope, replay_body, capture)
        if key is None or status != 200 or not finished:
            return
        # A fresh, exactly sized copy: the body handed to `send` may sit in a larger buffer
        # (orjson's output keeps a ~16 KiB allocation behind a 3 KB answer), and a cached
        # entry must cost what the byte budget counts.
        payload = memoryview(b"".join(parts)).tobytes()
        size = len(body) + len(payload) + _ENTRY_OVERHEAD
        if size > self.max_bytes:
            return
        observation = scope.get("state", {}).get(OBSERVATION_KEY)
        self.entries[key] = _Entry(headers, payload, scope.get("route"), observation, size)
        self.metrics.response_cache_bytes.set(self.size)


def _raising(exc: HTTPException) -> Receive:
    async def receive() -> Message:
        raise exc

    return receive


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool, Message | None]:
    """The body up to just past `limit` bytes: (bytes read, whether more is still to come,
    a non-body message received instead, e.g. a disconnect)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False, message
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(message.get("more_body", False))
        if not more or size > limit:
            return b"".join(chunks), more, None
