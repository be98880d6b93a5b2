"""The shape every estimator returns: bytes by component, per GPU and in total.

Both estimators (`simple`, `detailed`) and both kinds (inference, fine-tuning) answer with an
`Estimate`; the HTTP layer only renders it. Fit verdicts are a separate `Fit`, computed from an
estimate and a GPU's memory by the kind-specific fit functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a serving engine reports at start-up, per GPU (vLLM, SGLang)."""

    kv_cache_bytes_per_token: int
    kv_cache_pool_bytes: int
    kv_cache_tokens: int
    max_concurrency: float
    sequence_length: int
    # Components the engine subtracts from its budget before sizing the pool, in bytes.
    budget_bytes: int
    subtracted: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Estimate:
    """Bytes by component. `total` is summed over all GPUs; `per_gpu` is the most loaded GPU."""

    kind: str  # "inference" | "finetune"
    estimator: str  # "simple" | "detailed"
    total: Mapping[str, int]
    per_gpu: Mapping[str, int]
    gpu_count: int
    assumptions: tuple[str, ...]
    capacity: Capacity | None = None
    # Host memory the job needs outside the GPUs (CPU offload), in bytes; 0 when none.
    cpu_bytes: int = 0
    # Extra facts for the response (e.g. trainable parameter count); plain JSON-able values.
    details: Mapping[str, int | float | str | bool | None] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(self.total.values())

    @property
    def per_gpu_bytes(self) -> int:
        return sum(self.per_gpu.values())


@dataclass(frozen=True, slots=True)
class Fit:
    """Whether an estimate fits a GPU type and count, and the inverse answers."""

    gpu: str
    gpu_count: int
    usable_bytes: int  # per GPU
    required_bytes: int  # per GPU (most loaded)
    fits: bool
    headroom_bytes: int  # usable - required; negative when it does not fit
    min_gpu_count: int | None
    max_batch_size: int | None
    max_sequence_length: int | None
    assumptions: tuple[str, ...] = ()
