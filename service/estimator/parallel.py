"""Parallel layouts: how layers split into pipeline stages, and the layouts operators run.

One home for the pipeline partition (vLLM's ``get_pp_indices``: contiguous ranges, the
remainder layers to the stages before the last) and for the rule that turns a GPU count into
the one tensor × pipeline layout an operator would run on it (:func:`operator_layout`):
tensor parallelism inside one node first, in a power-of-two size the engine accepts for the
model, and pipeline stages only once TP can grow no further (it fills a node, or the model
splits no further by TP). vLLM's guide names it the common practice (docs.vllm.ai, "Distributed
Inference and Serving", "How to decide the distributed inference strategy": the tensor
parallel size is the number of GPUs in each node, the pipeline parallel size the number of
nodes); docs/inference.md ("Minimum layout") says the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.estimator.errors import InvalidRequest

__all__ = [
    "MAX_GPU_COUNT",
    "MAX_PARALLEL",
    "ExpertLayout",
    "Layout",
    "operator_layout",
    "operator_tensor_sizes",
    "pp_layer_partition",
    "stage_layer_ranges",
]

#: The most GPUs any deployment may span (the API's bound on gpu_count, replicas included).
MAX_GPU_COUNT = 65_536
#: The largest tensor or pipeline parallel size.
MAX_PARALLEL = 1_024


@dataclass(frozen=True, slots=True)
class Layout:
    """Tensor, pipeline and data parallel sizes of one deployment, and the expert-parallel
    group its routed experts are spread over (1: none, the experts follow tensor
    parallelism)."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert: int = 1

    @property
    def model_gpus(self) -> int:
        """GPUs one copy of the model spans (TP × PP)."""
        return self.tensor * self.pipeline

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline * self.data


@dataclass(frozen=True, slots=True)
class ExpertLayout:
    """How a MoE model's routed experts sit on the GPUs of one pipeline stage.

    ``tensor`` is how many ways each expert's width is split (column/row parallel, as the
    dense layers are), ``expert`` how many ranks the experts themselves are divided among
    (expert parallelism: whole experts per rank), ``redundant`` the extra physical copies an
    expert-load balancer adds (vLLM's EPLB ``num_redundant_experts``). An engine says which
    applies (vLLM flattens TP × DP into one group for its MoE layers:
    ``FusedMoEParallelConfig.make``).
    """

    tensor: int = 1
    expert: int = 1
    redundant: int = 0

    def local_experts(self, num_experts: int) -> int:
        """Experts on the most loaded rank: vLLM's ``determine_expert_map`` gives the first
        ``(E + R) mod ep`` ranks one more than ``(E + R) // ep``."""
        return -(-(num_experts + self.redundant) // self.expert)


def pp_layer_partition(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage as vLLM's get_pp_indices assigns them."""
    if pp < 1 or pp > num_layers:
        raise InvalidRequest(
            f"pipeline_parallel_size must be between 1 and the layer count {num_layers}",
            field="pipeline_parallel_size",
        )
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_layer_ranges(num_layers: int, pp: int) -> tuple[range, ...]:
    """The decoder layers of each pipeline stage, first to last."""
    out, start = [], 0
    for n in pp_layer_partition(num_layers, pp):
        out.append(range(start, start + n))
        start += n
    return tuple(out)


def operator_tensor_sizes(valid: Sequence[int], gpus_per_node: int) -> tuple[int, ...]:
    """The TP sizes operators run, smallest first: of the sizes the engine accepts for the
    model (``valid``), the powers of two within one node. A node holds 1, 2, 4 or 8 GPUs (HGX
    boards, cloud GPU instances), so a power-of-two TP group packs it whole; TP 1 is always
    among them."""
    return tuple(sorted(t for t in valid if t <= gpus_per_node and t & (t - 1) == 0))


def operator_layout(count: int, tensor_sizes: Sequence[int], max_pp: int) -> Layout | None:
    """The one layout of ``count`` GPUs in the form operators run, or None when there is none:
    TP alone while a size of ``tensor_sizes`` (:func:`operator_tensor_sizes`) holds them;
    beyond the largest, that TP with ``count / TP`` pipeline stages (at most ``max_pp``), one
    per node when TP fills a node, else as many as the model needs once TP splits it no
    further."""
    top = max(tensor_sizes)
    if count in tensor_sizes:
        return Layout(count, 1)
    if count > top and count % top == 0 and count // top <= max_pp:
        return Layout(top, count // top)
    return None
