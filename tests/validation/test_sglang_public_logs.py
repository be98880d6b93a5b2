"""Held-out bounds of the SGLang engine against public start-up logs.

The rows (bench/validate/data/public_logs_sglang.csv) were collected after the engine was
written and fit nothing in it; bench/validate/public_logs_sglang.py builds the comparisons
that docs/accuracy.md shows ("Held-out: public SGLang logs"). The bounds are the ones reached
on these rows; a change that loosens one must say why in docs/inference.md.
"""

from __future__ import annotations

import statistics

import pytest

from bench.validate import public_logs_sglang as p


@pytest.fixture(scope="module")
def results() -> tuple[list[p.Comparison], list[p.Unresolved]]:
    return p.results()


def _component(results: tuple[list[p.Comparison], list[p.Unresolved]], name: str) -> list[float]:
    return [abs(c.error) for c in results[0] if c.component == name]


def test_every_row_is_compared_or_listed(
    results: tuple[list[p.Comparison], list[p.Unresolved]],
) -> None:
    ids = [r["row_id"] for r in p.rows()]
    assert len(ids) == 21
    seen = {c.row for c in results[0]} | {u.row for u in results[1]}
    # Rows with nothing comparable and nothing listed would vanish from the report.
    missing = set(ids) - seen
    assert not missing
    assert all(u.reason for u in results[1])


@pytest.mark.parametrize("component", ["k_size", "kv_total"])
def test_kv_bytes_per_token_within_0_1_percent(
    results: tuple[list[p.Comparison], list[p.Unresolved]], component: str
) -> None:
    # SGLang prints two decimals of GiB: 0.005 / 8.23 is 0.06 %.
    errs = _component(results, component)
    assert errs
    assert max(errs) <= 0.001


def test_weights_within_4_percent(results: tuple[list[p.Comparison], list[p.Unresolved]]) -> None:
    # Qwen2.5-3B prints 0.21 GiB above its tensors (5.97 / 5.96 GiB against 5.75): the known
    # gap of docs/inference.md.
    errs = _component(results, "weights")
    assert len(errs) >= 5
    assert statistics.fmean(errs) <= 0.035
    assert max(errs) <= 0.04


def test_pool_tokens_within_1_5_percent(
    results: tuple[list[p.Comparison], list[p.Unresolved]],
) -> None:
    errs = _component(results, "kv_tokens")
    assert len(errs) >= 2
    assert max(errs) <= 0.015


def test_free_memory_before_init_within_0_5_percent(
    results: tuple[list[p.Comparison], list[p.Unresolved]],
) -> None:
    errs = _component(results, "free_before_init")
    assert errs
    assert max(errs) <= 0.005


def test_max_running_requests_derivation_exact(
    results: tuple[list[p.Comparison], list[p.Unresolved]],
) -> None:
    errs = _component(results, "max_running_requests")
    assert errs
    assert max(errs) == 0


def test_start_verdicts_agree(results: tuple[list[p.Comparison], list[p.Unresolved]]) -> None:
    errs = _component(results, "starts")
    assert len(errs) >= 3
    assert not any(errs)


def test_cuda_graph_reserve_under_measured(
    results: tuple[list[p.Comparison], list[p.Unresolved]],
) -> None:
    # SGLang's own 2 MiB per decode batch size is what the slack check uses; it falls short of
    # every printed capture (19 - 40 %), a gap docs/inference.md names.
    cs = [c for c in results[0] if c.component == "cuda_graph"]
    assert len(cs) >= 3
    assert all(-0.41 <= c.error < 0 for c in cs)


def test_free_memory_at_weights_within_1_percent(
    results: tuple[list[p.Comparison], list[p.Unresolved]],
) -> None:
    # QwQ-32B at TP 4 on L4 (SGLang 0.4.3.post3): the CUDA total less the context and the TP
    # group's communicators on a PCIe board, the memory free at start the budget is a fraction of.
    errs = _component(results, "free_at_weights")
    assert errs
    assert max(errs) <= 0.01


def test_pool_tokens_median_below_2_percent(
    results: tuple[list[p.Comparison], list[p.Unresolved]],
) -> None:
    errs = _component(results, "kv_tokens")
    assert statistics.median(errs) < 0.02


def test_communicators_at_init(results: tuple[list[p.Comparison], list[p.Unresolved]]) -> None:
    # On an NVSwitch board (TP 8) the fitted figure is within 3 %; on PCIe (4 × L4) the
    # per-peer channel buffers price 0.375 GiB where SGLang's init grew 0.13 GiB: an
    # over-estimate (a smaller pool, never a wrong "fits"), the known gap docs/inference.md
    # names.
    cs = {c.row: c for c in results[0] if c.component == "init_mem_usage"}
    assert abs(cs["s_pr11716"].error) <= 0.03
    assert cs["s_4127"].estimate > cs["s_4127"].measured
