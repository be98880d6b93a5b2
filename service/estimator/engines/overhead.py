"""Memory outside the model's tensors: CUDA context, library workspaces, NCCL, CUDA graphs.

These terms do not follow from the architecture; they are properties of the driver, the CUDA
libraries and the communication stack. Their sizes are entries of the calibration register
(:mod:`service.estimator.calibration`), which says what each stands for and where it comes
from; every estimate names the terms it used in its assumptions.

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
  boards is 1.8-1.9 GiB: that calibration, split into a fixed part and a part per extra peer.
- CUDA graphs (vLLM): the private memory pool of the captured decode graphs, which grows with the
  number of captured layers (nodes) on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.calibration import value
from service.estimator.units import GIB

__all__ = [
    "OverheadTerms",
    "cuda_context_bytes",
    "cuda_graph_pool_bytes",
    "framework_overhead",
    "nccl_bytes",
]


# Communicators a vLLM TP group keeps: torch's ProcessGroupNCCL and vLLM's own PyNccl.
TP_COMMUNICATORS = 2


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


def cuda_context_bytes() -> int:
    return int(value("cuda.context_bytes"))


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

    @property
    def total(self) -> int:
        return (
            self.cuda_context
            + self.library_workspace
            + self.nccl
            + self.cuda_graphs
            + self.activations
            + self.request_table
        )

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
        if self.activations:
            out.append(f"forward activations {self.activations / GIB:.2f} GiB per GPU")
        if self.request_table:
            out.append(f"request-to-token table {self.request_table / GIB:.2f} GiB per GPU")
        return out


def framework_overhead(
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    *,
    uses_nccl: bool = True,
    cuda_context: bool = True,
    nvswitch: bool = True,
) -> OverheadTerms:
    """Context, workspaces and communication buffers of a plain PyTorch process on one GPU."""
    nccl = nccl_bytes(tensor_parallel_size, pipeline_parallel_size, nvswitch=nvswitch)
    return OverheadTerms(
        cuda_context=cuda_context_bytes() if cuda_context else 0,
        library_workspace=int(value("cuda.library_workspace_bytes")),
        nccl=nccl if uses_nccl else 0,
    )
