"""Transient memory of an inference forward pass: MLP/attention intermediates, logits, sampler.

What the forward pass of a decoder holds at its peak, per token and per GPU, from the shape:

- The residual stream and its neighbours: four hidden-width tensors are alive inside a layer
  (residual, normed input, the attention or MLP output, the next residual), ``4·h`` elements.
- The MLP, where the peak of a dense layer sits: a gated MLP holds ``gate`` then ``act(gate)``
  and ``up`` and their product, three ``I``-wide tensors at once (``act(gate_proj(x)) *
  up_proj(x)``); a plain MLP two. A MoE layer holds, per token, its ``k`` routed copies
  (``k·3·I_e``) and the shared expert (``3·I_s``); vLLM's fused_moe shares one buffer between
  the gate_up output and the down output (``k·(max(2·I_e, h) + I_e)``).
- Attention with flash/SDPA kernels: q, k, v and the output (``2·q + 2·kv`` elements); eager
  attention also materializes the score matrix, ``heads × s × s``: the raw, scaled and masked
  scores in the model dtype (each alive while the next is built) and the fp32 softmax,
  ``(3·d + 4)`` bytes per score (``3·d`` with gpt-oss's attention sinks, whose eager softmax
  runs in the model dtype).
- Logits: the lm_head output in the model dtype and the fp32 copy generation/sampling makes of
  it (``V·(d + 4)`` bytes per row). ``generate`` in transformers >= 4.45 computes the prefill
  logits of the last position only; older versions, and a plain forward, every position (kept
  in the model dtype by transformers 5, upcast to fp32 inside the forward before 4.45).
- What an engine's profiling run or sampler reserves beyond this is the engine's own
  (``service/estimator/engines/``).

These coefficients are checked against the reference tracer (transformers 5, FakeTensorMode) and
vLLM's start-up logs in ``make validate``; see docs/inference.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.model import Architecture

__all__ = [
    "HIDDEN_TENSORS",
    "ForwardCoefficients",
    "dense_widths",
    "forward_coefficients",
    "prefill_transient",
]

# Hidden-width tensors alive at a layer's peak (residual, normed input, sublayer output, next).
HIDDEN_TENSORS = 4


@dataclass(frozen=True, slots=True)
class ForwardCoefficients:
    """Per-GPU transient bytes of a forward pass, as linear coefficients.

    `per_token`: bytes per token in flight (the layer peak); `score_per_token_sq`: bytes per
    squared prompt token per sequence when eager attention materializes the scores; `logit_row`:
    model-dtype logits plus their fp32 copy for one row; `hidden_row`: one hidden-width row.
    """

    per_token: float
    score_per_token_sq: float
    logit_row: float
    hidden_row: float
    dtype_bytes: float
    vocab: int


def _mlp_width(arch: Architecture, tp: int, fused_moe: bool) -> float:
    """Elements per token the widest MLP of the model holds at its peak, on one TP rank."""
    h = arch.hidden_size
    per_gate = 3 if arch.gated_mlp else 2
    dense = per_gate * arch.intermediate_size / tp if arch.num_dense_layers else 0.0
    moe = arch.moe
    if moe is None:
        return dense
    e = moe.expert_intermediate_size / tp
    k = moe.experts_per_token
    routed = k * (max(2 * e, h) + e) if fused_moe else k * 3 * e
    shared = 3 * moe.shared_expert_intermediate_size / tp
    router = moe.num_experts * 2  # fp32 router logits (4 bytes) counted in model-dtype elements
    return max(dense, routed + shared + router)


def _attention_width(arch: Architecture, tp: int) -> float:
    """Elements per token of q, k, v and the attention output on one TP rank."""
    if arch.mla is not None:
        heads = arch.num_attention_heads / tp
        m = arch.mla
        return heads * (2 * m.qk_head_dim + 2 * m.v_head_dim) + m.kv_lora_rank + m.qk_rope_head_dim
    kv = max(1, arch.num_kv_heads // tp) * arch.head_dim
    q = arch.num_attention_heads * arch.head_dim / tp
    return 2 * q + 2 * kv


def dense_widths(arch: Architecture, tp: int) -> tuple[float, float]:
    """(attention, dense MLP) elements per token on one TP rank: the non-MoE candidates for a
    layer's peak, for engines that price their MoE buffers themselves."""
    per_gate = 3 if arch.gated_mlp else 2
    dense = per_gate * arch.intermediate_size / tp if arch.num_dense_layers else 0.0
    return _attention_width(arch, tp), dense


def forward_coefficients(
    arch: Architecture, dtype_bytes: float, tp: int, *, fused_moe: bool, eager: bool
) -> ForwardCoefficients:
    """Coefficients of the forward transient of `arch` on one TP rank."""
    h = arch.hidden_size
    width = max(_mlp_width(arch, tp, fused_moe), _attention_width(arch, tp))
    per_token = dtype_bytes * (HIDDEN_TENSORS * h + width)
    # Attention sinks (gpt-oss): the sink logits are concatenated and the softmax stays in the
    # model dtype, so three model-dtype copies and no fp32 one.
    per_score = 3 * dtype_bytes + (0 if arch.attention_sinks else 4)
    score = per_score * arch.num_attention_heads / tp if eager else 0.0
    return ForwardCoefficients(
        per_token=per_token,
        score_per_token_sq=score,
        logit_row=arch.vocab_size * (dtype_bytes + 4),
        hidden_row=h * dtype_bytes,
        dtype_bytes=dtype_bytes,
        vocab=arch.vocab_size,
    )


def prefill_transient(c: ForwardCoefficients, sequences: int, prompt: int) -> float:
    """Peak transient of the prefill layers (no logits): MLP/attention plus eager scores."""
    return c.per_token * sequences * prompt + c.score_per_token_sq * sequences * prompt * prompt
