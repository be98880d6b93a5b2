"""A deadline on reading the request body, so a slow client cannot hold a request open.

uvicorn bounds idle keep-alive connections (`timeout_keep_alive`) but not the time a client
takes to deliver a body it announced: a client that sends its headers and then trickles one
byte a second would keep its request, and whatever the endpoint holds while it waits, alive
indefinitely. This pure-ASGI middleware gives each HTTP request a deadline, counted from the
moment the server hands the request to the app (its headers are complete), by which the whole
body must have arrived (`LLMMEM_REQUEST_READ_TIMEOUT_S`, default 10 s). Past it, the pending
`receive()` raises a 408 `HTTPException` (rendered as a problem document by the app's handler)
and the response carries `Connection: close`, so uvicorn closes the connection after it.

Once the body is complete, `receive()` is passed through untouched (it then only waits for a
disconnect). The event loop is never blocked while a body trickles in, so other requests are
served meanwhile; the deadline bounds how long the trickle holds a connection and its request.
"""

from __future__ import annotations

import asyncio

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_CONNECTION_CLOSE = (b"connection", b"close")


class RequestReadTimeout(HTTPException):
    """The request body did not arrive within the read deadline (HTTP 408)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(
            408,
            f"The request body did not arrive within {timeout_s:g} s; send the whole body "
            "promptly (the connection is closed).",
            headers={"Connection": "close"},
        )


class RequestReadTimeoutMiddleware:
    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        body_done = False
        timed_out = False

        async def receive_with_deadline() -> Message:
            nonlocal body_done, timed_out
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                timed_out = True
                raise RequestReadTimeout(self.timeout_s) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def send_closing_after_timeout(message: Message) -> None:
            if timed_out and message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, _CONNECTION_CLOSE]}
            await send(message)

        await self.app(scope, receive_with_deadline, send_closing_after_timeout)
