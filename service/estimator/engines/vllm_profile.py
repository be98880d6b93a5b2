"""vLLM's profiling run: the activation peak it measures before sizing the KV cache, by line.

The run (``profile_run``; V0 ``vllm/worker/model_runner.py``, V1
``vllm/v1/worker/gpu_model_runner.py``) is one forward over ``T = max_num_batched_tokens``
dummy tokens, then a dummy sampler run over ``R`` rows (V0: ``max_num_seqs`` sequences; V1:
``min(max_num_seqs, T)``), with the sampling parameters that make it do the most work
(top-k = vocabulary − 1, top-p < 1). The measured peak is the larger of two moments:

- the forward: ``T × d × 4·h`` (residual stream and its neighbours) plus the widest layer
  moment: attention, the dense MLP, or a MoE layer's fused buffers (:mod:`.moe_workspace`);
  with dynamically quantized activations (W8A8 int8, fp8 on GPUs with native fp8) a linear
  also holds the quantized input and its per-token scales while its output is written
  (``ops.scaled_int8_quant`` / ``scaled_fp8_quant`` before ``cutlass_scaled_mm``): the gated
  MLP's moments become ``max(3I·d, 2I·d + h, I·d + I + 4 + h·d)`` per token;
- the sampler: ``R × V`` logits in the model dtype plus the sampler's own bytes per logit —
  V0 ``sampler.py``: an fp32 copy, the sorted values and int64 indices, masks, probabilities,
  cumulative sums and the scattered result (30 B); V1's native top-k/top-p
  (``topk_topp_sampler.py``, v0.8.5 - v0.16): 26 B; the Triton top-k/top-p from v0.17
  (``topk_topp_triton.py``, taken from 8 rows): 12 B plus a cached
  ``[min(next_pow2(min(SM, R)), SM), V]`` fp32 buffer (from v0.21 FlashInfer serves by
  default, but the dummy run also warms this native path, so its peak stands); v0.34's sampler
  (``v1/worker/gpu/sample/sampler.py``): 4 B plus that buffer.
  From v0.10.1 the forward's ``T × h`` output and two ``R × h`` copies stay alive meanwhile
  (V0 keeps its hidden states too).

A multimodal model (V1) first runs its encoder on dummy images and keeps the pixel values and
the encoder outputs through both moments: ``items = max(1, min(budget // tokens_per_item,
max_num_seqs × max(1, min(limit_per_prompt, max_model_len // tokens_per_item))))`` images at
the tower's image size (``MultiModalBudget.get_max_items``; ``budget = max(T, tokens_per_item)``;
v0.8.5 rounds up), pixels in fp32 as the image processor returns them (a Conv3d tower's
processor repeats a still image over its ``temporal_patch_size`` frames:
``VisionSpec.pixel_values_per_image``), outputs
``tokens_per_item × H`` each in the model dtype — expanded to ``budget`` rows each in
v0.11.0 - v0.11.2 (``new_zeros(encoder_budget, hidden)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.engines.moe_workspace import moe_buffers
from service.estimator.engines.vllm_versions import VllmLine
from service.estimator.forward import HIDDEN_TENSORS, ForwardCoefficients, dense_widths
from service.estimator.gpu import GpuSpec
from service.estimator.model import Architecture

__all__ = [
    "SAMPLER_CHOICES",
    "ProfileRun",
    "encoder_items",
    "profile_peak",
    "sampler_buffer_rows",
    "sampler_choice",
]

# Multiprocessors assumed when the GPU's count is unknown (H100 SXM / H200: 132; a MIG slice
# too, whose share is not published); it sizes the Triton sampler's cached buffer, whose rows
# never exceed it.
DEFAULT_MULTIPROCESSORS = 132
# vLLM's default image limit per prompt when --limit-mm-per-prompt names none: 999 in V1, one
# item per modality in V0 (MultiModalConfig.get_limit_per_prompt, v0.8.5).
DEFAULT_MM_LIMIT = 999
V0_DEFAULT_MM_LIMIT = 1
# Formats whose linears quantize activations on the fly (W8A8 int8, fp8 on native-fp8 GPUs).
_ACT_QUANT_KINDS = ("int8-channel", "fp8-tensor", "fp8-channel", "fp8-block")
# Architectures vLLM runs through ``models/llama.py`` (``registry.py``), whose ``LlamaMLP.forward``
# rebinds one name: ``x, _ = self.gate_up_proj(x); x = self.act_fn(x); x, _ =
# self.down_proj(x)`` (v0.6.4, v0.8.5). Other model files (``qwen2.py``: ``gate_up, _ = ...``)
# keep the gate/up output alive through down_proj.
_V0_REBINDING_MLP = frozenset(
    {
        "LlamaForCausalLM",
        "LLaMAForCausalLM",
        "MistralForCausalLM",
        "AquilaForCausalLM",
        "AquilaModel",
        "InternLMForCausalLM",
    }
)
_FP8_NATIVE = (8, 9)

# The sampler's bytes per logit beyond the model-dtype logits at its widest moment. For the
# sort-based top-k/top-p (V0 and V1's native path) that is the sort itself: the fp32 copy (4),
# the sorted values (4) and int64 indices (8), and what torch.sort allocates while it runs on
# a [R, V] tensor of 128 rows or more: int64 source indices (8) and cub's alternate key and
# value buffers (4 + 8) (pytorch/pytorch aten/src/ATen/native/cuda/SortStable.cu:
# segmented_sort_pairs; the cub temporary size is cub's own) = 36, above the later
# mask/softmax/scatter moment (V0 30, native 26).
_SORT_TEMPORARIES = 20.0
_SAMPLER_BYTES = {"v0": 16.0 + _SORT_TEMPORARIES, "native": 16.0 + _SORT_TEMPORARIES}
_SAMPLER_BYTES |= {"triton": 12.0, "v2": 4.0}
# FlashInfer's top-k/top-p (``flashinfer.sampling.top_k_top_p_sampling_from_logits``, order
# "top_k_first", as vLLM's ``flashinfer_sample`` calls it): the fp32 copy the V1 sampler makes
# (4), the top-k-masked logits (4) and their softmax (4); the rejection sampling sorts nothing.
_SAMPLER_BYTES["flashinfer"] = 12.0
# vLLM 0.8.5 (``v1/sample/ops/topk_topp_sampler.py``: ``forward_cuda``, taken with FlashInfer
# below 0.2.3 only) samples from probabilities: the fp32 copy (4) and its softmax (4), then
# ``top_k_top_p_sampling_from_probs`` with a [32, R] uniform-sample tensor and no [R, V] buffer.
_FLASHINFER_FROM_PROBS = 8.0

#: ``sampler`` engine option values: ``auto`` runs what the line's official image runs
#: (:func:`sampler_choice`), ``flashinfer`` FlashInfer's top-k/top-p, ``native`` the line's own.
SAMPLER_CHOICES = ("auto", "flashinfer", "native")


def sampler_choice(line: VllmLine, requested: str, gpu: GpuSpec | None) -> tuple[str, str | None]:
    """(``flashinfer`` or the line's own sampler kind, the note that names the choice).

    ``auto`` follows the project's official image of the line (``VllmLine.image_installs``):
    where it ships flashinfer and the line's V1 sampler takes it whenever it imports (0.8 -
    0.11.0), FlashInfer samples on an NVIDIA GPU (``current_platform.is_cuda()``; ROCm builds
    sample natively). V0 samples with FlashInfer only under an environment variable and keeps
    its own sampler here."""
    if not line.v1:
        return line.sampler, (
            "V0 samples with FlashInfer only under VLLM_USE_FLASHINFER_SAMPLER=1: modelled with "
            "its sort-based sampler"
            if requested == "flashinfer"
            else None
        )
    cuda = gpu is None or gpu.vendor != "amd"
    if requested == "auto":
        if line.image_installs == "flashinfer" and cuda:
            return "flashinfer", (
                f"sampler: FlashInfer's top-k/top-p, as in vLLM's official image of this line "
                f"(vllm/vllm-openai, flashinfer {line.image_flashinfer}), whose V1 sampler takes "
                "it whenever it imports; a pip install without flashinfer samples natively "
                "(engine_options.sampler: native)"
            )
        return line.sampler, None
    if requested == "flashinfer" and not cuda:
        return line.sampler, "FlashInfer's sampler is CUDA-only: a ROCm build samples natively"
    if requested == "native":
        return line.sampler, None
    return "flashinfer", None


@dataclass(frozen=True, slots=True)
class ProfileRun:
    """The profiling run's moments on one GPU (bytes)."""

    forward: float
    sampler: float
    held: float  # encoder inputs/outputs and persistent workspaces alive through both
    rows: int
    notes: tuple[str, ...] = ()

    @property
    def peak(self) -> float:
        return self.held + max(self.forward, self.sampler)


def sampler_buffer_rows(rows: int, multiprocessors: int | None = None) -> int:
    """Rows of the Triton sampler's cached buffer: ``min(next_pow2(min(SM, R)), SM)`` (SM
    unknown: :data:`DEFAULT_MULTIPROCESSORS`)."""
    sm = multiprocessors or DEFAULT_MULTIPROCESSORS
    m = min(sm, rows)
    return min(1 << (m - 1).bit_length(), sm)


def encoder_items(
    tokens_per_item: int, budget_tokens: int, max_num_seqs: int, max_model_len: int, limit: int
) -> int:
    budget = max(budget_tokens, tokens_per_item)
    per_prompt = max(1, min(limit, max_model_len // tokens_per_item))
    return max(1, min(budget // tokens_per_item, max_num_seqs * per_prompt))


def activation_quantized(kind: str, gpu: GpuSpec | None) -> bool:
    """Whether linears of this weight format quantize their input at run time (fp8 below
    compute capability 8.9 runs weight-only on Marlin)."""
    if kind not in _ACT_QUANT_KINDS:
        return False
    if kind.startswith("fp8") and gpu is not None and gpu.compute_capability is not None:
        return gpu.compute_capability >= _FP8_NATIVE
    return True


def _layer_moment(
    arch: Architecture,
    c: ForwardCoefficients,
    line: VllmLine,
    tp: int,
    t: int,
    quant: bool,
    moe_tp: int | None = None,
    moe_tokens: int | None = None,
) -> tuple[float, float]:
    """(transient, persistent) bytes of the widest layer moment beyond the residual stream;
    a MoE layer's experts split ``moe_tp`` ways (default ``tp``) over ``moe_tokens`` tokens
    (default ``t``: data-parallel gathering hands it more)."""
    d = c.dtype_bytes
    attention, dense = dense_widths(arch, tp)
    widest = max(attention, 0.0) * d * t
    if dense:
        i = arch.intermediate_size / tp
        h = arch.hidden_size
        if quant and arch.gated_mlp:
            per = max(3 * i * d, 2 * i * d + h, i * d + i + 4 + h * d)
        elif not line.v1 and arch.gated_mlp and _V0_REBINDING_MLP & set(arch.architectures):
            # Eager V0: the gate/up output dies when act_fn's result rebinds the name, so the
            # stream is 3 rows at act_fn (plus 3I) and 4 rows at down_proj (plus I).
            per = max(3 * i - h, i) * d
        else:
            per = dense * d
        widest = max(widest, per * t)
    moe = moe_buffers(
        arch,
        moe_tp or tp,
        moe_tokens or t,
        d,
        line.moe,
        chunk=line.moe_chunk_tokens,
        quantized_activations=quant,
    )
    return max(widest, moe.transient), moe.persistent


def profile_peak(
    arch: Architecture,
    c: ForwardCoefficients,
    line: VllmLine,
    *,
    tp: int,
    tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    is_last: bool,
    weight_kind: str,
    gpu: GpuSpec | None,
    mm_limit: int | None,
    sampler_kind: str = "auto",
    moe_tp: int | None = None,
    moe_token_factor: int = 1,
) -> ProfileRun:
    """The profiling run of one GPU of a stage under ``line``; ``sampler_kind`` is the
    ``sampler`` option (:func:`sampler_choice`)."""
    t = tokens
    rows = max_num_seqs if not line.v1 else min(max_num_seqs, t)
    notes: list[str] = []
    v = arch.vision
    v0_images = 0
    if v is not None and not line.v1 and mm_limit != 0:
        # V0 (model_runner.py: profile_run) fills min(max_num_seqs, T // max_mm_tokens)
        # sequences, each with `limit` dummy images (V0's default limit: one per modality,
        # MultiModalConfig.get_limit_per_prompt), and samples on those sequences only.
        limit = V0_DEFAULT_MM_LIMIT if mm_limit is None else mm_limit
        rows = max(1, min(max_num_seqs, t // (limit * v.tokens_per_image)))
        v0_images = rows * limit
    kind, choice_note = sampler_choice(line, sampler_kind, gpu)
    if choice_note:
        notes.append(choice_note)
    flashinfer = kind == "flashinfer"
    if flashinfer and line.warms_native_sampler:
        notes.append(
            f"vLLM {line.name}'s profiling run also warms the native sampler (Triton top-k/"
            "top-p): its peak stands whichever sampler serves"
        )
        kind, flashinfer = line.sampler, False
    quant = activation_quantized(weight_kind, gpu)
    transient, persistent = _layer_moment(
        arch, c, line, tp, t, quant, moe_tp=moe_tp, moe_tokens=t * moe_token_factor
    )
    forward = c.dtype_bytes * HIDDEN_TENSORS * arch.hidden_size * t + transient
    per_logit = c.dtype_bytes + _SAMPLER_BYTES[kind]
    if flashinfer and line.flashinfer_from_probs:
        per_logit = c.dtype_bytes + _FLASHINFER_FROM_PROBS
    buffer = 0.0
    if kind in ("triton", "v2"):
        sm = gpu.multiprocessors if gpu is not None else None
        buffer = sampler_buffer_rows(rows, sm) * c.vocab * 4
    if not is_last:
        return ProfileRun(forward + 2 * t * c.hidden_row, 0.0, persistent, rows, tuple(notes))
    alive = (t + 2 * rows) * c.hidden_row if line.sampler_hidden else rows * c.hidden_row
    sampler = rows * c.vocab * per_logit + buffer + alive
    held = persistent
    if v0_images:
        assert v is not None
        # The pixel values sit in the model input through the sampler; the encoder outputs
        # are merged into the input embeddings inside the forward and die with it.
        pixels = v0_images * v.pixel_values_per_image * 4
        outputs = v0_images * v.tokens_per_image * v.projector_out * c.dtype_bytes
        held += pixels
        forward += outputs
        notes.append(
            f"vLLM V0 profiles {rows} sequences of {v0_images // rows} dummy image(s) each "
            f"({v.tokens_per_image} tokens per image): pixels {pixels / 2**30:.2f} GiB held, "
            f"encoder outputs {outputs / 2**30:.2f} GiB through the forward; the sampler runs "
            f"on those {rows} sequences"
        )
    if v is not None and line.v1 and mm_limit != 0:
        limit = DEFAULT_MM_LIMIT if mm_limit is None else mm_limit
        tok = v.tokens_per_image
        budget = max(t, tok)
        if line.encoder_items_per_prompt:
            per_prompt = max(1, min(limit, -(-max_model_len // tok)))
            items = max(1, min(-(-budget // tok), max_num_seqs * per_prompt))
        else:
            items = encoder_items(tok, t, max_num_seqs, max_model_len, limit)
        pixels = items * v.pixel_values_per_image * 4
        out_rows = budget if line.encoder_output_spans_budget else tok
        outputs = items * out_rows * v.projector_out * c.dtype_bytes
        held += pixels + outputs
        notes.append(
            f"vLLM profiles the vision encoder on {items} dummy images ({tok} tokens each) and "
            f"keeps their pixels and outputs ({(pixels + outputs) / 2**30:.2f} GiB) through "
            "the profiling run"
        )
    return ProfileRun(forward, sampler, held, rows, tuple(notes))
