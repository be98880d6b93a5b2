"""vLLM's options as data, and the defaults it derives for those the caller leaves unset.

Defaults as vLLM's ``EngineArgs`` picks them for the OpenAI server: on GPUs of at least 70 GiB
``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024, else 2048 and 256; ``block_size``
16; ``gpu_memory_utilization`` 0.9; ``max_model_len`` the model's derived maximum
(:func:`derived_max_model_len`), and a request that names no sequence length is judged at it,
as ``vllm serve`` without ``--max-model-len`` is. What each release line changes is data in
:mod:`.vllm_versions`; :func:`engine_line` picks the line whose accounting runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from service.estimator.engines.base import TRUST_REMOTE_CODE, EngineContext, Option, OptionValue
from service.estimator.engines.mxfp4_storage import BACKENDS
from service.estimator.engines.vllm_features import KV_CONNECTORS, LORA_DTYPES
from service.estimator.engines.vllm_parallel import ALL2ALL_BACKENDS, PRICED_ALL2ALL
from service.estimator.engines.vllm_profile import SAMPLER_CHOICES
from service.estimator.engines.vllm_versions import (
    LINES,
    NEWEST,
    VllmLine,
    line_for,
    v0_batch_tokens,
)
from service.estimator.errors import InvalidRequest
from service.estimator.model import Architecture
from service.estimator.units import GIB

if TYPE_CHECKING:
    from service.estimator.gpu import GpuSpec

__all__ = [
    "COMMAND_LINE",
    "DECLARED",
    "DTYPES",
    "DTYPE_OPTION",
    "LARGE_GPU_BYTES",
    "OPTIONS",
    "batch_defaults",
    "derived_defaults",
    "derived_max_model_len",
    "engine_line",
]

# vLLM's thresholds for its larger scheduling defaults (EngineArgs, usage context OpenAI server).
LARGE_GPU_BYTES = 70 * GIB
HUGE_GPU_BYTES = 160 * GIB  # v0.34's top tier (B200/B300, MI300X)
_V0_FALLBACK = next(line for line in LINES if line.name == "0.6.5")
# When a config names no context length at all.
FALLBACK_MAX_MODEL_LEN = 2048
# Rope types whose max_position_embeddings already is the scaled context (no factor applied).
_UNSCALED_ROPE = frozenset({"su", "longrope", "llama3"})
# `--dtype` values and the dtype each names (vLLM's STR_DTYPE_TO_TORCH_DTYPE).
DTYPES = {
    "half": "fp16",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float": "fp32",
    "float32": "fp32",
}
# The `--dtype` option, the same in SGLang (server_args.py takes vLLM's choices).
DTYPE_OPTION = Option(
    "dtype",
    str,
    "vLLM, SGLang: the dtype the model runs in (`auto`: the engine's rule for the "
    "checkpoint and GPU).",
    default="auto",
    choices=("auto", *DTYPES),
    flag="--dtype",
)


def derived_max_model_len(arch: Architecture, line: VllmLine = NEWEST) -> int:
    """vLLM's ``_get_and_verify_max_len`` without a user value: the config's context (from
    0.8.5 a stated ``model_max_length`` replaces it, before it only lowers it), scaled by the
    rope factor except for Gemma 3 and the su / longrope / llama3 types, yarn scaling the
    original context (not in 0.34, where yarn's context already is scaled); from 0.11.1 a
    longrope model defaults to its original context. 0.6.4 caps a model with interleaved
    sliding-window layers to its window (it disables the window)."""
    derived = arch.max_position_embeddings or FALLBACK_MAX_MODEL_LEN
    if arch.model_max_length:
        if line.model_max_length_overrides:
            derived = arch.model_max_length
        else:
            derived = min(derived, arch.model_max_length)
    kind = arch.rope_type
    if kind == "longrope" and arch.original_max_position_embeddings and line.longrope_original:
        return arch.original_max_position_embeddings
    if (
        line.hybrid_window_caps_length
        and arch.sliding_window
        and 0 < arch.num_sliding_layers < len(arch.layer_types)
    ):
        derived = min(derived, arch.sliding_window)
    if kind is None or kind in _UNSCALED_ROPE or arch.context_includes_rope_scaling:
        return derived
    if kind == "yarn":
        if not line.yarn_scales:
            return derived
        if arch.original_max_position_embeddings:
            return int(arch.original_max_position_embeddings * arch.rope_factor)
    return int(derived * arch.rope_factor)


def engine_line(version: str, gpu: GpuSpec | None, dtype: str = "auto") -> VllmLine:
    """The line whose accounting runs: 0.8.x falls back to its V0 engine on GPUs below compute
    capability 8.0 and for float32 (``EngineArgs._is_v1_supported_oracle``, v0.8.5, v0.9.1)."""
    line, _ = line_for(version)
    if line.v0_fallback:
        cc = gpu.compute_capability if gpu is not None else None
        if (cc is not None and cc < (8, 0)) or DTYPES.get(dtype) == "fp32":
            return _V0_FALLBACK
    return line


def batch_defaults(
    line: VllmLine,
    ctx: EngineContext,
    max_model_len: int,
    seqs_given: OptionValue | None,
    entrypoint: OptionValue | None = "serve",
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM's EngineArgs defaults them: V1 keys its
    tables by usage context, and the Python ``LLM`` class (``entrypoint`` "llm") gets the
    larger token budget of each tier (``EngineArgs._set_default_args``, 0.8.5-0.34)."""
    if line.batch == "v0":
        seqs = 256 if seqs_given is None else int(seqs_given)
        arch, gpu = ctx.architecture, ctx.gpu
        return v0_batch_tokens(
            line,
            max_model_len,
            multimodal=arch.vision is not None,
            sliding_window=arch.sliding_window is not None,
            mla=arch.vllm_runs_mla,
            rocm=gpu is not None and gpu.vendor == "amd",
        ), seqs
    offline = entrypoint == "llm"
    mem = ctx.gpu_memory_bytes
    gpu = ctx.gpu
    name = gpu.name.lower() if gpu is not None else ""
    # 0.34 keeps GB10 (DGX Spark, compute capability 12.1) on the small tier: the memory of a
    # large GPU without its compute.
    gb10 = line.batch == "v1-0.34" and gpu is not None and gpu.compute_capability == (12, 1)
    if mem is None:
        tokens, seqs = (16384 if offline else 8192), 1024
    elif line.batch == "v1-0.34" and mem >= HUGE_GPU_BYTES:
        tokens, seqs = 16384, 1024
    elif mem >= LARGE_GPU_BYTES and (line.batch == "v1-0.8" or "a100" not in name) and not gb10:
        # "a100": the exclusion of PR 17885 (EngineArgs._set_default_args_v1, v0.9.1).
        tokens, seqs = (16384 if offline else 8192), 1024
    else:
        tokens, seqs = (8192 if offline else 2048), 256
    if seqs_given is not None:
        seqs = int(seqs_given)
    if line.batch not in ("v1-0.8", "v1-0.9"):
        seqs = min(seqs, tokens)
    if line.tokens_capped_by_seqs:
        tokens = min(seqs * max_model_len, tokens)
    return tokens, seqs


OPTIONS: tuple[Option, ...] = (
    Option(
        "gpu_memory_utilization",
        float,
        "vLLM: fraction of the GPU's memory vLLM may use (0.9; 0.92 from 0.20; 1.0 with "
        "0.34's extensible KV cache); SGLang's equivalent is mem_fraction_static.",
        low=0.0,
        high=1.0,
        low_open=True,
        flag="--gpu-memory-utilization",
        flags=("--device-memory-utilization",),
        chart_fields=("gpuMemoryUtilization",),
    ),
    Option(
        "max_model_len",
        int,
        "vLLM: the longest sequence a request may have (prompt plus output).",
        low=1,
        high=1 << 24,
        flag="--max-model-len",
        int_syntax="vllm_or_auto",
        cli_low=-1,
        chart_fields=("maxModelLen",),
    ),
    Option(
        "max_num_batched_tokens",
        int,
        "vLLM: tokens per scheduler step (chunked prefill), also its profiling size "
        "(V1 under `vllm serve`: 8192 on GPUs of 70 GiB or more but A100s, else 2048; "
        "twice to four times that under the Python LLM class, see entrypoint; V0: the "
        "whole max_model_len unless chunked prefill).",
        low=1,
        high=1 << 24,
        flag="--max-num-batched-tokens",
        int_syntax="vllm",
    ),
    Option(
        "max_num_seqs",
        int,
        "vLLM: sequences per scheduler step (1024 on GPUs of 70 GiB or more, else 256).",
        low=1,
        high=1 << 20,
        flag="--max-num-seqs",
        chart_fields=("maxNumSeqs",),
    ),
    Option(
        "block_size",
        int,
        "vLLM: tokens per KV-cache block (16; 64 from 0.34).",
        choices=(1, 8, 16, 32, 64, 128),
        flag="--block-size",
    ),
    Option(
        "enforce_eager",
        bool,
        "vLLM: no CUDA graphs (saves their memory pool).",
        default=False,
        flag="--enforce-eager",
    ),
    DTYPE_OPTION,
    Option(
        "version",
        str,
        "vLLM: the release whose memory accounting to model, e.g. 0.10.1 or 0.19.0 "
        f"(modelled lines {', '.join(line.name for line in LINES)}; another release maps "
        "to the newest line at or below it).",
        default=NEWEST.name,
    ),
    Option(
        "mxfp4_backend",
        str,
        "vLLM: the MoE kernel for mxfp4 experts (gpt-oss), which sets their padding and "
        "scale copies (`auto`: Marlin below compute capability 9.0, FlashInfer on 10.x, "
        "Triton on Hopper from 0.22, Marlin before; VLLM_MXFP4_USE_MARLIN forces Marlin).",
        default="auto",
        choices=("auto", *BACKENDS),
    ),
    Option(
        "sampler",
        str,
        "vLLM: the top-k/top-p sampler its profiling run measures (`auto`: what the line's "
        "official image vllm/vllm-openai runs: FlashInfer's in 0.8-0.11.0, whose V1 sampler takes "
        "it whenever the flashinfer package imports and whose image ships it, the line's own "
        "elsewhere and on ROCm; `native`: the line's own, as a pip install without flashinfer "
        "runs it; `flashinfer`: FlashInfer's, which 0.11.1-0.20 take only under "
        "VLLM_USE_FLASHINFER_SAMPLER=1; the log then says 'Using FlashInfer for top-p & top-k "
        "sampling'. From 0.21 the profiling run also warms the Triton path, whose peak stands "
        "either way).",
        default="auto",
        choices=SAMPLER_CHOICES,
    ),
    Option(
        "entrypoint",
        str,
        "vLLM: how the engine is started, which picks V1's scheduling defaults (`serve`: "
        "`vllm serve` / the OpenAI API server; `llm`: the Python `LLM` class, whose default "
        "max_num_batched_tokens is 8192, or 16384 on GPUs of 70 GiB or more but A100s). "
        "V0 lines default the same either way.",
        default="serve",
        choices=("serve", "llm"),
    ),
    Option(
        "limit_mm_per_prompt",
        int,
        "vLLM: images per prompt a multimodal model accepts (its profiling run sizes the "
        "encoder cache by it; 0 skips the vision tower). Default: vLLM's 999.",
        low=0,
        high=1 << 20,
        flag="--limit-mm-per-prompt",
        cli_kind="json",
        json_keys=((("image",), "limit_mm_per_prompt", 1),),
    ),
    Option(
        "all2all_backend",
        str,
        "vLLM: how expert-parallel MoE layers dispatch tokens (--all2all-backend; "
        "VLLM_ALL2ALL_BACKEND before 0.13): the gather backends give each rank every DP "
        "rank's tokens, DeepEP allocates its NVLink/RDMA buffers.",
        default="allgather_reducescatter",
        choices=ALL2ALL_BACKENDS,
        flag="--all2all-backend",
        env="VLLM_ALL2ALL_BACKEND",
        priced_values=tuple(b for b in ALL2ALL_BACKENDS if b in PRICED_ALL2ALL),
    ),
    Option(
        "moe_dp_chunk_size",
        int,
        "vLLM: tokens per rank DeepEP's low-latency buffers are sized for "
        "(VLLM_MOE_DP_CHUNK_SIZE, 256).",
        default=256,
        low=1,
        high=1 << 20,
        env="VLLM_MOE_DP_CHUNK_SIZE",
    ),
    Option(
        "enable_eplb",
        bool,
        "vLLM: expert-parallel load balancing (adds num_redundant_experts physical experts).",
        default=False,
        flag="--enable-eplb",
    ),
    Option(
        "enable_lora",
        bool,
        "vLLM: LoRA adapters; max_loras slots of max_lora_rank are allocated on every "
        "supported module before the KV cache is sized.",
        default=False,
        flag="--enable-lora",
    ),
    Option(
        "max_loras",
        int,
        "vLLM: adapters served in one batch (GPU slots).",
        default=1,
        low=1,
        high=1024,
        flag="--max-loras",
        chart_fields=("maxLoras",),
    ),
    Option(
        "max_lora_rank",
        int,
        "vLLM: the largest adapter rank; every slot is allocated at it.",
        default=16,
        choices=(1, 8, 16, 32, 64, 128, 256, 320, 512),
        flag="--max-lora-rank",
    ),
    Option(
        "max_cpu_loras",
        int,
        "vLLM: adapters kept in each worker's CPU cache (host memory; default max_loras).",
        low=1,
        high=1 << 16,
        flag="--max-cpu-loras",
    ),
    Option(
        "lora_dtype",
        str,
        "vLLM: the dtype of the LoRA slots (`auto`: the model's).",
        default="auto",
        choices=tuple(LORA_DTYPES),
        flag="--lora-dtype",
    ),
    Option(
        "fully_sharded_loras",
        bool,
        "vLLM: shard both LoRA matrices over TP (the rank of column layers' A, the output of "
        "row layers' B).",
        default=False,
        flag="--fully-sharded-loras",
    ),
    Option(
        "cpu_offload_gb",
        float,
        "vLLM: GiB of weights per GPU kept in pinned host memory (decoder-layer parameters in "
        "order until the budget).",
        default=0.0,
        low=0.0,
        high=1 << 20,
        flag="--cpu-offload-gb",
    ),
    Option(
        "kv_cache_memory_bytes",
        int,
        "vLLM (0.11+): a KV pool of this many bytes per GPU instead of the utilization budget "
        "(0: unset).",
        low=0,
        high=1 << 50,
        flag="--kv-cache-memory-bytes",
        int_syntax="vllm",
    ),
    Option(
        "num_gpu_blocks_override",
        int,
        "vLLM: the KV pool's block count, whatever the budget leaves.",
        low=1,
        high=1 << 30,
        flag="--num-gpu-blocks-override",
    ),
    Option(
        "swap_space",
        float,
        "vLLM V0 lines: GiB of pinned host memory per GPU for swapped-out KV blocks (V1 "
        "allocates none).",
        default=4.0,
        low=0.0,
        high=1 << 20,
        flag="--swap-space",
    ),
    Option(
        "kv_offloading_size",
        float,
        "vLLM (0.12+): GiB of host memory for offloaded KV blocks, for the whole TP × PP group.",
        low=0.0,
        high=1 << 20,
        flag="--kv-offloading-size",
    ),
    Option(
        "kv_offloading_backend",
        str,
        "vLLM: the KV offload backend (`native` or `lmcache`).",
        default="native",
        choices=("native", "lmcache"),
        flag="--kv-offloading-backend",
    ),
    Option(
        "num_redundant_experts",
        int,
        "vLLM: EPLB's redundant expert copies per MoE layer, spread over the EP ranks "
        "(--eplb-config num_redundant_experts; --num-redundant-experts in 0.10-0.11).",
        default=0,
        low=0,
        high=1 << 16,
        flag="--num-redundant-experts",
    ),
    Option(
        "kv_connector",
        str,
        "vLLM: the KV-transfer connector of a disaggregated prefill/decode role "
        "(--kv-transfer-config kv_connector): NixlConnector (host buffers with "
        "kv_buffer_device cpu), P2pNcclConnector (a GPU send buffer of kv_buffer_size), "
        "LMCacheConnectorV1 and OffloadingConnector (host memory).",
        choices=KV_CONNECTORS,
    ),
    Option(
        "kv_role",
        str,
        "vLLM: the role of this instance in disaggregated serving (kv_producer: prefill, "
        "kv_consumer: decode, kv_both).",
        choices=("kv_producer", "kv_consumer", "kv_both"),
    ),
    Option(
        "kv_buffer_device",
        str,
        "vLLM: where the connector's transfer buffers live (cuda or cpu).",
        default="cuda",
        choices=("cuda", "cpu"),
    ),
    Option(
        "kv_buffer_size",
        float,
        "vLLM: the connector's buffer size in bytes (P2pNcclConnector's GPU send store; 1e9).",
        default=1e9,
        low=0.0,
        high=float(1 << 50),
    ),
    Option(
        "kv_connector_host_bytes",
        int,
        "vLLM: host memory per GPU the connector is configured to keep KV in (LMCache's "
        "max_local_cpu_size, the offloading connector's cpu_bytes_to_use).",
        low=0,
        high=1 << 50,
    ),
)

#: Command-line options of ``vllm serve`` that are not engine options of an estimate: the
#: request fields they set, and those read for no memory effect (vllm/engine/arg_utils.py,
#: EngineArgs.add_cli_args, 0.19 and 0.34).
COMMAND_LINE: tuple[Option, ...] = (
    Option("model", str, "The model.", flag="--model", role="field", field="model"),
    Option(
        "served_model_name",
        str,
        "Names the API serves the model under.",
        flag="--served-model-name",
        cli_kind="str_list",
        role="inert",
    ),
    Option(
        "tensor_parallel_size",
        int,
        "GPUs one layer is split over.",
        default=1,
        low=1,
        high=1024,
        flag="--tensor-parallel-size",
        flags=("-tp",),
        role="field",
        field="tensor_parallel_size",
        chart_fields=("tensorParallelSize",),
    ),
    Option(
        "pipeline_parallel_size",
        int,
        "Pipeline stages.",
        default=1,
        low=1,
        high=1024,
        flag="--pipeline-parallel-size",
        flags=("-pp",),
        role="field",
        field="pipeline_parallel_size",
    ),
    Option(
        "data_parallel_size",
        int,
        "Data-parallel ranks (a MoE model's expert layers span all of them).",
        default=1,
        low=1,
        high=1024,
        flag="--data-parallel-size",
        flags=("-dp",),
        role="field",
        field="data_parallel_size",
    ),
    Option(
        "data_parallel_size_local",
        int,
        "Data-parallel ranks on this node (the pod's GPUs are TP × PP × these).",
        low=1,
        high=1024,
        flag="--data-parallel-size-local",
        flags=("-dpl",),
        role="inert",
        note="the data-parallel ranks this pod runs (its GPUs: TP × PP × these)",
    ),
    Option(
        "enable_expert_parallel",
        bool,
        "Expert parallelism.",
        default=False,
        flag="--enable-expert-parallel",
        flags=("-ep",),
        role="field",
        field="expert_parallel",
    ),
    Option(
        "kv_cache_dtype",
        str,
        "The KV cache's dtype.",
        default="auto",
        flag="--kv-cache-dtype",
        role="field",
        field="kv_cache_dtype",
    ),
    Option(
        "quantization",
        str,
        "Online quantization method, or the checkpoint's.",
        flag="--quantization",
        flags=("-q",),
        role="field",
        field="weight_format",
    ),
    Option(
        "speculative_config",
        str,
        "Speculative decoding (JSON: method, model, num_speculative_tokens, "
        "draft_tensor_parallel_size).",
        flag="--speculative-config",
        flags=("-sc",),
        cli_kind="json",
        role="field",
        field="speculative",
        json_keys=(
            (("method",), "speculative.method", 1),
            (("model",), "speculative.model", 1),
            (("num_speculative_tokens",), "speculative.num_speculative_tokens", 1),
            (("draft_tensor_parallel_size",), "speculative.draft_tensor_parallel_size", 1),
        ),
    ),
    Option(
        "eplb_config",
        str,
        "EPLB's settings (JSON; num_redundant_experts is priced).",
        flag="--eplb-config",
        cli_kind="json",
        role="field",
        field="engine_options",
        json_keys=((("num_redundant_experts",), "num_redundant_experts", 1),),
    ),
    Option(
        "kv_transfer_config",
        str,
        "The KV-transfer connector (JSON: kv_connector, kv_role, kv_buffer_device, "
        "kv_buffer_size, kv_connector_extra_config).",
        flag="--kv-transfer-config",
        cli_kind="json",
        role="field",
        field="engine_options",
        json_keys=(
            (("kv_connector",), "kv_connector", 1),
            (("kv_role",), "kv_role", 1),
            (("kv_buffer_device",), "kv_buffer_device", 1),
            (("kv_buffer_size",), "kv_buffer_size", 1),
            # LMCache's local CPU cache, GiB per rank (LMCacheEngineConfig max_local_cpu_size).
            (
                ("kv_connector_extra_config", "lmcache.max_local_cpu_size"),
                "kv_connector_host_bytes",
                GIB,
            ),
            # The offloading connector's host budget (config/vllm.py cpu_bytes_to_use).
            (("kv_connector_extra_config", "cpu_bytes_to_use"), "kv_connector_host_bytes", 1),
        ),
    ),
    TRUST_REMOTE_CODE,
)

DECLARED: tuple[Option, ...] = (*OPTIONS, *COMMAND_LINE)


def derived_defaults(
    values: Mapping[str, OptionValue | None], ctx: EngineContext
) -> Mapping[str, OptionValue | None]:
    """The defaults vLLM derives for the options the caller leaves unset (the line's
    ``gpu_memory_utilization`` and ``block_size``, the derived ``max_model_len``, the batch
    sizes of :func:`batch_defaults`); a ``max_model_len`` above the derived maximum is refused."""
    version = values.get("version")
    version = NEWEST.name if version is None else str(version)
    line, _ = line_for(version)
    run = engine_line(version, ctx.gpu, str(values["dtype"]))
    derived = derived_max_model_len(ctx.architecture, line)
    given = values.get("max_model_len")
    if given is not None and int(given) > derived:
        raise InvalidRequest(
            f"max_model_len {given} exceeds the model's derived maximum {derived} (its "
            "config's context with rope scaling, as vLLM derives it); vLLM refuses it",
            field="engine_options.max_model_len",
        )
    length = derived if given is None else int(given)
    tokens, seqs = batch_defaults(
        run, ctx, length, values.get("max_num_seqs"), values.get("entrypoint")
    )
    return MappingProxyType(
        {
            "max_num_batched_tokens": tokens,
            "max_num_seqs": seqs,
            "max_model_len": derived,
            "gpu_memory_utilization": line.gpu_memory_utilization,
            "block_size": line.block_size,
        }
    )
