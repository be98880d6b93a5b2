"""The GPU a fit is judged on, as the estimator needs it.

The HTTP layer builds a :class:`GpuSpec` from a catalog record (or from a bare memory figure a
scheduler holds): the memory a process sees (a whole GPU, or one MIG slice), what the CUDA
runtime reports as its total (what engines budget from), and the capabilities engines check
(compute capability, bf16, fp8). Capabilities left unknown are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_GPUS_PER_NODE", "MAX_THREADS_PER_MULTIPROCESSOR", "GpuPerformance", "GpuSpec"]

#: GPUs tensor parallelism may span: one node's NVLink domain (8 on HGX / DGX boards).
DEFAULT_GPUS_PER_NODE = 8

#: Resident threads one multiprocessor holds, by compute capability (NVIDIA CUDA C++
#: Programming Guide, "Technical Specifications per Compute Capability": "Maximum number of
#: resident threads per SM"); the driver sizes a context's local-memory reservation by it.
MAX_THREADS_PER_MULTIPROCESSOR: dict[tuple[int, int], int] = {
    (7, 0): 2048,
    (7, 5): 1024,
    (8, 0): 2048,
    (8, 6): 1536,
    (8, 9): 1536,
    (9, 0): 2048,
    (10, 0): 2048,
    (10, 3): 2048,
    (12, 0): 1536,
}


@dataclass(frozen=True, slots=True)
class GpuPerformance:
    """What the performance model reads of a GPU (service/estimator/performance/): the
    catalog's datasheet peaks, in SI units, for the part a process sees (a MIG slice gets its
    share), the architecture family its calibration is keyed by, and the tensor-parallel link
    (None: not sourced)."""

    memory_bytes_per_s: float
    tensor_flops_per_s: float  # dense BF16 (FP16 where the GPU has no BF16)
    architecture: str | None
    interconnect: str | None = None
    interconnect_bytes_per_s: float | None = None  # one GPU, one direction
    mig_share: float | None = None  # the compute share of a MIG slice (None: whole GPU)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU type (or MIG slice) a workload is placed on.

    ``total_bytes`` is the total a CUDA process sees (``cudaMemGetInfo``; what vLLM prints as
    total GPU memory), the basis of every budget. ``mig_profile`` is set for a MIG slice: a
    process sees one slice, and NCCL does not span MIG instances. ``shared``: time-sliced
    replicas, whose memory is not isolated.
    """

    ref: str
    name: str
    total_bytes: int
    compute_capability: tuple[int, int] | None = None
    bf16: bool | None = None
    fp8: bool | None = None
    mig_profile: str | None = None
    mig_max_instances: int | None = None
    shared: bool = False
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    # The total the driver tool prints (nvidia-smi memory.total, rocm-smi VRAM total), which
    # SGLang sizes its defaults from; None for a MIG slice, whose process reads the CUDA total.
    driver_total_bytes: int | None = None
    vendor: str | None = None  # "nvidia", "amd", "intel" (None: unknown)
    # Streaming multiprocessors the process sees (None: unknown, and for a MIG slice).
    multiprocessors: int | None = None
    # Datasheet peaks for the performance model (None: an ad-hoc GPU known by its memory).
    performance: GpuPerformance | None = None

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None

    def resident_threads(self) -> int | None:
        """Threads the whole GPU can hold at once (multiprocessors × resident threads per
        multiprocessor of its compute capability); None when either is unknown."""
        if self.multiprocessors is None or self.compute_capability is None:
            return None
        per_sm = MAX_THREADS_PER_MULTIPROCESSOR.get(self.compute_capability)
        return None if per_sm is None else self.multiprocessors * per_sm

    def supports_bf16(self) -> bool:
        """bf16 compute (unknown: assumed, as on every GPU since Ampere)."""
        if self.bf16 is not None:
            return self.bf16
        return self.compute_capability is None or self.compute_capability >= (8, 0)
