"""Issue 28 §4: cheap estimates answered on the event loop (service/api/fast_path.py).

What is checked is where the work runs (the pool's runs are counted) and that the answers, the
errors, the metrics and the response cache are those of the route, byte for byte; the speed
itself is measured in `make bench`, not here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api import concurrency
from service.api.fast_path import InlinePolicy, cost_class
from service.app import create_app
from service.schemas.estimates import InferenceRequestBody
from service.settings import Settings

LLAMA = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100-sxm-80gb", "engine": "vllm"}


class PoolRuns:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = concurrency.CpuPool.run

        async def counted(pool: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await original(pool, *args, **kwargs)

        monkeypatch.setattr(concurrency.CpuPool, "run", counted)


@pytest.fixture
def pool_runs(monkeypatch: pytest.MonkeyPatch) -> PoolRuns:
    return PoolRuns(monkeypatch)


def _client(**settings: Any) -> TestClient:
    return TestClient(create_app(Settings(access_log=False, **settings)))


@pytest.fixture
def inline_client() -> Iterator[TestClient]:
    with _client() as client:
        yield client


@pytest.fixture
def pool_client() -> Iterator[TestClient]:
    with _client(inline_estimate_max_ms=0) as client:
        yield client


def _post(client: TestClient, body: dict[str, Any], path: str = "/v1/estimate/inference") -> Any:
    return client.post(path, content=json.dumps(body))


def test_a_kind_measured_cheap_runs_on_the_loop_with_the_same_answer(
    inline_client: TestClient, pool_client: TestClient, pool_runs: PoolRuns
) -> None:
    policy = inline_client.app.state.inline_policy  # type: ignore[attr-defined]
    # Whatever a loaded machine measures, this kind counts as cheap here: what is checked is
    # that a kind measured cheap runs on the loop and answers as the route does.
    policy.max_inline_s = 60.0
    first = _post(inline_client, {**LLAMA, "sequence_length": 4096})
    assert first.status_code == 200
    assert pool_runs.count == 1  # not measured yet: the pool, which measures it
    key = cost_class("/v1/estimate/inference", InferenceRequestBody.model_validate(LLAMA))
    cost = policy.cost(key)
    assert cost is not None and 0 < cost < policy.max_inline_s
    runs = pool_runs.count
    answers = [_post(inline_client, {**LLAMA, "sequence_length": 5000 + i}) for i in range(5)]
    assert pool_runs.count == runs  # all five on the loop
    reference = [_post(pool_client, {**LLAMA, "sequence_length": 5000 + i}) for i in range(5)]
    assert pool_runs.count == runs + 5
    for inline, pooled in zip(answers, reference, strict=True):
        assert inline.status_code == pooled.status_code == 200
        assert inline.content == pooled.content
        assert inline.headers["content-type"] == pooled.headers["content-type"]


def test_inline_answers_are_counted_and_cached_like_the_route(
    inline_client: TestClient, pool_runs: PoolRuns
) -> None:
    policy = inline_client.app.state.inline_policy  # type: ignore[attr-defined]
    key = cost_class("/v1/estimate/inference", InferenceRequestBody.model_validate(LLAMA))
    assert _post(inline_client, {**LLAMA, "sequence_length": 7000}).status_code == 200
    assert pool_runs.count == 1  # the route had not been seen: the usual way, once
    policy.observe(key, 0.0)  # measured cheap
    policy.max_inline_s = 60.0  # and stays so, whatever a loaded machine measures next
    registry = inline_client.app.state.metrics.registry  # type: ignore[attr-defined]
    labels = {"method": "POST", "route": "/v1/estimate/inference", "status": "200"}
    before = registry.get_sample_value("llmmem_http_requests_total", labels) or 0
    estimates = {"kind": "inference", "estimator": "detailed", "engine": "vllm"}
    counted = registry.get_sample_value("llmmem_estimates_total", estimates) or 0
    body = {**LLAMA, "sequence_length": 7777}
    once, twice = _post(inline_client, body), _post(inline_client, body)
    assert pool_runs.count == 1
    assert once.content == twice.content
    assert registry.get_sample_value("llmmem_http_requests_total", labels) == before + 2
    assert registry.get_sample_value("llmmem_estimates_total", estimates) == counted + 2
    hits = registry.get_sample_value("llmmem_estimate_cache_total", {"result": "hit"})
    assert hits is not None and hits >= 1  # the second was replayed by the response cache


@pytest.mark.parametrize(
    "body",
    [
        {**LLAMA, "sequence_length": 10**7},  # the estimator refuses it: 422 naming the field
        {**LLAMA, "sequence_length": "long"},  # does not validate
        {**LLAMA, "engine": "vllm", "engine_options": {"no_such_option": 1}},
    ],
)
def test_errors_are_answered_by_the_route(
    inline_client: TestClient, pool_client: TestClient, body: dict[str, Any]
) -> None:
    policy = inline_client.app.state.inline_policy  # type: ignore[attr-defined]
    assert _post(inline_client, LLAMA).status_code == 200  # the route is known from now on
    policy.observe(
        cost_class("/v1/estimate/inference", InferenceRequestBody.model_validate(LLAMA)), 0.0
    )
    inline, pooled = _post(inline_client, body), _post(pool_client, body)
    assert inline.status_code == pooled.status_code == 422
    strip = ("request_id",)
    a = {k: v for k, v in inline.json().items() if k not in strip}
    b = {k: v for k, v in pooled.json().items() if k not in strip}
    assert a == b


def test_posted_configs_and_costly_kinds_stay_on_the_pool(
    inline_client: TestClient, pool_runs: PoolRuns
) -> None:
    from bench.harness import LLAMA_CONFIG

    config = {"hf_config": LLAMA_CONFIG, "gpu": "l4"}
    assert cost_class("/v1/estimate/inference", InferenceRequestBody.model_validate(config)) is None
    for i in range(3):
        assert _post(inline_client, {**config, "sequence_length": 1000 + i}).status_code == 200
    assert pool_runs.count == 3
    policy = inline_client.app.state.inline_policy  # type: ignore[attr-defined]
    key = cost_class("/v1/estimate/inference", InferenceRequestBody.model_validate(LLAMA))
    policy.observe(key, 2 * policy.max_inline_s)  # measured costly
    _post(inline_client, {**LLAMA, "sequence_length": 3000})
    assert pool_runs.count == 4


def test_inline_work_between_two_polls_of_the_loop_is_capped() -> None:
    policy = InlinePolicy(max_inline_s=0.001, max_turn_s=0.01)
    policy.observe("cheap", 0.0005)
    assert policy.inline("cheap") and not policy.inline("unknown") and not policy.inline(None)

    async def turn() -> tuple[bool, bool, bool]:
        loop = asyncio.get_running_loop()
        policy.spent(0.006, loop)
        still = policy.inline("cheap")
        policy.spent(0.006, loop)  # 12 ms in this turn: the rest goes to the pool
        capped = policy.inline("cheap")
        await asyncio.sleep(0)  # the loop polls and starts a new turn
        return still, capped, policy.inline("cheap")

    assert asyncio.run(turn()) == (True, False, True)


def test_past_its_turn_a_cheap_request_waits_for_the_next_one(
    inline_client: TestClient, pool_runs: PoolRuns
) -> None:
    app = inline_client.app
    assert _post(inline_client, LLAMA).status_code == 200  # the route is known from now on
    policy = app.state.inline_policy  # type: ignore[attr-defined]
    policy.max_inline_s = 60.0  # cheap whatever a loaded machine measures
    policy.observe(
        cost_class("/v1/estimate/inference", InferenceRequestBody.model_validate(LLAMA)), 0.0
    )
    runs = pool_runs.count

    def request(seq: int) -> int:
        body = json.dumps({**LLAMA, "sequence_length": seq}).encode()
        sent: list[int] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                sent.append(message["status"])

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/estimate/inference",
            "raw_path": b"/v1/estimate/inference",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"content-type", b"application/json")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 8000),
            "app": app,
            "state": {},
        }

        async def run() -> None:
            policy.spent(1.0, asyncio.get_running_loop())  # this turn is spent
            await app(scope, receive, send)

        asyncio.run(run())
        return sent[0]

    assert request(6100) == 200
    assert pool_runs.count == runs  # it waited a turn, then ran on the loop
    assert policy.waiting == 0
    policy.max_waiting = 0
    assert request(6101) == 200
    assert pool_runs.count == runs + 1  # no room to wait: the pool


def test_one_slow_measurement_does_not_move_a_kind_but_two_do() -> None:
    policy = InlinePolicy(max_inline_s=0.001)
    policy.observe("kind", 0.0004)
    policy.observe("kind", 0.0004)
    policy.observe("kind", 0.003)  # a collection ran during this one
    assert policy.inline("kind")
    policy.observe("kind", 0.0004)
    policy.observe("kind", 0.003)
    policy.observe("kind", 0.003)  # the kind itself became costly: two of the last three
    assert not policy.inline("kind")
    policy.observe("other", 0.003)  # a first measurement decides alone
    assert not policy.inline("other")


def test_waiting_requests_are_served_first_come_first_served() -> None:
    """Requests that wait for a turn run in the order they came, and one that comes while
    others wait goes after them even when the turn has room."""
    policy = InlinePolicy(max_inline_s=0.001, max_turn_s=0.002)
    policy.observe("kind", 0.0008)
    order: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def request(i: int) -> None:
            reserved = 0.0
            if not policy.inline("kind"):
                assert policy.may_wait("kind")
                reserved = await policy.wait_turn("kind")
            order.append(i)
            policy.spent(0.0008, loop, reserved)

        first = [asyncio.create_task(request(i)) for i in range(5)]
        policy.spent(0.01, loop)  # the current turn is spent before they run: all wait
        await asyncio.sleep(0)  # all five queued, then a new turn woke the head of the queue
        assert order == []
        assert policy.waiting == 2  # the 2 ms turn holds three of 0.8 ms (the last one over)
        policy.max_turn_s = 1.0  # the turn has room now, but two wait:
        late = asyncio.create_task(request(5))  # the newcomer goes after them
        await asyncio.gather(*first, late)

    asyncio.run(main())
    assert order == [0, 1, 2, 3, 4, 5]
    assert policy.waiting == 0 and abs(policy.reserved_s) < 1e-12
