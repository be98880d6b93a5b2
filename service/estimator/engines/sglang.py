"""``sglang``: SGLang's static memory split, as its start-up log reports it.

Budget: ``mem_fraction_static`` of the driver's total holds the weights and the KV pool (with
the context, workspaces and NCCL buffers); the rest (1 − fraction) is left for activations at
``chunked_prefill_size`` tokens per forward and the CUDA graphs. The pool is token-granular:
every layer holds every token (``max_total_num_tokens`` = pool ÷ bytes per token).
The fraction's default is the calibration register's ``sglang.mem_fraction_static``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from service.estimator.calibration import value
from service.estimator.engines.base import (
    Engine,
    EngineContext,
    EngineSettings,
    Option,
    OptionValue,
)
from service.estimator.engines.overhead import OverheadTerms, framework_overhead
from service.estimator.result import Capacity
from service.estimator.units import GIB

if TYPE_CHECKING:
    from service.estimator.inference.setup import ServingSetup, Stage

__all__ = ["SglangEngine"]

_LARGE_GPU_BYTES = 70 * GIB


class SglangEngine(Engine):
    name: ClassVar[str] = "sglang"
    summary: ClassVar[str] = "SGLang: mem_fraction_static holds weights and a token KV pool"
    budget_option: ClassVar[str | None] = "mem_fraction_static"
    fused_kernels: ClassVar[bool] = True
    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "mem_fraction_static",
            float,
            "SGLang: fraction of the GPU's memory for weights and the KV pool (0.88).",
            low=0.0,
            high=1.0,
            low_open=True,
            flag="--mem-fraction-static",
        ),
        Option(
            "chunked_prefill_size",
            int,
            "SGLang: tokens per prefill chunk (8192 on GPUs of 70 GiB or more, else 2048).",
            low=1,
            high=1 << 24,
            flag="--chunked-prefill-size",
        ),
        Option(
            "max_running_requests",
            int,
            "SGLang: requests running at once (1024 on GPUs of 70 GiB or more, else 256).",
            low=1,
            high=1 << 20,
            flag="--max-running-requests",
        ),
        Option(
            "context_length",
            int,
            "SGLang: the longest sequence a request may have (also accepted as max_model_len).",
            low=1,
            high=1 << 24,
            flag="--context-length",
            aliases=("max_model_len",),
        ),
    )

    def defaults(
        self, values: Mapping[str, OptionValue | None], ctx: EngineContext
    ) -> Mapping[str, OptionValue | None]:
        large = ctx.gpu_memory_bytes is None or ctx.gpu_memory_bytes >= _LARGE_GPU_BYTES
        return MappingProxyType(
            {
                "mem_fraction_static": value("sglang.mem_fraction_static"),
                "chunked_prefill_size": 8192 if large else 2048,
                "max_running_requests": 1024 if large else 256,
            }
        )

    def max_model_len(self, s: EngineSettings) -> int | None:
        length = s["context_length"]
        return None if length is None else int(length)

    def overheads(
        self, s: EngineSettings, tp: int, pp: int, layers_on_gpu: int
    ) -> tuple[OverheadTerms, OverheadTerms]:
        return framework_overhead(tp, pp), OverheadTerms()

    def sequence_cost(
        self, setup: ServingSetup, stage: Stage, seq_len: int, prompt: int
    ) -> tuple[int, int]:
        return seq_len * stage.kv.full_token_bytes, 0

    def capacity(
        self, setup: ServingSetup, gpu_memory_bytes: int, seq_len: int
    ) -> tuple[Capacity, tuple[str, ...]]:
        budget = setup.usable(gpu_memory_bytes)
        conc_len = setup.max_model_len or seq_len
        st = max(setup.stages, key=lambda x: x.weights + x.kv.full_token_bytes)
        pool = max(0, budget - st.weights - setup.overhead.total)
        per_token = st.kv.full_token_bytes
        tokens = pool // per_token if per_token else 0
        cap = Capacity(
            kv_cache_bytes_per_token=per_token,
            kv_cache_pool_bytes=pool,
            kv_cache_tokens=tokens,
            max_concurrency=round(tokens / conc_len, 2),
            sequence_length=conc_len,
            budget_bytes=budget,
            subtracted=MappingProxyType({"weights": st.weights, "overhead": setup.overhead.total}),
        )
        return cap, ()
