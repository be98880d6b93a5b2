"""A prototype, for measurement only: the service with an in-memory cache of whole estimate
responses, keyed by path and the exact request body bytes.

Why it is sound: estimates are deterministic (API.md: "the same request gives the same bytes")
and the catalogs and estimator version are fixed for the life of a process, so a 200 answer to
a given body can be replayed byte for byte. Schedulers send the same few pre-flight bodies over
and over. `make bench` serves this app next to the real one to show what the cache would buy;
it is not part of the service until the lead adopts it (see bench/results.md).

The cache sits innermost (inside the request-id/metrics/log middleware and the read deadline),
so a hit still gets its own X-Request-ID, metrics and access-log line; only routing, validation,
the estimate, rendering and serialization are skipped. Bodies over 16 KiB are never cached;
at most 4096 entries (about 12 MiB of pre-flight answers).

Run: `uvicorn bench.response_cache_prototype:create_app --factory`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from fastapi import FastAPI
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.app import create_app as create_service_app

CACHED_PATHS = frozenset({"/v1/estimate/inference", "/v1/estimate/finetune"})


class ResponseCacheMiddleware:
    def __init__(self, app: ASGIApp, max_entries: int = 4096, max_body: int = 16384) -> None:
        self.app = app
        self.max_entries = max_entries
        self.max_body = max_body
        self.entries: OrderedDict[tuple[str, bytes], tuple[int, list[Any], bytes]] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] not in CACHED_PATHS
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        first: Message | None = None
        while more:
            message = await receive()
            if message["type"] != "http.request":
                first = message
                break
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = message.get("more_body", False)
            if size > self.max_body:
                break
        body = b"".join(chunks)
        key = (scope["path"], body)
        hit = self.entries.get(key) if not more and first is None else None
        if hit is not None:
            self.entries.move_to_end(key)
            status, headers, payload = hit
            start = {"type": "http.response.start", "status": status, "headers": list(headers)}
            await send(start)
            await send({"type": "http.response.body", "body": payload})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                if first is not None:
                    return first
                return {"type": "http.request", "body": body, "more_body": more}
            return await receive()

        start: Message | None = None
        parts: list[bytes] = []
        complete = False

        async def capture(message: Message) -> None:
            nonlocal start, complete
            if message["type"] == "http.response.start":
                # A copy: outer middleware appends X-Request-ID to this very message.
                start = {**message, "headers": list(message.get("headers", []))}
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                complete = not message.get("more_body", False)
            await send(message)

        await self.app(scope, replay, capture)
        if not more and first is None and complete and start and start["status"] == 200:
            self.entries[key] = (200, start["headers"], b"".join(parts))
            if len(self.entries) > self.max_entries:
                self.entries.popitem(last=False)


def create_app() -> FastAPI:
    app = create_service_app()
    # Innermost: user_middleware[0] is the outermost layer.
    app.user_middleware.append(Middleware(ResponseCacheMiddleware))
    return app
