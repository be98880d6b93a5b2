"""CPU-bound work off the event loop: a small pool per worker, admission control, a deadline,
and cancellation when the client goes away.

Why: an estimate is pure Python. Run on the event loop, 64 clients posting heavy configs kept
`/healthz` waiting over 2 s (issue 18 §4), and kubelet would restart a busy pod. Here the work
runs on `LLMMEM_CPU_THREADS` threads (1 by default). Few on purpose: the GIL lets one thread
run Python at a time, so more threads add no throughput, only contenders for the GIL; a thread
that wants it back waits at most the switch interval for the holder to yield
(`SWITCH_INTERVAL_S`, set by the server) per handoff. With one pool thread the loop competes
with one holder only (`make soak`, heavy phase: /healthz p99 50 ms with one thread, 119 ms
with two, bench/results.md).

* **Admission**: at most `threads + LLMMEM_CPU_QUEUE` pieces of work admitted per worker
  (running or waiting for a thread), of which at most `threads` batches: a batch is tens of
  estimates (a 100-item batch of catalog models takes 100-300 ms), and every single estimate
  queued behind two of them waits for both. Past that, `Overloaded` is raised at once, which
  the problem handlers answer with 503 and `Retry-After`, so a saturated replica sheds load in
  microseconds instead of queueing it into timeouts (service/api/middleware.py refuses before
  routing when the pool is already full). Under issue 28's heavy mix (two distinct 80-layer
  configs for each 100-item batch), batches let into every slot made the thread spend most of
  its time on them: 4 answers a second.
* **Deadline**: `deadline_s` (default `LLMMEM_ESTIMATE_DEADLINE_S`) counts from admission,
  queueing included. Past it the caller gets `DeadlineExceeded` (503), and the work is told to
  stop.
* **Cancellation**: the work gets a `CancelToken` (service/estimator/cancel.py), set when the
  deadline passes or the client disconnects (its `http.disconnect` arrives). Long work calls
  `checkpoint()` between items (the items of a batch, the containers of an admission review,
  the nodes of an extender call, every evaluation of the estimator's searches); it raises
  `Cancelled` once the token is set, so the thread is free again within one item. Work that
  never calls it runs to its end (a thread cannot be stopped from outside); its slot stays
  taken until then, so admission stays honest.

Use from a route::

    from service.api.concurrency import checkpoint, run_cpu_bound

    def estimate_many(items):             # runs on a pool thread
        for item in items:
            checkpoint()                  # raises Cancelled after a disconnect or the deadline
            ...

    async def route(request: Request) -> Response:
        result = await run_cpu_bound(request, estimate_many, items)
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal, TypeVar, TypeVarTuple

from starlette.types import Message, Receive

from service.estimator.cancel import Cancelled, CancelToken, checkpoint, running

if TYPE_CHECKING:
    from fastapi import Request

    from service.application.metrics import Metrics

__all__ = [
    "CancelToken",
    "Cancelled",
    "CpuPool",
    "DeadlineExceeded",
    "Overloaded",
    "checkpoint",
    "run_cpu_bound",
    "run_on_body",
]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# GIL switch interval for a worker running this pool (sys.setswitchinterval; CPython's
# default is 5 ms). The loop thread waits up to this long each time it wants the GIL back from
# a busy pool thread, and a probe passes through the loop a dozen times: at 1 ms the heavy
# soak phase measured /healthz p99 at 107-170 ms, at 0.2 ms 50 ms (bench/results.md).
SWITCH_INTERVAL_S = 0.0002
# What a 503 tells the client to wait before retrying, in seconds.
RETRY_AFTER_S = 1


class Overloaded(Exception):
    """Every slot of the pool is taken: answered 503 with Retry-After."""

    def __init__(self, capacity: int, kind: str = "single") -> None:
        if kind == "single":
            what = f"{capacity} estimates are already running or waiting"
        else:
            what = f"{capacity} batch{'es are' if capacity != 1 else ' is'} already running"
        super().__init__(
            f"{what} on this replica; retry after {RETRY_AFTER_S} s (another replica may "
            "answer sooner)."
        )
        self.retry_after_s = RETRY_AFTER_S


class DeadlineExceeded(Exception):
    """The work did not finish within its deadline: answered 503 with Retry-After."""

    def __init__(self, deadline_s: float) -> None:
        super().__init__(
            f"The estimate did not finish within {deadline_s:g} s (waiting for a thread "
            "included); send fewer items per batch, or retry when the replica is less busy."
        )
        self.retry_after_s = RETRY_AFTER_S


def _call(token: CancelToken, fn: Callable[[*Ts], T], args: tuple[*Ts]) -> T:
    token.check()  # waited past its deadline, or its client left: do not start
    with running(token):
        return fn(*args)


async def _watch_disconnect(receive: Receive, token: CancelToken) -> None:
    # After the body has been read, the server's receive() returns only when the client goes.
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            token.cancel("disconnected")
            return


Kind = Literal["single", "batch"]


class CpuPool:
    """The bounded pool of one worker process."""

    def __init__(
        self, threads: int, queue: int, deadline_s: float, metrics: Metrics | None = None
    ) -> None:
        self.threads = threads
        self.capacity = threads + queue
        self.batch_capacity = threads
        self.deadline_s = deadline_s
        self.metrics = metrics
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="estimate")
        self.admitted = 0  # touched on the event loop only
        self.batches = 0  # of which batches

    def full(self, kind: Kind = "single") -> bool:
        """No slot for work of this kind: it would be refused."""
        if self.admitted >= self.capacity:
            return True
        return kind == "batch" and self.batches >= self.batch_capacity

    def refuse(self, kind: Kind = "single") -> Overloaded:
        """Count a refusal and return its exception (raised by :meth:`reserve`; answered
        directly by the request middleware, before routing, when the pool is already full)."""
        self._count("overloaded")
        return Overloaded(self.capacity if kind == "single" else self.batch_capacity, kind)

    def reserve(self, kind: Kind = "single") -> None:
        """Take a slot now, for work that will be handed to :meth:`run` with
        ``reserved=True`` (a route that reads its body only once admitted); Overloaded if none
        is free. :meth:`release_reservation` gives it back if the work never starts."""
        if self.full(kind):
            raise self.refuse(kind)
        self.admitted += 1
        self.batches += kind == "batch"
        self._gauge()

    def release_reservation(self, kind: Kind = "single") -> None:
        self.admitted -= 1
        self.batches -= kind == "batch"
        self._gauge()

    async def run(
        self,
        fn: Callable[[*Ts], T],
        *args: *Ts,
        deadline_s: float | None = None,
        receive: Receive | None = None,
        grace_s: float = 0.0,
        reserved: bool = False,
        kind: Kind = "single",
    ) -> T:
        """`fn(*args)` on a pool thread; raises Overloaded, DeadlineExceeded or Cancelled.

        `grace_s`: after the deadline, how long to wait for the work to return what it has
        (work that catches `Cancelled` at a checkpoint and returns a partial result, e.g. a
        batch answering its unfinished items with problems); 0 answers at the deadline."""
        if not reserved:
            self.reserve(kind)
        deadline_s = self.deadline_s if deadline_s is None else deadline_s
        token = CancelToken(time.monotonic() + deadline_s)
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, _call, token, fn, args)
        future.add_done_callback(functools.partial(self._release, kind))
        watcher = (
            asyncio.create_task(_watch_disconnect(receive, token)) if receive is not None else None
        )
        try:
            done, _ = await asyncio.wait({future}, timeout=deadline_s)
        except asyncio.CancelledError:  # the request itself was cancelled (server shutdown)
            token.cancel("cancelled")
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
        if not done:
            token.cancel("deadline")
            if grace_s > 0:
                done, _ = await asyncio.wait({future}, timeout=grace_s)
            if not done:
                self._count("deadline")
                raise DeadlineExceeded(deadline_s)
        try:
            return future.result()
        except Cancelled as exc:
            reason = str(exc)
            self._count(reason)
            if reason == "deadline":
                raise DeadlineExceeded(deadline_s) from None
            raise

    def _release(self, kind: Kind, future: asyncio.Future[Any]) -> None:
        self.release_reservation(kind)
        if not future.cancelled():
            future.exception()  # retrieved: an abandoned piece of work logs no warning

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.estimate_admitted.set(self.admitted)
            self.metrics.estimate_queue_depth.set(max(0, self.admitted - self.threads))

    def _count(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.estimate_rejected.labels(reason).inc()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


async def run_on_body(
    request: Request,
    fn: Callable[[bytes, *Ts], T],
    *args: *Ts,
    deadline_s: float | None = None,
    grace_s: float = 0.0,
    kind: Kind = "single",
) -> T:
    """`fn(body, *args)` on the app's pool, admitted BEFORE the body is read: a saturated
    replica answers 503 without receiving a megabyte it would throw away, and the bodies held
    in memory are bounded by the pool's slots. The server discards the unread body."""
    pool: CpuPool = request.app.state.cpu_pool
    pool.reserve(kind)
    try:
        raw = await request.body()
    except BaseException:
        pool.release_reservation(kind)
        raise
    return await pool.run(
        fn,
        raw,
        *args,
        deadline_s=deadline_s,
        receive=request.receive,
        grace_s=grace_s,
        reserved=True,
        kind=kind,
    )


async def run_cpu_bound(
    request: Request,
    fn: Callable[[*Ts], T],
    *args: *Ts,
    deadline_s: float | None = None,
    grace_s: float = 0.0,
) -> T:
    """`fn(*args)` on the app's pool, cancelled if this request's client disconnects. Call it
    once the request body has been read (it then listens for the disconnect)."""
    pool: CpuPool = request.app.state.cpu_pool
    return await pool.run(
        fn, *args, deadline_s=deadline_s, receive=request.receive, grace_s=grace_s
    )
