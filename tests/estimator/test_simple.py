"""The simple estimator reproduces the PAI guide's worked examples exactly (figures from the
guide, not from this code), and scales as its rules say."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from service.estimator.simple import (
    SimpleModel,
    estimate_finetune_simple,
    estimate_inference_simple,
)

SEVEN_B = SimpleModel(
    parameter_count=7_000_000_000, active_parameter_count=7_000_000_000, dtype="fp16"
)


def test_guide_inference_example_7b_fp16() -> None:
    est = estimate_inference_simple(
        SEVEN_B, weight_format="fp16", batch_size=1, sequence_length=2048, concurrency=1
    )
    assert est.total["weights"] == 14_000_000_000
    assert est.total["activations"] == 1_400_000_000
    assert est.total["kv_cache"] == 1_400_000_000
    assert 1_000_000_000 <= est.total["overhead"] <= 2_000_000_000
    assert est.estimator == "simple"


def test_guide_finetune_example_7b_fp16_adam() -> None:
    est = estimate_finetune_simple(
        SEVEN_B,
        method="full",
        weight_format="fp16",
        precision="fp16-mixed",
        optimizer="adam",
        batch_size=1,
        sequence_length=2048,
    )
    assert est.total["weights"] == 14_000_000_000
    assert est.total["gradients"] == 14_000_000_000
    assert est.total["optimizer_states"] == 56_000_000_000
    assert est.total["activations"] == 1_400_000_000
    assert 1_000_000_000 <= est.total["overhead"] <= 2_000_000_000


def test_guide_optimizer_table() -> None:
    # SGD 0, momentum 1, RMSprop 1, Adam/AdamW 2 states of 4 bytes per trainable parameter.
    expected = {"sgd": 0, "sgd-momentum": 1, "rmsprop": 1, "adam": 2, "adamw": 2}
    for optimizer, states in expected.items():
        est = estimate_finetune_simple(
            SEVEN_B,
            method="full",
            weight_format="fp16",
            precision="fp16-mixed",
            optimizer=optimizer,
            batch_size=1,
            sequence_length=2048,
        )
        assert est.total["optimizer_states"] == 7_000_000_000 * 4 * states


def test_moe_activations_use_active_parameters() -> None:
    moe = SimpleModel(671_000_000_000, 37_000_000_000, "bf16")
    est = estimate_inference_simple(
        moe, weight_format=None, batch_size=1, sequence_length=2048, concurrency=1
    )
    assert est.total["activations"] == 37_000_000_000 * 2 // 10
    assert est.total["kv_cache"] == 671_000_000_000 * 2 // 10
    assert est.total["weights"] == 671_000_000_000 * 2


def test_int4_weights_are_half_a_byte() -> None:
    est = estimate_inference_simple(
        SEVEN_B, weight_format="int4", batch_size=1, sequence_length=2048, concurrency=1
    )
    assert est.total["weights"] == 3_500_000_000


def test_kv_scales_with_concurrency_and_tensor_parallel_splits() -> None:
    est = estimate_inference_simple(
        SEVEN_B,
        weight_format="fp16",
        batch_size=2,
        sequence_length=4096,
        concurrency=3,
        tensor_parallel_size=2,
    )
    assert est.total["kv_cache"] == 1_400_000_000 * 2 * 2 * 3
    assert est.per_gpu["weights"] == 7_000_000_000
    assert est.gpu_count == 2


@given(st.integers(1, 64), st.integers(1, 200_000), st.integers(1, 64), st.integers(1, 64))
def test_more_tokens_never_need_less_memory(batch: int, seq: int, more_b: int, more_s: int) -> None:
    def total(b: int, s: int) -> int:
        return estimate_inference_simple(
            SEVEN_B, weight_format="bf16", batch_size=b, sequence_length=s, concurrency=1
        ).total_bytes

    assert total(batch + more_b, seq + more_s) >= total(batch, seq)
