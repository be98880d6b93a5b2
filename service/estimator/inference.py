"""The detailed inference estimator: memory to serve a model, per GPU and in total, per engine.

Everything that depends only on (architecture, weight format, KV dtype, engine settings, TP, PP,
attention, GPU memory) is built once into a cached `_Plan`: per pipeline stage its weight bytes,
KV layout and, for vLLM, the profiling-run activation peak and KV-cache groups. What depends on
the workload (sequences, sequence length, prompt length) is a few multiplications in
`_evaluate`, which the fit searches call.

Components (bytes, per GPU; `total` sums them over all GPUs, `per_gpu` is the most loaded GPU):
- weights: :mod:`service.estimator.weights` (+ rotary caches vLLM / old transformers keep);
- kv_cache: :mod:`service.estimator.kv_cache`, as the engine sizes it for the workload;
- activations: :mod:`service.estimator.inference_activations` (prefill/decode peak transient;
  for vLLM the profiling-run peak its budget reserves);
- overhead: :mod:`service.estimator.overhead` (context, workspaces, NCCL).
For vLLM and SGLang the breakdown holds what the engine charges against its budget fraction;
the CUDA context and vLLM's CUDA-graph pool sit in the remaining margin and are reported in
`details` and `assumptions`. Engine rules: docs/inference.md.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

from service.estimator.architecture import Architecture
from service.estimator.engines import EngineSettings, resolve_engine
from service.estimator.errors import InvalidRequest
from service.estimator.formats import bytes_per_element, kv_dtype_bytes, normalize_dtype
from service.estimator.inference_activations import (
    GENERATE_SAMPLING_BYTES,
    ForwardCoefficients,
    forward_coefficients,
    prefill_transient,
    vllm_sampler_peak,
)
from service.estimator.kv_cache import KvLayout, VllmKvGroups, stage_kv_layouts, vllm_groups
from service.estimator.overhead import (
    CUDA_CONTEXT_BYTES,
    OverheadTerms,
    cuda_graph_pool_bytes,
    framework_overhead,
)
from service.estimator.result import Capacity, Estimate, Fit
from service.estimator.search import MAX_SEARCH_STEPS
from service.estimator.weights import (
    WeightLayout,
    pp_layer_partition,
    resolve_format,
    weight_layout,
)

__all__ = [
    "MAX_TOKENS",
    "InferenceRequest",
    "StageFigures",
    "estimate_inference",
    "fit_inference",
    "stage_figures",
]

GIB = 2**30
MAX_TOKENS = 10**9  # batch × concurrency × sequence_length bound
ATTENTION = ("flash", "sdpa", "eager")
COMPONENTS = ("weights", "kv_cache", "activations", "overhead")
MAX_GPU_COUNT = 1024
# A min_gpu_count scan builds at most this many plans before it bisects (one plan of an
# 80-layer model takes about 1 ms to build).
MAX_SCAN_PLANS = 24


@dataclass(frozen=True)
class InferenceRequest:
    """One inference workload on one model, engine and parallel layout."""

    architecture: Architecture
    weight_format: str | None = None
    kv_cache_dtype: str = "auto"
    batch_size: int = 1
    sequence_length: int = 2048
    prompt_tokens: int | None = None
    concurrency: int = 1
    engine: str = "generic"
    engine_options: Mapping[str, float | int | bool | None] = field(default_factory=dict)
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    attention: str = "flash"
    gpu_memory_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class _Stage:
    weights: int
    kv: KvLayout
    is_last: bool
    fixed_activation: int  # vLLM: the profiling-run peak; 0 elsewhere
    groups: VllmKvGroups | None
    base: int = 0  # weights + fixed activation + overhead: what no workload changes


@dataclass(frozen=True, slots=True)
class _Plan:
    arch: Architecture
    settings: EngineSettings
    tp: int
    pp: int
    weight_format: str
    act_dtype: str
    kv_bytes: float
    stages: tuple[_Stage, ...]
    coeffs: ForwardCoefficients
    overhead: OverheadTerms  # charged to the budget
    overhead_total: int
    outside_budget: OverheadTerms  # vLLM/SGLang: context and graphs in the margin
    gpu_memory_bytes: int | None
    max_model_len: int | None
    assumptions: tuple[str, ...]


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------


def _positive_int(value: object, name: str, high: int = MAX_TOKENS) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > high:
        raise InvalidRequest(f"{name} must be an integer between 1 and {high}", field=name)
    return value


@lru_cache(maxsize=1024)
def valid_tensor_parallel_sizes(arch: Architecture) -> tuple[int, ...]:
    """TP sizes that divide the attention heads and fit the KV heads (divide or multiple)."""
    heads, kv = arch.num_attention_heads, arch.num_kv_heads
    out = []
    for t in range(1, heads + 1):
        if heads % t:
            continue
        if arch.mla is None and kv % t and t % kv:
            continue
        out.append(t)
    return tuple(out)


def _validate(req: InferenceRequest) -> None:
    """Scalar checks of the workload (the layout is checked once per plan)."""
    b = _positive_int(req.batch_size, "batch_size")
    s = _positive_int(req.sequence_length, "sequence_length")
    c = _positive_int(req.concurrency, "concurrency")
    if req.prompt_tokens is not None:
        p = _positive_int(req.prompt_tokens, "prompt_tokens")
        if p > s:
            raise InvalidRequest(
                f"prompt_tokens ({p}) must not exceed sequence_length ({s})", field="prompt_tokens"
            )
    if b * c * s > MAX_TOKENS:
        raise InvalidRequest(
            f"batch_size × concurrency × sequence_length = {b * c * s} exceeds {MAX_TOKENS} tokens",
            field="sequence_length",
        )
    if req.gpu_memory_bytes is not None:
        _positive_int(req.gpu_memory_bytes, "gpu_memory_bytes", 1 << 50)


def _validate_layout(arch: Architecture, tp: int, pp: int, attention: str) -> None:
    _positive_int(tp, "tensor_parallel_size", MAX_GPU_COUNT)
    _positive_int(pp, "pipeline_parallel_size", MAX_GPU_COUNT)
    valid = valid_tensor_parallel_sizes(arch)
    if tp not in valid:
        raise InvalidRequest(
            f"tensor_parallel_size {tp} does not divide the {arch.num_attention_heads} attention "
            f"heads ({arch.num_kv_heads} KV heads); valid sizes: {', '.join(map(str, valid))}",
            field="tensor_parallel_size",
        )
    if pp > arch.num_layers:
        raise InvalidRequest(
            f"pipeline_parallel_size {pp} exceeds the {arch.num_layers} layers; valid sizes: "
            f"1 to {arch.num_layers}",
            field="pipeline_parallel_size",
        )
    if attention not in ATTENTION:
        raise InvalidRequest(f"attention must be one of {', '.join(ATTENTION)}", field="attention")


# ------------------------------------------------------------------------------------------
# Plan (cached per architecture, format, engine, layout)
# ------------------------------------------------------------------------------------------


def _activation_dtype(arch: Architecture, fmt_name: str, quantized: bool, dense: str | None) -> str:
    if not quantized:
        return fmt_name
    for cand in (dense, normalize_dtype(arch.dtype)):
        if cand in ("bf16", "fp16"):
            return cand
    return "bf16"


def _rope_cache_bytes(arch: Architecture, dtype_bytes: float, per_layer: bool) -> int:
    """Rotary cos/sin caches: vLLM keeps one [positions, rotary_dim] cache per distinct rope, in
    the model dtype; a linear or dynamic-NTK scaled rope precomputes `max_position × factor`
    positions (vLLM's LinearScalingRotaryEmbedding / DynamicNTKScalingRotaryEmbedding). Gemma 3
    has two: its global layers' scaled rope and its local layers' unscaled one. transformers
    < 4.40 keeps a cos and a sin cache of `max_position` rows in every layer."""
    positions = arch.max_position_embeddings or 0
    rope_dim = arch.mla.qk_rope_head_dim if arch.mla is not None else arch.head_dim
    if per_layer:
        return int(2 * positions * rope_dim * dtype_bytes)  # per layer; caller multiplies
    rows = int(positions * arch.rope_scaling_factor)
    if arch.family == "gemma3":
        rows += positions  # the sliding layers' rope (local base, no scaling)
    return int(rows * rope_dim * dtype_bytes)


# exllama v2 (AutoGPTQ / optimum) sizes its per-device scratch for this many input tokens.
EXLLAMA_MAX_INPUT_LENGTH = 2048


def _exllama_scratch_bytes(arch: Architecture, tp: int) -> int:
    """exllama v2's per-GPU scratch: the largest quantized layer dequantized to fp16
    (in × out × 2) plus its fp32 output for 2048 input tokens (out × 2048 × 4)."""
    best = 0
    for m in arch.linear_modules():
        if m.component in ("lm_head", "router"):
            continue
        fan_in, fan_out = m.in_features, m.out_features
        best = max(best, fan_in * fan_out // tp * 2 + fan_out * EXLLAMA_MAX_INPUT_LENGTH * 4)
    return best + 256


def _plan(
    arch: Architecture,
    weight_format: str | None,
    kv_cache_dtype: str,
    settings: EngineSettings,
    tp: int,
    pp: int,
    attention: str,
    gpu_memory_bytes: int | None,
) -> _Plan:
    engine = settings.engine
    fmt, _ = resolve_format(arch, weight_format)
    act_dtype = _activation_dtype(arch, fmt.name, fmt.quantized, fmt.dense_dtype)
    d = bytes_per_element(act_dtype)
    kvb = kv_dtype_bytes(kv_cache_dtype, act_dtype)
    assumptions: list[str] = []
    latent = True  # vLLM, SGLang and transformers 5 all cache MLA's compressed latent
    kv_layouts = stage_kv_layouts(arch, kvb, tp, pp, latent)
    max_model_len = settings.max_model_len
    limit = arch.max_position_embeddings
    if max_model_len is not None and limit is not None and max_model_len > limit:
        raise InvalidRequest(
            f"max_model_len {max_model_len} exceeds the model's max_position_embeddings "
            f"{arch.max_position_embeddings}",
            field="engine_options.max_model_len",
        )

    # Weights per stage, with the buffers each engine keeps next to them.
    if engine == "vllm":
        rope = _rope_cache_bytes(arch, d, per_layer=False)
        layout: WeightLayout = weight_layout(
            arch,
            weight_format,
            tp,
            pp,
            vocab_padding=64,
            tied_copy_on_last_stage=True,
            extra_per_gpu=rope,
            include_vision=True,
            vision_on_every_stage=True,
            mla_backend_workspace=True,
        )
        if rope:
            assumptions.append(f"vLLM rotary cos/sin cache {rope / GIB:.3f} GiB per GPU")
    else:
        layout = weight_layout(arch, weight_format, tp, pp, include_vision=True)
    stage_weights = list(layout.per_stage)
    if engine == "transformers" and settings.rope_cache_per_layer:
        per_layer = _rope_cache_bytes(arch, d, per_layer=True)
        for i, n in enumerate(pp_layer_partition(arch.num_layers, pp)):
            stage_weights[i] += per_layer * n
        assumptions.append(
            f"per-layer rotary caches (transformers < 4.40): {per_layer / 2**20:.1f} MiB per layer"
        )
    assumptions.extend(layout.assumptions)

    fused = engine in ("vllm", "sglang")
    coeffs = forward_coefficients(
        arch, d, tp, fused_moe=fused, eager=(attention == "eager" and not fused)
    )
    if attention == "eager" and not fused:
        assumptions.append("eager attention materializes heads × prompt² scores (+fp32 softmax)")

    # Overheads.
    gpus = tp * pp
    if engine == "vllm":
        overhead = framework_overhead(tp, pp, cuda_context=False)
        layers_max = max(k.layers for k in kv_layouts)
        outside = OverheadTerms(
            cuda_context=CUDA_CONTEXT_BYTES,
            cuda_graphs=0 if settings.enforce_eager else cuda_graph_pool_bytes(layers_max),
        )
    elif engine == "sglang":
        overhead = framework_overhead(tp, pp)
        outside = OverheadTerms()
    else:
        nccl = gpus > 1 and not (engine == "transformers" and tp == 1)
        overhead = framework_overhead(tp, pp, uses_nccl=nccl)
        outside = OverheadTerms()
    assumptions.extend(overhead.lines())

    workspace = 0
    if engine == "transformers" and fmt.kind == "gptq" and fmt.bits == 4:
        workspace = _exllama_scratch_bytes(arch, tp)
        assumptions.append(
            f"GPTQ 4-bit exllama v2 scratch buffer {workspace / GIB:.3f} GiB per GPU"
        )
    stages: list[_Stage] = []
    for i, kv in enumerate(kv_layouts):
        last = i == pp - 1
        fixed = workspace
        groups = None
        if engine == "vllm":
            t = settings.max_num_batched_tokens
            fwd = coeffs.per_token * t
            if last:
                fixed = int(max(fwd, vllm_sampler_peak(coeffs, t, settings.max_num_seqs)))
            else:
                fixed = int(fwd + 2 * t * coeffs.hidden_row)  # hidden + residual sent onward
            groups = vllm_groups(kv, settings.block_size)
        base = stage_weights[i] + fixed + overhead.total
        stages.append(_Stage(stage_weights[i], kv, last, fixed, groups, base))
    if engine == "vllm":
        assumptions.append(
            f"vLLM profiling run at max_num_batched_tokens={settings.max_num_batched_tokens}, "
            f"sampler on {min(settings.max_num_seqs, settings.max_num_batched_tokens)} rows"
        )
        g = stages[-1].groups
        if g is not None and g.sliding_groups:
            assumptions.append(
                f"vLLM KV groups: {g.groups} groups of {g.group_size} layers "
                f"({g.slots} slots per token)"
            )
    return _Plan(
        arch=arch,
        settings=settings,
        tp=tp,
        pp=pp,
        weight_format=layout.format,
        act_dtype=act_dtype,
        kv_bytes=kvb,
        stages=tuple(stages),
        coeffs=coeffs,
        overhead=overhead,
        overhead_total=overhead.total,
        outside_budget=outside,
        gpu_memory_bytes=gpu_memory_bytes,
        max_model_len=max_model_len,
        assumptions=tuple(assumptions),
    )


# A plan takes about 2.5 KiB (tracemalloc, Llama-3-70B on vLLM): 4096 of them, enough for a
# 1000-item batch spread over every catalog model × GPU × engine, hold about 10 MiB.
@lru_cache(maxsize=4096)
def _plan_cached(
    arch: Architecture,
    weight_format: str | None,
    kv_cache_dtype: str,
    engine: str,
    options: tuple[tuple[str, float | int | bool | None], ...],
    tp: int,
    pp: int,
    attention: str,
    gpu_memory_bytes: int | None,
) -> _Plan:
    _validate_layout(arch, tp, pp, attention)
    settings = resolve_engine(engine, dict(options), gpu_memory_bytes)
    return _plan(arch, weight_format, kv_cache_dtype, settings, tp, pp, attention, gpu_memory_bytes)


def _plan_for(req: InferenceRequest, tp: int | None = None, pp: int | None = None) -> _Plan:
    try:
        options = tuple(sorted(req.engine_options.items()))
        return _plan_cached(
            req.architecture,
            req.weight_format,
            req.kv_cache_dtype,
            req.engine,
            options,
            tp or req.tensor_parallel_size,
            pp or req.pipeline_parallel_size,
            req.attention,
            req.gpu_memory_bytes,
        )
    except TypeError:  # an unhashable option value: let the engine validation name it
        resolve_engine(req.engine, req.engine_options, req.gpu_memory_bytes)
        raise


# ------------------------------------------------------------------------------------------
# Evaluation (cheap, called by the searches)
# ------------------------------------------------------------------------------------------


def _stage_unit(plan: _Plan, st: _Stage, seq_len: int, prompt: int) -> tuple[int, int]:
    """(KV bytes, activation bytes) one sequence adds on one GPU of stage `st`.

    Every workload-dependent term is proportional to the number of sequences, so a GPU holds
    `weights + overhead + fixed_activation + seqs × (kv + act)`: the searches solve for the
    batch directly.
    """
    engine = plan.settings.engine
    if engine == "vllm":
        assert st.groups is not None
        return st.groups.request_bytes(seq_len, plan.settings.max_num_batched_tokens), 0
    if engine == "sglang":
        return seq_len * st.kv.full_token_bytes, 0
    c = plan.coeffs
    kv_pre = st.kv.prefill_bytes(prompt)
    kv_dec = st.kv.decode_bytes(seq_len)
    fwd = prefill_transient(c, 1, prompt)
    if st.is_last:
        if plan.settings.logits_all_positions:
            per_row = c.logit_row if plan.settings.logits_fp32_upcast else c.vocab * c.dtype_bytes
            logits = prompt * per_row
        else:
            logits = c.logit_row
        dec_extra = c.logit_row + c.vocab * GENERATE_SAMPLING_BYTES
    elif st is plan.stages[0] and engine == "transformers":
        # accelerate's device_map hooks move the model's outputs back to the input device:
        # the first GPU receives an fp32 copy of the prefill logits.
        rows = prompt if plan.settings.logits_all_positions else 1
        logits = rows * c.vocab * 4
        dec_extra = 0
    else:
        logits = 0
        dec_extra = 0
    cat = kv_dec // (2 * (st.kv.layers or 1))  # DynamicCache's torch.cat: one layer's K twice
    peak_pre = kv_pre + max(fwd, logits)
    peak_dec = kv_dec + cat + dec_extra + c.per_token if seq_len > prompt else 0
    return kv_dec, int(max(peak_pre, peak_dec) - kv_dec)


def _stage_components(
    plan: _Plan, st: _Stage, seqs: int, seq_len: int, prompt: int
) -> tuple[int, int, int, int]:
    """(weights, kv_cache, activations, overhead) of one GPU of stage `st`."""
    kv, act = _stage_unit(plan, st, seq_len, prompt)
    return st.weights, seqs * kv, st.fixed_activation + seqs * act, plan.overhead_total


def _per_gpu(plan: _Plan, seqs: int, seq_len: int, prompt: int) -> tuple[int, int, int, int]:
    """Components of the most loaded GPU."""
    best: tuple[int, int, int, int] | None = None
    best_sum = -1
    for st in plan.stages:
        comp = _stage_components(plan, st, seqs, seq_len, prompt)
        total = comp[0] + comp[1] + comp[2] + comp[3]
        if total > best_sum:
            best, best_sum = comp, total
    assert best is not None
    return best


def _required(plan: _Plan, seqs: int, seq_len: int, prompt: int) -> int:
    return sum(_per_gpu(plan, seqs, seq_len, prompt))


def _max_sequences(plan: _Plan, usable: int, seq_len: int, prompt: int) -> int:
    """The most sequences of this length that fit every GPU (0 if not even one), solved."""
    best = MAX_TOKENS
    for st in plan.stages:
        kv, act = _stage_unit(plan, st, seq_len, prompt)
        room = usable - st.weights - st.fixed_activation - plan.overhead_total
        per = kv + act
        if room < per:
            return 0
        if per:
            best = min(best, room // per)
    return best


def _usable(plan: _Plan, gpu_memory_bytes: int) -> int:
    return int(gpu_memory_bytes * plan.settings.budget_fraction)


# ------------------------------------------------------------------------------------------
# Capacity (vLLM / SGLang start-up report)
# ------------------------------------------------------------------------------------------


def _capacity(plan: _Plan, gpu_memory_bytes: int, seq_len: int) -> tuple[Capacity, list[str]]:
    s = plan.settings
    budget = _usable(plan, gpu_memory_bytes)
    notes: list[str] = []
    conc_len = plan.max_model_len or seq_len
    if s.engine == "vllm":
        pools = []
        for st in plan.stages:
            pools.append(budget - st.weights - st.fixed_activation - plan.overhead_total)
        # Every worker gets the block count of the smallest pool (vLLM unifies num_blocks).
        idx = min(range(len(pools)), key=lambda i: pools[i])
        st = plan.stages[idx]
        assert st.groups is not None
        pool = max(0, pools[idx])
        blocks = st.groups.num_blocks(pool)
        tokens = st.groups.pool_tokens(blocks)
        per_req = st.groups.blocks_per_request(conc_len, s.max_num_batched_tokens)
        conc = blocks / per_req if per_req else 0.0
        subtracted = {
            "weights": st.weights,
            "activations": st.fixed_activation,
            "non_torch": plan.overhead_total,
        }
        cap = Capacity(
            kv_cache_bytes_per_token=st.groups.token_bytes,
            kv_cache_pool_bytes=pool,
            kv_cache_tokens=tokens,
            max_concurrency=round(conc, 2),
            sequence_length=conc_len,
            budget_bytes=budget,
            subtracted=MappingProxyType(subtracted),
        )
        if pools[0] != pools[idx]:
            notes.append(
                f"first pipeline stage's pool {max(0, pools[0]) / GIB:.2f} GiB; the last "
                "stage's smaller pool sets the block count"
            )
        if blocks < per_req:
            notes.append(
                f"vLLM would refuse to start: the pool holds {tokens} tokens, fewer than one "
                f"{conc_len}-token request needs"
            )
        return cap, notes
    # SGLang: token-granular pool of the static fraction less weights and overheads.
    st = max(plan.stages, key=lambda x: x.weights + x.kv.full_token_bytes)
    pool = max(0, budget - st.weights - plan.overhead_total)
    per_token = st.kv.full_token_bytes
    tokens = pool // per_token if per_token else 0
    cap = Capacity(
        kv_cache_bytes_per_token=per_token,
        kv_cache_pool_bytes=pool,
        kv_cache_tokens=tokens,
        max_concurrency=round(tokens / conc_len, 2),
        sequence_length=conc_len,
        budget_bytes=budget,
        subtracted=MappingProxyType({"weights": st.weights, "overhead": plan.overhead_total}),
    )
    return cap, notes


# ------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------


def _workload(req: InferenceRequest) -> tuple[int, int, int]:
    seqs = req.batch_size * req.concurrency
    prompt = req.prompt_tokens if req.prompt_tokens is not None else req.sequence_length
    return seqs, req.sequence_length, prompt


def _check_len(plan: _Plan, seq_len: int) -> None:
    if plan.max_model_len is not None and seq_len > plan.max_model_len:
        raise InvalidRequest(
            f"sequence_length {seq_len} exceeds engine_options.max_model_len {plan.max_model_len}",
            field="sequence_length",
        )


def estimate_inference(req: InferenceRequest) -> Estimate:
    """Bytes to serve `req`: per component, summed over GPUs and for the most loaded GPU."""
    _validate(req)
    plan = _plan_for(req)
    seqs, seq_len, prompt = _workload(req)
    _check_len(plan, seq_len)
    per_gpu = _per_gpu(plan, seqs, seq_len, prompt)
    totals = [0, 0, 0, 0]
    for st in plan.stages:
        comp = _stage_components(plan, st, seqs, seq_len, prompt)
        for i in range(4):
            totals[i] += comp[i] * plan.tp
    gpus = plan.tp * plan.pp
    assumptions = list(plan.assumptions)
    details: dict[str, int | float | str | bool | None] = {
        "weight_format": plan.weight_format,
        "activation_dtype": plan.act_dtype,
        "kv_cache_bytes_per_token_per_gpu": plan.stages[-1].kv.full_token_bytes,
        "engine": plan.settings.engine,
    }
    capacity = None
    if plan.settings.engine in ("vllm", "sglang"):
        frac = plan.settings.budget_fraction
        name = "gpu_memory_utilization" if plan.settings.engine == "vllm" else "mem_fraction_static"
        assumptions.append(f"{name} {frac:g}: the breakdown is what the engine charges to it")
        if plan.outside_budget.total:
            details["outside_budget_bytes"] = plan.outside_budget.total
            assumptions.extend(
                line + " (outside the budget)" for line in plan.outside_budget.lines()
            )
        if req.gpu_memory_bytes is not None:
            capacity, notes = _capacity(plan, req.gpu_memory_bytes, seq_len)
            assumptions.extend(notes)
    return Estimate(
        kind="inference",
        estimator="detailed",
        total=MappingProxyType(dict(zip(COMPONENTS, totals, strict=True))),
        per_gpu=MappingProxyType(dict(zip(COMPONENTS, per_gpu, strict=True))),
        gpu_count=gpus,
        assumptions=tuple(dict.fromkeys(assumptions)),
        capacity=capacity,
        details=MappingProxyType(details),
    )


def _fits(plan: _Plan, usable: int, seqs: int, seq_len: int, prompt: int) -> bool:
    """Whether every GPU holds the workload: the per-stage static part (precomputed in the plan)
    plus `seqs` times what one sequence adds."""
    for st in plan.stages:
        if st.base > usable:
            return False
        kv, act = _stage_unit(plan, st, seq_len, prompt)
        if st.base + seqs * (kv + act) > usable:
            return False
    return True


def _largest_fitting(fits: Callable[[int], bool], hi: int) -> int | None:
    """The largest length in [1, hi] that fits, `hi` being an upper bound already: one check
    at `hi`, then a bisection (≤ log2(hi) + 2 evaluations, capped like `search.py`)."""
    if fits(hi):
        return hi
    if hi == 1 or not fits(1):
        return None
    good, bad = 1, hi
    for _ in range(MAX_SEARCH_STEPS):
        if bad - good <= 1:
            break
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def _min_gpu_count(
    req: InferenceRequest, seqs: int, seq_len: int, prompt: int
) -> tuple[int | None, str | None]:
    """The fewest GPUs (any valid TP × PP split) that hold the workload, with a note when the
    answer needed the bisection fallback or none was found.

    Plans are built lazily and only for counts that can hold the weights: every weight sits on
    at least one GPU, so the most loaded of n GPUs holds at least 1/n of the single-GPU
    weights. The lowest such count is tried first; then the largest count in the window (if
    even that fails, nothing smaller fits: fewer GPUs only hold more), and counts are scanned
    upward until one fits.
    The scan builds at most MAX_SCAN_PLANS plans; past that it bisects the rest of the window,
    which assumes a fit stays a fit with more GPUs (true of every split family here, but only
    checked at the counts it visits), and says so.
    """
    mem = req.gpu_memory_bytes
    assert mem is not None
    arch = req.architecture
    whole = _plan_for(req, 1, 1).stages[0].weights
    floor_count = -(-whole // mem)
    candidates = _candidate_counts(arch)
    start = bisect.bisect_left(candidates, floor_count)
    counts = candidates[start : start + MAX_SEARCH_STEPS]
    built = 0

    def any_split_fits(n: int) -> bool:
        nonlocal built
        for t, p in _splits(arch, n):
            built += 1
            plan = _plan_for(req, t, p)
            if _fits(plan, _usable(plan, mem), seqs, seq_len, prompt):
                return True
        return False

    if not counts:
        return None, f"min_gpu_count: no valid TP × PP split of {floor_count} or more GPUs"
    # The floor itself first: most requests fit there, and then no other plan is needed.
    if any_split_fits(counts[0]):
        return counts[0], None
    if not any_split_fits(counts[-1]):
        return None, f"min_gpu_count: no valid TP × PP split of up to {counts[-1]} GPUs fits"
    last = len(counts) - 1
    for i, n in enumerate(counts[:last]):
        if i == 0:
            continue  # checked above
        if built >= MAX_SCAN_PLANS:
            # Bisect counts[i..last]; counts[last] is known to fit.
            bad, good = i - 1, last
            while good - bad > 1:
                mid = (bad + good) // 2
                if any_split_fits(counts[mid]):
                    good = mid
                else:
                    bad = mid
            return counts[good], (
                f"min_gpu_count: counts from {n} GPUs on bisected (assumes a fit stays a fit "
                "with more GPUs)"
            )
        if any_split_fits(n):
            return n, None
    return counts[last], None


@lru_cache(maxsize=4096)
def _splits(arch: Architecture, count: int) -> list[tuple[int, int]]:
    """Valid (tp, pp) with tp × pp = count, larger TP first."""
    out = []
    for tp in reversed(valid_tensor_parallel_sizes(arch)):
        if count % tp == 0 and count // tp <= arch.num_layers:
            out.append((tp, count // tp))
    return out


@lru_cache(maxsize=1024)
def _candidate_counts(arch: Architecture) -> tuple[int, ...]:
    """Every valid TP × PP product, ascending (a tuple: the cached value is shared)."""
    tps = valid_tensor_parallel_sizes(arch)
    counts = {tp * pp for tp in tps for pp in range(1, min(arch.num_layers, 64) + 1)}
    return tuple(sorted(c for c in counts if c <= MAX_GPU_COUNT))


def fit_inference(req: InferenceRequest, gpu_label: str, gpu_count: int | None) -> Fit:
    """Whether `req` fits `gpu_count` GPUs of `req.gpu_memory_bytes`, and the inverse answers."""
    _validate(req)
    if req.gpu_memory_bytes is None:
        raise InvalidRequest("a GPU is needed to check the fit", field="gpu")
    mem = req.gpu_memory_bytes
    arch = req.architecture
    seqs, seq_len, prompt = _workload(req)
    tp, pp = req.tensor_parallel_size, req.pipeline_parallel_size
    notes: list[str] = []
    replicas = 1
    if gpu_count is not None:
        _positive_int(gpu_count, "gpu_count", MAX_GPU_COUNT)
        if gpu_count != tp * pp:
            if tp * pp == 1:
                options = _splits(arch, gpu_count)
                if not options:
                    raise InvalidRequest(
                        f"{gpu_count} GPUs cannot split this model (TP must divide "
                        f"{arch.num_attention_heads} heads, PP at most {arch.num_layers})",
                        field="gpu_count",
                    )
                tp, pp = min(
                    options,
                    key=lambda o: _required(_plan_for(req, o[0], o[1]), seqs, seq_len, prompt),
                )
                notes.append(f"{gpu_count} GPUs used as TP {tp} × PP {pp}")
            elif gpu_count % (tp * pp) == 0:
                replicas = gpu_count // (tp * pp)
                notes.append(f"{replicas} data-parallel replicas of TP {tp} × PP {pp}")
            else:
                raise InvalidRequest(
                    f"gpu_count {gpu_count} is not a multiple of TP × PP = {tp * pp}",
                    field="gpu_count",
                )
    plan = _plan_for(req, tp, pp)
    _check_len(plan, seq_len)
    usable = _usable(plan, mem)
    required = _required(plan, seqs, seq_len, prompt)
    fits = required <= usable
    frac = plan.settings.budget_fraction
    if frac < 1.0:
        knob = "gpu_memory_utilization" if plan.settings.engine == "vllm" else "mem_fraction_static"
        notes.append(f"usable = driver total {mem / GIB:.2f} GiB × {frac:g} ({knob})")
        margin = mem - usable
        if plan.outside_budget.total > margin:
            fits = False
            notes.append(
                f"the {margin / GIB:.2f} GiB left outside the budget cannot hold the CUDA context "
                f"and graphs ({plan.outside_budget.total / GIB:.2f} GiB)"
            )
    else:
        notes.append(f"usable = driver total {mem / GIB:.2f} GiB")
    if plan.settings.engine == "vllm":
        g = plan.stages[-1].groups
        assert g is not None
        conc_len = plan.max_model_len or seq_len
        need_one = g.request_bytes(conc_len, plan.settings.max_num_batched_tokens)
        if (
            required
            - _stage_components(plan, plan.stages[-1], seqs, seq_len, prompt)[1]
            + (need_one)
            > usable
        ):
            fits = False

    def fits_at(b: int, s: int) -> bool:
        p = min(prompt, s) if req.prompt_tokens is not None else s
        return _fits(plan, usable, b * req.concurrency, s, p)

    max_b_hi = max(1, MAX_TOKENS // (seq_len * req.concurrency))
    seqs_max = _max_sequences(plan, usable, seq_len, prompt)
    max_batch: int | None = min(max_b_hi, seqs_max // req.concurrency)
    if not max_batch or plan.outside_budget.total > mem - usable:
        max_batch = None
    limit = plan.max_model_len or arch.max_position_embeddings or MAX_TOKENS
    s_hi = max(1, min(limit, MAX_TOKENS // (req.batch_size * req.concurrency)))
    # Every sequence holds at least its full-attention layers' KV cache for all its tokens, on
    # every stage: an upper bound on the length that shortens the search.
    room = usable - max(st.base for st in plan.stages)
    rate = max(st.kv.layer_token_bytes * st.kv.full_layers for st in plan.stages)
    per_token = rate * req.batch_size * req.concurrency
    if per_token and room >= 0:
        s_hi = max(1, min(s_hi, room // per_token + 1))
    max_seq = None
    if max_batch is not None:
        max_seq = _largest_fitting(lambda s: fits_at(req.batch_size, s), s_hi)
    min_count, note = _min_gpu_count(req, seqs, seq_len, prompt)
    if note:
        notes.append(note)
    return Fit(
        gpu=gpu_label,
        gpu_count=tp * pp * replicas,
        usable_bytes=usable,
        required_bytes=required,
        fits=fits,
        headroom_bytes=usable - required,
        min_gpu_count=min_count,
        max_batch_size=max_batch,
        max_sequence_length=max_seq,
        assumptions=tuple(dict.fromkeys(notes)),
    )


@dataclass(frozen=True, slots=True)
class StageFigures:
    """What one GPU of each pipeline stage holds before the KV cache (an engine's start-up log).

    `kv_pool_bytes` is the pool that GPU's own budget leaves (vLLM / SGLang; None otherwise).
    """

    weights: int
    activations: int
    non_kv_overhead: int
    kv_pool_bytes: int | None


def stage_figures(req: InferenceRequest) -> tuple[StageFigures, ...]:
    """Per pipeline stage, first to last: weights, profiled activations, overhead, own pool."""
    _validate(req)
    plan = _plan_for(req)
    out = []
    for st in plan.stages:
        pool = None
        if req.gpu_memory_bytes is not None and plan.settings.engine in ("vllm", "sglang"):
            pool = (
                _usable(plan, req.gpu_memory_bytes)
                - st.weights
                - st.fixed_activation
                - plan.overhead_total
            )
        out.append(StageFigures(st.weights, st.fixed_activation, plan.overhead_total, pool))
    return tuple(out)
