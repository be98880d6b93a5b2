"""What an engine is handed and returns: a serving setup and its pipeline stages.

The engines read these (their budgets, capacities and per-stage state take a setup), and
:mod:`service.estimator.inference.setup` builds them; they live here, beside the engines, so
that the engines depend on nothing above them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.estimator.engines.base import Engine, EngineSettings
from service.estimator.engines.overhead import OverheadTerms
from service.estimator.forward import ForwardCoefficients
from service.estimator.gpu import GpuSpec
from service.estimator.kv_cache import KvLayout
from service.estimator.model import Architecture

__all__ = ["ServingSetup", "Stage"]


@dataclass(frozen=True, slots=True)
class Stage:
    """One GPU of one pipeline stage (all TP ranks of a stage hold the same)."""

    index: int
    weights: int
    kv: KvLayout
    is_last: bool
    fixed_activation: int  # what the engine reserves whatever the workload
    engine_state: Any  # the engine's own (vLLM: its KV-cache groups)
    base: int  # weights + fixed activation + fixed KV + overhead: what no workload changes
    fixed_kv: int = 0  # KV cache the engine allocates whatever the workload (llama.cpp)
    # A KV pool of fixed size the caller set (vLLM --kv-cache-memory-bytes, a block-count
    # override): counted in ``base``, and the workload's KV must fit inside it.
    kv_pool: int | None = None


@dataclass(frozen=True, slots=True)
class ServingSetup:
    arch: Architecture
    engine: Engine
    settings: EngineSettings
    tp: int
    pp: int
    weight_format: str
    act_dtype: str
    kv_bytes: float
    stages: tuple[Stage, ...]
    coeffs: ForwardCoefficients
    overhead: OverheadTerms  # charged to the budget
    outside_budget: OverheadTerms  # held in the margin the budget leaves (context, graphs)
    gpu_memory_bytes: int | None
    max_model_len: int | None
    assumptions: tuple[str, ...]
    unsupported: str | None = None  # why the GPU cannot run this setup (None: it can)
    gpu: GpuSpec | None = None
    host_bytes: int = 0  # what the engine holds in host memory (llama.cpp's CPU buffers)
    # Host memory one GPU's worker holds, per stage (pinned offload, adapter caches, swap).
    host_per_gpu: tuple[int, ...] = ()
    dp: int = 1  # data-parallel ranks, each holding this setup's GPUs
    expert_parallel: bool = False
    # Options and features read but not priced: each would change the figures, so a verdict
    # that rests on them is a warning, never a refusal.
    unpriced: tuple[str, ...] = ()

    @property
    def host_total(self) -> int:
        """Host memory of all the engine's processes, every GPU of every data-parallel rank."""
        return self.host_bytes + sum(self.host_per_gpu) * self.tp * self.dp

    @property
    def budget_fraction(self) -> float:
        return self.engine.budget_fraction(self.settings)

    def usable(self, gpu_memory_bytes: int) -> int:
        """What the engine's budget lets it use of a GPU's memory."""
        return self.engine.budget_bytes(self, gpu_memory_bytes)
