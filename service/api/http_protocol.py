"""The HTTP/1.1 protocol the server runs: uvicorn's httptools protocol with the limits it lacks.

uvicorn's httptools protocol reads a request head with no bound in size or time: httptools
grows a header value by concatenating every chunk that arrives (quadratic in the chunks), so
one 64 MB header held the event loop for 4.7 s and 20 unfinished 20 MB headers took 450 MiB
(issue 18 §6); and nothing limits how long a head may take, or how long a fresh connection may
stay silent. This subclass adds, per connection:

* a head size limit (`LLMMEM_HEADER_MAX_BYTES`): the request line and header fields of one
  request. Bytes are counted as they arrive, so a head is refused once it passes the limit
  (plus at most the one chunk in hand), with 431 (414 when the request target alone is over
  it), and the connection is closed;
* a head deadline (`LLMMEM_HEADER_READ_TIMEOUT_S`): counted from the connection's opening, or
  from the first byte of a later request on a kept-alive connection, to the end of the head.
  Past it a partial head gets 408; a connection that has sent nothing is closed without an
  answer (there is no request to answer). uvicorn's own keep-alive timeout still bounds the
  idle time between requests;
* problem documents (`application/problem+json`, with an `X-Request-ID`) for everything this
  layer answers itself: malformed HTTP (400), the 408, 414 and 431 above. uvicorn answers
  those in plain text.

And, on TLS connections, the verified client certificate's subject in the ASGI `tls` scope
extension (`scope["extensions"]["tls"]["client_cert_name"]`), for `service/api/auth.py`.

What this layer still cannot answer with a problem: a TLS handshake that fails (no HTTP was
spoken), a connection that closes or times out before sending a byte, and a request whose body
turns out malformed after its response has started (the connection is closed instead).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from service.api.problems import KINDS, PROBLEM_MEDIA_TYPE, problem_bytes

# Called with the status of each answer this layer gives itself (metrics).
RefusalHook = Callable[[int], None]
# Called on each new connection (the TLS certificate reload check).
ConnectionHook = Callable[[], None]


@dataclass(frozen=True)
class HeadLimits:
    max_bytes: int
    timeout_s: float


class _Refusal(Exception):
    def __init__(self, status: int, detail: str, kind: tuple[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.kind = status, detail, kind


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded head; see the module docstring."""

    limits = HeadLimits(max_bytes=16_384, timeout_s=10.0)
    on_refusal: RefusalHook | None = None
    on_connection: ConnectionHook | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading_head = True  # the next bytes belong to a request head
        self.head_bytes = 0
        self.head_started: float | None = None  # loop time of the head's first byte
        self.head_timer: asyncio.TimerHandle | None = None
        self.refusal: _Refusal | None = None
        self.tls_extension: dict[str, Any] | None = None

    # -- connection --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.on_connection is not None:
            self.on_connection()
        peer = transport.get_extra_info("peercert")
        if transport.get_extra_info("sslcontext") is not None:
            # With CERT_OPTIONAL/REQUIRED, `peercert` is only non-empty for a certificate the
            # handshake verified against the client CA bundle.
            self.tls_extension = {
                "client_cert_name": _subject(peer) if peer else None,
                "client_cert_chain": [],
                "client_cert_error": None,
            }
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.reading_head:
            if self.head_started is None:
                self.head_started = self.loop.time()
            self.head_bytes += len(data)
        super().data_received(data)
        if not self.reading_head or self.transport.is_closing():
            return
        if self.head_bytes > self.limits.max_bytes:
            self._refuse(self._too_large(len(getattr(self, "url", b""))))
        elif self.head_timer is None and self.head_started is not None:
            # A head that did not come whole in one read (most do, and need no timer).
            self._arm_head_timer(self.head_started + self.limits.timeout_s)

    # -- parser callbacks --------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.tls_extension is not None:
            self.scope["extensions"] = {"tls": self.tls_extension}  # type: ignore[dict-item]

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self.reading_head = False
        self.head_started = None
        if self.head_bytes > self.limits.max_bytes:
            # The count includes whatever body bytes came in the same chunks: measure the head.
            url = len(self.url)
            size = url + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > self.limits.max_bytes:
                # Raised through the parser: uvicorn then calls send_400_response, which
                # answers with this refusal instead.
                self.refusal = self._too_large(url)
                raise self.refusal
        self.head_bytes = 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.reading_head = True

    # -- answers of this layer ---------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this when the parser fails; a refusal raised in a callback got here too.
        refusal, self.refusal = self.refusal, None
        if refusal is None:
            refusal = _Refusal(
                400,
                "The request is not valid HTTP/1.1 (request line, header fields or body "
                "framing); send a well-formed request.",
            )
        self._refuse(refusal)

    def _refuse(self, refusal: _Refusal) -> None:
        self._cancel_head_timer()
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self.transport.close()  # an answer is already on the wire: nothing can follow it
            return
        request_id = uuid.uuid4().hex
        body = problem_bytes(
            refusal.status, refusal.detail, request_id=request_id, kind=refusal.kind
        )
        head = [STATUS_LINE[refusal.status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: ",
            PROBLEM_MEDIA_TYPE.encode(),
            b"\r\ncontent-length: ",
            str(len(body)).encode(),
            b"\r\nx-request-id: ",
            request_id.encode(),
            b"\r\nconnection: close\r\n\r\n",
            body,
        ]
        self.transport.write(b"".join(head))
        self.transport.close()
        if self.on_refusal is not None:
            self.on_refusal(refusal.status)

    def _too_large(self, url_bytes: int) -> _Refusal:
        limit = self.limits.max_bytes
        if url_bytes > limit:
            return _Refusal(
                414, f"The request target exceeds the limit of {limit} bytes; send a shorter URL."
            )
        return _Refusal(
            431,
            f"The request line and header fields exceed the limit of {limit} bytes; send "
            "fewer or shorter header fields.",
        )

    # -- head deadline -----------------------------------------------------------------------

    def _arm_head_timer(self, at: float | None = None) -> None:
        when = self.loop.time() + self.limits.timeout_s if at is None else at
        self.head_timer = self.loop.call_at(when, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if self.transport.is_closing() or not self.reading_head:
            return
        if self.head_bytes == 0:
            self.transport.close()  # nothing sent: no request to answer
            return
        self._refuse(
            _Refusal(
                408,
                f"The request head did not arrive within {self.limits.timeout_s:g} s; send the "
                "request line and header fields promptly (the connection is closed).",
                kind=KINDS["header-timeout"],
            )
        )


def _subject(cert: dict[str, Any]) -> str:
    """`CN=...,O=...` from the `getpeercert()` dict (RFC 4514 order: most specific first)."""
    parts = [f"{key}={value}" for rdn in cert.get("subject", ()) for key, value in rdn]
    return ",".join(reversed(parts))


def protocol_class(
    limits: HeadLimits,
    on_refusal: RefusalHook | None = None,
    on_connection: ConnectionHook | None = None,
) -> type[GuardedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, bound to these limits."""
    attrs = {
        "limits": limits,
        "on_refusal": staticmethod(on_refusal) if on_refusal else None,
        "on_connection": staticmethod(on_connection) if on_connection else None,
    }
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), attrs)
