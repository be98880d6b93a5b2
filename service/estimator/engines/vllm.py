"""``vllm``: the vLLM engine, as its start-up log reports memory, for the release line named by
``engine_options.version`` (:mod:`.vllm_versions`; default the newest modelled line).

The description below is the v0.19 line (the one the measured data holds); what each other
line changes (what the budget charges, defaults, the profiling run, CUDA-graph accounting) is
data in :mod:`.vllm_versions`, the profiling run per line in :mod:`.vllm_profile`.

Budget: the driver's total × ``gpu_memory_utilization``. At start-up vLLM loads the weights,
runs a profiling forward on ``max_num_batched_tokens`` dummy tokens and a dummy sampler run,
measures the torch peak and the non-torch increase, and gives what is left of the budget to the
KV-cache pool (``gpu_worker.determine_available_memory``). The CUDA context and the CUDA-graph
pool it captures afterwards live in the margin the budget leaves.

Next to the weights every GPU holds the rotary cos/sin tables vLLM precomputes (one
``[positions × scaling factor, rotary_dim]`` table per distinct rope, in the model dtype;
``LinearScalingRotaryEmbedding`` / ``DynamicNTKScalingRotaryEmbedding``; float32 for gpt-oss,
whose ``models/gpt_oss.py`` asks ``get_rope`` for it, until an eager profiling run casts it)
and, for an MLA model, the 128 MiB FlashInfer MLA workspace: ``get_valid_backends`` imports
each MLA attention backend of the platform's priority list while the first ``MLAAttention``
layer is built, and
``vllm/v1/attention/backends/mla/flashinfer_mla.py`` allocates ``g_fi_workspace``
(``FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE``) on the GPU at import, inside the load that
"Model loading took" measures. The vocabulary is padded to a multiple of 64; with PP > 1 a tied
lm_head gets its own copy on the last stage (``ParallelLMHead``); the vision tower of a
multimodal model is built on every pipeline rank.

The options and the defaults vLLM's ``EngineArgs`` derives for them are in :mod:`.vllm_options`.
``--dtype auto`` as ``ModelConfig._resolve_auto_dtype`` resolves it (vLLM 0.10.1 and later): the
checkpoint's dtype when the GPU supports it, a float32 checkpoint in the first 16-bit type the
GPU and the model support (bf16 from compute capability 8.0, else fp16; never fp16 for models
whose activations overflow it), bf16 on a GPU without it in fp16 (or fp32 for those models).
Quantization methods need the compute capability their kernels need
(``QuantizationConfig.get_min_capability`` in vLLM 0.11.2); fp8 weights below 8.9 run on the
weight-only Marlin path, whose memory is the same. TP must divide the attention heads, the KV
heads (or be a multiple of them), the MLP and expert widths and the 64-padded vocabulary (vLLM's
``divide`` assertions), and stay within one node's NVLink domain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Literal

from service.estimator.engines.base import (
    DataParallelPlan,
    DecidedBy,
    DtypeChoice,
    Engine,
    EngineContext,
    EngineSettings,
    Option,
    OptionValue,
    StageArgs,
    StageBuild,
    WeightOffload,
    activation_dtype,
    tp_sizes_dividing_widths,
)
from service.estimator.engines.mxfp4_storage import default_backend, mxfp4_extra_bytes
from service.estimator.engines.overhead import (
    OverheadTerms,
    cuda_context_bytes,
    cuda_graph_pool_bytes,
    framework_overhead,
    nvswitch_board,
)
from service.estimator.engines.vllm_features import (
    connector_cost,
    cpu_offload,
    fixed_pool_bytes,
    lora_slots,
    swap_space_bytes,
)
from service.estimator.engines.vllm_kv import VllmKvGroups, vllm_groups
from service.estimator.engines.vllm_options import (
    DECLARED,
    DTYPES,
    OPTIONS,
    derived_defaults,
    engine_line,
)
from service.estimator.engines.vllm_parallel import vllm_data_parallel
from service.estimator.engines.vllm_profile import profile_peak
from service.estimator.engines.vllm_versions import line_for
from service.estimator.formats import WeightFormat
from service.estimator.kv_cache import MlaCache
from service.estimator.model import Architecture
from service.estimator.result import Capacity
from service.estimator.units import DTYPE_BYTES, GIB, MIB, normalize_dtype
from service.estimator.weights import Placement, WeightLayout

if TYPE_CHECKING:
    from service.estimator.engines.serving import ServingSetup, Stage
    from service.estimator.gpu import GpuSpec

__all__ = ["MLA_WORKSPACE_BYTES", "VllmEngine"]

# The extensible KV cache's margin floor (v0.34 extensible_kv_cache.py: 1 GiB; 3 GiB on ROCm)
# and fraction of the transient peak.
EXTENSIBLE_MARGIN_FLOOR = {"amd": 3 * GIB}
EXTENSIBLE_MARGIN_FLOOR_DEFAULT = 1 * GIB
EXTENSIBLE_MARGIN_FRACTION = 0.75
# FLASHINFER_MLA_WORKSPACE_BUFFER_SIZE, allocated when flashinfer_mla.py is imported.
MLA_WORKSPACE_BYTES = 128 * MIB
VOCAB_PADDING = 64

# Minimum compute capability per weight-format kind: each quantization method's
# get_min_capability() in vLLM 0.11.2 (vllm/model_executor/layers/quantization/*.py):
# gptq 60, awq 75, bitsandbytes 70, fp8 80, mxfp4 80, compressed-tensors 70.
_MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    "gptq": (6, 0),
    "awq": (7, 5),
    "bnb4": (7, 0),
    "bnb4-dq": (7, 0),
    "fp8-tensor": (8, 0),
    "fp8-channel": (8, 0),
    "fp8-block": (8, 0),
    "mx": (8, 0),
    "int8-channel": (7, 0),
    "int4-sym": (7, 0),
}
# Native fp8 matmuls from Ada/Hopper (8.9); below, vLLM runs fp8 weights on Marlin W8A16.
_FP8_NATIVE = (8, 9)


def _rope_dtype_bytes(arch: Architecture, act_bytes: float) -> float:
    """The rotary table's element size as loaded: float32 where vLLM asks ``get_rope`` for it
    (``Modeling.vllm_rope_fp32``: gpt-oss), else the model dtype."""
    return DTYPE_BYTES["fp32"] if arch.vllm_rope_fp32 else act_bytes


def rope_table_bytes(arch: Architecture, dtype_bytes: float) -> int:
    """vLLM's rotary cos/sin tables: ``max_position × factor`` rows per table (a scaled rope
    precomputes the scaled range), one extra unscaled table for a second rope (Gemma 3's
    local layers), ``rotary_dim`` wide, in the model dtype."""
    positions = arch.max_position_embeddings or 0
    rows = int(positions * arch.rope_scaling_factor) + positions * (arch.rope_tables - 1)
    return int(rows * arch.rope_dim * dtype_bytes)


class VllmEngine(Engine):
    name: ClassVar[str] = "vllm"
    summary: ClassVar[str] = "vLLM v1: budget = total × gpu_memory_utilization, paged KV pool"
    budget_option: ClassVar[str | None] = "gpu_memory_utilization"
    fused_kernels: ClassVar[bool] = True
    context_option: ClassVar[str | None] = "max_model_len"
    decides_instead: ClassVar[tuple[DecidedBy, ...]] = (
        DecidedBy(
            "prompt_tokens",
            ("max_num_batched_tokens",),
            "vLLM reserves activations for its profiling batch of max_num_batched_tokens "
            "tokens; a request's prompt length changes nothing",
        ),
    )
    options: ClassVar[tuple[Option, ...]] = OPTIONS
    declared: ClassVar[tuple[Option, ...]] = DECLARED
    bool_flags: ClassVar[Literal["bool_optional", "switch"]] = "bool_optional"

    def defaults(
        self, values: Mapping[str, OptionValue | None], ctx: EngineContext
    ) -> Mapping[str, OptionValue | None]:
        return derived_defaults(values, ctx)

    def default_sequence_length(self, s: EngineSettings) -> int:
        return int(s["max_model_len"])

    def resolve_dtype(
        self,
        arch: Architecture,
        fmt: WeightFormat,
        s: EngineSettings,
        gpu: GpuSpec | None,
        named: bool = False,
    ) -> DtypeChoice:
        notes: list[str] = []
        unsupported = None
        cc = gpu.compute_capability if gpu is not None else None
        bf16_ok = gpu is None or gpu.supports_bf16()
        requested = str(s["dtype"])
        checkpoint = normalize_dtype(arch.dtype)
        if named and not fmt.quantized:
            compute = fmt.name  # a plain weight format named in the request is the dtype
            if compute == "bf16" and not bf16_ok:
                unsupported = f"bf16 needs compute capability 8.0, the GPU has {_cc(cc)}"
        elif requested != "auto":
            compute = DTYPES[requested]
            if compute == "bf16" and not bf16_ok:
                unsupported = (
                    f"--dtype {requested}: bfloat16 needs compute capability 8.0, the GPU has "
                    f"{_cc(cc)}"
                )
        elif line_for(str(s["version"]))[0].fp32_to_fp16:
            # <= 0.8.5 (_get_and_verify_dtype): float32 runs in fp16 (Gemma 2 in bf16 in
            # 0.6.4), other dtypes as stored; bf16 on a GPU without it is refused.
            compute = checkpoint
            if checkpoint == "fp32":
                compute = "bf16" if arch.model_type == "gemma2" else "fp16"
            if compute == "bf16" and not bf16_ok:
                unsupported = (
                    f"this vLLM line runs the bf16 checkpoint as stored and bfloat16 needs "
                    f"compute capability 8.0, the GPU has {_cc(cc)} (pass --dtype half)"
                )
            if compute != checkpoint:
                notes.append(
                    f"--dtype auto runs the {arch.dtype} checkpoint in {compute} (vLLM <= 0.8's "
                    "rule)"
                )
        else:
            compute = _auto_dtype(checkpoint, bf16_ok, arch.fp16_unsafe)
            if compute != checkpoint:
                notes.append(
                    f"--dtype auto runs the {arch.dtype} checkpoint in {compute} on this GPU "
                    "(vLLM's auto-dtype rule)"
                )
        minimum = _MIN_CAPABILITY.get(fmt.kind)
        if cc is not None and minimum is not None and cc < minimum and unsupported is None:
            unsupported = (
                f"{fmt.name} weights need compute capability {_cc(minimum)} in vLLM (its kernels' "
                f"minimum), the GPU has {_cc(cc)}"
            )
        elif cc is not None and fmt.kind.startswith("fp8") and cc < _FP8_NATIVE:
            notes.append(
                "fp8 weights on a GPU without native fp8: vLLM's weight-only Marlin path "
                "(same weight bytes, 16-bit activations)"
            )
        if fmt.quantized:
            return DtypeChoice(activation_dtype(arch, fmt), None, tuple(notes), unsupported)
        weights = compute if compute != fmt.name else None
        return DtypeChoice(compute, weights, tuple(notes), unsupported)

    def valid_tensor_parallel_sizes(self, arch: Architecture) -> tuple[int, ...]:
        return tp_sizes_dividing_widths(arch, VOCAB_PADDING)

    def command_args(self, s: EngineSettings, tp: int, pp: int, kv_cache_dtype: str) -> list[str]:
        args = [
            "--tensor-parallel-size",
            str(tp),
            "--pipeline-parallel-size",
            str(pp),
            "--max-model-len",
            str(s["max_model_len"]),
            "--gpu-memory-utilization",
            f"{float(s['gpu_memory_utilization']):g}",
            "--max-num-seqs",
            str(s["max_num_seqs"]),
        ]
        if kv_cache_dtype != "auto":
            args += ["--kv-cache-dtype", kv_cache_dtype]
        if s["dtype"] != "auto":
            args += ["--dtype", str(s["dtype"])]
        if s.get("limit_mm_per_prompt") is not None:
            args += ["--limit-mm-per-prompt", f'{{"image": {int(s["limit_mm_per_prompt"])}}}']
        return args

    def max_model_len(self, s: EngineSettings) -> int | None:
        value_ = s["max_model_len"]
        return None if value_ is None else int(value_)

    def offload(
        self, arch: Architecture, s: EngineSettings, layout: WeightLayout, pp: int
    ) -> WeightOffload | None:
        found = cpu_offload(
            float(s.get("cpu_offload_gb") or 0), layout.layer_tensors, pp, arch.num_layers
        )
        if found is None:
            return None
        return WeightOffload(found.per_stage, found.largest_layer, found.note)

    def budget_bytes(self, setup: ServingSetup, gpu_memory_bytes: int) -> int:
        """The total × gpu_memory_utilization; with a KV pool the caller fixed, vLLM ignores
        the fraction and everything must fit the device beside the context and graphs."""
        if _fixed_pool(setup.settings):
            return gpu_memory_bytes - setup.outside_budget.total
        return super().budget_bytes(setup, gpu_memory_bytes)

    def budget_note(self, setup: ServingSetup, gpu_memory_bytes: int) -> str:
        if _fixed_pool(setup.settings):
            return (
                f"usable = CUDA total {gpu_memory_bytes / GIB:.2f} GiB less the CUDA context "
                "and graphs (a fixed KV pool: vLLM ignores gpu_memory_utilization)"
            )
        return super().budget_note(setup, gpu_memory_bytes)

    def data_parallel(
        self,
        arch: Architecture,
        s: EngineSettings,
        tp: int,
        dp: int,
        expert_parallel: bool,
        gpu: GpuSpec | None,
    ) -> DataParallelPlan:
        line = engine_line(str(s["version"]), gpu, str(s["dtype"]))
        return vllm_data_parallel(line, arch, s, tp, dp, expert_parallel, gpu)

    def mla_cache(self, arch: Architecture) -> MlaCache:
        """The latent for vLLM's MLA model types; otherwise latent attention runs as standard
        Attention over every head, qk_head_dim wide, V padded to it (models/minicpm3.py)."""
        return MlaCache.LATENT if arch.vllm_runs_mla else MlaCache.HEADS_PADDED_V

    def placement(self, arch: Architecture, s: EngineSettings, act_bytes: float) -> Placement:
        rope = rope_table_bytes(arch, _rope_dtype_bytes(arch, act_bytes))
        workspace = MLA_WORKSPACE_BYTES if arch.vllm_runs_mla else 0
        notes = []
        if rope:
            kept = " (float32, as vLLM builds this model's)" if arch.vllm_rope_fp32 else ""
            notes.append(f"vLLM rotary cos/sin cache {rope / GIB:.3f} GiB per GPU{kept}")
        if workspace:
            notes.append(
                f"vLLM FlashInfer MLA workspace {workspace / GIB:.3f} GiB per GPU (allocated when "
                "vLLM imports that attention backend while building the model)"
            )
        return Placement(
            vocab_padding=VOCAB_PADDING,
            tied_copy_on_last_stage=True,
            extra_per_gpu=rope + workspace,
            extra_notes=tuple(notes),
            include_vision=s.get("limit_mm_per_prompt") != 0,
            vision_on_every_stage=True,
        )

    def overheads(
        self, s: EngineSettings, tp: int, pp: int, layers_on_gpu: int, gpu: GpuSpec | None
    ) -> tuple[OverheadTerms, OverheadTerms]:
        line = engine_line(str(s["version"]), gpu, str(s["dtype"]))
        graphs = 0 if s["enforce_eager"] else cuda_graph_pool_bytes(layers_on_gpu)
        # What the line's budget charges (vllm_versions: budget, graphs_in_budget).
        context_inside = line.budget in ("device", "extensible")
        graphs_inside = line.graphs_in_budget
        inside = framework_overhead(
            tp, pp, cuda_context=context_inside, nvswitch=nvswitch_board(gpu), gpu=gpu
        )
        inside = dataclasses.replace(inside, cuda_graphs=graphs if graphs_inside else 0)
        outside = OverheadTerms(
            cuda_context=0 if context_inside else cuda_context_bytes(gpu),
            cuda_graphs=0 if graphs_inside else graphs,
            kv_transfer=connector_cost(s, tp, pp).gpu_outside,
        )
        return inside, outside

    @staticmethod
    def _eager_rope_cast(arch: Architecture, s: EngineSettings, act_bytes: float) -> int:
        """Bytes a float32 rotary table sheds in an eager profiling run: the custom op's
        ``RotaryEmbedding.forward_cuda`` replaces it by a copy in the query's dtype
        (``_match_cos_sin_cache_dtype``, v0.11.0 and v0.19.0), so the torch peak vLLM
        measures from the loaded weights falls by the difference. Compiled, the native path
        (v0.11.0) or the traced cast (v0.19.0, ``torch.compiler.is_compiling``) keeps it."""
        loaded = _rope_dtype_bytes(arch, act_bytes)
        if not s["enforce_eager"] or loaded <= act_bytes:
            return 0
        return rope_table_bytes(arch, loaded) - rope_table_bytes(arch, act_bytes)

    def stage(self, args: StageArgs) -> StageBuild:
        """The profiling run's peak (:mod:`.vllm_profile`), the extensible cache's margin
        (0.34), and what mxfp4 experts take in the kernel's layout beyond the checkpoint."""
        s, c = args.settings, args.coeffs
        line = engine_line(str(s["version"]), args.gpu, str(s["dtype"]))
        run = profile_peak(
            args.arch,
            c,
            line,
            tp=args.tp,
            tokens=int(s["max_num_batched_tokens"]),
            max_num_seqs=int(s["max_num_seqs"]),
            max_model_len=int(s["max_model_len"]),
            is_last=args.is_last,
            weight_kind=args.weight_format_kind,
            gpu=args.gpu,
            mm_limit=s.get("limit_mm_per_prompt"),
            sampler_kind=str(s.get("sampler", "auto")),
            moe_tp=args.experts.tensor if args.experts is not None else None,
            moe_token_factor=args.moe_token_factor,
        )
        fixed = int(run.peak)
        notes = list(run.notes)
        cast = self._eager_rope_cast(args.arch, s, c.dtype_bytes)
        if cast:
            fixed -= cast
            notes.append(
                f"eager mode: the profiling run casts the float32 rotary table to the "
                f"activation dtype and frees it, {cast / GIB:.3f} GiB below the loaded weights"
            )
        if line.budget == "extensible":
            vendor = args.gpu.vendor if args.gpu is not None else None
            floor = EXTENSIBLE_MARGIN_FLOOR.get(vendor or "", EXTENSIBLE_MARGIN_FLOOR_DEFAULT)
            margin = int(max(floor, EXTENSIBLE_MARGIN_FRACTION * run.peak))
            fixed += margin
            notes.append(
                f"vLLM's extensible KV cache leaves a margin of {margin / GIB:.2f} GiB beyond "
                "the profiled peak (max of its floor and 0.75 × the peak)"
            )
        extra = 0
        if args.weight_format_kind == "mx" and args.arch.moe is not None:
            backend = str(s.get("mxfp4_backend", "auto"))
            if backend == "auto":
                backend = default_backend(args.gpu, line.mxfp4_hopper)
            moe_layers = min(args.layers, len(args.arch.moe.layers))
            extra = mxfp4_extra_bytes(args.arch, args.tp, moe_layers, backend)
            notes.append(
                f"vLLM's {backend} mxfp4 MoE kernel stores the experts padded and converted: "
                f"{extra / GIB:+.3f} GiB per GPU against the checkpoint's layout"
            )
        if not line.v1 and args.offloaded_layer_bytes:
            # V0 copies an offloaded module's parameters to the GPU for its forward.
            fixed += args.offloaded_layer_bytes
            notes.append(
                f"V0 brings an offloaded layer's {args.offloaded_layer_bytes / GIB:.2f} GiB back "
                "to the GPU for its forward (held during the profiling run)"
            )
        lora = lora_slots(
            args.arch,
            s,
            tp=args.tp,
            pp=args.pp,
            index=args.index,
            act_dtype=args.act_dtype,
            experts=args.experts,
            moe_lora=line.moe_lora,
        )
        host = swap_space_bytes(s, line.v1)
        if host:
            notes.append(f"V0 swap space {host / GIB:.2f} GiB of pinned host memory per GPU")
        if lora is not None:
            extra += lora.gpu_bytes
            host += lora.host_bytes
            notes.append(lora.note)
        kv_offload = float(s.get("kv_offloading_size") or 0)
        if kv_offload:
            share = int(kv_offload * GIB / (args.tp * args.pp))
            host += share
            notes.append(
                f"--kv-offloading-size {kv_offload:g} GiB ({s.get('kv_offloading_backend')}): "
                f"{share / GIB:.2f} GiB of host memory per GPU for offloaded KV blocks"
            )
        transfer = connector_cost(s, args.tp, args.pp)
        host += transfer.host
        if transfer.note:
            notes.append(transfer.note)
        groups = vllm_groups(
            args.kv, int(s["block_size"]), tokens_from_concurrency=line.kv_tokens_from_concurrency
        )
        pool = fixed_pool_bytes(s, groups.block_bytes)
        if pool is not None:
            notes.append(pool[1])
        if args.gpu is not None and args.gpu.vendor == "amd" and args.tp > 1:
            notes.append(
                "RCCL's buffers on ROCm are priced as NCCL's (fitted on H100 NVSwitch boards); "
                "no public vLLM log of them was found to check"
            )
        return StageBuild(
            fixed_activation=fixed,
            state=groups,
            notes=tuple(notes),
            extra_weights=extra,
            kv_pool=pool[0] if pool is not None else None,
            host_per_gpu=host,
            unpriced=transfer.unpriced,
        )

    def complete(self, setup: ServingSetup) -> ServingSetup:
        """A connector that mirrors the KV pool in host memory (NIXL's host buffer) holds as
        much host memory as the pool it mirrors, known once the GPU is."""
        if not connector_cost(setup.settings, setup.tp, setup.pp).host_is_pool:
            return setup
        if setup.gpu_memory_bytes is None:
            return setup
        usable = setup.usable(setup.gpu_memory_bytes)
        host = tuple(
            h + max(0, st.kv_pool if st.kv_pool is not None else usable - st.base)
            for h, st in zip(setup.host_per_gpu, setup.stages, strict=True)
        )
        return dataclasses.replace(setup, host_per_gpu=host)

    def setup_notes(
        self, arch: Architecture, s: EngineSettings, last_state: object
    ) -> tuple[str, ...]:
        t, seqs = int(s["max_num_batched_tokens"]), int(s["max_num_seqs"])
        line, mapped = line_for(str(s["version"]))
        notes = [f"vLLM {line.name} line ({line.releases}): {line.source}"]
        if mapped:
            notes.append(mapped)
        notes.extend(line.notes)
        rows = min(seqs, t) if line.v1 else seqs
        notes.append(f"vLLM profiling run at max_num_batched_tokens={t}, sampler on {rows} rows")
        if line.kv_cache_memory_hint:
            notes.append(
                "this vLLM line logs a --kv-cache-memory value that reproduces the pool "
                "(DEBUG level before 0.34)"
            )
        if isinstance(last_state, VllmKvGroups) and last_state.sliding_groups:
            g = last_state
            notes.append(
                f"vLLM KV groups: {g.groups} groups of {g.group_size} layers ({g.slots} slots "
                "per token)"
            )
        return tuple(notes)

    # ---- workload -------------------------------------------------------------------

    @staticmethod
    def _groups(stage: Stage) -> VllmKvGroups:
        groups = stage.engine_state
        assert isinstance(groups, VllmKvGroups)
        return groups

    def sequence_cost(
        self, setup: ServingSetup, stage: Stage, seq_len: int, prompt: int
    ) -> tuple[int, int]:
        mnbt = int(setup.settings["max_num_batched_tokens"])
        return self._groups(stage).request_bytes(seq_len, mnbt), 0

    def capacity(
        self, setup: ServingSetup, gpu_memory_bytes: int, seq_len: int
    ) -> tuple[Capacity, tuple[str, ...]]:
        budget = setup.usable(gpu_memory_bytes)
        conc_len = concurrency_length(setup, seq_len)
        mnbt = int(setup.settings["max_num_batched_tokens"])
        pools = [
            st.kv_pool
            if st.kv_pool is not None
            else budget - st.weights - st.fixed_activation - setup.overhead.total
            for st in setup.stages
        ]
        # Every worker gets the block count of the smallest pool (vLLM unifies num_blocks).
        idx = min(range(len(pools)), key=lambda i: pools[i])
        st = setup.stages[idx]
        groups = self._groups(st)
        pool = max(0, pools[idx])
        blocks = groups.num_blocks(pool)
        tokens = groups.logged_tokens(blocks, conc_len, mnbt)
        per_req = groups.blocks_per_request(conc_len, mnbt)
        notes = []
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
        cap = Capacity(
            kv_cache_bytes_per_token=groups.token_bytes,
            kv_cache_pool_bytes=pool,
            kv_cache_tokens=tokens,
            max_concurrency=round(blocks / per_req if per_req else 0.0, 2),
            sequence_length=conc_len,
            budget_bytes=budget,
            subtracted=MappingProxyType(
                {
                    "weights": st.weights,
                    "activations": st.fixed_activation,
                    "non_torch": setup.overhead.total,
                }
            ),
        )
        return cap, tuple(notes)

    def refuses(
        self, setup: ServingSetup, usable: int, required: int, kv_last: int, seq_len: int
    ) -> bool:
        """vLLM checks at start-up that its pool holds one request of max_model_len: with
        the workload's KV replaced by one such request, the most loaded GPU must still fit."""
        conc_len = setup.max_model_len or seq_len
        mnbt = int(setup.settings["max_num_batched_tokens"])
        last = setup.stages[-1]
        need_one = self._groups(last).request_bytes(conc_len, mnbt)
        if last.kv_pool is not None:
            return need_one > last.kv_pool
        return required - kv_last + need_one > usable


def _fixed_pool(s: EngineSettings) -> bool:
    """Whether the caller fixed the KV pool (its size, or its block count)."""
    return bool(s.get("kv_cache_memory_bytes") or s.get("num_gpu_blocks_override"))


def _cc(cc: tuple[int, int] | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def _auto_dtype(checkpoint: str, bf16_ok: bool, fp16_unsafe: bool) -> str:
    """vLLM's ``_resolve_auto_dtype`` (0.10.1+): the supported dtypes in the platform's order
    (bf16 from compute capability 8.0, fp16, fp32; fp16 removed for models it overflows); a
    float32 checkpoint takes the first, a checkpoint dtype the GPU lacks falls back to it."""
    supported = [d for d in ("bf16", "fp16", "fp32") if (d != "bf16" or bf16_ok)]
    if fp16_unsafe:
        supported.remove("fp16")
    if checkpoint == "fp32":
        return supported[0]
    return checkpoint if checkpoint in supported else supported[0]


def concurrency_length(setup: ServingSetup, seq_len: int) -> int:
    """The length max_concurrency is reported at: max_model_len when the caller set it, else
    the request's sequence length (which defaults to max_model_len)."""
    if setup.max_model_len is not None and setup.engine.context_option in setup.settings.explicit:
        return setup.max_model_len
    return seq_len
