"""vLLM's data and expert parallelism: where the routed experts sit, the extra communicators
and the MoE dispatch buffers, per GPU.

- Experts (``vllm/model_executor/layers/fused_moe/config.py: FusedMoEParallelConfig.make``,
  the same rule in ``fused_moe/layer.py`` since 0.8.5): a MoE layer flattens TP × DP into one
  group. Without ``--enable-expert-parallel`` every expert's width is split over all TP × DP
  GPUs; with it each GPU holds whole experts, ``determine_expert_map`` giving the first
  ``(E + R) mod ep`` ranks one more than ``(E + R) // ep`` (``R``: EPLB's redundant experts,
  ``global_num_experts = num_experts + num_redundant_experts``). Everything else (attention,
  dense MLPs, shared experts, embeddings) is a TP-sharded copy per DP rank.
- Communicators: a MoE model's DP ranks exchange tokens in every MoE layer, over the DP group
  (``dp`` peers) and the EP group (``tp × dp`` peers), each a ``GroupCoordinator`` with its
  own NCCL communicators (``vllm/distributed/parallel_state.py``); priced like a TP group of
  that many peers (:func:`~.overhead.nccl_bytes`). A dense model's DP ranks only agree on
  batch sizes over a CPU (gloo) group: nothing on the GPU.
- Dispatch (``--all2all-backend``; the ``VLLM_ALL2ALL_BACKEND`` variable before 0.13, default
  ``naive`` in 0.10, ``allgather_reducescatter`` from 0.11): the gather backends hand every
  DP rank's tokens to every rank's experts, so a MoE layer works on ``dp ×`` the rank's
  tokens (no chunking: ``FusedMoE.use_dp_chunking`` is off for them). DeepEP
  (``vllm/distributed/device_communicators/all2all.py``): high-throughput mode allocates
  ``VLLM_DEEPEP_BUFFER_SIZE_MB`` (1024 MiB) of NVLink buffer, and as much RDMA buffer when the
  EP group spans nodes; low-latency mode the same NVLink buffer plus
  ``deep_ep.Buffer.get_low_latency_rdma_size_hint`` for ``VLLM_MOE_DP_CHUNK_SIZE`` (256)
  tokens per rank (:func:`deepep_low_latency_bytes`, DeepEP's ``csrc/config.hpp``
  ``LowLatencyLayout``). Other backends (pplx, FlashInfer's, MoRI, NIXL-EP) are read but not
  priced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.estimator.engines.base import DataParallelPlan, EngineSettings
from service.estimator.engines.overhead import nccl_bytes, nvswitch_board
from service.estimator.errors import InvalidRequest
from service.estimator.gpu import DEFAULT_GPUS_PER_NODE
from service.estimator.parallel import ExpertLayout
from service.estimator.units import GIB, MIB

if TYPE_CHECKING:
    from service.estimator.engines.vllm_versions import VllmLine
    from service.estimator.gpu import GpuSpec
    from service.estimator.model import Architecture

__all__ = [
    "ALL2ALL_BACKENDS",
    "PRICED_ALL2ALL",
    "deepep_low_latency_bytes",
    "vllm_data_parallel",
]

# VLLM_DEEPEP_BUFFER_SIZE_MB's default (vllm/envs.py; a literal 1 GiB in 0.10).
DEEPEP_BUFFER_BYTES = 1024 * MIB
# VLLM_MOE_DP_CHUNK_SIZE: the tokens per rank DeepEP's low-latency buffers are sized for.
MOE_DP_CHUNK_TOKENS = 256
# DeepEP's NUM_BUFFER_ALIGNMENT_BYTES.
_DEEPEP_ALIGNMENT = 128

#: ``--all2all-backend`` choices (vllm/config/parallel.py All2AllBackend, 0.19).
ALL2ALL_BACKENDS = (
    "allgather_reducescatter",
    "naive",
    "pplx",
    "deepep_high_throughput",
    "deepep_low_latency",
    "flashinfer_all2allv",
    "mori",
    "nixl_ep",
)
#: Backends whose buffers are priced; the rest are read and named as not priced.
PRICED_ALL2ALL = frozenset(
    {"allgather_reducescatter", "naive", "deepep_high_throughput", "deepep_low_latency"}
)
_GATHERING = frozenset({"allgather_reducescatter", "naive"})


def deepep_low_latency_bytes(tokens_per_rank: int, hidden: int, num_experts: int) -> int:
    """DeepEP's low-latency RDMA buffer (``get_low_latency_rdma_size_hint``): odd/even send,
    receive and signalling buffers for messages of one token's bf16 hidden state (dispatch:
    16-byte header plus the larger of bf16 and fp8-with-scales; combine: bf16 plus per-128
    channel scales)."""
    scales = hidden // 128
    dispatch_msg = 16 + max(hidden * 2, hidden + scales * 4)
    combine_msg = scales * 4 + hidden * 2
    send = max(tokens_per_rank * dispatch_msg, num_experts * tokens_per_rank * combine_msg)
    recv = num_experts * tokens_per_rank * max(dispatch_msg, combine_msg)
    signal = -(-(num_experts * 4) // 128) * 128
    total = 2 * (send + recv + signal)
    return (total + _DEEPEP_ALIGNMENT) // _DEEPEP_ALIGNMENT * _DEEPEP_ALIGNMENT


def _all_to_all(
    backend: str,
    arch: Architecture,
    ep: int,
    experts: int,
    gpu: GpuSpec | None,
    chunk: int = MOE_DP_CHUNK_TOKENS,
) -> tuple[int, str]:
    """(buffer bytes per GPU, note) of the dispatch backend of an expert-parallel group."""
    node = gpu.gpus_per_node if gpu is not None else DEFAULT_GPUS_PER_NODE
    if backend == "deepep_high_throughput":
        rdma = DEEPEP_BUFFER_BYTES if ep > node else 0
        where = "NVLink and RDMA" if rdma else "NVLink"
        return DEEPEP_BUFFER_BYTES + rdma, (
            f"DeepEP high-throughput buffers ({where}) {(DEEPEP_BUFFER_BYTES + rdma) / GIB:.2f} "
            "GiB per GPU"
        )
    if backend == "deepep_low_latency":
        rdma = deepep_low_latency_bytes(chunk, arch.hidden_size, experts)
        total = DEEPEP_BUFFER_BYTES + rdma
        return total, (
            f"DeepEP low-latency buffers {total / GIB:.2f} GiB per GPU (1 GiB NVLink + "
            f"{rdma / GIB:.2f} GiB RDMA for {chunk} tokens per rank × {experts} experts)"
        )
    return 0, ""


def vllm_data_parallel(
    line: VllmLine,
    arch: Architecture,
    s: EngineSettings,
    tp: int,
    dp: int,
    expert_parallel: bool,
    gpu: GpuSpec | None,
) -> DataParallelPlan:
    """What ``dp`` data-parallel ranks and ``--enable-expert-parallel`` change on one GPU."""
    if not line.v1 and (dp > 1 or expert_parallel):
        raise InvalidRequest(
            f"vLLM {line.releases} has no data or expert parallelism (--data-parallel-size "
            "and --enable-expert-parallel arrive in 0.8); judge each replica on its own",
            field="data_parallel_size" if dp > 1 else "expert_parallel",
        )
    moe = arch.moe
    if moe is None:
        if expert_parallel:
            raise InvalidRequest(
                "expert parallelism needs a mixture-of-experts model; this one has no routed "
                "experts",
                field="expert_parallel",
            )
        if dp > 1:
            return DataParallelPlan(
                notes=(f"{dp} data-parallel ranks, each a full TP {tp} copy of the model",)
            )
        return DataParallelPlan()
    group = tp * dp
    redundant = int(s.get("num_redundant_experts") or 0) if s.get("enable_eplb") else 0
    if redundant and not expert_parallel:
        raise InvalidRequest(
            "EPLB's redundant experts need --enable-expert-parallel",
            field="engine_options.num_redundant_experts",
        )
    if group == 1:
        return DataParallelPlan()
    notes: list[str] = []
    nvswitch = nvswitch_board(gpu)
    nccl = 0
    if dp > 1:
        nccl = nccl_bytes(dp, 1, nvswitch=nvswitch) + nccl_bytes(group, 1, nvswitch=nvswitch)
        notes.append(
            f"{dp} data-parallel ranks of TP {tp}: attention, dense layers and embeddings are "
            f"a copy per rank; the DP ({dp}) and EP ({group}) groups' NCCL communicators "
            f"{nccl / GIB:.2f} GiB per GPU, priced like a TP group of that many peers"
        )
    if not expert_parallel:
        return DataParallelPlan(
            experts=ExpertLayout(tensor=group),
            nccl=nccl,
            moe_token_factor=dp if dp > 1 else 1,
            notes=(*notes, f"MoE layers split every expert over TP × DP = {group} GPUs"),
        )
    backend = str(s.get("all2all_backend") or "allgather_reducescatter")
    chunk = int(s.get("moe_dp_chunk_size") or MOE_DP_CHUNK_TOKENS)
    buffers, note = _all_to_all(backend, arch, group, moe.num_experts + redundant, gpu, chunk)
    if note:
        notes.append(note)
    unpriced: tuple[str, ...] = ()
    if backend not in PRICED_ALL2ALL:
        unpriced = (f"--all2all-backend {backend}: its dispatch buffers",)
    factor = dp if backend in _GATHERING else 1
    if factor > 1:
        notes.append(
            f"--all2all-backend {backend}: every MoE layer works on the tokens of all {dp} DP "
            "ranks (the profiling run's MoE buffers scale with them)"
        )
    return DataParallelPlan(
        experts=ExpertLayout(tensor=1, expert=group, redundant=redundant),
        nccl=nccl,
        all_to_all=buffers,
        moe_token_factor=factor,
        notes=tuple(notes),
        unpriced=unpriced,
    )
