"""The perf constants of the register are what the fit on the fit rows gives, the held-out
rows never enter the fit, and each constant enters the figures it stands for."""

from __future__ import annotations

import math

import pytest

from bench.validate import performance as validation
from service.estimator import calibration
from service.estimator.performance import Traffic, estimate_performance
from tests.estimator.performance.conftest import request


def test_a_third_of_every_source_is_held_out() -> None:
    rows = [r for r in validation.rows() if r.closed_loop]
    hold = validation.held_out()
    for source in {r.source for r in rows}:
        ids = [r.id for r in rows if r.source == source]
        assert sum(i in hold for i in ids) >= math.ceil(len(ids) / 3)


def test_register_lists_the_fit_rows_and_holds_the_fitted_values() -> None:
    expected = validation.row_ids()
    fitted = validation.fit()
    for name in validation.FITTED:
        entry = calibration.REGISTER[name]
        assert entry.fitted_on == expected
        assert not any(i.split(":", 1)[1] in validation.held_out() for i in entry.fitted_on)
        # Burst rows (all prompts at once) are not the closed loop the model answers.
        assert all(r.closed_loop for r in validation.fit_rows())
        # The register rounds the fit to three significant digits.
        assert entry.value == pytest.approx(fitted[name], rel=5e-3), name


def test_memory_efficiency_sets_the_zero_load_itl() -> None:
    traffic = Traffic(128, 128, 1)
    base = estimate_performance(request(), traffic).performance.itl_ms
    eta = calibration.value("perf.vllm.hopper.memory_efficiency")
    with calibration.overridden(perf__vllm__hopper__memory_efficiency=eta / 2):
        slower = estimate_performance(request(), traffic).performance.itl_ms
    overhead = calibration.value("perf.vllm.step_overhead_s") * 1e3
    overhead += calibration.value("perf.vllm.sequence_overhead_s") * 1e3
    # Halving the efficiency doubles the roofline part of the step, not its overheads.
    assert slower - overhead == pytest.approx(2 * (base - overhead))


def test_request_overhead_enters_the_ttft_once() -> None:
    traffic = Traffic(128, 128, 1)
    base = estimate_performance(request(), traffic).performance.ttft_ms
    with calibration.overridden(perf__vllm__request_overhead_s=1.0):
        later = estimate_performance(request(), traffic).performance.ttft_ms
    t_r = calibration.value("perf.vllm.request_overhead_s")
    assert later - base == pytest.approx((1.0 - t_r) * 1e3)
