"""Inverse searches are bounded in steps: however large the range and whatever the predicate,
the search evaluates it a bounded number of times, and a request at the extremes of every
bound does a bounded amount of work (counted in evaluations, not timed)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.estimator import memo, search
from service.estimator.engines import REGISTRY, Engine
from service.estimator.inference import evaluate
from service.estimator.inference.fit import MAX_SCAN_SETUPS
from service.estimator.model.config_reader import Bounds
from service.estimator.training import phases

# log2(10^18) is just under 60: a doubling phase and a bisection over a range that wide could
# take about 120 evaluations if unbounded; the search must stop well before that.
STEP_CEILING = 64


class Counter:
    def __init__(self, rule: object) -> None:
        self.calls = 0
        self.rule = rule

    def __call__(self, n: int) -> bool:
        self.calls += 1
        return bool(self.rule(n))  # type: ignore[operator]


@pytest.mark.parametrize("threshold", [1, 2, 3, 1000, 2**20 + 7, 10**9, 10**12, 10**18])
def test_largest_true_is_bounded_for_monotone_predicates(threshold: int) -> None:
    predicate = Counter(lambda n: n <= threshold)
    search.largest_true(predicate, 1, 10**18)
    assert predicate.calls <= STEP_CEILING


@pytest.mark.parametrize("threshold", [1, 5, 1000, 123_456, 2**24 - 1])
def test_largest_true_is_exact_on_realistic_ranges(threshold: int) -> None:
    # Hand check: over [1, 2^24] doubling takes at most 25 probes and bisection at most 24,
    # 49 in all, under the ceiling, so the answer is exact.
    predicate = Counter(lambda n: n <= threshold)
    assert search.largest_true(predicate, 1, 2**24) == threshold


def test_largest_true_is_bounded_for_an_adversarial_predicate() -> None:
    predicate = Counter(lambda n: n % 3 != 0)  # not monotone at all
    search.largest_true(predicate, 1, 10**18)
    assert predicate.calls <= STEP_CEILING


@pytest.mark.parametrize("threshold", [1, 2, 7, 1000, 2**20 + 7, 10**12])
@pytest.mark.parametrize("monotone", [True, False])
def test_smallest_true_is_exact_and_bounded_for_monotone_predicates(
    threshold: int, monotone: bool
) -> None:
    predicate = Counter(lambda n: n >= threshold)
    assert search.smallest_true(predicate, 1, 10**12, monotone=monotone) == threshold
    assert predicate.calls <= STEP_CEILING


def test_smallest_true_finds_a_stretch_that_ends_below_the_top() -> None:
    # True on [25, 31] only (SGLang: fewer stages hold too many weights, more stages too much
    # reserve). A check at the top (80) says "none". Doubling from 13 probes 26 (true), and
    # the bisection between 13 and 26 gives 25; from 3 it probes 6, 12, 24, 48, 80 and steps
    # over the stretch.
    window = Counter(lambda n: 25 <= n <= 31)
    assert search.smallest_true(window, 13, 80, monotone=False) == 25
    assert search.smallest_true(window, 13, 80, monotone=True) is None
    assert search.smallest_true(window, 3, 80, monotone=False) is None  # the documented limit


def test_smallest_true_is_bounded_for_an_adversarial_predicate() -> None:
    predicate = Counter(lambda n: n % 3 == 0 and n > 10**9)
    search.smallest_true(predicate, 1, 10**18, monotone=False)
    assert predicate.calls <= STEP_CEILING


EXTREMES = [
    {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "h100-sxm-80gb",
        "engine": "vllm",
        "sequence_length": 16 * 1024 * 1024,
        "batch_size": 1,
    },
    {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "h100-sxm-80gb",
        "gpu_count": 65536,
        "batch_size": 59,
        "sequence_length": 16 * 1024 * 1024,
    },
    {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "h100-sxm-80gb",
        "concurrency": 1 << 20,
        "sequence_length": 512,
        "batch_size": 1,
    },
    {
        "parameter_count": 1e14,
        "estimator": "simple",
        "gpu": "h100-sxm-80gb",
        "sequence_length": 16 * 1024 * 1024,
    },
    {"parameter_count": 1000, "estimator": "simple", "gpu": "h100-sxm-80gb"},
]


class Calls:
    """Counts calls of one function wherever the service imported it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        self.count = 0
        original: Callable[..., Any] = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return original(*args, **kwargs)

        for module in list(sys.modules.values()):
            service_module = module is not None and module.__name__.startswith("service")
            if service_module and getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted)


class _Count:
    count = 0


def _count_sequence_costs(monkeypatch: pytest.MonkeyPatch) -> _Count:
    """Counts every engine's per-sequence cost evaluations (one per stage and workload)."""
    counter = _Count()
    # Each class that defines its own (an inherited one is counted where it is defined).
    for engine in {Engine, *(type(e) for e in REGISTRY.values())}:
        if "sequence_cost" not in vars(engine):
            continue
        original = vars(engine)["sequence_cost"]

        def counted(self: Any, *args: Any, _original: Any = original) -> Any:
            counter.count += 1
            return _original(self, *args)

        monkeypatch.setattr(engine, "sequence_cost", counted)
    return counter


@pytest.fixture
def cold() -> Iterator[None]:
    # Nothing from an earlier test may be replayed: count the work of this request alone.
    memo.clear()
    yield
    memo.clear()


# Work bound of one inference request, from the caps the code documents: the layouts a
# gpu_count without a layout scans (MAX_SCAN_SETUPS), one setup for the layout judged and one
# for the largest layout a gpu_count without a layout holds; for min_gpu_count the
# single-GPU setup (the weights floor), one per TP size operators run (the powers of two
# within a node of at most 72 GPUs: 7) and 2 · log2(layers) + 1 stage counts at the largest;
# the engine flags' other settings (a lower budget, the requested context, the longest
# context that starts: 3). Each setup asked at most 2·STEP_CEILING + 4 workloads (two
# searches and the fixed checks), each workload evaluated once per pipeline stage (at most
# one per layer).
SETUPS = MAX_SCAN_SETUPS + 2 + 1 + 7 + (2 * Bounds.LAYERS.bit_length() + 1) + 3
INFERENCE_STAGE_EVALUATIONS = SETUPS * (2 * STEP_CEILING + 4) * Bounds.LAYERS


@pytest.mark.parametrize("body", EXTREMES)
def test_extreme_inference_requests_do_bounded_work(
    client: TestClient, body: dict[str, object], cold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch, evaluate, "stage_components")
    costs = _count_sequence_costs(monkeypatch)
    response = client.post("/v1/estimate/inference", json=body)
    assert response.status_code in (200, 422), response.text[:300]
    # A stage's workload is evaluated by the engine's per-sequence cost (the verdicts and
    # searches) or by stage_components (the figures reported).
    assert calls.count + costs.count <= INFERENCE_STAGE_EVALUATIONS
    if response.status_code == 200 and body.get("estimator") != "simple":
        assert costs.count > 0  # the counter sees the work it bounds


# A fine-tuning answer is solved per line (phases.solve_max), not searched: a few evaluations
# per stage for the requested point and each of its two inverse answers.
FINETUNE_STAGE_EVALUATIONS = 3 * 4 * Bounds.LAYERS


@pytest.mark.parametrize(
    "body",
    [
        {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "gpu": "h100-sxm-80gb",
            "sequence_length": 16 * 1024 * 1024,
            "gpu_count": 65536,
            "zero_stage": 3,
        },
        {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "gpu": "h100-sxm-80gb",
            "gpu_count": 64,
            "pipeline_parallel_size": 8,
        },
        {
            "parameter_count": 1e14,
            "estimator": "simple",
            "gpu": "h100-sxm-80gb",
            "batch_size": 1 << 20,
        },
    ],
)
def test_extreme_finetune_requests_do_bounded_work(
    client: TestClient, body: dict[str, object], cold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(monkeypatch, phases, "_stage_phases")
    response = client.post("/v1/estimate/finetune", json=body)
    assert response.status_code in (200, 422), response.text[:300]
    assert calls.count <= FINETUNE_STAGE_EVALUATIONS


@pytest.mark.parametrize("kind", ["largest", "smallest", "smallest-doubling"])
def test_a_search_stops_at_the_first_evaluation_after_its_work_is_cancelled(kind: str) -> None:
    # Issue 28 §2: work past its deadline stops where it is. The token is set during the
    # fourth evaluation; no fifth begins.
    from service.estimator.cancel import Cancelled, CancelToken, running

    token = CancelToken(deadline=float("inf"))
    calls = 0

    def predicate(n: int) -> bool:
        nonlocal calls
        calls += 1
        if calls == 4:
            token.cancel("deadline")
        return n < 10**12 if kind == "largest" else n > 10**12

    with running(token), pytest.raises(Cancelled, match="deadline"):
        if kind == "largest":
            search.largest_true(predicate, 1, 10**18)
        else:
            search.smallest_true(predicate, 1, 10**18, monotone=kind == "smallest")
    assert calls == 4
    # Without a token (tests, the bench) a search runs to its answer.
    assert search.largest_true(lambda n: n < 1000, 1, 10**18) == 999
