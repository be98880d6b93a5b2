"""``sglang``: SGLang's static memory split, as its start-up log reports it, per release line.

Budget: SGLang measures the memory free once torch.distributed (NCCL, custom all-reduce) is up
and before the weights load (``F0``: the CUDA total less the CUDA context and the
communication buffers), and gives ``mem_fraction_static × F0`` to the weights and the KV pool:
the pool is what that leaves after the weights (``profile_max_num_token``:
``rest = F1 − F0 · (1 − fraction)``, ``F1`` the memory free after loading). The pool is
token-granular: ``max_total_num_tokens = rest // cell``, the cell being one token's K and V on
every layer of the stage (MLA: the latent, not split by TP), floored to ``page_size``.
Everything allocated after the pool lives in the slack ``(1 − fraction) · F0``: the
req_to_token table (``rows × (context_length + 4)`` int32, rows = the request slots derived
from the pool, :func:`~.sglang_versions.max_num_reqs`), the CUDA graphs (SGLang's own figure:
2 MiB per decode batch size), one prefill chunk's activations, cuBLAS workspaces; when they do
not fit, the verdict is ``outside_budget_exceeded``. SGLang refuses to start only when the pool
holds nothing (``Not enough memory``); a pool shorter than ``context_length`` limits requests
instead.

The defaults (``mem_fraction_static``, ``chunked_prefill_size``, ``cuda_graph_max_bs``) follow
the release line of ``version`` (:mod:`.sglang_versions`), from the GPU's memory as nvidia-smi
prints it, TP and PP. ``context_length`` defaults to SGLang's ``get_context_length``: the first
of the config's context keys, times the rope factor unless the scaling states its original
context or is of type llama3; a request that names no sequence length is judged at it.
``--dtype auto`` as SGLang's ``_get_and_verify_dtype`` resolves it: the checkpoint's dtype, a
float32 checkpoint in fp16 (Gemma families: bf16); a bf16 checkpoint is kept on a GPU without
bf16, which then cannot run it. Sliding-window models get a hybrid pool where the release
gives one (sliding layers hold 0.8 slots per full-attention slot and keep a request's window).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from service.estimator.engines import sglang_versions as sv
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
from service.estimator.engines.overhead import (
    OverheadTerms,
    cuda_context_bytes,
    library_workspace_bytes,
    nccl_bytes,
    nvswitch_board,
)
from service.estimator.engines.sglang_options import (
    DECLARED,
    OPTIONS,
    derived_context_length,
    derived_defaults,
    gpu_mib,
)
from service.estimator.engines.vllm import concurrency_length
from service.estimator.engines.vllm_features import cpu_offload, stacked_lora
from service.estimator.engines.vllm_options import DTYPES
from service.estimator.errors import InvalidRequest
from service.estimator.formats import WeightFormat
from service.estimator.model import Architecture
from service.estimator.parallel import ExpertLayout
from service.estimator.result import Capacity
from service.estimator.units import GIB, MIB, normalize_dtype

if TYPE_CHECKING:
    from service.estimator.engines.serving import ServingSetup, Stage
    from service.estimator.gpu import GpuSpec
    from service.estimator.weights import WeightLayout

__all__ = ["SglangEngine", "SglangPool", "derived_context_length", "gpu_mib"]

VOCAB_PADDING = 64
# SGLang's own estimate of decode CUDA-graph memory per captured batch size (the 2 MiB per
# unit of max batch size of its reserve, server_args.py 0.5.3+).
GRAPH_BYTES_PER_BATCH = 2 * MIB
# req_to_token rows hold context_length + 4 int32 slots.
_ROW_EXTRA, _ROW_BYTES = 4, 4


@dataclass(frozen=True, slots=True)
class SglangPool:
    """SGLang's KV pool on one GPU as its start-up log reports it."""

    free_at_start: int  # F0, bytes
    budget: int  # F0 × mem_fraction_static
    rest: int  # what the budget leaves after the weights
    cell: float  # bytes of one full-attention slot on every layer (with its sliding share)
    tokens: int  # max_total_num_tokens (full-attention slots)
    swa_tokens: int | None  # sliding-window slots of a hybrid pool
    max_num_reqs: int
    max_running_requests: int
    request_table_bytes: int

    @property
    def pool_bytes(self) -> int:
        return int(self.tokens * self.cell)


class SglangEngine(Engine):
    name: ClassVar[str] = "sglang"
    summary: ClassVar[str] = (
        "SGLang: mem_fraction_static of the memory free at start holds weights and a token KV pool"
    )
    declared: ClassVar[tuple[Option, ...]] = DECLARED
    budget_option: ClassVar[str | None] = "mem_fraction_static"
    budget_reads_free_memory: ClassVar[bool] = True
    fused_kernels: ClassVar[bool] = True
    context_option: ClassVar[str | None] = "context_length"
    decides_instead: ClassVar[tuple[DecidedBy, ...]] = (
        DecidedBy(
            "prompt_tokens",
            ("mem_fraction_static", "chunked_prefill_size"),
            "SGLang leaves activations the memory mem_fraction_static does not take and "
            "prefills in chunks of chunked_prefill_size tokens; a request's prompt length "
            "changes nothing",
        ),
    )
    # server_args.py reserves tp × pp / 8 GiB more per GPU as the group grows.
    reserve_grows_with_gpus: ClassVar[bool] = True
    options: ClassVar[tuple[Option, ...]] = OPTIONS

    # ---- options --------------------------------------------------------------------

    def defaults(
        self, values: Mapping[str, OptionValue | None], ctx: EngineContext
    ) -> Mapping[str, OptionValue | None]:
        return derived_defaults(values, ctx)

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
        ]
        for name, flag in (
            ("max_running_requests", "--max-running-requests"),
            ("max_total_tokens", "--max-total-tokens"),
        ):
            if s[name] is not None:
                args += [flag, str(s[name])]
        if s["disable_cuda_graph"]:
            args.append("--disable-cuda-graph")
        if kv_cache_dtype != "auto":
            args += ["--kv-cache-dtype", kv_cache_dtype]
        if s["dtype"] != "auto":
            args += ["--dtype", str(s["dtype"])]
        return args

    def command_layout(self, body: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
        """``--tp N --dp D --enable-dp-attention`` runs on N GPUs: D attention groups of
        TP N / D, the MoE layers over all N (SGLang's ``compute_dp_attention_world_info``);
        the estimate's layout is then TP N / D × DP D. Without it, ``--dp`` starts D copies."""
        tp, dp = int(body.get("tensor_parallel_size", 1)), int(body.get("data_parallel_size", 1))
        if options.get("enable_dp_attention") and dp > 1 and tp % dp == 0:
            return {"tensor_parallel_size": tp // dp}
        return {}

    def data_parallel(
        self,
        arch: Architecture,
        s: EngineSettings,
        tp: int,
        dp: int,
        expert_parallel: bool,
        gpu: GpuSpec | None,
    ) -> DataParallelPlan:
        """SGLang's MoE layers: experts divided among ``ep_size`` ranks, each split
        ``tp_size / ep_size`` ways (``moe_ep_size``, ``moe_tp_size`` in server_args.py), over
        the whole TP group; with DP attention that group is TP × DP of the estimate."""
        attention_dp = bool(s.get("enable_dp_attention")) and dp > 1
        group = tp * dp if attention_dp else tp
        ep = int(s.get("ep_size") or 1)
        if expert_parallel and ep == 1:
            ep = group
        notes: list[str] = []
        unpriced: tuple[str, ...] = ()
        if attention_dp:
            notes.append(
                f"SGLang DP attention: {dp} attention groups of TP {tp}, each with its own KV "
                f"pool; the MoE layers span all {group} GPUs"
            )
        elif dp > 1:
            notes.append(f"{dp} SGLang replicas (--dp without DP attention), each a full copy")
        if arch.moe is None:
            return DataParallelPlan(notes=tuple(notes))
        if group % ep:
            raise InvalidRequest(
                f"ep_size {ep} must divide the {group} GPUs of the MoE group",
                field="engine_options.ep_size",
            )
        redundant = int(s.get("ep_num_redundant_experts") or 0)
        experts = ExpertLayout(tensor=group // ep, expert=ep, redundant=redundant)
        if s.get("moe_a2a_backend") not in (None, "none"):
            unpriced = (f"--moe-a2a-backend {s.get('moe_a2a_backend')}: its dispatch buffers",)
        if group == tp and ep == 1:
            return DataParallelPlan(notes=tuple(notes), unpriced=unpriced)
        return DataParallelPlan(experts=experts, notes=tuple(notes), unpriced=unpriced)

    def max_model_len(self, s: EngineSettings) -> int | None:
        length = s["context_length"]
        return None if length is None else int(length)

    # ---- setup ----------------------------------------------------------------------

    def overheads(
        self, s: EngineSettings, tp: int, pp: int, layers_on_gpu: int, gpu: GpuSpec | None
    ) -> tuple[OverheadTerms, OverheadTerms]:
        """Nothing is charged to the budget but the weights and the pool: the context and
        NCCL are allocated before F0 is measured, the rest after the pool (in the slack).

        NCCL as a TP group of two communicators holds it (SGLang's PyNccl and torch's process
        group, which ``get_available_gpu_memory``'s all-reduce sets up): the fitted NVSwitch
        figure on Hopper-and-later SXM boards, the per-peer channel buffers elsewhere (PCIe
        boards such as 4 × L4), as vLLM's groups are priced."""
        graphs = 0 if s["disable_cuda_graph"] else GRAPH_BYTES_PER_BATCH * s["cuda_graph_max_bs"]
        outside = OverheadTerms(
            cuda_context=cuda_context_bytes(gpu),
            library_workspace=library_workspace_bytes(gpu),
            nccl=nccl_bytes(tp, pp, nvswitch=nvswitch_board(gpu)),
            cuda_graphs=graphs,
        )
        return OverheadTerms(), outside

    def offload(
        self, arch: Architecture, s: EngineSettings, layout: WeightLayout, pp: int
    ) -> WeightOffload | None:
        """``--cpu-offload-gb``: SGLang's offloader takes decoder-layer parameters in order
        until the budget, as vLLM's does (``sglang/srt/utils/offloader.py``)."""
        found = cpu_offload(
            float(s.get("cpu_offload_gb") or 0), layout.layer_tensors, pp, arch.num_layers
        )
        if found is None:
            return None
        return WeightOffload(found.per_stage, found.largest_layer, found.note)

    def stage(self, args: StageArgs) -> StageBuild:
        """LoRA: ``max_loras_per_batch`` buffers of ``max_lora_rank`` on the target modules,
        allocated with the model, before the pool is sized (``lora/mem_pool.py``:
        ``LoRAMemoryPool.init_buffers``); no embedding or lm_head slots."""
        s = args.settings
        if not s.get("enable_lora"):
            return StageBuild()
        lora = stacked_lora(
            args.arch,
            slots=int(s["max_loras_per_batch"]),
            rank=int(s["max_lora_rank"]),
            cpu_adapters=0,
            dtype=args.act_dtype,
            fully_sharded=False,
            vocab=False,
            tp=args.tp,
            pp=args.pp,
            index=args.index,
            experts=args.experts,
            moe_lora=False,
            engine="SGLang",
        )
        return StageBuild(extra_weights=lora.gpu_bytes, notes=(lora.note,))

    def complete(self, setup: ServingSetup) -> ServingSetup:
        """The slack's terms that depend on the model: one prefill chunk's activations and
        the req_to_token table, whose rows follow from the pool's tokens; with HiCache, the
        host tier (``hicache_size`` GB, else ``hicache_ratio`` × the GPU pool)."""
        chunk = int(setup.settings["chunked_prefill_size"])
        outside = dataclasses.replace(
            setup.outside_budget, activations=int(setup.coeffs.per_token * chunk)
        )
        host = setup.host_per_gpu
        if setup.gpu_memory_bytes is not None:
            with_activations = dataclasses.replace(setup, outside_budget=outside)
            pool = self.pool(with_activations, setup.gpu_memory_bytes)
            outside = dataclasses.replace(outside, request_table=pool.request_table_bytes)
            if setup.settings.get("enable_hierarchical_cache"):
                size = int(setup.settings.get("hicache_size") or 0)
                tier = (
                    size * 10**9
                    if size
                    else int(float(setup.settings["hicache_ratio"]) * pool.pool_bytes)
                )
                host = tuple(h + tier for h in host)
        return dataclasses.replace(setup, outside_budget=outside, host_per_gpu=host)

    def budget_bytes(self, setup: ServingSetup, gpu_memory_bytes: int) -> int:
        return int(
            self.free_at_start(setup, gpu_memory_bytes) * self.budget_fraction(setup.settings)
        )

    def budget_note(self, setup: ServingSetup, gpu_memory_bytes: int) -> str:
        free = self.free_at_start(setup, gpu_memory_bytes)
        return (
            f"usable = memory free at start {free / GIB:.2f} GiB (CUDA total "
            f"{gpu_memory_bytes / GIB:.2f} GiB less the CUDA context and NCCL) × "
            f"{self.budget_fraction(setup.settings):g} (mem_fraction_static)"
        )

    @staticmethod
    def free_at_start(setup: ServingSetup, gpu_memory_bytes: int) -> int:
        """F0: what is free once the CUDA context and the communicators exist."""
        pre = setup.outside_budget.cuda_context + setup.outside_budget.nccl
        return max(0, gpu_memory_bytes - pre)

    def setup_notes(
        self, arch: Architecture, s: EngineSettings, last_state: object
    ) -> tuple[str, ...]:
        rel = sv.release(str(s["version"]))
        notes = [
            *rel.notes,
            f"SGLang {rel.text} accounting (line {rel.line.name}, {rel.line.span}: default "
            f"mem_fraction_static {rel.line.rule})",
            f"chunked_prefill_size {s['chunked_prefill_size']}, cuda_graph_max_bs "
            f"{s['cuda_graph_max_bs']}",
        ]
        layers = arch.layer_types
        if "sliding_attention" in layers and self._hybrid(arch, s):
            notes.append(
                f"SGLang hybrid sliding-window pool: {sv.SWA_FULL_TOKENS_RATIO:g} sliding slots "
                "per full-attention slot; a request keeps its window on sliding layers"
            )
        return tuple(notes)

    @staticmethod
    def _hybrid(arch: Architecture, s: EngineSettings) -> bool:
        rel = sv.release(str(s["version"]))
        return sv.hybrid_swa(rel, arch.architectures, "sliding_attention" in arch.layer_types)

    # ---- the pool -------------------------------------------------------------------

    def _cell(self, setup: ServingSetup, stage: Stage) -> float:
        """Bytes of one full-attention slot with its share of sliding slots, on every layer."""
        kv = stage.kv
        if not kv.sliding_layers or not self._hybrid(setup.arch, setup.settings):
            return kv.full_token_bytes
        per_layer = kv.layer_token_bytes
        hybrid = per_layer * (kv.full_layers + sv.SWA_FULL_TOKENS_RATIO * kv.sliding_layers)
        return hybrid + kv.extra_token_bytes

    def pool(self, setup: ServingSetup, gpu_memory_bytes: int) -> SglangPool:
        """The pool as ``profile_max_num_token`` / ``init_memory_pool`` size it."""
        s = setup.settings
        rel = sv.release(str(s["version"]))
        free = self.free_at_start(setup, gpu_memory_bytes)
        budget = self.budget_bytes(setup, gpu_memory_bytes)
        # The least free memory over the ranks, and the largest cell, set the token count.
        rest = budget - max(st.weights for st in setup.stages)
        cell = max(self._cell(setup, st) for st in setup.stages)
        page = int(s["page_size"])
        tokens = int(max(0, rest) // cell) // page * page if cell else 0
        if s["max_total_tokens"] is not None:
            tokens = min(tokens, int(s["max_total_tokens"]))
        swa = None
        if cell != setup.stages[-1].kv.full_token_bytes:
            swa = int(tokens * sv.SWA_FULL_TOKENS_RATIO)
        context = int(s["context_length"])
        flag = s["max_running_requests"]
        reqs = sv.max_num_reqs(rel, tokens, context, None if flag is None else int(flag))
        rows = sv.request_table_rows(rel, reqs)
        return SglangPool(
            free_at_start=free,
            budget=budget,
            rest=rest,
            cell=cell,
            tokens=tokens,
            swa_tokens=swa,
            max_num_reqs=reqs,
            max_running_requests=sv.running_requests(
                tokens, None if flag is None else int(flag), reqs
            ),
            request_table_bytes=rows * (context + _ROW_EXTRA) * _ROW_BYTES,
        )

    # ---- workload -------------------------------------------------------------------

    def sequence_cost(
        self, setup: ServingSetup, stage: Stage, seq_len: int, prompt: int
    ) -> tuple[int, int]:
        """A sequence's slots: ``seq_len`` full-attention slots; in a hybrid pool as many of
        the sliding slots as its window needs, whichever share of the pool is larger."""
        cell = self._cell(setup, stage)
        if cell == stage.kv.full_token_bytes:
            return seq_len * stage.kv.full_token_bytes, 0
        window = min(seq_len, stage.kv.window or seq_len)
        slots = max(seq_len, window / sv.SWA_FULL_TOKENS_RATIO)
        return math.ceil(slots * cell), 0

    def capacity(
        self, setup: ServingSetup, gpu_memory_bytes: int, seq_len: int
    ) -> tuple[Capacity, tuple[str, ...]]:
        pool = self.pool(setup, gpu_memory_bytes)
        conc_len = concurrency_length(setup, seq_len)
        per_seq = self.sequence_cost(setup, setup.stages[-1], conc_len, conc_len)[0]
        weights = max(st.weights for st in setup.stages)
        notes = [
            f"SGLang: memory free at start {pool.free_at_start / GIB:.2f} GiB, budget "
            f"{pool.budget / GIB:.2f} GiB, after weights {pool.rest / GIB:.2f} GiB; "
            f"max_total_num_tokens {pool.tokens}, max_running_requests "
            f"{pool.max_running_requests}",
            f"SGLang req_to_token table {pool.request_table_bytes / GIB:.2f} GiB "
            f"({pool.max_num_reqs} request slots) in the slack",
        ]
        if pool.swa_tokens is not None:
            notes.append(f"SGLang sliding-window slots {pool.swa_tokens}")
        if pool.tokens <= 0:
            notes.append("SGLang would refuse to start: 'Not enough memory' (no KV tokens)")
        elif pool.tokens < int(setup.settings["context_length"]):
            notes.append(
                f"the pool's {pool.tokens} tokens are fewer than context_length: SGLang starts "
                "and limits a request to the pool"
            )
        cap = Capacity(
            kv_cache_bytes_per_token=math.ceil(pool.cell),
            kv_cache_pool_bytes=pool.pool_bytes,
            kv_cache_tokens=pool.tokens,
            max_concurrency=round(pool.pool_bytes / per_seq if per_seq else 0.0, 2),
            sequence_length=conc_len,
            budget_bytes=pool.budget,
            subtracted=MappingProxyType({"weights": weights}),
        )
        return cap, tuple(notes)
