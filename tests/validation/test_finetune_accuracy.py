"""Accuracy bounds of the fine-tuning estimator against committed tracer data and the
published measurements with stated settings (bench/validate/finetune.py)."""

import pytest

from bench.validate import finetune as v


def test_against_reference_tracer():
    cases = v.tracer_cases()
    if not cases:
        pytest.skip("no committed tracer data")
    s = v.summarize(cases)
    worst = max(cases, key=lambda c: abs(c.error))
    assert s.median_abs <= 0.05, s
    assert s.worst_abs <= 0.10, f"{worst.name}: {worst.error:+.1%}"


def _published():
    cases = v.published_cases()
    if not cases:
        pytest.skip("../shared/validation not present")
    return cases


def test_published_median_error():
    s = v.summarize(_published())
    assert s.median_abs <= 0.10, s


@pytest.mark.xfail(
    strict=True,
    reason="known gaps (docs/finetune.md, 'Open gaps'): ms-swift's Qwen-v1 runs beyond 2048 "
    "tokens and LitGPT's bitsandbytes QLoRA runs measure more than the modelled mechanisms",
)
def test_published_no_underestimate_beyond_10_percent():
    under = [c for c in _published() if c.error < -0.10]
    assert not under, "under-estimated by more than 10%: " + ", ".join(
        f"{c.name} {c.error:+.1%}" for c in under
    )
