"""The estimate pool (service/api/concurrency.py): admission, deadline, cancellation.

In-process: the pool is driven from an event loop like a route would, with a work function
that counts its checkpoints so a test can see whether the work actually stopped.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest

from service.api.concurrency import (
    Cancelled,
    CpuPool,
    DeadlineExceeded,
    Overloaded,
    checkpoint,
)
from service.application.metrics import Metrics
from service.settings import Settings
from tests.server import apps


class Work:
    """Busy work in 1 ms steps with a checkpoint before each; counts the steps taken."""

    def __init__(self) -> None:
        self.steps = 0
        self.started = threading.Event()

    def __call__(self, seconds: float) -> int:
        self.started.set()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            checkpoint()
            self.steps += 1
            step_end = time.perf_counter() + 0.001
            while time.perf_counter() < step_end:
                pass
        return self.steps


def _metric(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels or None)
    return value or 0.0


def test_the_work_runs_off_the_loop_and_returns_its_result() -> None:
    pool = CpuPool(threads=1, queue=0, deadline_s=5)

    async def scenario() -> tuple[int, str]:
        loop_thread = threading.current_thread().name
        thread_name = await pool.run(lambda: threading.current_thread().name)
        assert thread_name != loop_thread
        return await pool.run(lambda a, b: a + b, 2, 3), thread_name

    total, name = asyncio.run(scenario())
    assert total == 5 and name.startswith("estimate")


def test_errors_of_the_work_reach_the_caller() -> None:
    pool = CpuPool(threads=1, queue=0, deadline_s=5)

    def fail() -> None:
        raise ValueError("bad config")

    with pytest.raises(ValueError, match="bad config"):
        asyncio.run(pool.run(fail))


def test_past_threads_plus_queue_the_pool_refuses_at_once() -> None:
    metrics = Metrics()
    pool = CpuPool(threads=1, queue=1, deadline_s=5, metrics=metrics)
    work = Work()

    async def scenario() -> float:
        running = [asyncio.create_task(pool.run(work, 0.3)) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert _metric(metrics, "llmmem_estimate_pool_admitted") == 2
        assert _metric(metrics, "llmmem_estimate_pool_queue_depth") == 1
        started = time.perf_counter()
        with pytest.raises(Overloaded) as refused:
            await pool.run(work, 0.3)
        elapsed = time.perf_counter() - started
        assert refused.value.retry_after_s >= 1
        await asyncio.gather(*running)
        await asyncio.sleep(0)  # the slots are released by done-callbacks on the loop
        assert _metric(metrics, "llmmem_estimate_pool_admitted") == 0
        await pool.run(work, 0.01)  # room again
        return elapsed

    assert asyncio.run(scenario()) < 0.05
    assert _metric(metrics, "llmmem_estimate_pool_rejected_total", reason="overloaded") == 1


def test_the_deadline_answers_the_caller_and_stops_the_work() -> None:
    metrics = Metrics()
    pool = CpuPool(threads=1, queue=0, deadline_s=0.2, metrics=metrics)
    work = Work()

    async def scenario() -> float:
        started = time.perf_counter()
        with pytest.raises(DeadlineExceeded):
            await pool.run(work, 5.0)
        return time.perf_counter() - started

    assert 0.15 < asyncio.run(scenario()) < 1.0
    steps = work.steps
    time.sleep(0.1)
    assert work.steps <= steps + 1, "the work went on after its deadline"
    assert _metric(metrics, "llmmem_estimate_pool_rejected_total", reason="deadline") == 1


def test_within_the_grace_the_work_returns_what_it_finished() -> None:
    """A batch-like piece of work catches Cancelled at a checkpoint and returns a partial
    result; with a grace period the caller gets it instead of DeadlineExceeded."""
    pool = CpuPool(threads=1, queue=0, deadline_s=0.2)

    def batch(items: int, item_s: float) -> list[str]:
        done: list[str] = []
        for i in range(items):
            try:
                checkpoint()
            except Cancelled:
                return done + ["unfinished"] * (items - i)
            end = time.perf_counter() + item_s
            while time.perf_counter() < end:
                pass
            done.append("ok")
        return done

    # Items of 0.3 s: the deadline (0.2 s) falls inside the first item, so the partial result
    # comes one item after it, within the grace.
    result = asyncio.run(pool.run(batch, 100, 0.3, grace_s=1.0))
    assert result == ["ok"] + ["unfinished"] * 99, result[:3]


def test_work_queued_past_its_deadline_never_starts() -> None:
    pool = CpuPool(threads=1, queue=1, deadline_s=5)
    first, second = Work(), Work()

    async def scenario() -> None:
        blocker = asyncio.create_task(pool.run(first, 0.4))
        await asyncio.sleep(0.05)
        with pytest.raises(DeadlineExceeded):
            await pool.run(second, 1.0, deadline_s=0.1)
        await blocker

    asyncio.run(scenario())
    assert not second.started.is_set()


def test_a_client_disconnect_stops_the_work() -> None:
    metrics = Metrics()
    pool = CpuPool(threads=1, queue=0, deadline_s=30, metrics=metrics)
    work = Work()

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.2)  # the client goes away while the work runs
        return {"type": "http.disconnect"}

    async def scenario() -> float:
        started = time.perf_counter()
        with pytest.raises(Cancelled):
            await pool.run(work, 10.0, receive=receive)
        return time.perf_counter() - started

    assert asyncio.run(scenario()) < 1.0
    steps = work.steps
    time.sleep(0.1)
    assert work.steps <= steps + 1
    assert _metric(metrics, "llmmem_estimate_pool_rejected_total", reason="disconnected") == 1


def test_checkpoint_outside_the_pool_is_a_no_op() -> None:
    checkpoint()


def test_the_app_answers_overload_with_a_503_problem_and_retry_after() -> None:
    settings = Settings(access_log=False, cpu_threads=1, cpu_queue=0)
    app = apps.create_test_app(settings)

    async def scenario() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return await asyncio.gather(
                *(client.post("/test/spin", params={"ms": 200}) for _ in range(3))
            )

    responses = asyncio.run(scenario())
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 503, 503], statuses
    refused = next(r for r in responses if r.status_code == 503)
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/problem+json"
    body = json.loads(refused.content)
    assert body["type"] == "/problems/overloaded" and "retry" in body["detail"]


def test_the_app_answers_a_deadline_with_a_503_problem() -> None:
    settings = Settings(access_log=False, estimate_deadline_s=0.1)
    app = apps.create_test_app(settings)

    async def scenario() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as client:
            return await client.post("/test/spin", params={"ms": 2000})

    response = asyncio.run(scenario())
    assert response.status_code == 503
    assert response.json()["type"] == "/problems/deadline-exceeded"
    assert response.headers["retry-after"] == "1"
