"""vLLM release lines whose memory accounting the estimator models, as data.

Each :class:`VllmLine` is one accounting, read from one published vLLM wheel's Python sources
(cited as the public repository vllm-project/vllm at the tag), and covers the releases from it
up to the next line (``first`` names the first release it covers). ``engine_options.version``
names a release; :func:`line_for` maps it to the line whose releases hold it (an assumption line
says so when it is not the release a line was read from).

What differs between lines, field by field:

- ``budget``: what the KV pool is carved from and what is charged inside it
  (``vllm/worker/worker.py: determine_num_available_blocks`` in 0.6.4;
  ``vllm/v1/worker/gpu_worker.py: determine_available_memory`` later):

  - ``profiled`` in 0.6.0 – 0.6.3 too, by another route: ``total × util − (free memory at
    the worker's first reading − free memory after the profiling run)``, read before
    ``empty_cache``, so what the caching allocator reserves counts (priced as its allocated
    peak) and the CUDA context, read before, does not (``determine_num_available_blocks``,
    v0.6.1, v0.6.3.post1; vllm-project/vllm#9352 replaced it in 0.6.4).
  - ``device``: ``total × util − (torch peak incl. weights + every byte on the device the
    process's allocator does not hold)``: the CUDA context, NCCL and library workspaces are
    inside (0.6.4; the V1 worker of 0.8.5 kept this formula).
  - ``profiled``: ``total × util − weights − activation peak − non-torch increase`` since a
    snapshot taken after the CUDA context exists and before the communicators are built, so
    NCCL's and custom all-reduce's init-time buffers are inside (0.8.5's V0 worker, the
    default engine of 0.6.5–0.7; 0.10.1).
  - ``comm_outside``: as ``profiled`` but the snapshot follows the distributed init, so only
    what NCCL allocates lazily during the profiling run is inside (0.11.0 onwards:
    "Initialize the distributed environment BEFORE taking memory snapshot").
  - ``extensible``: 0.34's extensible KV cache: the pool is what is free after warm-up and
    CUDA-graph capture, less the profiled transient peak ``P`` and a margin of
    ``max(1 GiB, 0.75·P)`` (``vllm/v1/worker/extensible_kv_cache.py: measure_kv_cache_bytes``).
- ``graphs_in_budget``: CUDA-graph memory is estimated before the pool is sized and subtracted
  from it (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``: present from 0.18 but off, on by
  default from 0.20; ``gpu_model_runner.profile_cudagraph_memory``); before, the graphs are
  captured after the KV cache is allocated, in the margin the budget leaves.
- defaults: ``gpu_memory_utilization`` (0.9; 0.92 from 0.20, ``config/cache.py``; 1.0 with
  0.34's extensible cache), ``block_size`` (16; 64 in 0.34), the scheduler's batch defaults
  (``batch``: ``v0`` = 256 sequences and ``max(max_model_len, 2048)`` tokens unless chunked
  prefill, which V0 turns on above 32768 tokens; ``v1`` tiers of ``EngineArgs``: ``v1-0.8``
  without the A100 exclusion of PR 17885, ``v1-0.9`` with it, both without clamping
  ``max_num_seqs`` to ``max_num_batched_tokens``).
- the profiling run: ``sampler`` (bytes per logit of the dummy sampler run and the cached
  Triton buffer: the sort-based native top-k/top-p up to 0.16, Triton from 0.17), whether the
  run also warms the native sampler (``warms_native_sampler``, 0.21 onwards), ``sampler_hidden``
  (whether the forward's ``tokens × h`` output stays alive through the sampler run: 0.10.1
  onwards), ``moe`` and ``moe_chunk_tokens`` (the fused-MoE buffers and the tokens they are
  sized for, :mod:`.moe_workspace`).
- ``image_installs``: what the project's official image of the line (``vllm/vllm-openai:vX``)
  installs that changes a default the caller leaves unset. The image ships flashinfer since
  0.5.1 (vllm-project/vllm#6172), and the V1 sampler of 0.8 - 0.10 takes FlashInfer's
  top-k/top-p whenever the package imports (``VLLM_USE_FLASHINFER_SAMPLER`` unset means on in
  V1: ``v1/sample/ops/topk_topp_sampler.py: TopKTopPSampler.__init__``), and so does 0.11.0,
  the last release that does (a line of its own); the PyPI wheel lists it only as the
  ``[flashinfer]`` extra (0.10.1, 0.11.0) or not at all (0.8.5, 0.9.1), so a plain
  ``pip install`` samples natively (``sampler: native``). From 0.11.1 FlashInfer samples only
  under ``VLLM_USE_FLASHINFER_SAMPLER=1``.
- ``kv_cache_memory_hint``: the start-up log offers a ``--kv-cache-memory`` value (from
  0.11.0; at DEBUG level until 0.34, which logs it at INFO).
- ``max_len``: the derived ``max_model_len`` rules that changed (a config's
  ``model_max_length`` replaces the derived length from 0.8.5; a longrope model defaults to its
  original context from 0.11.1; yarn no longer scales in 0.34).
- ``mxfp4``: the kernel gpt-oss's experts take on Hopper (:mod:`.mxfp4_storage`).
- ``kv_tokens_from_concurrency``: the logged KV token count is ``max_concurrency ×
  max_model_len`` (0.21 onwards), not the pool's blocks (:mod:`.vllm_kv`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

from service.estimator.errors import InvalidRequest

__all__ = [
    "LINES",
    "NEWEST",
    "V0_CHUNKED_ABOVE",
    "V0_MULTIMODAL_MIN_TOKENS",
    "VllmLine",
    "line_for",
    "parse_version",
    "v0_batch_tokens",
]

Budget = Literal["device", "profiled", "comm_outside", "extensible"]
Batch = Literal["v0", "v1-0.8", "v1-0.9", "v1", "v1-0.34"]
Sampler = Literal["v0", "native", "triton", "v2", "flashinfer"]
Moe = Literal["separate", "shared", "shared+out", "workspace"]


@dataclass(frozen=True, slots=True)
class VllmLine:
    """One modelled vLLM accounting (module docstring: what each field means)."""

    name: str
    releases: str
    source: str
    # The first release the line covers (the name is the release its code was read from).
    first: str
    v1: bool
    budget: Budget
    gpu_memory_utilization: float
    block_size: int
    batch: Batch
    sampler: Sampler
    sampler_hidden: bool
    moe: Moe
    graphs_in_budget: bool = False
    kv_cache_memory_hint: bool = False
    # VLLM_FUSED_MOE_CHUNK_SIZE: the fused-MoE path works on this many tokens at a time (None:
    # the whole batch, from 0.18).
    moe_chunk_tokens: int | None = 32768
    model_max_length_overrides: bool = True
    longrope_original: bool = True
    yarn_scales: bool = True
    fp32_to_fp16: bool = False  # --dtype auto: float32 checkpoints run in fp16 (<= 0.8.5)
    # V0 with chunked prefill (above 32768 tokens): the tokens of one profiled batch.
    v0_chunked_tokens: int = 2048
    # 0.6.5 on: V0 turns chunked prefill on by default on CUDA only (ROCm keeps the whole
    # max_model_len batch), and 0.8's V0 not for an MLA model (_set_default_args_v0).
    v0_chunked_cuda_only: bool = False
    # 0.8-0.9: V1 falls back to the V0 engine below compute capability 8.0 and for float32
    # (EngineArgs._is_v1_supported_oracle).
    v0_fallback: bool = False
    # 0.8-0.9: the encoder profile fills max_num_seqs prompts of up to max_model_len tokens
    # with images (gpu_model_runner.profile_run), later lines size it by the encoder budget.
    encoder_items_per_prompt: bool = False
    # 0.8.5: FlashInfer samples from probabilities (topk_topp_sampler.forward_cuda).
    flashinfer_from_probs: bool = False
    # 0.11.1 on: a default max_num_batched_tokens never exceeds max_num_seqs × max_model_len
    # (EngineArgs._set_default_args).
    tokens_capped_by_seqs: bool = False
    # 0.21 on: the profiling run also calls the sampler with a generator, which takes the native
    # path (Triton top-k/top-p), so FlashInfer never lowers the profiled peak.
    warms_native_sampler: bool = False
    # 0.6.4: a model mixing sliding and full layers is capped at its sliding window.
    hybrid_window_caps_length: bool = False
    # 0.11.0 - 0.11.x: each dummy image's encoder output spans the whole encoder budget.
    encoder_output_spans_budget: bool = False
    mxfp4_hopper: Literal["marlin", "triton"] = "triton"
    # 0.12 on: LoRA slots on the routed experts too (vllm/lora/layers/fused_moe.py).
    moe_lora: bool = False
    # What the project's official image of the line (vllm/vllm-openai:v<release>) installs that
    # changes a default: ``flashinfer``, which this line's V1 sampler takes whenever it imports
    # (``TopKTopPSampler.__init__``, 0.8-0.11.0); None: nothing the estimate prices.
    image_installs: Literal["flashinfer"] | None = None
    # The flashinfer release that image ships (named in the answer).
    image_flashinfer: str = ""
    # 0.21 on: "GPU KV cache size" logs max_concurrency × max_model_len instead of the pool's
    # blocks per group × the smallest block size (kv_cache_utils._report_kv_cache_config).
    kv_tokens_from_concurrency: bool = False
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[int, ...]:
        """The release whose code the line was read from."""
        return parse_version(self.name)

    @property
    def start(self) -> tuple[int, ...]:
        """The first release the line covers."""
        return parse_version(self.first)


def _after(
    previous: VllmLine, name: str, releases: str, source: str, first: str, **what: Any
) -> VllmLine:
    """The line that follows ``previous``: its identity, and only what changed (notes are
    the line's own, never inherited)."""
    what.setdefault("notes", ())
    return dataclasses.replace(
        previous, name=name, releases=releases, source=source, first=first, **what
    )


# The oldest line is written out in full; each line after it is the previous one with what its
# release changed.
_V0_6_3 = VllmLine(
    "0.6.3",
    "0.6.0 – 0.6.3.post1",
    "vllm/worker/worker.py: determine_num_available_blocks, vllm/worker/model_runner.py, "
    "vllm/model_executor/layers/sampler.py, vllm/model_executor/layers/fused_moe/fused_moe.py "
    "(v0.6.1, v0.6.3.post1)",
    first="0.6.0",
    v1=False,
    budget="profiled",
    gpu_memory_utilization=0.9,
    block_size=16,
    batch="v0",
    sampler="v0",
    sampler_hidden=False,
    moe="separate",
    model_max_length_overrides=False,
    longrope_original=False,
    fp32_to_fp16=True,
    mxfp4_hopper="marlin",
    v0_chunked_tokens=512,
    hybrid_window_caps_length=True,
    notes=(
        "V0 engine: the pool is total x util less what the device lost since the worker's "
        "first reading (after the CUDA context, before NCCL): weights, NCCL and what the "
        "caching allocator still reserves after the profiling run, priced as its allocated "
        "peak (fragmentation not modelled)",
    ),
)
_V0_6_4 = _after(
    _V0_6_3,
    "0.6.4",
    "0.6.4 – 0.6.4.post1",
    "vllm/worker/worker.py, vllm/worker/model_runner.py, vllm/model_executor/layers/"
    "sampler.py, vllm/model_executor/layers/fused_moe/fused_moe.py (v0.6.4)",
    first="0.6.4",
    budget="device",
    notes=(
        "V0 engine: the profiling run is one max_num_batched_tokens batch (the whole "
        "max_model_len unless chunked prefill, which V0 enables above 32768 tokens); the "
        "CUDA context and everything else on the device count inside the budget",
    ),
)
_V0_6_5 = _after(
    _V0_6_4,
    "0.6.5",
    "0.6.5 – 0.7.x (V0, the default engine), and V0 in 0.8.x",
    "vllm/worker/worker.py and vllm/utils.py: memory_profiling (v0.8.5, its V0 worker)",
    first="0.6.5",
    budget="profiled",
    moe="shared",
    model_max_length_overrides=True,
    v0_chunked_tokens=2048,
    v0_chunked_cuda_only=True,
    hybrid_window_caps_length=False,
    notes=(
        "V0 engine with memory profiling: the profiling run is one max_num_batched_tokens "
        "batch (the whole max_model_len unless chunked prefill); the CUDA context lies "
        "outside the budget, NCCL's buffers inside",
    ),
)
_V0_8 = _after(
    _V0_6_5,
    "0.8.5",
    "0.8.0 – 0.9.0 (V1 the default engine)",
    "vllm/v1/worker/gpu_worker.py, vllm/engine/arg_utils.py, vllm/v1/sample/ops/"
    "topk_topp_sampler.py (v0.8.5)",
    first="0.8.0",
    v1=True,
    budget="device",
    batch="v1-0.8",
    sampler="native",
    v0_fallback=True,
    encoder_items_per_prompt=True,
    flashinfer_from_probs=True,
    image_installs="flashinfer",
    image_flashinfer=(
        "below 0.2.3, the only flashinfer 0.8.5 samples with (the workers of vllm-project/vllm"
        "#17469 log it)"
    ),
    notes=(
        "V1's first worker sized the pool from the device's used memory: the CUDA context "
        "and NCCL count inside the budget",
    ),
)
_V0_9 = _after(
    _V0_8,
    "0.9.1",
    "0.9.1 – 0.9.x",
    "vllm/v1/worker/gpu_worker.py, vllm/engine/arg_utils.py, vllm/v1/worker/"
    "gpu_model_runner.py, vllm/v1/sample/ops/topk_topp_sampler.py (v0.9.1)",
    first="0.9.1",
    budget="profiled",
    batch="v1-0.9",
    fp32_to_fp16=False,
    flashinfer_from_probs=False,
    image_flashinfer="0.2.5 / 0.2.6.post1 (docker/Dockerfile, vllm-project/vllm#19810)",
    notes=(
        "V1 sizes the pool with memory profiling from a snapshot taken before the "
        "communicators are built: the CUDA context lies outside the budget, NCCL inside",
    ),
)
_V0_10 = _after(
    _V0_9,
    "0.10.1",
    "0.10.x",
    "vllm/v1/worker/gpu_worker.py, vllm/utils/__init__.py: memory_profiling, "
    "vllm/engine/arg_utils.py (v0.10.1)",
    first="0.10.0",
    batch="v1",
    sampler_hidden=True,
    v0_fallback=False,
    encoder_items_per_prompt=False,
    image_flashinfer="0.2.8rc1 / 0.2.9 (vllm-project/vllm#21768, #22233)",
)
# From 0.11 the memory snapshot follows the distributed init. 0.11.0 is a line of its own: the
# last release whose V1 sampler takes FlashInfer whenever it imports (0.11.1 made it opt-in),
# and the last on torch 2.8, where the fused-MoE path still writes in place.
_V0_11_0 = _after(
    _V0_10,
    "0.11.0",
    "0.11.0",
    "vllm/v1/worker/gpu_worker.py: init_device, determine_available_memory, "
    "vllm/v1/worker/gpu_model_runner.py: profile_run, vllm/v1/sample/ops/"
    "topk_topp_sampler.py: TopKTopPSampler.__init__, vllm/engine/arg_utils.py: "
    "_set_default_args (v0.11.0)",
    first="0.11.0",
    budget="comm_outside",
    kv_cache_memory_hint=True,
    encoder_output_spans_budget=True,
    image_flashinfer="0.3.1 (the wheel's [flashinfer] extra pins it)",
    notes=(
        "mxfp4 on Hopper: Marlin, as a plain `pip install vllm` of this line runs it (the "
        "wheel does not ship triton_kernels)",
    ),
)
_V0_11 = _after(
    _V0_11_0,
    "0.11.2",
    "0.11.1 – 0.11.x",
    "vllm/v1/worker/gpu_worker.py, vllm/v1/worker/gpu_model_runner.py, "
    "vllm/model_executor/layers/fused_moe/fused_moe.py (v0.11.1, v0.11.2)",
    first="0.11.1",
    moe="shared+out",
    tokens_capped_by_seqs=True,
    longrope_original=True,
    image_installs=None,
    image_flashinfer="",
    notes=(
        "mxfp4 on Hopper: Marlin, as a plain `pip install vllm` of this line runs it (the "
        "wheel does not ship triton_kernels)",
    ),
)
_V0_13 = _after(
    _V0_11,
    "0.13",
    "0.12.0 – 0.13.x",
    "vllm/envs.py (VLLM_FUSED_MOE_CHUNK_SIZE 16384), vllm/v1/worker/gpu_model_runner.py, "
    "vllm/model_executor/layers/quantization/mxfp4.py (v0.12.0, v0.13.0)",
    first="0.12.0",
    moe_chunk_tokens=16384,
    mxfp4_hopper="triton",
    encoder_output_spans_budget=False,
    notes=(
        "0.12.0 expands each dummy image's encoder output per item during the profiling "
        "run, 0.13 does not: modelled as 0.13",
    ),
    moe_lora=True,
)
_V0_16 = _after(
    _V0_13,
    "0.16",
    "0.14.0 – 0.16.x",
    "vllm/model_executor/layers/fused_moe/modular_kernel.py and vllm/v1/worker/"
    "workspace.py (the MoE workspace), vllm/v1/sample/ops/topk_topp_sampler.py "
    "(v0.14.0, v0.16.0)",
    first="0.14.0",
    moe="workspace",
)
_V0_19 = _after(
    _V0_16,
    "0.19",
    "0.17.0 – 0.19.x (0.19 is the line shared/validation was measured on)",
    "vllm/v1/sample/ops/topk_topp_sampler.py: apply_top_k_top_p (Triton from 8 rows), "
    "vllm/v1/worker/gpu_model_runner.py: _dummy_sampler_run, vllm/envs.py "
    "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 0) (v0.17.0, v0.18.0, v0.19.0)",
    first="0.17.0",
    sampler="triton",
    moe_chunk_tokens=None,
    notes=("0.17 still splits the MoE batch in 16384-token chunks: modelled as 0.18, whole batch",),
)
_V0_20 = _after(
    _V0_19,
    "0.20",
    "0.20.x",
    "vllm/envs.py (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1), "
    "vllm/config/cache.py (gpu_memory_utilization 0.92) (v0.20.0)",
    first="0.20.0",
    gpu_memory_utilization=0.92,
    graphs_in_budget=True,
    notes=("CUDA-graph memory is estimated before the KV cache is sized and charged to it",),
)
# FlashInfer samples by default on compute capability 7.5 - 12.1 from 0.21, but the dummy run
# also warms the native path (a generator forces it), whose Triton top-k/top-p and its cached
# buffer set the profiled peak on every GPU.
_V0_22 = _after(
    _V0_20,
    "0.22",
    "0.21.0 – 0.33.x",
    "vllm/v1/worker/gpu_worker.py, vllm/v1/worker/gpu_model_runner.py: "
    "profile_cudagraph_memory, _dummy_sampler_run, vllm/v1/worker/workspace.py, "
    "vllm/config/cache.py (v0.21.0, v0.22.0)",
    first="0.21.0",
    warms_native_sampler=True,
    kv_tokens_from_concurrency=True,
    notes=_V0_20.notes,
)
_V0_34 = _after(
    _V0_22,
    "0.34",
    "0.34.x and later",
    "vllm/v1/worker/extensible_kv_cache.py, vllm/config/vllm.py, vllm/config/cache.py, "
    "vllm/v1/worker/gpu/sample/sampler.py (v0.34.0)",
    first="0.34.0",
    budget="extensible",
    gpu_memory_utilization=1.0,
    block_size=64,
    batch="v1-0.34",
    sampler="v2",
    warms_native_sampler=False,
    yarn_scales=False,
    notes=(
        "extensible KV cache: the pool is the memory free after warm-up and CUDA-graph "
        "capture, less the profiled peak and a margin of max(1 GiB, 0.75 × peak)",
    ),
)

LINES: tuple[VllmLine, ...] = (
    _V0_6_3,
    _V0_6_4,
    _V0_6_5,
    _V0_8,
    _V0_9,
    _V0_10,
    _V0_11_0,
    _V0_11,
    _V0_13,
    _V0_16,
    _V0_19,
    _V0_20,
    _V0_22,
    _V0_34,
)

NEWEST: VllmLine = LINES[-1]

# V0 turns chunked prefill on by default above this max_model_len (EngineArgs).
V0_CHUNKED_ABOVE = 32768
# V0's SchedulerConfig raises a multimodal model's default token budget to this
# (_MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS, vllm/config.py, v0.6.4 - v0.8.5).
V0_MULTIMODAL_MIN_TOKENS = 5120


def v0_batch_tokens(
    line: VllmLine,
    max_model_len: int,
    *,
    multimodal: bool,
    sliding_window: bool,
    mla: bool,
    rocm: bool,
) -> int:
    """V0's default ``max_num_batched_tokens``: 512 / 2048 (the line's) with chunked prefill,
    which V0 turns on above 32768 tokens on CUDA for a model without a multimodal tower or a
    sliding window (0.6.5 on: not on ROCm, and not for MLA; EngineArgs.create_engine_config
    v0.6.4 / v0.7.3, _set_default_args_v0 v0.8.5), else ``max(max_model_len, 2048)``, at
    least 5120 for a multimodal model (SchedulerConfig)."""
    chunked = (
        max_model_len > V0_CHUNKED_ABOVE
        and not multimodal
        and not sliding_window
        and not (line.v0_chunked_cuda_only and (rocm or mla))
    )
    if chunked:
        return line.v0_chunked_tokens
    tokens = max(max_model_len, 2048)
    return max(tokens, V0_MULTIMODAL_MIN_TOKENS) if multimodal else tokens


_BY_NAME = {line.name: line for line in LINES}
_VERSION = re.compile(r"^v?(\d{1,3})\.(\d{1,4})(?:\.(\d{1,4}))?(?:[.+-]?[0-9A-Za-z.+-]{0,60})?$")


def parse_version(text: str) -> tuple[int, ...]:
    """(major, minor, patch) of a release string such as ``0.10.1.1``, ``v0.19.0`` or
    ``0.8.5.post1``; ValueError if it names no release."""
    m = _VERSION.match(text.strip())
    if m is None:
        raise ValueError(text)
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def line_for(version: str) -> tuple[VllmLine, str | None]:
    """The modelled line for ``version``, and an assumption line when it is not one of them
    (the newest line at or below it; the oldest for a release before every line)."""
    if version in _BY_NAME:
        return _BY_NAME[version], None
    try:
        key = parse_version(version)
    except ValueError:
        raise InvalidRequest(
            f"version {version[:40]!r} is not a vLLM release; give one such as "
            f"{', '.join(line.name for line in LINES[-3:])} (modelled lines: "
            f"{', '.join(line.name for line in LINES)})",
            field="engine_options.version",
        ) from None
    below = [line for line in LINES if line.start <= key]
    line = below[-1] if below else LINES[0]
    if line.key == key:
        return line, None
    why = "the nearest modelled line at or below it" if below else "the oldest modelled line"
    return line, (f"vLLM {version} is modelled by the {line.name} line ({line.releases}), {why}")
