"""Cooperative cancellation of work running on a thread: a token set from elsewhere (a deadline
that passed, a client that left), checked by the work between two units of it.

A thread cannot be stopped from outside, so long work stops itself: the estimator's searches
(service/estimator/search.py, every evaluation) and the scheduling services' loops (every
container, every node) call :func:`checkpoint`, which raises :class:`Cancelled` once the token
of the work running on this thread is set or its deadline has passed. The HTTP layer's pool
(service/api/concurrency.py) gives each piece of work its token. Work run without a token
(tests, the bench, the command line) never stops. Plain Python, so every layer may use it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CancelToken", "Cancelled", "checkpoint", "running"]


class Cancelled(Exception):
    """Raised by :func:`checkpoint` once the work's token is set; ``str()`` is the reason
    (``deadline``, ``disconnected``, ``cancelled``)."""


class CancelToken:
    """Set once (by the loop, or by its own deadline); read by the work between units."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline  # time.monotonic()
        self.reason: str | None = None

    def cancel(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def check(self) -> None:
        if self.reason is None and time.monotonic() >= self.deadline:
            self.reason = "deadline"
        if self.reason is not None:
            raise Cancelled(self.reason)


_local = threading.local()


def checkpoint() -> None:
    """Raise :class:`Cancelled` if the work running on this thread should stop; a no-op for
    work run without a token."""
    token: CancelToken | None = getattr(_local, "token", None)
    if token is not None:
        token.check()


@contextmanager
def running(token: CancelToken) -> Iterator[None]:
    """Run the block as the work of ``token`` on this thread."""
    previous = getattr(_local, "token", None)
    _local.token = token
    try:
        yield
    finally:
        _local.token = previous
