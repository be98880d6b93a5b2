"""Optimizer state sizes, checked against hand calculations from the implementations."""

from service.estimator.training.optimizers import (
    OPTIMIZERS,
    TensorGroup,
    get_optimizer,
    optimizer_footprint,
)

# One 4096 x 4096 matrix in bf16 (2 bytes) and one 4096-vector.
MAT = TensorGroup(4096, 4096, 1, 2)
VEC = TensorGroup(4096, 0, 1, 2)
N = 4096 * 4096


def test_adamw_two_states_in_param_dtype_and_foreach_temp():
    f = optimizer_footprint(get_optimizer("adamw"), [MAT])
    assert f.state_bytes == 2 * N * 2  # exp_avg + exp_avg_sq, bf16
    assert f.update_temp_bytes == N * 2  # torch._foreach_sqrt(exp_avg_sqs)
    fused = optimizer_footprint(get_optimizer("adamw"), [MAT], foreach=False)
    assert fused.update_temp_bytes == 0


def test_sgd_variants():
    assert optimizer_footprint(get_optimizer("sgd"), [MAT]).state_bytes == 0
    assert optimizer_footprint(get_optimizer("sgd-momentum"), [MAT]).state_bytes == N * 2
    assert optimizer_footprint(get_optimizer("rmsprop"), [MAT]).state_bytes == N * 2
    assert optimizer_footprint(get_optimizer("lion"), [MAT]).state_bytes == N * 2


def test_adamw_8bit_block_scales_and_small_tensors():
    f = optimizer_footprint(get_optimizer("adamw-8bit"), [MAT, TensorGroup(1024, 0, 1, 2)])
    # two uint8 states + fp32 absmax per 256 + 256-entry fp32 qmap each; the 1024-vector is
    # under bitsandbytes' min_8bit_size (4096) and keeps two fp32 states.
    per_state = N + 4 * (N // 256) + 256 * 4
    assert f.state_bytes == 2 * per_state + 2 * 1024 * 4


def test_paged_variant_is_flagged():
    assert optimizer_footprint(get_optimizer("paged-adamw-8bit"), [MAT]).paged


def test_adafactor_factored():
    f = optimizer_footprint(get_optimizer("adafactor"), [MAT, VEC])
    assert f.state_bytes == (4096 + 4096) * 4 + 4096 * 4


def test_every_optimizer_resolves():
    for name in OPTIMIZERS:
        assert get_optimizer(name).name == name
