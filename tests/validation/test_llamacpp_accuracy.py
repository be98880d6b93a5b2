"""The llama.cpp engine against llama.cpp's own printed buffer sizes (bench/validate/llamacpp.py,
docs/accuracy.md "llama.cpp").

Bounds: the KV cache and the model buffers within 0.01% (they are exact byte counts; the
printed MiB have two decimals; model buffers of Q4_0 and Q4_K_S files are priced tensor by
tensor by llama-quantize's preset rule), the compute buffers within 2.5% (the worst row is a January
2025 build without the V-cache row indices the current graph reserves)."""

from __future__ import annotations

import pytest

from bench.validate import llamacpp as v


@pytest.fixture(scope="module")
def comparisons() -> list[v.Comparison]:
    return v.results()


def test_every_case_names_a_row_and_every_row_is_accounted_for() -> None:
    ids = {r["row_id"] for r in v.rows()}
    assert set(v.CASES) <= ids
    assert ids == set(v.CASES) | set(v.NOT_COMPARED)
    for r in v.rows():
        assert r["source_url"].startswith("https://github.com/"), r["row_id"]


def test_enough_figures_are_compared(comparisons: list[v.Comparison]) -> None:
    counted = [c for c in comparisons if c.excluded is None]
    assert len(counted) >= 15
    figures = {c.figure for c in counted}
    assert {"kv_cache", "gpu_compute", "host_compute", "cpu_model", "gpu_model"} <= figures


def test_preset_files_are_compared(comparisons: list[v.Comparison]) -> None:
    presets = {row_id for row_id, case in v.CASES.items() if case.preset is not None}
    compared = {c.row_id for c in comparisons if c.figure == "gpu_model"}
    assert len(presets) >= 2 and presets <= compared


@pytest.mark.parametrize(
    ("figure", "bound"),
    [
        ("kv_cache", 0.0001),
        ("cpu_model", 0.0001),
        ("gpu_model", 0.0001),
        ("host_compute", 0.001),
        ("gpu_compute", 0.025),
    ],
)
def test_error_bounds(comparisons: list[v.Comparison], figure: str, bound: float) -> None:
    for c in comparisons:
        if c.figure == figure and c.excluded is None:
            assert abs(c.error) <= bound, (c.row_id, c.printed_mib, c.estimated_mib)
