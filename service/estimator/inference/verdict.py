"""The verdict on one serving setup: does the engine start and serve the workload, and if not,
the first reason it would not.

The checks, in order (:class:`~service.estimator.result.FitReason`): the layout is one the
engine runs (TP dividing what its parallel layers split, within one node's NVLink domain); a
MIG slice holds one process; the GPU runs the dtype and quantization; the weights fit; the
engine's fixed reserve (profiling peak, workspaces, NCCL) leaves room for a KV cache; the
margin outside the engine's budget holds its context and graphs; the engine would start (vLLM:
its pool holds one sequence of ``max_model_len``); the workload's KV cache and transients fit;
what the engine holds in host memory stays within the limit given (a pod's ``limits.memory``).
``fits`` is true only when every check passes.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.engines import get_engine
from service.estimator.engines.serving import ServingSetup
from service.estimator.gpu import DEFAULT_GPUS_PER_NODE, GpuSpec
from service.estimator.inference.evaluate import fits_from, required_from, stage_costs
from service.estimator.inference.request import InferenceRequest
from service.estimator.result import FitReason
from service.estimator.units import GIB

__all__ = ["Verdict", "judge", "runnable_tensor_parallel_sizes"]


@dataclass(frozen=True, slots=True)
class Verdict:
    reason: FitReason
    detail: str
    usable: int
    required: int

    @property
    def fits(self) -> bool:
        return self.reason is FitReason.FITS


def runnable_tensor_parallel_sizes(req: InferenceRequest) -> tuple[int, ...]:
    """TP sizes the engine runs the model at on this GPU: one on a MIG slice (a process sees
    one slice), else the engine's valid sizes within one node's NVLink domain."""
    gpu = req.gpu
    if gpu is not None and gpu.is_mig:
        return (1,)
    node = gpu.gpus_per_node if gpu is not None else DEFAULT_GPUS_PER_NODE
    engine = get_engine(req.engine)
    return tuple(t for t in engine.valid_tensor_parallel_sizes(req.arch) if t <= node)


def _layout_problem(req: InferenceRequest, setup: ServingSetup) -> tuple[FitReason, str] | None:
    gpu: GpuSpec | None = req.gpu
    tp, pp = setup.tp, setup.pp
    if gpu is not None and gpu.is_mig and tp * pp > 1:
        return FitReason.MIG_CANNOT_SPAN, (
            f"TP {tp} × PP {pp} needs {tp * pp} GPUs in one process group, and a process sees "
            f"one {gpu.mig_profile} slice"
        )
    node = gpu.gpus_per_node if gpu is not None else DEFAULT_GPUS_PER_NODE
    if tp > node:
        return FitReason.INVALID_LAYOUT, (
            f"TP {tp} spans more GPUs than one node's NVLink domain ({node}); use TP ≤ {node} "
            "and pipeline parallelism across nodes"
        )
    valid = setup.engine.valid_tensor_parallel_sizes(req.arch)
    if tp not in valid:
        return FitReason.INVALID_LAYOUT, (
            f"{setup.engine.name} cannot split this model {tp} ways (its parallel layers must "
            f"divide the heads, MLP widths and padded vocabulary); valid TP sizes: "
            f"{', '.join(map(str, valid))}"
        )
    return None


def judge(req: InferenceRequest, setup: ServingSetup, gpu_memory_bytes: int) -> Verdict:
    """The verdict on ``setup`` for ``req``'s workload on GPUs of ``gpu_memory_bytes``."""
    seqs, seq_len, prompt = req.sequences, req.seq_len, req.prompt
    usable = setup.usable(gpu_memory_bytes)
    costs = stage_costs(setup, seq_len, prompt)
    need = required_from(setup, costs, seqs)

    def verdict(reason: FitReason, detail: str = "") -> Verdict:
        return Verdict(reason, detail, usable, need)

    problem = _layout_problem(req, setup)
    if problem is not None:
        return verdict(*problem)
    if setup.unsupported is not None:
        return verdict(FitReason.DTYPE_UNSUPPORTED, setup.unsupported)
    weights = max(st.weights for st in setup.stages)
    if weights > usable:
        return verdict(
            FitReason.WEIGHTS_EXCEED_MEMORY,
            f"{weights / GIB:.2f} GiB of weights per GPU, {usable / GIB:.2f} GiB usable",
        )
    base = max(st.base for st in setup.stages)
    if base > usable:
        return verdict(
            FitReason.ENGINE_BUDGET_EXHAUSTED,
            f"weights, the engine's fixed reserve and overheads take {base / GIB:.2f} GiB of "
            f"{usable / GIB:.2f} GiB usable",
        )
    margin = gpu_memory_bytes - usable
    if setup.outside_budget.total > margin:
        return verdict(
            FitReason.OUTSIDE_BUDGET_EXCEEDED,
            f"the {margin / GIB:.2f} GiB outside the budget cannot hold the CUDA context and "
            f"graphs ({setup.outside_budget.total / GIB:.2f} GiB)",
        )
    kv_last = setup.stages[-1].fixed_kv + seqs * costs[-1][0]
    if setup.engine.refuses(setup, usable, need, kv_last, seq_len):
        length = setup.max_model_len or seq_len
        return verdict(
            FitReason.KV_POOL_BELOW_ONE_SEQUENCE,
            f"the pool left after weights and the engine's reserve cannot hold one "
            f"{length}-token sequence",
        )
    if not fits_from(setup, costs, usable, seqs):
        return verdict(
            FitReason.WORKLOAD_EXCEEDS_MEMORY,
            f"{need / GIB:.2f} GiB needed per GPU, {usable / GIB:.2f} GiB usable",
        )
    host, limit = setup.host_total, req.host_memory_bytes
    if limit is not None and host > limit:
        return verdict(
            FitReason.HOST_MEMORY_EXCEEDED,
            f"{host / GIB:.2f} GiB of host memory priced, the limit is {limit / GIB:.2f} GiB",
        )
    return verdict(FitReason.FITS)
