"""Parallel layouts: how layers split into pipeline stages, and which TP × PP splits exist.

One home for the pipeline partition (vLLM's ``get_pp_indices``: contiguous ranges, the
remainder layers to the stages before the last) and for the enumeration of tensor × pipeline
splits of a GPU count, which inference and fine-tuning share.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.errors import InvalidRequest
from service.estimator.model import Architecture

__all__ = [
    "MAX_GPU_COUNT",
    "MAX_PARALLEL",
    "ExpertLayout",
    "Layout",
    "pp_layer_partition",
    "splits",
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


def splits(
    arch: Architecture, count: int, max_pp: int | None = None
) -> tuple[tuple[int, int], ...]:
    """Valid (tp, pp) with tp × pp = count, larger TP first (PP at most the layers)."""
    limit = arch.num_layers if max_pp is None else min(max_pp, arch.num_layers)
    return tuple(
        (tp, count // tp)
        for tp in reversed(arch.valid_tensor_parallel_sizes)
        if count % tp == 0 and count // tp <= limit
    )
