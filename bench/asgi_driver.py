"""Drive the service's ASGI app in-process, without sockets: what one request costs the app
itself (routing, validation, estimate, rendering, middleware), for timing and profiling.

The app is built with `create_app` and its catalogs loaded as the lifespan would load them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from service.app import create_app, load_catalogs
from service.settings import Settings

Call = Callable[[str, str, bytes], Awaitable[tuple[int, bytes]]]


def build_app(access_log: bool = False) -> Any:
    settings = Settings(access_log=access_log)
    app = create_app(settings)
    load_catalogs(app, settings)
    return app


def make_caller(app: Any) -> Call:
    async def call(method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [
                (b"host", b"127.0.0.1"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        delivered = False
        status = 0
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)  # the client never disconnects in this driver
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await app(scope, receive, send)
        return status, b"".join(chunks)

    return call


def run_many(app: Any, method: str, path: str, body: bytes, count: int) -> float:
    """Seconds taken to serve `count` requests one after another (status 200 enforced)."""
    call = make_caller(app)

    async def loop() -> float:
        loop_time = asyncio.get_running_loop().time
        status, payload = await call(method, path, body)
        if status != 200:
            raise RuntimeError(f"{path} answered {status}: {payload[:500]!r}")
        start = loop_time()
        for _ in range(count):
            await call(method, path, body)
        return loop_time() - start

    return asyncio.run(loop())


def run_bodies(app: Any, method: str, path: str, bodies: list[bytes]) -> float:
    """Seconds taken to serve one request per body, one after another (status 200 enforced)."""
    call = make_caller(app)

    async def loop() -> float:
        loop_time = asyncio.get_running_loop().time
        start = loop_time()
        for body in bodies:
            status, payload = await call(method, path, body)
            if status != 200:
                raise RuntimeError(f"{path} answered {status}: {payload[:500]!r}")
        return loop_time() - start

    return asyncio.run(loop())
