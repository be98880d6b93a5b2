"""``sglang``: SGLang's static memory split, as its start-up log reports it.

Budget: ``mem_fraction_static`` of the driver's total holds the weights and the KV pool (with
the context, workspaces and NCCL buffers); the rest (1 − fraction) is left for activations at
``chunked_prefill_size`` tokens per forward and the CUDA graphs. The pool is token-granular:
every layer holds every token (``max_total_num_tokens`` = pool ÷ bytes per token).
The fraction's default is the calibration register's ``sglang.mem_fraction_static``.
``context_length`` defaults to SGLang's ``get_context_length``: the first of the config's
context keys, times the rope factor unless the scaling states its original context or is of
type llama3; a request that names no sequence length is judged at it. ``--dtype auto`` as
SGLang's ``_get_and_verify_dtype`` resolves it: the checkpoint's dtype, a float32 checkpoint
in fp16 (Gemma families: bf16); a bf16 checkpoint is kept on a GPU without bf16, which then
cannot run it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from service.estimator.calibration import value
from service.estimator.engines.base import (
    DtypeChoice,
    Engine,
    EngineContext,
    EngineSettings,
    Option,
    OptionValue,
    activation_dtype,
    tp_sizes_dividing_widths,
)
from service.estimator.engines.overhead import OverheadTerms, framework_overhead
from service.estimator.engines.vllm import DTYPES, concurrency_length
from service.estimator.formats import WeightFormat
from service.estimator.model import Architecture
from service.estimator.result import Capacity
from service.estimator.units import GIB, normalize_dtype

if TYPE_CHECKING:
    from service.estimator.gpu import GpuSpec
    from service.estimator.inference.setup import ServingSetup, Stage

__all__ = ["SglangEngine"]

_LARGE_GPU_BYTES = 70 * GIB
# When a config names no context length (get_context_length's fallback).
FALLBACK_CONTEXT_LENGTH = 2048
VOCAB_PADDING = 64


def derived_context_length(arch: Architecture) -> int:
    """SGLang's ``get_context_length``: the config's context (``model_max_length`` is read
    before ``max_position_embeddings``), times the rope factor unless the scaling names its
    original context or is of type llama3."""
    context = arch.model_max_length or arch.max_position_embeddings or FALLBACK_CONTEXT_LENGTH
    if arch.original_max_position_embeddings or arch.rope_type in (None, "llama3"):
        return context
    return int(context * arch.rope_factor)


class SglangEngine(Engine):
    name: ClassVar[str] = "sglang"
    summary: ClassVar[str] = "SGLang: mem_fraction_static holds weights and a token KV pool"
    budget_option: ClassVar[str | None] = "mem_fraction_static"
    fused_kernels: ClassVar[bool] = True
    context_option: ClassVar[str | None] = "context_length"
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
        Option(
            "dtype",
            str,
            "vLLM, SGLang: the dtype the model runs in (`auto`: the engine's rule for the "
            "checkpoint and GPU).",
            default="auto",
            choices=("auto", *DTYPES),
            flag="--dtype",
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
                "context_length": derived_context_length(ctx.architecture),
            }
        )

    def default_sequence_length(self, s: EngineSettings) -> int:
        return int(s["context_length"])

    def resolve_dtype(
        self,
        arch: Architecture,
        fmt: WeightFormat,
        s: EngineSettings,
        gpu: GpuSpec | None,
        named: bool = False,
    ) -> DtypeChoice:
        checkpoint = normalize_dtype(arch.dtype)
        requested = str(s["dtype"])
        if named and not fmt.quantized:
            compute = fmt.name
        elif requested != "auto":
            compute = DTYPES[requested]
        elif checkpoint == "fp32":
            compute = "bf16" if arch.family_name.startswith("gemma") else "fp16"
        else:
            compute = checkpoint
        unsupported = None
        if compute == "bf16" and gpu is not None and not gpu.supports_bf16():
            unsupported = "bfloat16 on a GPU without it: SGLang keeps the dtype and cannot run"
        notes: tuple[str, ...] = ()
        if compute != checkpoint and requested == "auto" and not fmt.quantized:
            notes = (f"--dtype auto runs the {arch.dtype} checkpoint in {compute} (SGLang)",)
        if fmt.quantized:
            return DtypeChoice(activation_dtype(arch, fmt), None, notes, unsupported)
        weights = compute if compute != fmt.name else None
        return DtypeChoice(compute, weights, notes, unsupported)

    def valid_tensor_parallel_sizes(self, arch: Architecture) -> tuple[int, ...]:
        return tp_sizes_dividing_widths(arch, VOCAB_PADDING)

    def command_args(self, s: EngineSettings, tp: int, pp: int, kv_cache_dtype: str) -> list[str]:
        args = [
            "--tp-size",
            str(tp),
            "--pp-size",
            str(pp),
            "--context-length",
            str(s["context_length"]),
            "--mem-fraction-static",
            f"{float(s['mem_fraction_static']):g}",
            "--max-running-requests",
            str(s["max_running_requests"]),
        ]
        if kv_cache_dtype != "auto":
            args += ["--kv-cache-dtype", kv_cache_dtype]
        if s["dtype"] != "auto":
            args += ["--dtype", str(s["dtype"])]
        return args

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
        conc_len = concurrency_length(setup, seq_len)
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
