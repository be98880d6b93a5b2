"""The performance model against published serving benchmarks, on the rows no fit saw.

bench/validate/performance.py holds the rows, the fixed held-out rule and the fit; the bounds
are the issue's targets: ITL and output tokens/s within 20 % MAPE, zero-load TTFT within 40 %.
"""

from __future__ import annotations

import pytest

from bench.validate import performance as v


@pytest.fixture(scope="module")
def held_out() -> list[v.Scored]:
    return [s for s in v.scored() if s.held_out]


@pytest.mark.parametrize("metric", sorted(v.TARGETS))
def test_held_out_mape_within_target(held_out: list[v.Scored], metric: str) -> None:
    value, n = v.mape(held_out, metric)
    assert n >= 3, f"too few held-out rows for {metric}"
    assert value <= v.TARGETS[metric], f"{metric}: {value:.1%} over {n} rows"


def test_every_row_is_a_calibrated_answer() -> None:
    # The rows are what the calibration stands on: each must be answered as calibrated.
    assert all(s.predicted.calibrated for s in v.scored())


def test_rows_name_their_source_and_setting() -> None:
    for r in v.rows():
        assert r.url.startswith("https://"), r.id
        assert r.engine == "vllm" and r.tp >= 1 and r.concurrency >= 1
