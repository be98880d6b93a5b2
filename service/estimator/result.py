"""The shape every estimator returns: bytes by component, per GPU and in total.

Both estimators (`simple`, `detailed`) and both kinds (inference, fine-tuning) answer with an
`Estimate`; the HTTP layer only renders it. Fit verdicts are a separate `Fit`, computed from an
estimate and a GPU's memory by the kind-specific fit functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from service.estimator.parallel import Layout


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


class FitReason(StrEnum):
    """Why a request fits or not: the first check that fails, in this order."""

    FITS = "fits"
    TOO_FEW_GPUS = "too_few_gpus"
    INVALID_LAYOUT = "invalid_layout"
    MIG_CANNOT_SPAN = "mig_cannot_span"
    DTYPE_UNSUPPORTED = "dtype_unsupported"
    WEIGHTS_EXCEED_MEMORY = "weights_exceed_memory"
    ENGINE_BUDGET_EXHAUSTED = "engine_budget_exhausted"
    OUTSIDE_BUDGET_EXCEEDED = "outside_budget_exceeded"
    KV_POOL_BELOW_ONE_SEQUENCE = "kv_pool_below_one_sequence"
    WORKLOAD_EXCEEDS_MEMORY = "workload_exceeds_memory"
    HOST_MEMORY_EXCEEDED = "host_memory_exceeded"


#: What each reason means, for people (the summary and the docs use these words).
REASON_TEXT: Mapping[FitReason, str] = {
    FitReason.FITS: "fits",
    FitReason.TOO_FEW_GPUS: (
        "the engine's parallel layout uses more GPUs than it is given: it will not start"
    ),
    FitReason.INVALID_LAYOUT: "the engine cannot run this parallel layout",
    FitReason.MIG_CANNOT_SPAN: "one process sees one MIG slice; NCCL does not span MIG instances",
    FitReason.DTYPE_UNSUPPORTED: "the GPU cannot run this dtype or quantization",
    FitReason.WEIGHTS_EXCEED_MEMORY: "the weights alone exceed the usable memory",
    FitReason.ENGINE_BUDGET_EXHAUSTED: (
        "weights and the engine's fixed reserve leave no memory for the KV cache"
    ),
    FitReason.OUTSIDE_BUDGET_EXCEEDED: (
        "the memory the engine's budget leaves cannot hold its CUDA context and graphs"
    ),
    FitReason.KV_POOL_BELOW_ONE_SEQUENCE: (
        "the KV-cache pool holds less than one sequence of the maximum length: the engine "
        "refuses to start"
    ),
    FitReason.WORKLOAD_EXCEEDS_MEMORY: "the requested batch and sequence length exceed memory",
    FitReason.HOST_MEMORY_EXCEEDED: (
        "what the engine holds in host memory (offloaded weights, adapter and KV caches, swap) "
        "exceeds the memory the pod may use: the kubelet would kill it"
    ),
}


@dataclass(frozen=True, slots=True)
class Fit:
    """Whether an estimate fits a GPU type and count, and the inverse answers.

    ``reason`` is the first check that fails (``fits`` when none does) and ``reason_detail``
    its figures; ``layout`` is the parallel layout judged; ``min_gpu_layout`` the layout of
    ``min_gpu_count``, one the engine can run; ``engine_args`` the engine flags of a setup that
    fits (the judged one, else the minimal one), None for engines without a command line.
    """

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
    reason: FitReason = FitReason.FITS
    reason_detail: str = ""
    layout: Layout | None = None
    min_gpu_layout: Layout | None = None
    engine_args: tuple[str, ...] | None = None
    # Why ``min_gpu_layout`` is that layout (the form operators run, what smaller fails).
    min_gpu_layout_reason: str | None = None
