"""Memory outside the model's tensors: CUDA context, library workspaces, NCCL, CUDA graphs.

These terms do not follow from the architecture; they are properties of the driver, the CUDA
libraries and the communication stack. Each constant below states what it stands for and where
its size comes from; every estimate names the terms it used in its assumptions.

- CUDA context: the driver's per-process state on the device (code of loaded modules, the
  device heap, local memory). With lazy module loading (CUDA 11.7+ default) it is about half a
  GiB on Ampere/Hopper, more without it. It is never seen by ``torch.cuda.memory_allocated``.
- Library workspaces and lazily loaded kernels: cuBLAS/cuBLASLt workspaces (32 MiB per handle
  on Hopper) and the kernel modules loaded on first use during the first forward pass; vLLM's
  profiler sees them as its "non-torch" increase of about a quarter GiB on one GPU.
- NCCL: each communicator allocates per-peer, per-channel buffers (NCCL_BUFFSIZE = 4 MiB per
  channel and direction) plus NVLink SHARP / symmetric buffers on NVSwitch systems; vLLM keeps
  two communicators per TP group (torch's ProcessGroupNCCL and its own PyNccl) and a custom
  all-reduce buffer. The sum measured as vLLM's non-torch increase at TP >= 2 on H100 NVSwitch
  boards is 1.8-1.9 GiB; the constants below are that calibration, split into a fixed part and a
  part per extra peer.
- CUDA graphs (vLLM): the private memory pool of the captured decode graphs, which grows with the
  number of captured layers (nodes) on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "LIBRARY_WORKSPACE_BYTES",
    "NCCL_BASE_BYTES",
    "NCCL_PER_PEER_BYTES",
    "OverheadTerms",
    "cuda_graph_pool_bytes",
    "framework_overhead",
    "nccl_bytes",
]

MIB = 2**20
GIB = 2**30

# Driver context with lazy loading on Ampere/Hopper (nvidia-smi shows ~500 MiB for an idle
# PyTorch process after torch.cuda.init()).
CUDA_CONTEXT_BYTES = 512 * MIB
# cuBLAS + cuBLASLt workspaces and lazily loaded kernel modules of a forward pass.
LIBRARY_WORKSPACE_BYTES = 256 * MIB
# NCCL communicators of one tensor-parallel group (two communicators, NVLS buffers on NVSwitch).
NCCL_BASE_BYTES = 1832 * MIB
NCCL_PER_PEER_BYTES = 40 * MIB
# Point-to-point (pipeline) communicators: channel buffers for one send/recv peer each way.
NCCL_P2P_BYTES = 64 * MIB
# vLLM CUDA-graph pool: a fixed part plus the per-layer nodes of the captured graphs.
CUDA_GRAPH_BASE_BYTES = 384 * MIB
CUDA_GRAPH_PER_LAYER_BYTES = 17 * MIB


def nccl_bytes(tensor_parallel_size: int, pipeline_parallel_size: int) -> int:
    """NCCL buffers one GPU holds for its TP group and its pipeline neighbours."""
    b = 0
    if tensor_parallel_size > 1:
        b += NCCL_BASE_BYTES + NCCL_PER_PEER_BYTES * (tensor_parallel_size - 1)
    if pipeline_parallel_size > 1:
        b += NCCL_P2P_BYTES
    return b


def cuda_graph_pool_bytes(layers_on_gpu: int) -> int:
    """vLLM's CUDA-graph memory pool for the graphs of a GPU holding `layers_on_gpu` layers."""
    return CUDA_GRAPH_BASE_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * layers_on_gpu


@dataclass(frozen=True, slots=True)
class OverheadTerms:
    """Named overhead terms of one GPU, bytes."""

    cuda_context: int = 0
    library_workspace: int = 0
    nccl: int = 0
    cuda_graphs: int = 0

    @property
    def total(self) -> int:
        return self.cuda_context + self.library_workspace + self.nccl + self.cuda_graphs

    def lines(self) -> list[str]:
        out = []
        if self.cuda_context:
            out.append(f"CUDA context {self.cuda_context / GIB:.2f} GiB per GPU")
        if self.library_workspace:
            out.append(
                f"cuBLAS workspaces and lazily loaded kernels {self.library_workspace / GIB:.2f}"
                " GiB per GPU"
            )
        if self.nccl:
            out.append(f"NCCL buffers {self.nccl / GIB:.2f} GiB per GPU")
        if self.cuda_graphs:
            out.append(f"CUDA graph pool {self.cuda_graphs / GIB:.2f} GiB per GPU")
        return out


def framework_overhead(
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    *,
    uses_nccl: bool = True,
    cuda_context: bool = True,
) -> OverheadTerms:
    """Context, workspaces and communication buffers of a plain PyTorch process on one GPU."""
    return OverheadTerms(
        cuda_context=CUDA_CONTEXT_BYTES if cuda_context else 0,
        library_workspace=LIBRARY_WORKSPACE_BYTES,
        nccl=nccl_bytes(tensor_parallel_size, pipeline_parallel_size) if uses_nccl else 0,
    )
