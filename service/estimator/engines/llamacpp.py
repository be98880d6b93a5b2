"""``llama.cpp``: llama-server (and Ollama, which runs it) on GGUF weights.

What llama.cpp allocates at context creation, before any request (source: the ggml-org/llama.cpp
repository; files named below), per GPU:

- **Weights** by offloaded layer (``src/llama-model.cpp``, ``load_tensors``): with
  ``n_gpu_layers = N`` the output layer is offloaded first, then the last ``N - 1`` repeating
  layers (``i_gpu_start = max(n_layer + 1 - N, 0)``); ``N > n_layer`` (the default) offloads
  everything. The token embedding always stays in a CPU buffer. A tied output (no
  ``output.weight``) is a duplicate of ``token_embd`` on the output device. Each tensor on a
  CUDA device takes what ``ggml_backend_cuda_buffer_type_get_alloc_size`` gives
  (:mod:`service.estimator.ggml`). Several GPUs split the offloaded layers (split mode
  ``layer``); the output layer goes to the last one.
- **KV cache** for every cell of the context (``src/llama-kv-cache.cpp``): per layer
  ``row(type_k, n_head_kv·head_dim_k) + row(type_v, n_head_kv·head_dim_v)`` bytes per cell,
  on the device of its layer (MLA: K only, the latent width). Cells (``src/llama-context.cpp``):
  ``n_ctx`` rounded up to 256; a unified cache has one stream of ``n_ctx`` cells, a per-slot
  cache ``n_parallel`` streams of ``pad256(n_ctx / n_parallel)``. Sliding-window layers keep
  ``pad256(min(cells, window·(unified ? n_parallel : 1) + n_ubatch))`` cells unless
  ``swa_full`` (``src/llama-kv-cache-iswa.cpp``).
- **Compute buffer** (``sched_reserve`` / ``graph_reserve`` in ``src/llama-context.cpp``): the
  peak of the worst-case graph of ``u = min(n_ubatch, n_ctx)`` tokens attending over all the
  cells of one stream, as ggml-alloc packs it: the largest of the attention peak (without
  flash attention the materialised K·Q of every head), the FFN peak and the logits of
  ``min(u, n_outputs_max)`` rows (the output device only); the formulas are in
  docs/inference.md ("llama.cpp").
- **Outside ggml's buffers**: the CUDA context, cuBLAS workspaces and the ggml CUDA pool
  (llama.cpp's own memory breakdown calls it "unaccounted"), the framework overhead terms.

Quantized V needs flash attention: llama.cpp refuses to create the context otherwise.
Pipeline parallelism's extra copies of the compute buffer (``n_copies = 4`` with several GPUs)
and split mode ``row`` are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from service.estimator.checkpoint import GgufWeights
from service.estimator.engines.base import (
    DecidedBy,
    Engine,
    EngineContext,
    EngineSettings,
    Option,
    OptionValue,
    StageArgs,
    StageBuild,
    WeightSplit,
)
from service.estimator.engines.overhead import OverheadTerms, framework_overhead
from service.estimator.errors import InvalidRequest
from service.estimator.ggml import row_bytes, type_named
from service.estimator.gguf_quant import (
    PRESETS,
    Role,
    converted_tensors,
    fallback_type,
    get_preset,
    gguf_weights_of,
    preset_types,
    quant_model,
)
from service.estimator.kv_cache import MlaCache
from service.estimator.model import SLIDING_ATTENTION, Architecture
from service.estimator.units import GIB, MIB, cdiv

if TYPE_CHECKING:
    from service.estimator.checkpoint import CheckpointWeights
    from service.estimator.engines.serving import ServingSetup, Stage
    from service.estimator.gpu import GpuSpec
    from service.estimator.weights import WeightLayout

__all__ = [
    "LlamaCppEngine",
    "gguf_weights_for_preset",
    "gguf_weights_from_architecture",
]

# --cache-type-k / --cache-type-v values (common/arg.cpp's kv_cache_types).
CACHE_TYPES: tuple[str, ...] = (
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "q4_0",
    "q4_1",
    "iq4_nl",
    "q5_0",
    "q5_1",
)
CELL_PADDING = 256  # n_ctx and per-stream cells are rounded up to this
DEFAULT_CONTEXT = 4096  # when the model states no trained context
# The weight formats a Hugging Face checkpoint is converted to (convert_hf_to_gguf.py
# --outtype; `auto` keeps bf16 and turns everything else into f16).
_CONVERTED = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}


# Architectures llama.cpp builds with a sliding-window cache (llama_model::create_memory gives
# them llama_kv_cache_iswa); for the others (Mistral 7B v0.1's window, Qwen2's unused one)
# every layer keeps every cell, as their GGUF conversions carry no window.
_SWA_MODEL_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text", "cohere2", "gpt_oss"})


def _pad(n: int, to: int = CELL_PADDING) -> int:
    return cdiv(n, to) * to


@dataclass(frozen=True, slots=True)
class _Placed:
    """Repeating layers on each GPU stage (first to last), and those left on the CPU."""

    stages: tuple[range, ...]
    cpu_layers: range

    @property
    def output_on_gpu(self) -> bool:
        """The output layer is offloaded first: on a GPU whenever any layer is."""
        return bool(self.stages)


def _offload(n_layer: int, n_gpu_layers: int, pp: int) -> _Placed:
    n = min(n_gpu_layers, n_layer + 1)
    start = max(n_layer + 1 - n, 0)
    on_gpu = n_layer - start
    if n == 0:
        return _Placed((), range(0, n_layer))
    # Contiguous runs, the first GPUs taking one more layer; with more GPUs than offloaded
    # layers the last ones hold only what every GPU holds (llama.cpp gives out whole layers).
    stages = []
    first = start
    for g in range(pp):
        count = on_gpu // pp + (1 if g < on_gpu % pp else 0)
        stages.append(range(first, first + count))
        first += count
    return _Placed(tuple(stages), range(0, start))


def gguf_weights_from_architecture(arch: Architecture, weight_format: str) -> GgufWeights:
    """The tensors a Hugging Face checkpoint converts to (convert_hf_to_gguf.py): matrices in
    ``weight_format`` (bf16 / fp16 / fp32, or one GGUF type for all of them, as
    ``llama-quantize --pure`` writes), 1-D tensors (norms, biases) and MoE routers in F32;
    the vision tower is a separate ``mmproj`` file and is not counted."""
    if weight_format in _CONVERTED:
        matrix = type_named(_CONVERTED[weight_format])
    elif weight_format.startswith("gguf-"):
        matrix = type_named(weight_format.removeprefix("gguf-"))
    elif weight_format in PRESETS:
        # A preset whose per-tensor rule does not apply to this model (answer.py tried it):
        # its bulk type on every matrix.
        matrix = PRESETS[weight_format].default
    else:
        raise InvalidRequest(
            f"llama.cpp runs GGUF files: weight_format {weight_format} has no GGUF form here; "
            "use bf16, fp16, a gguf-* type, or a GGUF model (`<repo>:<quant>` from the "
            "catalog or the model store)",
            field="weight_format",
        )
    tensors = converted_tensors(arch)
    f32 = type_named("F32")
    # A row that is not a whole number of blocks takes llama-quantize's fall-back type (its
    # --pure keeps that rule: tensor_type_fallback runs for every tensor).
    types = tuple(f32 if t.role is Role.KEPT else fallback_type(matrix, t.ne0) for t in tensors)
    return gguf_weights_of(arch.num_layers, tensors, types, matrix.name)


def gguf_weights_for_preset(
    arch: Architecture, preset: str, *, imatrix: bool, own_output: bool = False
) -> GgufWeights:
    """The tensors of ``llama-quantize <preset>`` run on the converted checkpoint, each in the
    type the preset's rule gives it (:mod:`service.estimator.gguf_quant`)."""
    p = get_preset(preset)
    tensors = converted_tensors(arch, own_output=own_output)
    model = quant_model(arch, own_output=own_output)
    types = preset_types(p, model, tensors, imatrix=imatrix)
    return gguf_weights_of(arch.num_layers, tensors, types, p.name)


class LlamaCppEngine(Engine):
    name: ClassVar[str] = "llama.cpp"
    summary: ClassVar[str] = (
        "llama-server on GGUF weights: layers offloaded by n_gpu_layers, a KV cache for every "
        "cell of n_ctx, the compute buffer of the worst-case micro-batch"
    )
    context_option: ClassVar[str | None] = "n_ctx"
    # Everything is allocated at context creation, for every cell and slot (module docstring):
    # the workload only fills it.
    decides_instead: ClassVar[tuple[DecidedBy, ...]] = (
        DecidedBy(
            "sequence_length",
            ("n_ctx",),
            "llama.cpp allocates the KV cache for every cell of n_ctx at start; a request only "
            "fills cells",
        ),
        DecidedBy(
            "batch_size",
            ("n_parallel",),
            "requests share the server's slots and their cells; nothing is allocated per request",
        ),
        DecidedBy(
            "concurrency",
            ("n_parallel",),
            "requests share the server's slots and their cells; nothing is allocated per request",
        ),
        DecidedBy(
            "prompt_tokens",
            ("n_ubatch",),
            "the compute buffer is reserved for one micro-batch of n_ubatch tokens over every cell",
        ),
        DecidedBy(
            "kv_cache_dtype",
            ("cache_type_k", "cache_type_v"),
            "llama.cpp types the K and V caches by its own options",
        ),
        DecidedBy(
            "attention",
            ("flash_attn",),
            "the compute buffer follows llama.cpp's flash-attention switch",
        ),
    )
    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "n_gpu_layers",
            int,
            "llama.cpp: layers offloaded to the GPUs (-ngl); the output layer counts as one and "
            "goes first; default (and any value above the model's layers + 1): all.",
            low=0,
            high=100_000,
            flag="--n-gpu-layers",
        ),
        Option(
            "n_ctx",
            int,
            "llama.cpp: context cells of the KV cache, all slots together (-c); default: the "
            "model's trained context, as llama-server's -c 0.",
            low=0,
            high=16 * 1024 * 1024,
            flag="--ctx-size",
        ),
        Option(
            "n_parallel",
            int,
            "llama.cpp: server slots (-np); default: llama-server's auto, 4 slots sharing a "
            "unified cache.",
            low=1,
            high=1024,
            flag="--parallel",
        ),
        Option(
            "kv_unified",
            bool,
            "llama.cpp: one KV cache shared by all slots (--kv-unified); default: on with the "
            "automatic slot count, off when n_parallel is given (each slot then has n_ctx / "
            "n_parallel cells).",
            flag="--kv-unified",
        ),
        Option(
            "cache_type_k",
            str,
            "llama.cpp: KV cache type of K (--cache-type-k).",
            default="f16",
            choices=CACHE_TYPES,
            flag="--cache-type-k",
        ),
        Option(
            "cache_type_v",
            str,
            "llama.cpp: KV cache type of V (--cache-type-v); a quantized V needs flash_attn.",
            default="f16",
            choices=CACHE_TYPES,
            flag="--cache-type-v",
        ),
        Option(
            "flash_attn",
            bool,
            "llama.cpp: flash attention (--flash-attn); default on, as `auto` resolves on CUDA "
            "GPUs that support it.",
            default=True,
            flag="--flash-attn",
        ),
        Option(
            "n_batch",
            int,
            "llama.cpp: logical batch (-b).",
            default=2048,
            low=1,
            high=1 << 20,
            flag="--batch-size",
        ),
        Option(
            "n_ubatch",
            int,
            "llama.cpp: physical micro-batch the compute buffer is sized for (-ub).",
            default=512,
            low=1,
            high=1 << 20,
            flag="--ubatch-size",
        ),
        Option(
            "n_outputs_max",
            int,
            "llama.cpp: logit rows the compute buffer reserves; default: llama-server's "
            "n_parallel (builds before mid-2026, llama-cli and llama-cpp-python: n_batch).",
            low=1,
            high=1 << 20,
        ),
        Option(
            "swa_full",
            bool,
            "llama.cpp: full-size cache for sliding-window layers (--swa-full); llama-server's "
            "default is off.",
            default=False,
            flag="--swa-full",
        ),
    )

    # ---- options --------------------------------------------------------------------

    def defaults(
        self, values: Mapping[str, OptionValue | None], ctx: EngineContext
    ) -> Mapping[str, OptionValue | None]:
        out: dict[str, OptionValue | None] = {}
        if values["n_gpu_layers"] is None:
            out["n_gpu_layers"] = ctx.architecture.num_layers + 1
        n_ctx = values["n_ctx"]
        if n_ctx is None or n_ctx == 0:
            out["n_ctx"] = ctx.architecture.max_position_embeddings or DEFAULT_CONTEXT
        if values["n_parallel"] is None:
            out["n_parallel"] = 4
            if values["kv_unified"] is None:
                out["kv_unified"] = True
        elif values["kv_unified"] is None:
            out["kv_unified"] = False
        if values["n_outputs_max"] is None:
            out["n_outputs_max"] = values["n_parallel"] or out["n_parallel"]
        return out

    def valid_tensor_parallel_sizes(self, arch: Architecture) -> tuple[int, ...]:
        return (1,)  # several GPUs split whole layers (split mode layer): PP here

    def default_sequence_length(self, s: EngineSettings) -> int:
        return self.cells(s)[1]

    def max_model_len(self, s: EngineSettings) -> int | None:
        return self.cells(s)[1]

    def command_args(self, s: EngineSettings, tp: int, pp: int, kv_cache_dtype: str) -> list[str]:
        args = [
            "--n-gpu-layers",
            str(s["n_gpu_layers"]),
            "--ctx-size",
            str(s["n_ctx"]),
            "--parallel",
            str(s["n_parallel"]),
            "--cache-type-k",
            str(s["cache_type_k"]),
            "--cache-type-v",
            str(s["cache_type_v"]),
            "--flash-attn",
            "on" if s["flash_attn"] else "off",
            "--batch-size",
            str(s["n_batch"]),
            "--ubatch-size",
            str(s["n_ubatch"]),
        ]
        if s["kv_unified"]:
            args.append("--kv-unified")
        if s["swa_full"]:
            args.append("--swa-full")
        return args

    # ---- shape of the context ---------------------------------------------------------

    @staticmethod
    def cells(s: EngineSettings) -> tuple[int, int, int]:
        """(streams, cells per stream, cells in total) as the context constructor sets them."""
        n_ctx = _pad(int(s["n_ctx"]))
        seqs = int(s["n_parallel"])
        if s["kv_unified"] or seqs == 1:
            return 1, n_ctx, n_ctx
        per = _pad(cdiv(n_ctx, seqs))
        return seqs, per, per * seqs

    @staticmethod
    def ubatch(s: EngineSettings) -> int:
        n_ctx = _pad(int(s["n_ctx"]))
        n_batch = min(int(s["n_batch"]), n_ctx)
        return min(int(s["n_ubatch"]), n_batch)

    def _check(self, s: EngineSettings) -> None:
        if type_named(str(s["cache_type_v"])).name not in ("F32", "F16", "BF16") and not bool(
            s["flash_attn"]
        ):
            raise InvalidRequest(
                f"llama.cpp refuses a quantized V cache ({s['cache_type_v']}) without flash "
                "attention: set engine_options.flash_attn true or cache_type_v f16",
                field="engine_options.cache_type_v",
            )

    def mla_cache(self, arch: Architecture) -> MlaCache:
        """The latent (deepseek2's graph), unless the family's graph expands K and V of every
        head (``LlamaCppNames.mla_latent``: MiniCPM3, src/models/minicpm3.cpp)."""
        return MlaCache.LATENT if arch.family.llamacpp.mla_latent else MlaCache.HEADS

    def layer_kv_bytes(self, arch: Architecture, s: EngineSettings, layer: int) -> int:
        """KV bytes of one layer, every stream and cell."""
        streams, cells, _ = self.cells(s)
        if (
            arch.layer_types[layer] == SLIDING_ATTENTION
            and arch.sliding_window
            and not s["swa_full"]
        ):
            window = arch.sliding_window * (int(s["n_parallel"]) if s["kv_unified"] else 1)
            cells = min(cells, _pad(window + self.ubatch(s)))
        k_type, v_type = type_named(str(s["cache_type_k"])), type_named(str(s["cache_type_v"]))
        if arch.mla is not None and self.mla_cache(arch) is MlaCache.LATENT:
            return row_bytes(k_type, arch.mla.latent_width) * cells * streams
        k = row_bytes(k_type, arch.num_kv_heads * arch.head_dim)
        v = row_bytes(v_type, arch.num_kv_heads * arch.v_head_dim)
        return (k + v) * cells * streams

    def compute_bytes(self, arch: Architecture, s: EngineSettings, output: bool) -> int:
        """The GPU compute buffer: the peak of the reserved graph (docs/inference.md)."""
        _, n_kv, _ = self.cells(s)
        u = self.ubatch(s)
        fa = bool(s["flash_attn"])
        e, h = arch.hidden_size, arch.num_attention_heads
        q = h * (arch.mla.qk_head_dim if arch.mla is not None else arch.head_dim)
        ev = arch.num_kv_heads * arch.v_head_dim
        mask = n_kv * u * (2 if fa else 4)
        if fa:
            attn = mask + (2 * e + 2 * q) * u * 4
        else:
            attn = h * n_kv * u * 4 + n_kv * u * 4 + u * ev * 8 + (2 * e + 2 * q) * u * 4
        peaks = [attn]
        if arch.num_dense_layers:
            peaks.append(3 * arch.intermediate_size * u * 4 + 3 * e * u * 4 + mask)
        if arch.moe is not None:
            k, fe = arch.moe.experts_per_token, arch.moe.expert_intermediate_size
            peaks.append(3 * k * fe * u * 4 + k * e * u * 4 + 4 * e * u * 4 + mask)
        if output:
            rows = min(u, int(s["n_outputs_max"]))
            peaks.append(arch.vocab_size * rows * 4 + e * u * 4)
        return max(peaks)

    def host_compute_bytes(self, arch: Architecture, s: EngineSettings) -> int:
        """The host-side compute buffer: the graph inputs (the embedded micro-batch, the
        mask in f32)."""
        _, n_kv, _ = self.cells(s)
        u = self.ubatch(s)
        return arch.hidden_size * u * 4 + n_kv * u * 4

    # ---- setup ----------------------------------------------------------------------

    def place_weights(
        self,
        arch: Architecture,
        layout: WeightLayout,
        checkpoint: CheckpointWeights | None,
        s: EngineSettings,
    ) -> WeightSplit | None:
        self._check(s)
        if layout.tensor_parallel_size > 1:
            raise InvalidRequest(
                "llama.cpp gives each GPU whole layers (split mode layer): use "
                "pipeline_parallel_size for several GPUs, tensor_parallel_size 1",
                field="tensor_parallel_size",
            )
        notes: list[str] = []
        if checkpoint is not None and checkpoint.gguf is not None:
            g = checkpoint.gguf
            notes.append(f"weights tensor by tensor, as the GGUF file types them ({g.file_type})")
        else:
            g = gguf_weights_from_architecture(arch, layout.format)
            notes.append(
                f"weights as convert_hf_to_gguf.py writes them: matrices in {g.file_type}, "
                "norms and biases in F32; a vision tower (mmproj) is not counted"
            )
        pp = len(layout.per_stage)
        placed = _offload(len(g.layers), int(s["n_gpu_layers"]), pp)
        per_stage = [sum(g.layers_cuda[i] for i in r) for r in placed.stages] or [0] * pp
        host = g.token_embd + sum(g.layers[i] for i in placed.cpu_layers)
        output_cuda = g.output_cuda if g.output else g.token_embd_cuda
        if placed.output_on_gpu:
            per_stage[-1] += output_cuda + g.output_norm_cuda
        else:
            host += g.output + g.output_norm
        notes.append(
            f"llama.cpp: token embedding in a CPU buffer ({g.token_embd / GIB:.3f} GiB); "
            f"{sum(len(r) for r in placed.stages)} of {len(g.layers)} layers"
            + (" and the output layer" if placed.output_on_gpu else "")
            + " offloaded"
            + ("; the tied output is a GPU copy of token_embd" if not g.output else "")
        )
        return WeightSplit(tuple(per_stage), host, tuple(notes))

    def overheads(
        self, s: EngineSettings, tp: int, pp: int, layers_on_gpu: int, gpu: GpuSpec | None
    ) -> tuple[OverheadTerms, OverheadTerms]:
        # CUDA context, cuBLAS workspaces and ggml's CUDA pool: llama.cpp's "unaccounted".
        return framework_overhead(tp, pp, uses_nccl=False, gpu=gpu), OverheadTerms()

    def stage(self, args: StageArgs) -> StageBuild:
        arch, s = args.arch, args.settings
        placed = _offload(arch.num_layers, int(s["n_gpu_layers"]), args.pp)
        layers = placed.stages[args.index] if placed.stages else range(0)
        kv = sum(self.layer_kv_bytes(arch, s, i) for i in layers)
        compute = self.compute_bytes(arch, s, output=args.is_last and placed.output_on_gpu)
        host = 0
        notes = []
        if args.index == 0:
            cpu_kv = sum(self.layer_kv_bytes(arch, s, i) for i in placed.cpu_layers)
            host = cpu_kv + self.host_compute_bytes(arch, s)
            streams, per, total = self.cells(s)
            notes.append(
                f"llama.cpp context: {total} cells"
                + (f" ({streams} slots × {per})" if streams > 1 else "")
                + f", K {s['cache_type_k']} / V {s['cache_type_v']}, micro-batch "
                f"{self.ubatch(s)}, flash attention {'on' if s['flash_attn'] else 'off'}"
            )
            notes.append(
                f"compute buffer {compute / MIB:.2f} MiB per GPU (the largest of the attention, "
                "FFN and logits peaks of one micro-batch over every cell)"
            )
            if placed.cpu_layers:
                notes.append(
                    f"{len(placed.cpu_layers)} layers on the CPU: their weights, KV "
                    f"({cpu_kv / GIB:.3f} GiB) and compute in host memory"
                )
        return StageBuild(
            fixed_activation=compute, fixed_kv=kv, host_bytes=host, notes=tuple(notes)
        )

    # ---- workload -------------------------------------------------------------------

    def sequence_cost(
        self, setup: ServingSetup, stage: Stage, seq_len: int, prompt: int
    ) -> tuple[int, int]:
        """Nothing per sequence: the cache and the compute buffer are allocated at start for
        every cell; a request only fills them."""
        return 0, 0
