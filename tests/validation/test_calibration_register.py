"""The calibration register against the rows it was fitted on and the rows it was not.

bench/validate/calibration.py rebuilds each fitted entry's rows and refits it leaving one row
out and one model out; docs/accuracy.md shows the figures. The bounds here are on out-of-sample
errors.
"""

from __future__ import annotations

import pytest

from bench.validate import calibration as c
from service.estimator import calibration


@pytest.fixture(scope="module")
def results() -> dict[tuple[str, ...], c.Result]:
    return {r.names: r for r in c.results()}


def test_every_fitted_entry_is_checked_out_of_sample(
    results: dict[tuple[str, ...], c.Result],
) -> None:
    checked = {n for names in results for n in names}
    for name, entry in calibration.REGISTER.items():
        if entry.fitted_on:
            assert name in checked, f"{name} lists fitted rows but no check rebuilds them"
    for r in results.values():
        assert r.in_sample, r.names
        assert len(r.loo) == len(r.in_sample), r.names
        assert len(r.lomo) == len(r.in_sample), r.names


def test_leave_one_out_bounds(results: dict[tuple[str, ...], c.Result]) -> None:
    # The CUDA context per resident thread, refitted without each GPU's measurement, predicts
    # that GPU's bare context within 6 % (eight GPUs, 107 to 612 MiB).
    context = results[("cuda.context_bytes_per_resident_thread",)]
    assert len(context.loo) >= 8 and max(abs(e) for _, e in context.loo) <= 0.06
    nccl = results[("nccl.tp_group_bytes", "nccl.tp_peer_bytes")]
    assert max(abs(e) for _, e in nccl.loo) <= 0.05


def test_leave_one_model_out_bounds(results: dict[tuple[str, ...], c.Result]) -> None:
    # Refitted without every row of a model (a model's other quantizations and layouts cannot
    # stand in for it), each model's rows stay within these bounds.
    nccl = results[("nccl.tp_group_bytes", "nccl.tp_peer_bytes")]
    assert max(abs(e) for _, e in nccl.lomo) <= 0.05
    fragmentation = results[("training.fragmentation_fraction",)]
    assert max(abs(e) for _, e in fragmentation.lomo) <= 0.12


def test_rows_name_their_model(results: dict[tuple[str, ...], c.Result]) -> None:
    # Leave one model out needs each fitted row's model; a row without one would count as a
    # model of its own, and its siblings would still fit it.
    for check in c.checks():
        assert all(row.model for row in check.fitted), check.names


def test_the_refit_recovers_the_fitted_values(results: dict[tuple[str, ...], c.Result]) -> None:
    # Entries fitted by least squares on exactly these rows come back near their value.
    for names in (
        ("nccl.tp_group_bytes", "nccl.tp_peer_bytes"),
        ("cuda.context_bytes_per_resident_thread",),
    ):
        r = results[names]
        assert r.refit is not None
        for n in names:
            assert r.refit[n] == pytest.approx(r.registered[n], rel=0.02), n


def test_a_value_that_differs_from_its_refit_says_why(
    results: dict[tuple[str, ...], c.Result],
) -> None:
    """A registered value more than 5 % from the value its own rows refit to is kept only with
    a reason written in the register (and printed in docs/accuracy.md), so a drift nobody
    chose fails here."""
    for r in results.values():
        if r.refit is None:
            continue
        drift = max(abs(r.registered[n] - r.refit[n]) / abs(r.refit[n]) for n in r.names)
        if drift > 0.05:
            entry = calibration.REGISTER[r.names[0]]
            assert entry.kept_over_refit, f"{r.names}: {drift:.0%} from its refit, no reason"
