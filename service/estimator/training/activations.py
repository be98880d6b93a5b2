"""Activation memory of one training step, from the architecture.

What each decoder layer keeps for backward follows the autograd rules of the transformers 5.x
modeling code (Llama/Qwen/Mistral/Gemma/MoE families) and of peft's LoRA layers:

- an op saves a tensor only if backward needs it: a linear saves its input only when its
  weight is trainable (a frozen base projection under LoRA keeps only its weight), a norm
  saves its normalized value only when its weight is trainable;
- HF RMSNorm upcasts to fp32 and keeps that copy (4 bytes) plus the normalized value in the
  input dtype; Gemma's norm keeps both in fp32;
- flash/SDPA attention keeps q, k, v (after RoPE), its output (which o_proj reads as a view)
  and an fp32 log-sum-exp per head; eager attention keeps the repeated k/v, fp32 softmax
  output and its 16-bit copy (s² per head) and a contiguous copy of the output;
- a gated MLP keeps gate, act(gate), up and their product (the product only if down_proj is
  trainable); grouped-mm MoE experts keep the same per routed token (top-k copies), plus the
  router's fp32 softmax;
- peft LoRA keeps, per adapted module, its own copy of the module input (fp32 on a 16-bit base,
  the autocast copy under AMP) and the rank-sized intermediate;
- bitsandbytes before 0.43.2 (its ``MatMul4Bit``/``MatMul8bitLt`` autograd functions kept
  ``ctx.tensors = (A, B)``; removed by bitsandbytes PR #1270, July 2024): a quantized frozen
  base linear keeps its input for backward although backward never reads it, so a QLoRA layer
  keeps the same linear inputs as a trainable one (``frozen_inputs_kept``). Those inputs are
  held as attributes of the autograd context, not through ``save_for_backward``, so
  non-reentrant checkpointing (whose saved-tensor hooks drop only what ``save_for_backward``
  saves) does not free them either: a checkpointed layer keeps, besides its input, one copy of
  each distinct tensor its quantized linears read (the attention-norm output, the attention
  output, the MLP-norm output, the MLP product; MLA's latents);
- the loss path (logits and cross entropy) depends on the trainer's implementation; each one
  is in :mod:`.loss` (transformers >= 4.45 by default: 16-bit logits kept with the fp32
  log-softmax, 6·V bytes per token in bf16, and 8·V at the start of backward);
- AMP: autocast keeps a 16-bit copy of every linear weight it cast, saved for backward;
- a quantized base prepared by peft (``kbit_fp32``, :mod:`.kbit`): fp32 residual stream, norm
  outputs, q/k/v and MLP intermediates; flash attention keeps 16-bit q/k/v (it casts them
  back), SDPA/eager outside autocast fp32 ones; adapters outside autocast share the fp32
  norm output they read; fp32 logits outside autocast.

Gradient checkpointing (HF, per decoder layer, non-reentrant): ``full`` keeps each layer's
input (plus the old-bitsandbytes context attributes above) and recomputes one layer at a time
in backward; ``selective`` recomputes the core attention only (Korthikanti et al., 2022): the
score matrices and the log-sum-exp are not kept.

Tensor parallelism (Megatron layout) splits what lies inside attention and the MLP, and the
logits (vocabulary-parallel); sequence parallelism splits the rest (norm inputs, layer
boundaries) as well.

The result is split into coefficients of b·s (bytes per token) and b·s² (bytes per token per
position), computed once per architecture and static settings, so that evaluating a
(batch, sequence) point is a few multiplications.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.calibration import value
from service.estimator.memo import memoized
from service.estimator.model import Architecture, LinearModule, Reads
from service.estimator.training.loss import LossShape, get_loss_path

__all__ = [
    "ATTENTION",
    "GRADIENT_CHECKPOINTING",
    "ActivationCoefficients",
    "ActivationSetup",
    "activation_coefficients",
]

GRADIENT_CHECKPOINTING: tuple[str, ...] = ("none", "full", "selective")
ATTENTION: tuple[str, ...] = ("flash", "sdpa", "eager")

_FP32 = 4
_INT64 = 8


@dataclass(frozen=True)
class ActivationSetup:
    """Static settings that shape activations (hashable: results are cached on it).

    ``trainable_from``: the first decoder layer whose weights train (0 for full fine-tuning,
    ``num_layers`` when only adapters train is *not* this: adapters make a layer trainable via
    ``lora_names``). ``residual_bytes``: dtype of the residual stream (the embedding's dtype).
    """

    arch: Architecture
    compute_bytes: int
    residual_bytes: int
    autocast: bool
    base_trainable: bool  # base weights of trainable layers train (full/freeze)
    trainable_from: int  # decoder layers >= this are trainable (full/freeze)
    lora_names: frozenset[str]  # adapted modules (LoRA/QLoRA)
    lora_rank: int
    attention: str
    checkpointing: str
    tp: int = 1
    sp: bool = False
    frozen_inputs_kept: bool = False  # frozen base linears keep their input (old bitsandbytes)
    loss: str = "transformers"  # the loss path (:data:`.loss.LOSS_IMPLEMENTATIONS`)
    kbit_fp32: bool = False  # peft's prepare_model_for_kbit_training ran (:mod:`.kbit`)

    @property
    def norm_output_bytes(self) -> int:
        """A norm's output (what q/k/v and gate/up read): fp32 after peft's preparation (an
        fp32 weight times the normalized value), else the compute dtype."""
        return _FP32 if self.kbit_fp32 else self.compute_bytes

    @property
    def attention_bytes(self) -> int:
        """q, k, v and the attention output as attention keeps them: flash attention and
        autocast bring the prepared base's fp32 projections back to 16 bits; SDPA and eager
        outside autocast run on them in fp32."""
        if self.kbit_fp32 and not self.autocast and self.attention != "flash":
            return _FP32
        return self.compute_bytes

    @property
    def logits_bytes(self) -> int:
        """lm_head's output: fp32 from the prepared base's fp32 lm_head outside autocast."""
        return _FP32 if self.kbit_fp32 and not self.autocast else self.compute_bytes


@dataclass(frozen=True)
class ActivationCoefficients:
    """Activation bytes as ``lin·(b·s) + quad·(b·s²)`` per phase (one GPU, one micro-batch).

    ``layers_*``: kept by all decoder layers until backward; ``layer_*`` (tuple per layer)
    lets pipeline stages take their own share. ``head_kept``: final norm and the loss tensors
    kept after forward. ``fw_transient``/``bw_transient``: the loss path's extra at the end of
    forward and at the start of backward. ``recompute_*``: one layer recomputed in backward
    (checkpointing) plus its backward working set. ``weight_copies``: autocast's 16-bit
    weight copies (bytes, independent of b and s).
    """

    layer_lin: tuple[float, ...]
    layer_quad: tuple[float, ...]
    head_kept: float
    fw_transient: float
    bw_transient: float
    recompute_lin: float
    recompute_quad: float
    weight_copies: int
    embed_lin: float

    @property
    def layers_lin(self) -> float:
        return sum(self.layer_lin)

    @property
    def layers_quad(self) -> float:
        return sum(self.layer_quad)


def _norm_kept(setup: ActivationSetup, dim: int, weight_trains: bool, input_grad: bool) -> float:
    """Bytes per token a norm over ``dim`` keeps (not counting its output)."""
    if not input_grad and not weight_trains:
        return 0.0
    arch = setup.arch
    if arch.norm_fp32:
        return dim * (_FP32 + (_FP32 if weight_trains else 0))
    if arch.norm == "layernorm":
        # LayerNorm keeps its input, plus mean and rstd per row.
        return dim * setup.residual_bytes + 2 * _FP32
    return dim * (_FP32 + (setup.residual_bytes if weight_trains else 0))


def _eager_score_bytes(setup: ActivationSetup, heads: int) -> float:
    """Bytes per score (b·s² per layer) eager attention keeps for backward.

    transformers 5.x: the fp32 softmax output and its 16-bit copy (read by the value matmul),
    ``heads · (4 + c)``; attention softcapping (``tanh(scores / cap) · cap``, set by
    ``Architecture.attn_logit_softcapping``: Gemma 2's default 50, which transformers runs
    eagerly without flash-attn as it has no SDPA path) keeps the tanh output in the compute
    dtype as well. Without ``Architecture.attention_softmax_fp32`` (Qwen v1, remote code,
    ``softmax_in_fp32`` off by default) the softmax is taken in the compute dtype,
    whose output is what the value matmul reads (``heads · c``), and ``torch.where`` keeps
    the layer's boolean causal mask (one byte per score, shared by the heads).
    """
    c = setup.compute_bytes
    arch = setup.arch
    kept = heads * ((_FP32 if arch.attention_softmax_fp32 else 0) + c)
    if arch.attn_logit_softcapping is not None:
        kept += heads * c  # tanh(scores / cap) · cap
    if arch.eager_mask_kept:
        kept += 1  # e.g. Qwen-1's remote code: torch.where keeps the boolean causal mask
    return kept


@dataclass(frozen=True)
class _LayerTerms:
    """One decoder layer's kept activations: ``inner`` is split by TP, ``outer`` by SP."""

    inner: float
    outer: float
    quad: float  # per b·s² (eager scores); split by TP
    work: float  # backward working set per token (transient)


def _consumer_input(
    setup: ActivationSetup,
    dim: int,
    consumers: tuple[LinearModule, ...],
    layer_trains: bool,
    input_bytes: int | None = None,
    input_kept: bool = False,
) -> float:
    """Bytes per token kept for linear inputs of width ``dim`` read by ``consumers``: the
    (autocast copy of the) input once if any base weight trains, plus a copy per adapter.

    ``input_bytes``: the input's dtype (default the compute dtype). An fp32 input outside
    autocast (a peft-prepared base) is what each adapter's ``x.to(float32)`` returns, so the
    adapters keep that one tensor (nothing more if ``input_kept``: attention keeps it
    already); a quantized linear's ``x.to(compute)`` is then a copy of its own."""
    c = setup.compute_bytes
    fp32_in = setup.kbit_fp32 and input_bytes == _FP32
    kept = 0.0
    quantized = sum(1 for m in consumers if m.component != "router")
    if layer_trains and setup.base_trainable:
        kept += dim * c  # norm output (or its autocast copy), shared by the projections
    elif setup.frozen_inputs_kept and quantized:
        kept += dim * c * (quantized if fp32_in else 1)
    n_lora = sum(1 for m in consumers if m.name in setup.lora_names)
    if n_lora:
        if fp32_in and not setup.autocast:
            kept += (0 if input_kept else dim * _FP32) + n_lora * setup.lora_rank * _FP32
        else:
            copy = c if setup.autocast else _FP32
            kept += n_lora * (dim * copy + setup.lora_rank * _FP32)
    return kept


def _context_kept_inputs(setup: ActivationSetup, i: int) -> tuple[float, float]:
    """Bytes per token the old-bitsandbytes autograd contexts of layer ``i`` keep through
    checkpointing, as (outer, inner): the norm outputs its quantized linears read (replicated
    under TP, split by SP) and the tensors its other quantized linears read (split by TP).
    Zero unless ``frozen_inputs_kept`` (a quantized, frozen base: routers, lm_head and the
    3-D expert stacks are not bitsandbytes linears)."""
    if not setup.frozen_inputs_kept:
        return 0.0, 0.0
    c = setup.compute_bytes
    mods = [
        m
        for m in setup.arch.layer_linear_modules[i]
        if m.is_nn_linear and m.component not in ("router", "lm_head")
    ]
    # One tensor per norm, however many quantized linears read it; any other quantized linear
    # (o_proj, down_proj, MLA's q_b/kv_b) reads a tensor of its own.
    norms = {m.reads for m in mods if m.reads_norm_output}
    # after peft's preparation a norm output is fp32 and each quantized linear keeps the
    # 16-bit copy its ``x.to(compute)`` made
    readers = sum(1 for m in mods if m.reads_norm_output) if setup.kbit_fp32 else len(norms)
    outer = readers * setup.arch.hidden_size * c
    inner = sum(m.in_features * c for m in mods if not m.reads_norm_output)
    return float(outer), float(inner)


def _layer_terms(setup: ActivationSetup, i: int, grad_flows: bool) -> _LayerTerms:
    arch = setup.arch
    c = setup.compute_bytes
    h = arch.hidden_size
    layer_trains = setup.base_trainable and i >= setup.trainable_from
    has_lora = bool(setup.lora_names)
    if not (grad_flows or layer_trains or has_lora):
        return _LayerTerms(0.0, 0.0, 0.0, 0.0)
    mods = arch.layer_linear_modules[i]

    def reading(what: Reads, *components: str) -> tuple[LinearModule, ...]:
        """The layer's projections that read ``what`` (of ``components``, if given)."""
        return tuple(
            m for m in mods if m.reads is what and (not components or m.component in components)
        )

    outer = 0.0
    inner = 0.0
    quad = 0.0
    gemma_style = arch.norms_per_layer == 4
    # --- attention block ------------------------------------------------------------
    outer += _norm_kept(setup, h, layer_trains, grad_flows)
    heads, kv, hd, vhd = arch.num_attention_heads, arch.num_kv_heads, arch.head_dim, arch.v_head_dim
    if arch.mla is not None:
        mla = arch.mla
        outer += _consumer_input(setup, h, reading(Reads.ATTN_INPUT), layer_trains)
        if mla.q_lora_rank:
            inner += mla.q_lora_rank * c + _norm_kept(setup, mla.q_lora_rank, layer_trains, True)
            inner += _consumer_input(setup, mla.q_lora_rank, reading(Reads.Q_LATENT), layer_trains)
        inner += (mla.kv_lora_rank + mla.qk_rope_head_dim) * c
        inner += _norm_kept(setup, mla.kv_lora_rank, layer_trains, True)
        inner += _consumer_input(setup, mla.kv_lora_rank, reading(Reads.KV_LATENT), layer_trains)
        inner += heads * (mla.qk_nope_head_dim + vhd) * c  # kv_b output
        attn_q, attn_k, attn_v = heads * hd, heads * hd, heads * vhd
    else:
        outer += _consumer_input(
            setup, h, reading(Reads.ATTN_INPUT), layer_trains, setup.norm_output_bytes
        )
        attn_q, attn_k, attn_v = heads * hd, kv * hd, kv * vhd
        if arch.qk_norm is not None:
            qk = attn_q + attn_k
            if arch.norm_fp32:
                inner += qk * (_FP32 + (_FP32 if layer_trains else 0))
            else:
                inner += qk * (_FP32 + (c if layer_trains else 0))
    out_width = heads * vhd
    if setup.attention == "eager":
        # repeat_kv copies k/v to every head; scores: fp32 softmax + 16-bit probabilities.
        inner += (attn_q + heads * hd + heads * vhd) * c + out_width * c
        if setup.checkpointing != "selective":
            quad += _eager_score_bytes(setup, heads)
    else:
        inner += (attn_q + attn_k + attn_v + out_width) * setup.attention_bytes
        if setup.checkpointing != "selective":
            inner += heads * _FP32  # log-sum-exp
    o_proj = reading(Reads.ATTN_OUTPUT)
    o_keeps = (layer_trains and setup.base_trainable) or (setup.frozen_inputs_kept and o_proj)
    inner += _consumer_input(
        setup,
        out_width,
        o_proj,
        layer_trains,
        setup.attention_bytes,
        input_kept=setup.attention != "eager",
    ) - (
        out_width * c if o_keeps and setup.attention != "eager" else 0.0
    )  # o_proj reads the attention output as a view (already counted) except after eager
    if gemma_style:
        outer += _norm_kept(setup, h, layer_trains, True)  # post-attention norm
    # --- MLP / MoE block ------------------------------------------------------------
    outer += _norm_kept(setup, h, layer_trains, True)
    work_bytes = c
    if arch.moe is not None and arch.is_moe_layer(i):
        moe = arch.moe
        k, e, ie = moe.experts_per_token, moe.num_experts, moe.expert_intermediate_size
        experts_train = layer_trains or any(
            m.name in setup.lora_names for m in mods if m.component == "experts"
        )
        # The routers and the shared expert read the MLP input; the routed experts' copies
        # of it are counted below.
        shared_in = reading(Reads.MLP_INPUT, "router", "shared_experts")
        outer += _consumer_input(setup, h, shared_in, layer_trains)
        inner += e * _FP32 + k * 2 * _INT64  # router softmax, top-k / sort indices
        inner += k * ((h * c if experts_train else 0) + 4 * ie * c + h * c)
        work_width = k * ie
        if moe.shared_expert_intermediate_size:
            si = moe.shared_expert_intermediate_size
            inner += 3 * si * c + (si * c if layer_trains else 0)
            inner += _consumer_input(setup, si, reading(Reads.SHARED_ACT), False)
            work_width += si
    else:
        width = arch.intermediate_size
        # gate/up read the norm output; a prepared base's quantized gate/up return its fp32
        mlp_bytes = setup.norm_output_bytes
        outer += _consumer_input(
            setup, h, reading(Reads.MLP_INPUT, "mlp"), layer_trains, setup.norm_output_bytes
        )
        inner += (3 if arch.gated_mlp else 1) * width * mlp_bytes
        inner += _consumer_input(setup, width, reading(Reads.MLP_ACT), layer_trains, mlp_bytes)
        work_width = width
        work_bytes = mlp_bytes
    if gemma_style:
        outer += _norm_kept(setup, h, layer_trains, True)  # post-feedforward norm
    # Backward working set: gradients of the widest intermediates and hidden-width rows alive
    # at once (calibration register: training.backward_work_*).
    work = value("training.backward_work_intermediate") * work_width * work_bytes + value(
        "training.backward_work_hidden"
    ) * h * max(c, setup.residual_bytes)
    return _LayerTerms(inner, outer, quad, work)


@memoized
def activation_coefficients(setup: ActivationSetup) -> ActivationCoefficients:
    """Per-token coefficients of every activation term for ``setup``."""
    arch = setup.arch
    tp = setup.tp
    sp_div = tp if setup.sp else 1
    c = setup.compute_bytes
    h = arch.hidden_size
    v = arch.vocab_size
    # Does a gradient flow into layer i's input? Only if something before it trains: the
    # embedding (full fine-tuning) or an earlier trainable layer / adapter.
    embed_trains = setup.base_trainable and setup.trainable_from == 0
    lin: list[float] = []
    quad: list[float] = []
    recompute_lin = 0.0
    recompute_quad = 0.0
    grad_flows = embed_trains
    for i in range(arch.num_layers):
        t = _layer_terms(setup, i, grad_flows)
        full_lin = t.inner / tp + t.outer / sp_div
        full_quad = t.quad / tp
        if t.inner or t.outer:
            grad_flows = True
        if setup.checkpointing == "full" and (t.inner or t.outer):
            ctx_outer, ctx_inner = _context_kept_inputs(setup, i)
            # the checkpointed layer input, and what old-bitsandbytes contexts hold on to
            lin.append((h * setup.residual_bytes + ctx_outer) / sp_div + ctx_inner / tp)
            quad.append(0.0)
            recompute_lin = max(recompute_lin, full_lin + t.work / tp)
            recompute_quad = max(recompute_quad, full_quad)
        else:
            lin.append(full_lin)
            quad.append(full_quad)
            recompute_lin = max(recompute_lin, t.work / tp)
    # Final norm + lm_head input + the loss path's tensors (:mod:`.loss`).
    head_trains = setup.base_trainable or "lm_head" in setup.lora_names
    loss = get_loss_path(setup.loss).terms(
        LossShape(
            vocab=v / tp,
            hidden=h,
            compute_bytes=setup.logits_bytes,
            head_trains=head_trains,
            softcapping=arch.final_logit_softcapping is not None,
        )
    )
    head = _norm_kept(setup, h, setup.base_trainable, grad_flows)
    if head_trains and loss.reads_head_input:
        head += h * c
    # Autocast's 16-bit copies of linear weights (frozen ones too: backward needs them).
    copies = 0
    if setup.autocast:
        for m in arch.linear_modules:
            n = m.weight_numel * (m.count if not m.tied else 1)
            if not m.is_nn_linear:
                n = m.weight_numel * m.count
            copies += n * c
        copies //= tp
    return ActivationCoefficients(
        layer_lin=tuple(lin),
        layer_quad=tuple(quad),
        head_kept=head / sp_div + loss.kept,
        fw_transient=loss.fw_transient,
        bw_transient=loss.bw_transient,
        recompute_lin=recompute_lin,
        recompute_quad=recompute_quad,
        weight_copies=copies,
        embed_lin=h * setup.residual_bytes / sp_div,
    )
