"""Memory outside the model's tensors: CUDA context, library workspaces, NCCL, CUDA graphs.

These terms do not follow from the architecture; they are properties of the driver, the CUDA
libraries and the communication stack. Their sizes are entries of the calibration register
(:mod:`service.estimator.calibration`), which says what each stands for and where it comes
from; every estimate names the terms it used in its assumptions.

- CUDA context: the driver's per-process state on the device (code of loaded modules, the
  device heap, local memory), never seen by ``torch.cuda.memory_allocated``. The driver
  reserves local memory for every thread the GPU can hold at once (max resident threads per
  multiprocessor × multiprocessors × bytes per thread), which makes the context grow with the
  GPU: measured bare contexts (lazy module loading, the CUDA 11.7+ default) are 107 MiB on an
  RTX 4060 Ti and 612 MiB on a B200, about 2 KiB per resident thread on every GPU measured.
  A GPU whose multiprocessors are unknown (MIG slices, AMD, a bare memory figure) is priced
  as the reference GPU, an H100 SXM (the GPU the vLLM calibration ran on).
- The first forward's driver growth ("library workspace"): the local-memory reservation grows
  to the largest per-thread stack a launched kernel needs (the driver raises the stack limit
  per launch and never lowers it; the reservation is that stack × the resident threads), and
  kernel modules load on first use; vLLM's profiler sees it as its "non-torch" increase of
  about a quarter GiB on one H100. Priced per resident thread, as the context.
- NCCL: each communicator allocates per-peer, per-channel buffers (NCCL_BUFFSIZE = 4 MiB per
  channel and direction) plus NVLink SHARP / symmetric buffers on NVSwitch systems; vLLM keeps
  two communicators per TP group (torch's ProcessGroupNCCL and its own PyNccl) and a custom
  all-reduce buffer. The sum measured as vLLM's non-torch increase at TP >= 2 on H100 NVSwitch
  boards is 1.8-1.9 GiB: that calibration, split into a fixed part and a part per extra peer.
- CUDA graphs (vLLM): the private memory pool of the captured decode graphs, which grows with the
  number of captured layers (nodes) on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.calibration import value
from service.estimator.gpu import GpuSpec
from service.estimator.units import GIB

__all__ = [
    "REFERENCE_RESIDENT_THREADS",
    "OverheadTerms",
    "cuda_context_bytes",
    "cuda_graph_pool_bytes",
    "driver_reservation_note",
    "framework_overhead",
    "library_workspace_bytes",
    "nccl_bytes",
    "nvswitch_board",
]

# Resident threads of the reference GPU, an H100 SXM (132 multiprocessors × 2048): what a GPU
# whose multiprocessors are unknown is priced as.
REFERENCE_RESIDENT_THREADS = 132 * 2048


# Communicators a vLLM TP group keeps: torch's ProcessGroupNCCL and vLLM's own PyNccl.
TP_COMMUNICATORS = 2


def nvswitch_board(gpu: GpuSpec | None) -> bool:
    """Whether TP peers share an NVSwitch board of the Hopper generation or later (NVLink
    SHARP): SXM parts of compute capability 9.0 / 10.x; unknown GPUs and AMD's fully connected
    XGMI boards keep the fitted figure."""
    if gpu is None or gpu.compute_capability is None:
        return True
    name = gpu.name.lower()
    if "pcie" in name or " nvl" in name:
        return False
    return gpu.compute_capability in ((9, 0), (10, 0), (10, 3))


def nccl_bytes(
    tensor_parallel_size: int, pipeline_parallel_size: int, *, nvswitch: bool = True
) -> int:
    """NCCL buffers one GPU holds for its TP group and its pipeline neighbours.

    ``nvswitch``: the GPUs sit on an NVSwitch board of the Hopper generation or later, where
    NCCL also sets up NVLink SHARP buffers: the fitted figure. Elsewhere (PCIe, NVLink bridges,
    Ampere and older) a TP group holds its communicators' channel buffers only: per peer the
    same default channel buffers as a pipeline peer, in each of the group's two communicators.
    """
    b = 0
    if tensor_parallel_size > 1 and nvswitch:
        b += int(
            value("nccl.tp_group_bytes") + value("nccl.tp_peer_bytes") * (tensor_parallel_size - 1)
        )
    elif tensor_parallel_size > 1:
        b += int(TP_COMMUNICATORS * value("nccl.pp_peer_bytes") * (tensor_parallel_size - 1))
    if pipeline_parallel_size > 1:
        b += int(value("nccl.pp_peer_bytes"))
    return b


def cuda_graph_pool_bytes(layers_on_gpu: int) -> int:
    """vLLM's CUDA-graph memory pool for the graphs of a GPU holding `layers_on_gpu` layers."""
    return int(
        value("vllm.cuda_graph_base_bytes")
        + value("vllm.cuda_graph_per_layer_bytes") * layers_on_gpu
    )


def _known_threads(gpu: GpuSpec | None) -> int | None:
    """``gpu``'s resident threads when it is an NVIDIA GPU of known multiprocessors."""
    return gpu.resident_threads() if gpu is not None and gpu.vendor == "nvidia" else None


def _resident_threads(gpu: GpuSpec | None) -> int:
    """``gpu``'s resident threads, else the reference GPU's."""
    threads = _known_threads(gpu)
    return REFERENCE_RESIDENT_THREADS if threads is None else threads


def cuda_context_bytes(gpu: GpuSpec | None = None) -> int:
    """The CUDA context on ``gpu`` (None: unknown): resident threads × bytes per thread."""
    return int(_resident_threads(gpu) * value("cuda.context_bytes_per_resident_thread"))


def driver_reservation_note(gpu: GpuSpec | None) -> str:
    """The assumption behind the context and first-forward terms on ``gpu``."""
    per = (
        f"{value('cuda.context_bytes_per_resident_thread'):.0f} B (context) and "
        f"{value('cuda.library_workspace_bytes_per_resident_thread'):.0f} B (first forward's "
        "driver growth) per resident thread"
    )
    threads = _known_threads(gpu)
    if threads is None:
        return (
            f"CUDA context and driver growth: {per}, priced for an H100 SXM's "
            f"{REFERENCE_RESIDENT_THREADS:,} resident threads (this GPU's multiprocessors "
            "are not known)"
        )
    assert gpu is not None  # threads are known only for a GPU
    note = (
        f"CUDA context and driver growth: {per}, for {threads:,} resident threads "
        f"({gpu.multiprocessors} multiprocessors)"
    )
    if threads != REFERENCE_RESIDENT_THREADS:
        # The growth term's rows are all H100 SXM (calibration.py, its applies_to).
        note += (
            "; the driver growth per thread was fitted on H100 SXM rows only and is applied "
            "to this GPU uncalibrated"
        )
    return note


def library_workspace_bytes(gpu: GpuSpec | None = None) -> int:
    """What the first forward makes the driver take on ``gpu`` (None: unknown)."""
    return int(_resident_threads(gpu) * value("cuda.library_workspace_bytes_per_resident_thread"))


@dataclass(frozen=True, slots=True)
class OverheadTerms:
    """Named overhead terms of one GPU, bytes."""

    cuda_context: int = 0
    library_workspace: int = 0
    nccl: int = 0
    cuda_graphs: int = 0
    # A forward's transients held beside the budget (SGLang: one prefill chunk's).
    activations: int = 0
    # SGLang's req_to_token table, allocated after the pool is sized.
    request_table: int = 0
    # A MoE dispatch/combine backend's buffers (DeepEP), per GPU.
    all_to_all: int = 0
    # A KV-transfer connector's GPU buffers (disaggregated prefill/decode), per GPU.
    kv_transfer: int = 0

    @property
    def total(self) -> int:
        return (
            self.cuda_context
            + self.library_workspace
            + self.nccl
            + self.cuda_graphs
            + self.activations
            + self.request_table
            + self.all_to_all
            + self.kv_transfer
        )

    def lines(self) -> list[str]:
        out = []
        if self.cuda_context:
            out.append(f"CUDA context {self.cuda_context / GIB:.2f} GiB per GPU")
        if self.library_workspace:
            out.append(
                "first forward's driver growth (stack reservation, lazily loaded kernels) "
                f"{self.library_workspace / GIB:.2f} GiB per GPU (per resident thread, fitted "
                "on H100 SXM rows only; other GPUs scaled by their resident threads, "
                "uncalibrated)"
            )
        if self.nccl:
            out.append(f"NCCL buffers {self.nccl / GIB:.2f} GiB per GPU")
        if self.cuda_graphs:
            out.append(f"CUDA graph pool {self.cuda_graphs / GIB:.2f} GiB per GPU")
        if self.activations:
            out.append(f"forward activations {self.activations / GIB:.2f} GiB per GPU")
        if self.request_table:
            out.append(f"request-to-token table {self.request_table / GIB:.2f} GiB per GPU")
        if self.all_to_all:
            out.append(f"MoE all-to-all buffers {self.all_to_all / GIB:.2f} GiB per GPU")
        if self.kv_transfer:
            out.append(f"KV-transfer buffers {self.kv_transfer / GIB:.2f} GiB per GPU")
        return out


def framework_overhead(
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    *,
    uses_nccl: bool = True,
    cuda_context: bool = True,
    nvswitch: bool = True,
    gpu: GpuSpec | None = None,
) -> OverheadTerms:
    """Context, workspaces and communication buffers of a plain PyTorch process on one GPU."""
    nccl = nccl_bytes(tensor_parallel_size, pipeline_parallel_size, nvswitch=nvswitch)
    return OverheadTerms(
        cuda_context=cuda_context_bytes(gpu) if cuda_context else 0,
        library_workspace=library_workspace_bytes(gpu),
        nccl=nccl if uses_nccl else 0,
    )
