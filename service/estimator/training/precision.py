"""Training precision: which dtype each kind of training tensor is held in.

Follows PyTorch's automatic mixed precision (``torch.autocast``) and the layouts of the common
trainers:

- ``bf16-mixed`` / ``fp16-mixed``: fp32 master weights, fp32 gradients (autograd writes a
  parameter's gradient in the parameter's dtype), optimizer states in fp32, 16-bit compute
  under autocast. Autocast keeps a 16-bit copy of every linear weight used in the forward,
  and those copies are what the linear layers save for backward, so they count as
  activations (`training_activations`). Under ZeRO/FSDP the same bytes are laid out the
  DeepSpeed way instead: 16-bit weights and gradients, fp32 master copy with the states
  (see `sharding`).
- ``bf16``: everything in bf16 (weights, gradients, and PyTorch optimizer states, which follow
  the parameter dtype), as most single-GPU recipes (LitGPT ``bf16-true``) run.
- ``fp32``: everything in fp32.

LoRA adapters are fp32 whatever the base (peft's ``autocast_adapter_dtype=True``).
Element sizes come from `formats.bytes_per_element`.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.errors import InvalidRequest
from service.estimator.units import bytes_per_element

__all__ = ["ADAPTER_DTYPE", "PRECISIONS", "Precision", "get_precision"]


@dataclass(frozen=True, slots=True)
class Precision:
    """Dtypes of one precision recipe (canonical short names, see `units.DTYPE_BYTES`)."""

    name: str
    master: str  # trainable weights as the model holds them
    compute: str  # activations and matmul inputs
    grad: str  # gradients of trainable weights
    autocast: bool  # compute dtype differs from the weights' (AMP)

    @property
    def master_bytes(self) -> int:
        return int(bytes_per_element(self.master))

    @property
    def compute_bytes(self) -> int:
        return int(bytes_per_element(self.compute))

    @property
    def grad_bytes(self) -> int:
        return int(bytes_per_element(self.grad))


_TABLE: dict[str, Precision] = {
    "bf16-mixed": Precision("bf16-mixed", "fp32", "bf16", "fp32", True),
    "fp16-mixed": Precision("fp16-mixed", "fp32", "fp16", "fp32", True),
    "bf16": Precision("bf16", "bf16", "bf16", "bf16", False),
    "fp32": Precision("fp32", "fp32", "fp32", "fp32", False),
}

#: Precisions a fine-tuning request may name (the API enum is built from this tuple).
PRECISIONS: tuple[str, ...] = tuple(_TABLE)

#: peft keeps LoRA A/B in fp32 on a 16-bit base.
ADAPTER_DTYPE = "fp32"


def get_precision(name: str) -> Precision:
    try:
        return _TABLE[name]
    except KeyError:
        raise InvalidRequest(
            f"unknown precision {name!r}; allowed: {', '.join(PRECISIONS)}", field="precision"
        ) from None
