"""The performance answer: calibrated or a band, the KV pool's limit, and SLO sizing."""

from __future__ import annotations

import dataclasses
import math

import pytest

from service.estimator.errors import InvalidRequest
from service.estimator.inference.evaluate import max_sequences
from service.estimator.inference.request import resolved, setup_for
from service.estimator.performance import NotServable, Slo, Traffic, estimate_performance
from tests.estimator.performance.conftest import gpu, request

TRAFFIC = Traffic(input_tokens=1024, output_tokens=256, concurrency=16)


def test_vllm_on_h100_bf16_is_calibrated() -> None:
    p = estimate_performance(request(gpu_ref="h100-sxm-80gb"), TRAFFIC).performance
    assert p.calibrated and p.band is None and p.calibration == "vllm/hopper"


def test_a_hopper_gpu_without_measured_rows_gets_a_band() -> None:
    """The H200 runs the same kernels with more bandwidth, but no measured row checks the
    Hopper constants on it: a band, with the reason."""
    answer = estimate_performance(request(gpu_ref="h200-sxm-141gb"), TRAFFIC)
    assert not answer.performance.calibrated and answer.performance.band is not None
    assert any("no measured rows on this GPU" in line for line in answer.assumptions)


@pytest.mark.parametrize(
    ("fields", "gpu_ref", "engine"),
    [
        ({}, "a100-sxm4-80gb", "vllm"),  # no A100 rows
        ({}, "l40s", "vllm"),
        ({"weight_format": "fp8"}, "h100-sxm-80gb", "vllm"),  # no FP8 rows
        ({"pipeline_parallel_size": 2}, "h100-sxm-80gb", "vllm"),
        ({}, "h100-sxm-80gb/3g.40gb", "vllm"),  # a MIG slice
        ({}, "h100-sxm-80gb", "sglang"),  # no SGLang rows
    ],
)
def test_without_calibration_data_the_answer_is_a_band(
    fields: dict[str, object], gpu_ref: str, engine: str
) -> None:
    p = estimate_performance(request(gpu_ref=gpu_ref, engine=engine, **fields), TRAFFIC)
    perf = p.performance
    assert not perf.calibrated and perf.band is not None and perf.calibration is None
    for name in ("ttft_ms", "itl_ms", "output_tokens_per_s", "requests_per_s"):
        low, high = getattr(perf.band, name)
        assert low < getattr(perf, name) < high, name
    assert any("not calibrated" in line for line in p.assumptions)


def test_past_the_kv_pool_the_replica_is_saturated() -> None:
    req = request(gpu_ref="l40s")
    setup = setup_for(resolved(req))
    length = TRAFFIC.input_tokens + TRAFFIC.output_tokens
    pool = max_sequences(setup, setup.usable(req.gpu_memory_bytes or 0), length, 1024, 10**6)
    limit = min(pool, int(setup.settings["max_num_seqs"]))
    below = estimate_performance(req, dataclasses.replace(TRAFFIC, concurrency=limit))
    past = estimate_performance(req, dataclasses.replace(TRAFFIC, concurrency=limit + 50))
    assert below.performance.max_concurrency == limit and not below.performance.saturated
    assert past.performance.saturated and past.performance.running == limit
    assert past.performance.requests_per_s == below.performance.requests_per_s
    assert past.performance.queue_wait_ms > 0
    assert past.performance.ttft_ms > below.performance.ttft_ms
    # The rate past the pool is an upper bound (preemption is not priced), and says so.
    assert any("upper bound" in line for line in past.assumptions)
    assert not any("upper bound" in line for line in below.assumptions)


def test_slo_replicas_are_the_rate_over_the_per_replica_rate() -> None:
    req = request()
    slo = Slo(requests_per_s=50.0, ttft_ms=400.0, itl_ms=20.0)
    s = estimate_performance(req, TRAFFIC, slo).sizing
    assert s is not None and s.slo_met
    assert s.replicas == math.ceil(50.0 / s.per_replica_requests_per_s)
    assert s.gpus == s.replicas  # TP 1
    # The per-replica rate is the one at the largest concurrency that meets the SLO.
    at = estimate_performance(req, dataclasses.replace(TRAFFIC, concurrency=s.concurrency))
    assert at.performance.requests_per_s == pytest.approx(s.per_replica_requests_per_s)
    assert at.performance.itl_ms <= 20.0 and at.performance.ttft_ms <= 400.0
    nxt = estimate_performance(req, dataclasses.replace(TRAFFIC, concurrency=s.concurrency + 1))
    assert s.limited_by == "itl" and nxt.performance.itl_ms > 20.0


def test_slo_out_of_reach_has_no_replicas() -> None:
    s = estimate_performance(request(), TRAFFIC, Slo(requests_per_s=1.0, itl_ms=0.5)).sizing
    assert s is not None and not s.slo_met and s.replicas is None and s.limited_by == "itl"


def test_slo_counts_every_gpu_of_a_replica() -> None:
    req = request("Qwen/Qwen2.5-72B-Instruct", tensor_parallel_size=4)
    s = estimate_performance(req, TRAFFIC, Slo(requests_per_s=30.0)).sizing
    assert s is not None and s.limited_by == "max_concurrency"
    assert s.gpus == 4 * (s.replicas or 0)


def test_traffic_needs_a_catalog_gpu() -> None:
    req = dataclasses.replace(request(), gpu=dataclasses.replace(gpu("h100"), performance=None))
    with pytest.raises(InvalidRequest) as e:
        estimate_performance(req, TRAFFIC)
    assert e.value.field == "gpu"


def test_traffic_longer_than_the_context_is_refused() -> None:
    req = request(engine_options={"max_model_len": 1000})
    with pytest.raises(InvalidRequest) as e:
        estimate_performance(req, TRAFFIC)
    assert e.value.field == "traffic"


def test_a_request_the_memory_cannot_hold_is_not_served() -> None:
    with pytest.raises(NotServable):
        estimate_performance(request(gpu_ref="h100-sxm-80gb/1g.10gb"), TRAFFIC)
