"""Inverse searches are bounded in steps: however large the range and whatever the predicate,
the search evaluates it a bounded number of times, and a request at the extremes of every
bound is answered promptly."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from service.estimator import search

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


@pytest.mark.parametrize("body", EXTREMES)
def test_extreme_inference_requests_are_answered_promptly(
    client: TestClient, body: dict[str, object]
) -> None:
    started = time.monotonic()
    response = client.post("/v1/estimate/inference", json=body)
    assert response.status_code in (200, 422), response.text[:300]
    # Generous for a shared 2-core machine; a bounded estimate takes well under a millisecond.
    assert time.monotonic() - started < 2


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
            "parameter_count": 1e14,
            "estimator": "simple",
            "gpu": "h100-sxm-80gb",
            "batch_size": 1 << 20,
        },
    ],
)
def test_extreme_finetune_requests_are_answered_promptly(
    client: TestClient, body: dict[str, object]
) -> None:
    started = time.monotonic()
    response = client.post("/v1/estimate/finetune", json=body)
    assert response.status_code in (200, 422), response.text[:300]
    assert time.monotonic() - started < 2
