"""Optimizer states and the transient of the update step, per trainable tensor.

Sources (the implementations, read for which tensors they allocate):

- PyTorch ``torch.optim`` Adam/AdamW/SGD/RMSprop: states are created with ``zeros_like(param)``,
  so they take the parameter's dtype (fp32 under AMP, bf16 in pure-bf16 training). Adam keeps
  ``exp_avg`` and ``exp_avg_sq``; SGD with momentum a ``momentum_buffer``; RMSprop a
  ``square_avg``. The default ``foreach`` implementation on CUDA computes
  ``torch._foreach_sqrt(exp_avg_sqs)`` into a new list the size of all parameters (Adam/AdamW,
  RMSprop); ``fused=True`` (and plain SGD) updates in place.
- bitsandbytes ``AdamW8bit`` / ``PagedAdamW8bit``: each state one byte per element with one
  fp32 absmax per block of 256 (block-wise quantization) and a 256-entry fp32 quantile map per
  state; tensors under ``min_8bit_size`` (4096 elements) keep 32-bit states. Paged variants put
  states in CUDA unified memory, which the driver pages out to host under pressure: they are
  resident during the optimizer step only.
- transformers ``Adafactor`` (defaults: no first moment, factored second moment): one fp32 row
  vector (``shape[:-1]``) and one fp32 column vector per matrix, a full fp32 ``exp_avg_sq``
  for vectors. The update works tensor by tensor on fp32 copies.
- Lion (lion-pytorch): one ``exp_avg`` in the parameter dtype; per-tensor update temporaries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.estimator.errors import InvalidRequest
from service.estimator.units import cdiv

__all__ = [
    "OPTIMIZERS",
    "OptimizerFootprint",
    "OptimizerSpec",
    "TensorGroup",
    "get_optimizer",
    "optimizer_footprint",
]

_FP32 = 4
_BNB_BLOCK = 256
_BNB_MIN_8BIT_SIZE = 4096
_BNB_QMAP_BYTES = 256 * 4


@dataclass(frozen=True, slots=True)
class OptimizerSpec:
    """How one optimizer lays out its state.

    ``states`` full-size states in the parameter dtype (``layout="param"``), one-byte states
    with block scales (``"int8-block"``) or a factored fp32 second moment (``"factored"``).
    ``foreach_temp`` is the size of the foreach update temporary in units of the states'
    bytes per element (1 for Adam: one sqrt(v) list); ``per_tensor_temps`` the number of
    temporaries the size of one tensor for implementations that loop over tensors.
    """

    name: str
    states: int
    layout: str = "param"
    foreach_temp: int = 0
    per_tensor_temps: int = 0
    paged: bool = False
    supports_foreach: bool = True
    description: str = ""


_TABLE: dict[str, OptimizerSpec] = {
    s.name: s
    for s in (
        OptimizerSpec("adamw", 2, foreach_temp=1, description="torch AdamW: exp_avg, exp_avg_sq"),
        OptimizerSpec("adam", 2, foreach_temp=1, description="torch Adam: exp_avg, exp_avg_sq"),
        OptimizerSpec(
            "adamw-8bit",
            2,
            "int8-block",
            per_tensor_temps=0,
            supports_foreach=False,
            description="bitsandbytes AdamW8bit: two uint8 states, fp32 absmax per 256",
        ),
        OptimizerSpec(
            "paged-adamw-8bit",
            2,
            "int8-block",
            paged=True,
            supports_foreach=False,
            description="bitsandbytes PagedAdamW8bit: as adamw-8bit, in unified memory",
        ),
        OptimizerSpec("sgd", 0, description="torch SGD without momentum: no state"),
        OptimizerSpec("sgd-momentum", 1, description="torch SGD: momentum_buffer"),
        OptimizerSpec("rmsprop", 1, foreach_temp=1, description="torch RMSprop: square_avg"),
        OptimizerSpec(
            "adafactor",
            1,
            "factored",
            per_tensor_temps=3,
            supports_foreach=False,
            description="transformers Adafactor: factored fp32 second moment",
        ),
        OptimizerSpec(
            "lion",
            1,
            per_tensor_temps=2,
            supports_foreach=False,
            description="Lion: exp_avg",
        ),
    )
}

#: Optimizers a fine-tuning request may name (the API enum is built from this tuple).
OPTIMIZERS: tuple[str, ...] = tuple(_TABLE)


def get_optimizer(name: str) -> OptimizerSpec:
    try:
        return _TABLE[name]
    except KeyError:
        raise InvalidRequest(
            f"unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}", field="optimizer"
        ) from None


@dataclass(frozen=True, slots=True)
class TensorGroup:
    """``count`` trainable tensors of shape (rows, cols) (cols 0: a vector), each element
    ``dtype_bytes`` wide (the parameter's dtype, which PyTorch states follow)."""

    rows: int
    cols: int
    count: int
    dtype_bytes: int

    @property
    def numel(self) -> int:
        return self.rows * max(self.cols, 1)


@dataclass(frozen=True, slots=True)
class OptimizerFootprint:
    """Optimizer bytes for a set of trainable tensors (unsharded)."""

    state_bytes: int  # persistent states
    update_temp_bytes: int  # transient during step()
    paged: bool  # states live in unified memory (resident during the step only)


def _state_bytes(spec: OptimizerSpec, g: TensorGroup) -> int:
    n = g.numel
    if spec.states == 0:
        return 0
    if spec.layout == "param":
        return spec.states * n * g.dtype_bytes * g.count
    if spec.layout == "int8-block":
        if n < _BNB_MIN_8BIT_SIZE:
            return spec.states * n * _FP32 * g.count
        per_state = n + _FP32 * cdiv(n, _BNB_BLOCK) + _BNB_QMAP_BYTES
        return spec.states * per_state * g.count
    if spec.layout == "factored":
        if g.cols:
            return (g.rows + g.cols) * _FP32 * g.count
        return n * _FP32 * g.count
    raise AssertionError(spec.layout)  # pragma: no cover


def optimizer_footprint(
    spec: OptimizerSpec, groups: Iterable[TensorGroup], foreach: bool = True
) -> OptimizerFootprint:
    """States and update transient of ``spec`` over ``groups`` (unsharded, on one device)."""
    groups = tuple(groups)
    states = sum(_state_bytes(spec, g) for g in groups)
    temp = 0
    if foreach and spec.supports_foreach and spec.foreach_temp:
        temp = spec.foreach_temp * sum(g.numel * g.dtype_bytes * g.count for g in groups)
    elif spec.per_tensor_temps and groups:
        # Tensor-by-tensor implementations hold temporaries (fp32 for Adafactor) of the largest
        # tensor only.
        width = _FP32 if spec.layout == "factored" else None
        temp = spec.per_tensor_temps * max(g.numel * (width or g.dtype_bytes) for g in groups)
    return OptimizerFootprint(states, temp, spec.paged)
