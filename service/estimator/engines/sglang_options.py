"""SGLang's options as data, and the defaults it derives for those the caller leaves unset.

``context_length`` follows SGLang's ``get_context_length``; ``chunked_prefill_size``,
``cuda_graph_max_bs`` and ``mem_fraction_static`` follow the release line of ``version``
(:mod:`.sglang_versions`), from the GPU's memory as nvidia-smi prints it, TP and PP.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from service.estimator.engines import sglang_versions as sv
from service.estimator.engines.base import TRUST_REMOTE_CODE, EngineContext, Option, OptionValue
from service.estimator.engines.vllm_options import DTYPE_OPTION
from service.estimator.model import Architecture
from service.estimator.units import MIB

if TYPE_CHECKING:
    from service.estimator.gpu import GpuSpec

__all__ = ["OPTIONS", "derived_context_length", "derived_defaults", "gpu_mib"]

# When a config names no context length (get_context_length's fallback).
FALLBACK_CONTEXT_LENGTH = 2048


def derived_context_length(arch: Architecture) -> int:
    """SGLang's ``get_context_length``: the config's context (``model_max_length`` is read
    before ``max_position_embeddings``), times the rope factor unless the scaling names its
    original context or is of type llama3."""
    context = arch.model_max_length or arch.max_position_embeddings or FALLBACK_CONTEXT_LENGTH
    if arch.original_max_position_embeddings or arch.rope_type in (None, "llama3"):
        return context
    return int(context * arch.rope_factor)


def gpu_mib(ctx_gpu: GpuSpec | None, gpu_memory_bytes: int | None) -> int | None:
    """The GPU's memory as SGLang reads it, MiB: nvidia-smi's memory.total (rocm-smi on ROCm);
    where no driver total is known (a MIG slice, a bare figure) the CUDA total, as SGLang's
    fallback to ``torch.cuda.mem_get_info`` reads it."""
    if ctx_gpu is not None and ctx_gpu.driver_total_bytes is not None:
        return ctx_gpu.driver_total_bytes // MIB
    if gpu_memory_bytes is not None:
        return gpu_memory_bytes // MIB
    return None


OPTIONS: tuple[Option, ...] = (
    Option(
        "version",
        str,
        "SGLang: the release whose memory accounting to model, e.g. 0.4.8 or 0.5.6 (lines "
        "A-F of docs/inference.md; default the newest modelled, another release maps to the "
        "line covering it).",
        default=sv.DEFAULT_VERSION,
    ),
    Option(
        "mem_fraction_static",
        float,
        "SGLang: fraction of the memory free at start for weights and the KV pool "
        "(default: the release's rule from the GPU's memory, chunk and graph sizes, TP × PP).",
        low=0.0,
        high=1.0,
        low_open=True,
        flag="--mem-fraction-static",
    ),
    Option(
        "chunked_prefill_size",
        int,
        "SGLang: tokens per prefill chunk (default: by the GPU's memory, per release).",
        low=1,
        high=1 << 24,
        flag="--chunked-prefill-size",
        cli_low=-1,
    ),
    Option(
        "cuda_graph_max_bs",
        int,
        "SGLang: the largest decode batch captured as a CUDA graph (default: by the GPU's "
        "memory and TP, per release).",
        low=1,
        high=1 << 16,
        flag="--cuda-graph-max-bs",
    ),
    Option(
        "disable_cuda_graph",
        bool,
        "SGLang: no CUDA graphs.",
        default=False,
        flag="--disable-cuda-graph",
    ),
    Option(
        "max_running_requests",
        int,
        "SGLang: requests running at once (default: derived from the KV pool's tokens).",
        low=1,
        high=1 << 20,
        flag="--max-running-requests",
    ),
    Option(
        "max_total_tokens",
        int,
        "SGLang: a cap on the KV pool's tokens (default: what the budget holds).",
        low=1,
        high=1 << 40,
        flag="--max-total-tokens",
        int_syntax="sglang",
    ),
    Option(
        "page_size",
        int,
        "SGLang: tokens per KV page (1).",
        default=1,
        low=1,
        high=1 << 12,
        flag="--page-size",
    ),
    Option(
        "context_length",
        int,
        "SGLang: the longest sequence a request may have (also accepted as max_model_len).",
        low=1,
        high=1 << 24,
        flag="--context-length",
        aliases=("max_model_len",),
        int_syntax="sglang",
    ),
    DTYPE_OPTION,
    Option(
        "enable_dp_attention",
        bool,
        "SGLang: data-parallel attention inside the TP group (--enable-dp-attention): "
        "attention and KV per GPU at TP / DP, the MoE layers over all TP GPUs.",
        default=False,
        flag="--enable-dp-attention",
    ),
    Option(
        "ep_size",
        int,
        "SGLang: the expert-parallel size of the MoE layers (experts divided among ep_size "
        "ranks, each expert split tp_size / ep_size ways).",
        default=1,
        low=1,
        high=1024,
        flag="--ep-size",
        flags=("--expert-parallel-size", "--ep"),
    ),
    Option(
        "ep_num_redundant_experts",
        int,
        "SGLang: EPLB's redundant experts per MoE layer.",
        default=0,
        low=0,
        high=1 << 16,
        flag="--ep-num-redundant-experts",
    ),
    Option(
        "moe_a2a_backend",
        str,
        "SGLang: the MoE dispatch backend (`none`: all-reduce; DeepEP's and others' buffers "
        "are read but not priced).",
        default="none",
        choices=("none", "deepep", "mooncake", "ascend_fuseep", "flashinfer", "mori"),
        flag="--moe-a2a-backend",
        priced_values=("none",),
    ),
    Option(
        "enable_lora",
        bool,
        "SGLang: LoRA adapters; max_loras_per_batch slots of max_lora_rank on the target "
        "modules, allocated before the KV pool.",
        default=False,
        flag="--enable-lora",
    ),
    Option(
        "max_lora_rank",
        int,
        "SGLang: the rank every LoRA slot is allocated at (default 16 here when unset).",
        default=16,
        low=1,
        high=1024,
        flag="--max-lora-rank",
    ),
    Option(
        "max_loras_per_batch",
        int,
        "SGLang: adapters in one batch (GPU slots; 8).",
        default=8,
        low=1,
        high=1024,
        flag="--max-loras-per-batch",
    ),
    Option(
        "cpu_offload_gb",
        float,
        "SGLang: GiB of weights per GPU kept in host memory.",
        default=0.0,
        low=0.0,
        high=1 << 20,
        flag="--cpu-offload-gb",
    ),
    Option(
        "enable_hierarchical_cache",
        bool,
        "SGLang: a host-memory tier of the KV cache (HiCache): hicache_ratio × the GPU pool, "
        "or hicache_size GB.",
        default=False,
        flag="--enable-hierarchical-cache",
    ),
    Option(
        "hicache_ratio",
        float,
        "SGLang: the host KV tier's size as a multiple of the GPU pool (2.0).",
        default=2.0,
        low=0.0,
        high=1024.0,
        low_open=True,
        flag="--hicache-ratio",
    ),
    Option(
        "hicache_size",
        int,
        "SGLang: the host KV tier in GB per GPU (0: hicache_ratio decides).",
        default=0,
        low=0,
        high=1 << 20,
        flag="--hicache-size",
    ),
)

#: Command-line options of ``python -m sglang.launch_server`` that are not engine options of
#: an estimate (sglang/srt/server_args.py, 0.5).
COMMAND_LINE: tuple[Option, ...] = (
    Option(
        "model_path",
        str,
        "The model.",
        flag="--model-path",
        flags=("--model",),
        role="field",
        field="model",
    ),
    Option("served_model_name", str, "API name.", flag="--served-model-name", role="inert"),
    Option(
        "tp_size",
        int,
        "GPUs of one instance.",
        default=1,
        low=1,
        high=1024,
        flag="--tp-size",
        flags=("--tensor-parallel-size", "--tp"),
        role="field",
        field="tensor_parallel_size",
    ),
    Option(
        "pp_size",
        int,
        "Pipeline stages.",
        default=1,
        low=1,
        high=1024,
        flag="--pp-size",
        flags=("--pipeline-parallel-size",),
        role="field",
        field="pipeline_parallel_size",
    ),
    Option(
        "dp_size",
        int,
        "Data-parallel replicas (with --enable-dp-attention: attention groups inside TP).",
        default=1,
        low=1,
        high=1024,
        flag="--dp-size",
        flags=("--data-parallel-size", "--dp"),
        role="field",
        field="data_parallel_size",
    ),
    Option(
        "kv_cache_dtype",
        str,
        "The KV cache's dtype.",
        default="auto",
        choices=(
            "auto",
            "fp8_e5m2",
            "fp8_e4m3",
            "mxfp8",
            "bf16",
            "bfloat16",
            "nvfp4",
            "fp4_mx_block16",
        ),
        flag="--kv-cache-dtype",
        role="field",
        field="kv_cache_dtype",
    ),
    Option(
        "quantization",
        str,
        "Online quantization method, or the checkpoint's.",
        flag="--quantization",
        role="field",
        field="weight_format",
    ),
    Option(
        "speculative_algorithm",
        str,
        "Speculative decoding: EAGLE, EAGLE3, NEXTN (MTP), STANDALONE (a draft model), NGRAM.",
        flag="--speculative-algorithm",
        role="field",
        field="speculative.method",
    ),
    Option(
        "speculative_draft_model_path",
        str,
        "The drafter.",
        flag="--speculative-draft-model-path",
        flags=("--speculative-draft-model",),
        role="field",
        field="speculative.model",
    ),
    Option(
        "speculative_num_draft_tokens",
        int,
        "Tokens proposed per step.",
        low=1,
        high=64,
        flag="--speculative-num-draft-tokens",
        role="field",
        field="speculative.num_speculative_tokens",
    ),
    Option(
        "lora_target_modules",
        str,
        "Modules LoRA slots are allocated on (default: every linear one).",
        flag="--lora-target-modules",
        cli_kind="str_list",
        role="unpriced",
        note="LoRA on named modules only (priced as every linear module: the GPU figure is high)",
    ),
    Option(
        "max_prefill_tokens",
        int,
        "A cap on prefill tokens per step.",
        low=1,
        flag="--max-prefill-tokens",
        int_syntax="sglang",
        role="inert",
        note="prefill batches are bounded by chunked_prefill_size, which is priced",
    ),
    Option(
        "disaggregation_mode",
        str,
        "Prefill/decode disaggregation role.",
        flag="--disaggregation-mode",
        role="inert",
        note="each role is judged on its own GPUs; the transfer backend's buffers are not "
        "separately priced",
    ),
    TRUST_REMOTE_CODE,
)

DECLARED: tuple[Option, ...] = (*OPTIONS, *COMMAND_LINE)


def derived_defaults(
    values: Mapping[str, OptionValue | None], ctx: EngineContext
) -> Mapping[str, OptionValue | None]:
    """The options SGLang derives when the caller sets none, as the release's rules do."""
    rel = sv.release(str(values.get("version") or sv.DEFAULT_VERSION))
    arch = ctx.architecture
    tp, pp = ctx.tensor_parallel_size, ctx.pipeline_parallel_size
    mib = gpu_mib(ctx.gpu, ctx.gpu_memory_bytes)
    context = values.get("context_length") or derived_context_length(arch)
    chunk = values.get("chunked_prefill_size") or sv.chunked_prefill_default(rel, mib)
    running = values.get("max_running_requests")
    max_bs = values.get("cuda_graph_max_bs") or sv.decode_max_bs(
        rel,
        sv.cuda_graph_max_bs_default(rel, mib, tp),
        None if running is None else int(running),
    )
    fraction = values.get("mem_fraction_static")
    if fraction is None:
        graph_tokens = int(chunk)
        if rel.since(sv.PREFILL_GRAPH_CONTEXT_CAP):
            graph_tokens = min(graph_tokens, int(context))
        if values.get("max_total_tokens"):
            graph_tokens = min(graph_tokens, int(values["max_total_tokens"]))  # type: ignore[arg-type]
        vision = arch.vision
        fraction = sv.fraction_default(
            rel,
            sv.FractionInputs(
                gpu_mib=mib,
                tp=tp,
                pp=pp,
                chunked_prefill_size=int(chunk),
                decode_max_bs=int(max_bs),
                decode_graphs=not values.get("disable_cuda_graph"),
                prefill_graph_max_tokens=graph_tokens,
                mla=arch.mla is not None,
                multimodal=vision is not None,
                vit_layers=vision.num_layers if vision else 24,
                vit_hidden=vision.hidden_size if vision else 1024,
            ),
        )
    return MappingProxyType(
        {
            "version": rel.text,
            "mem_fraction_static": fraction,
            "chunked_prefill_size": chunk,
            "cuda_graph_max_bs": max_bs,
            "context_length": context,
        }
    )
