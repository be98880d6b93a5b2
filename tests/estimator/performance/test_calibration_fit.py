"""The perf constants of the register are what the fit on the fit rows gives, per GPU class;
the held-out rows never enter the fit; a class without rows has no constants (a band); and each
constant enters the figures it stands for."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bench.validate import performance as validation
from service.estimator import calibration
from service.estimator.performance import Traffic, estimate_performance, timing
from tests.estimator.performance.conftest import request


def test_a_third_of_every_source_is_held_out() -> None:
    rows = [r for r in validation.rows() if r.closed_loop]
    hold = validation.held_out()
    for source in {r.source for r in rows}:
        ids = [r.id for r in rows if r.source == source]
        assert sum(i in hold for i in ids) >= math.ceil(len(ids) / 3)


def test_a_third_of_every_class_is_held_out() -> None:
    rows = [r for r in validation.rows() if r.closed_loop]
    hold = validation.held_out()
    for cls in validation.fitted_classes():
        ids = [r.id for r in rows if validation.gpu_class(r) == cls]
        assert sum(i in hold for i in ids) >= math.ceil(len(ids) / 3), cls


def test_rows_are_grouped_by_the_gpus_architecture_family() -> None:
    """H100 and H200 rows are one class, an A100 row another: the catalog's architecture."""
    row = validation.rows()[0]
    h200 = dataclasses.replace(row, id="x-h200", gpu="h200-sxm-141gb")
    a100 = dataclasses.replace(row, id="x-a100", gpu="a100-sxm4-80gb")
    l40s = dataclasses.replace(row, id="x-l40s", gpu="l40s")
    assert validation.gpu_class(row) == validation.gpu_class(h200) == ("vllm", "hopper")
    assert validation.gpu_class(a100) == ("vllm", "ampere")
    assert validation.gpu_class(l40s) == ("vllm", "ada")
    burst = dataclasses.replace(l40s, id="x-burst", load="burst")
    assert validation.classes_with_rows((row, h200, a100, burst)) == (
        ("vllm", "ampere"),
        ("vllm", "hopper"),
    )


def test_each_class_fits_its_own_efficiencies_and_the_engine_its_overheads() -> None:
    hopper = ("vllm", "hopper")
    names = validation.fitted_names((hopper,))
    assert names[:3] == validation.ENGINE_FITTED["vllm"]
    assert names[3:] == (
        "perf.vllm.hopper.memory_efficiency",
        "perf.vllm.hopper.compute_efficiency",
    )
    # A class with rows but no register prefix cannot be fitted: its rows would be fitted with
    # constants the service never reads.
    with pytest.raises(KeyError):
        validation.class_fitted(("vllm", "no-such-family"))


def test_fitted_classes_are_calibrated_on_the_gpus_their_rows_checked() -> None:
    """Every fitted class has a register prefix, and the service answers it as calibrated on
    exactly the GPUs of its closed-loop rows; no other class has a prefix (a band)."""
    classes = validation.fitted_classes()
    assert set(timing.CALIBRATED) == set(classes) == set(timing.CHECKED_ON)
    for cls in classes:
        gpus = {
            r.gpu for r in validation.rows() if r.closed_loop and validation.gpu_class(r) == cls
        }
        assert timing.CHECKED_ON[cls] == frozenset(gpus), cls


def test_a_class_is_fitted_only_when_its_own_rows_pin_and_check_both_efficiencies() -> None:
    """A fitted class has a usable zero-load TTFT among its fit rows (the compute efficiency;
    decode figures pin the memory efficiency) and at least three among its held-out rows (the
    targets' check); any other class with rows is not fitted, its rows enter no fit, and their
    own memory efficiency is an experiment only."""
    hold = validation.held_out()
    for cls in validation.classes_with_rows():
        mine = [r for r in validation.rows() if r.closed_loop and validation.gpu_class(r) == cls]
        fit_ttft = sum(validation.zero_load_ttft(r) for r in mine if r.id not in hold)
        held_ttft = sum(validation.zero_load_ttft(r) for r in mine if r.id in hold)
        ok = fit_ttft >= 1 and held_ttft >= validation.MIN_HELD_OUT
        assert (cls in validation.fitted_classes()) == ok, cls
        assert (validation.own_memory_fit(cls) is None) == ok, cls
        if not ok:
            assert not any(validation.gpu_class(r) == cls for r in validation.fit_rows())


@pytest.mark.parametrize(
    "cls", [c for c in validation.TARGET_CLASSES if c not in validation.fitted_classes()]
)
def test_a_target_class_without_a_fit_is_answered_as_a_band(cls: tuple[str, str]) -> None:
    gpu_ref = {"ampere": "a100-sxm4-80gb", "ada": "l40s", "hopper": "h100-sxm-80gb"}[cls[1]]
    p = estimate_performance(request(gpu_ref=gpu_ref, engine=cls[0]), Traffic(128, 128, 1))
    assert not p.performance.calibrated and p.performance.band is not None
    assert any(f"no measured rows for engine {cls[0]}" in line for line in p.assumptions)


def test_register_lists_the_fit_rows_and_holds_the_fitted_values() -> None:
    fitted = validation.fit()
    assert set(fitted) == set(validation.fitted_names())
    hold = validation.held_out()
    # Burst rows (all prompts at once) are not the closed loop the model answers.
    assert all(r.closed_loop for r in validation.fit_rows())
    expected = {n: validation.row_ids() for e in validation.ENGINE_FITTED.values() for n in e}
    for cls in validation.fitted_classes():
        expected |= {n: validation.row_ids(cls) for n in validation.class_fitted(cls)}
    for name in validation.fitted_names():
        entry = calibration.REGISTER[name]
        assert entry.fitted_on == expected[name], name
        assert not any(i.split(":", 1)[1] in hold for i in entry.fitted_on)
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
