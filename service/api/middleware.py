"""One pure-ASGI middleware for what every request needs: a request id, JSON by default,
metrics by route template, a structured access-log line, HEAD answered as GET without a body,
a problem document when the server cancels a request at shutdown, and the refusal of work the
estimate pool has no slot for.

Pure ASGI (not BaseHTTPMiddleware) because it sits on the hot path of every scheduler call.

**Shedding before routing.** A request for a route that runs on the estimate pool
(``POOLED_PATHS``) while the pool has no slot for it is answered 503 with Retry-After here,
before its body is read and before routing: the same problem document the route would give,
at a fraction of the cost. A connection that comes back before the Retry-After it was given
(``_Refusals``) is held until that time has passed, then admitted if a slot is free, else
refused: a client that ignores Retry-After cannot turn the worker into a 503 generator. Under
the heavy mix of issue 28 (64 clients retrying at once) the worker shed over 2,600 requests a
second through the whole stack and the estimates got what CPU was left: 4 answers a second.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from collections.abc import Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.access_log import AccessLog
from service.api.concurrency import RETRY_AFTER_S
from service.api.problems import KINDS, PROBLEM_MEDIA_TYPE, problem_body
from service.application.metrics import Metrics

error_logger = logging.getLogger("service.errors")
# A generator of the process's own, seeded from os.urandom when created.
_random_bits = random.Random().getrandbits

_REQUEST_ID_HEADER = b"x-request-id"
# An echoed id must be safe to log and to put back in a header.
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_JSON_TYPES = (b"application/json", b"application/problem+json")
UNMATCHED_ROUTE = "unmatched"
# Routes that take a batch slot of the pool: several estimates per request.
BATCH_PATHS = frozenset({"/v1/estimate/batch", "/v1/estimate/colocated"})
# Routes whose work runs on the estimate pool (service/api/concurrency.py), refused here when
# it is full. /v1/admission is not among them: the webhook answers a saturated replica with a
# review.
POOLED_PATHS = frozenset(
    {
        "/v1/estimate/inference",
        "/v1/estimate/finetune",
        *BATCH_PATHS,
        "/v1/preflight",
        "/v1/extender/filter",
        "/v1/extender/prioritize",
    }
)


def _is_json(content_type: bytes) -> bool:
    value = content_type.split(b";", 1)[0].strip().lower()
    return value in _JSON_TYPES or value.endswith(b"+json")


class _Refusals:
    """When each recent connection (the client's address and port) was last refused, so that
    one that comes back early is held until its Retry-After has passed. Bounded: the oldest
    entries go first."""

    def __init__(self, retry_after_s: float, max_entries: int = 4096) -> None:
        self.retry_after_s = retry_after_s
        self.max_entries = max_entries
        self.last: dict[Any, float] = {}

    def hold_s(self, client: Any, now: float) -> float:
        """Seconds this connection must still wait before its retry is looked at."""
        last = self.last.get(client)
        return 0.0 if last is None else max(0.0, last + self.retry_after_s - now)

    def note(self, client: Any, now: float) -> None:
        self.last.pop(client, None)
        self.last[client] = now  # most recent last
        if len(self.last) > self.max_entries:
            del self.last[next(iter(self.last))]


class RequestContextMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics,
        max_body_bytes: int,
        access_log: AccessLog | None = None,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body_bytes = max_body_bytes
        self.access_log = access_log
        self.routes = tuple(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        request_id = ""
        declared_length = 0
        headers: list[tuple[bytes, bytes]] = []
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared_length = int(value) if value.isdigit() else 0
            if name == _REQUEST_ID_HEADER:
                text = value.decode("latin-1")
                if _VALID_REQUEST_ID.match(text):
                    request_id = text
            elif name == b"content-type" and not _is_json(value):
                # The contract reads every body as JSON: `curl -d` sends a form content type.
                continue
            headers.append((name, value))
        if scope["method"] in ("POST", "PUT", "PATCH"):
            headers = [h for h in headers if h[0] != b"content-type"]
            headers.append((b"content-type", b"application/json"))
        request_id = request_id or _new_request_id()
        scope["headers"] = headers
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500
        started = False
        head = scope["method"] == "HEAD"
        # HEAD is routed as GET (RFC 9110 §9.3.2: the same answer without content). A copy, so
        # the server still sees HEAD and sends no body; the body is dropped here as well.
        inner = {**scope, "method": "GET"} if head else scope

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode("latin-1")),
                ]
            elif head and message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b""}
            await send(message)

        limit = self.max_body_bytes
        received = 0

        async def receive_within_limit() -> Message:
            # A body without (or lying about) Content-Length is counted as it arrives.
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413)
            return message

        # An announced oversized body is refused when the route reads it (not here, before
        # routing), so the 413 is counted under the route asked; a route reading no body
        # ignores it.
        receive_app: Receive = _refuse_body if declared_length > limit else receive_within_limit
        try:
            await self.app(inner, receive_app, send_with_id)
        except asyncio.CancelledError:
            # The server cancels what is still running when the graceful-shutdown period ends.
            if not started:
                await _send_problem(
                    send_with_id,
                    503,
                    "The server is shutting down and this request did not finish within its "
                    "grace period; retry it (another replica will answer).",
                    scope["path"],
                    request_id,
                    kind=KINDS["shutting-down"],
                    extra=[(b"retry-after", b"1"), (b"connection", b"close")],
                )
            raise
        except Exception:
            # Answered here, inside the request-id wrapper, so even a crash carries the id;
            # the trace goes to the log only.
            self.metrics.unhandled.inc()
            error_logger.exception("unhandled error on %s %s", scope["method"], scope["path"])
            if started:
                raise
            await _send_problem(
                send_with_id,
                500,
                "An unexpected error occurred; it has been logged. Quote the request id.",
                scope["path"],
                request_id,
            )
        finally:
            elapsed = time.perf_counter() - start
            template = route_template(inner, self.routes)
            method = scope["method"]
            self.metrics.observe_request(method, template, status, elapsed)
            if self.access_log is not None and self.access_log.enabled():
                client = (scope.get("client") or ("", 0))[0]
                self.access_log.write(
                    request_id, method, scope["path"], template, status, elapsed, client
                )


class SheddingMiddleware:
    """Refuses (503, Retry-After) a pooled request the estimate pool has no slot for, before
    its body is read and before routing (see the module docstring). Inside the request-context
    middleware (request id, metrics, access log) and authentication, outside everything that
    reads the body."""

    def __init__(self, app: ASGIApp, retry_after_s: float = RETRY_AFTER_S) -> None:
        self.app = app
        self.refusals = _Refusals(retry_after_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] not in POOLED_PATHS
            or not await self._refused(scope, send)
        ):
            await self.app(scope, receive, send)

    async def _refused(self, scope: Scope, send: Send) -> bool:
        pool = scope["app"].state.cpu_pool
        kind = "batch" if scope["path"] in BATCH_PATHS else "single"
        if not pool.full(kind):
            return False
        loop = asyncio.get_running_loop()
        client = scope.get("client")
        hold = self.refusals.hold_s(client, loop.time()) if client else 0.0
        if hold > 0:
            await asyncio.sleep(hold)
            if not pool.full(kind):
                return False
        if client:
            self.refusals.note(client, loop.time())
        refusal = pool.refuse(kind)
        # No scope["route"]: the request-context middleware labels it by matching the app's
        # routes (route_template), as it does a 401 or a 408.
        await _send_problem(
            send,
            503,
            str(refusal),
            scope["path"],
            scope.get("state", {}).get("request_id", ""),
            kind=KINDS["overloaded"],
            extra=[(b"retry-after", str(refusal.retry_after_s).encode())],
        )
        return True


def _new_request_id() -> str:
    # 128 random bits as 32 hex digits, like uuid4().hex, from the process's Mersenne Twister
    # (seeded from os.urandom at start): an id must be unique, not secret, and uuid4's
    # getrandom() call per request cost 15 µs under load (bench/profile.txt).
    return f"{_random_bits(128):032x}"


def route_template(scope: Scope, routes: Sequence[BaseRoute] = ()) -> str:
    """The template of the route a request matched, for metrics and the access log.

    Routing sets ``scope["route"]``. A request answered before routing (a 401 from the auth
    middleware, a 408 while its body is read, a 413) never reaches the router, so its route is
    found by matching ``routes`` (the app's, in routing order) against the request, as the
    router would; only a path no route matches is ``unmatched``.
    """
    route = scope.get("route")
    if route is not None:
        return getattr(route, "path", None) or UNMATCHED_ROUTE
    partial = None
    for candidate in routes:
        match, _ = candidate.matches(scope)
        if match is Match.FULL:
            return getattr(candidate, "path", None) or UNMATCHED_ROUTE
        if match is Match.PARTIAL and partial is None:
            partial = getattr(candidate, "path", None)  # the path matches, the method not
    return partial or UNMATCHED_ROUTE


async def _refuse_body() -> Message:
    raise HTTPException(413)


async def _send_problem(
    send: Send,
    status: int,
    detail: str,
    path: str,
    request_id: str,
    kind: tuple[str, str] | None = None,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    body = problem_body(status, detail, instance=path, request_id=request_id, kind=kind)
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                (b"content-length", str(len(payload)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class JsonLogFormatter(logging.Formatter):
    """One JSON object per log line, so log pipelines need no parsing rules."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        http = getattr(record, "http", None)
        if http:
            entry.update(http)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"))


def configure_logging(level: str) -> logging.StreamHandler:  # type: ignore[type-arg]
    """JSON lines on stderr for the service and uvicorn; returns the handler (the access log
    writes its batches to the same stream)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter())
    for name in ("service", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    # uvicorn's own access log is replaced by ours (it lacks the request id and route).
    logging.getLogger("uvicorn.access").disabled = True
    return handler
