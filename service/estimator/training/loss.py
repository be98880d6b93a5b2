"""The loss path: what the logits and the cross entropy hold, per trainer implementation.

With a large vocabulary the logits are the largest activation at long context, and what they
cost depends on the code that computes the loss, not on the model. One class per
implementation, each read from its source (public repositories and PyPI releases):

- ``transformers`` (transformers >= 4.45, the default; 5.x ``LlamaForCausalLM.forward`` and
  ``loss/loss_utils.py``'s ``ForCausalLMLoss``): lm_head returns logits in the compute dtype,
  which the model output holds; the loss upcasts them to fp32 (freed once the loss is taken),
  shifts the labels rather than the logits, and ``cross_entropy``'s log-softmax keeps its fp32
  output. Kept ``V·(c + 4)``, forward transient ``4·V`` (none when ``c`` is 4: ``.float()`` is
  a no-op), backward starts with two fp32 tensors of the logits' size (``8·V``: the gradients
  of the NLL and of the log-softmax).
- ``transformers-legacy`` (transformers < 4.45; 4.44.2 ``models/llama/modeling_llama.py``
  ``LlamaForCausalLM.forward``): ``logits = logits.float()`` right after lm_head, so the model
  output holds fp32 logits; the loss takes ``logits[..., :-1, :].contiguous()``, an fp32 copy
  alive until the forward returns. Kept ``8·V`` (fp32 logits and the log-softmax output),
  forward transient ``4·V`` (the shifted copy), backward ``8·V``.
- ``chunked`` (torchtune 0.6 ``modules/loss/ce_chunked_output_loss.py``
  ``CEWithChunkedOutputLoss``, ``num_output_chunks`` 8, with
  ``TransformerDecoder.chunked_output``): the output projection runs per chunk of the
  sequence, each chunk is upcast and its cross entropy taken in turn, and torchtune's recipes
  delete the logits before ``backward()``. Kept ``4·V`` (each chunk's fp32 log-softmax
  output), forward transient ``c·V`` (the chunks of logits) plus one chunk's upcast
  ``4·V/n``, backward ``8·V/n`` (one chunk's two fp32 gradients).
- ``liger`` (liger-kernel 0.8 ``ops/fused_linear_cross_entropy.py``
  ``LigerFusedLinearCrossEntropyFunction``): no logits exist beyond one chunk of tokens. The
  forward computes the loss and the gradients together: ``grad_input`` (tokens × hidden, the
  input's dtype) is kept for backward, ``grad_weight`` (the lm_head weight's shape and dtype,
  when it trains) from the forward on; per chunk ``chunk_size × V`` logits in the compute
  dtype, with ``chunk_size = next_power_of_2(ceil(BT / ceil(V / H)))`` (at most ``BT``), and a
  fp32 loss per token. Kept ``h·c``, forward transient ``4`` plus the chunk, which is between
  one and two times ``BT·H·c`` and is counted at its bound ``2·h·c`` per token; backward
  returns the stored gradients (no new tensor).
- ``cut-cross-entropy`` (Apple's cut-cross-entropy 25.1 ``cce.py``, ``cce_lse_forward.py``,
  ``cce_backward.py``, ``utils.py``): no logits are materialized; the forward keeps the
  hidden states it read (``h·c``), an fp32 log-sum-exp per token and, for shifted labels, the
  index of each valid position (``nonzero`` in int64, cast to int32, summed back to int64:
  8 bytes kept, 16 more while it is built); backward allocates the hidden states' gradient
  (``h·c``) and, when lm_head trains, its gradient in the compute dtype.

``V`` above is the vocabulary per GPU (vocabulary-parallel under TP), ``c`` the compute dtype's
bytes; every figure is bytes per token of the micro-batch. Final logit softcapping (Gemma 2)
keeps its tanh output (``c·V``) on the paths that materialize logits.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.errors import InvalidRequest

__all__ = [
    "CHUNKED_OUTPUT_CHUNKS",
    "LOSS_IMPLEMENTATIONS",
    "LossPath",
    "LossShape",
    "LossTerms",
    "get_loss_path",
    "liger_chunk_size",
]

_FP32 = 4
_INT64 = 8
#: torchtune's ``CEWithChunkedOutputLoss`` default (and every recipe's ``num_output_chunks``).
CHUNKED_OUTPUT_CHUNKS = 8


@dataclass(frozen=True, slots=True)
class LossShape:
    """What the loss path depends on: vocabulary per GPU, hidden width, compute dtype bytes,
    whether lm_head's weight trains, and final logit softcapping."""

    vocab: float  # per GPU (vocabulary-parallel under TP)
    hidden: int
    compute_bytes: int
    head_trains: bool
    softcapping: bool = False


@dataclass(frozen=True, slots=True)
class LossTerms:
    """Bytes per token of the loss path: ``kept`` from the forward's end through backward;
    ``fw_transient`` on top at the forward's peak; ``bw_transient`` on top at the start of
    backward; ``reads_head_input``: lm_head's autograd saves its input (when its weight
    trains) because lm_head runs as a module."""

    kept: float
    fw_transient: float
    bw_transient: float
    reads_head_input: bool = True


class LossPath:
    """One implementation of the logits and the cross entropy."""

    name: str = ""
    summary: str = ""

    def terms(self, shape: LossShape) -> LossTerms:
        raise NotImplementedError

    def fixed(self, head_weight_bytes: int, head_compute_bytes: int) -> tuple[int, int]:
        """Bytes independent of the tokens, (forward end, start of backward), held besides
        the gradients: a gradient of lm_head allocated before backward reaches it.
        ``head_weight_bytes``: lm_head's weight as stored (0 when it does not train)."""
        del head_weight_bytes, head_compute_bytes
        return 0, 0


def _softcap(shape: LossShape) -> float:
    return shape.vocab * shape.compute_bytes if shape.softcapping else 0.0


class _Transformers(LossPath):
    name = "transformers"
    summary = (
        "transformers >= 4.45: logits in the compute dtype held by the model output, upcast "
        "to fp32 inside the loss, labels shifted; keeps the logits and the fp32 log-softmax"
    )

    def terms(self, shape: LossShape) -> LossTerms:
        v, c = shape.vocab, shape.compute_bytes
        return LossTerms(
            kept=v * (c + _FP32) + _softcap(shape),
            fw_transient=v * _FP32 if c != _FP32 else 0.0,
            bw_transient=2 * v * _FP32,
        )


class _TransformersLegacy(LossPath):
    name = "transformers-legacy"
    summary = (
        "transformers < 4.45: logits upcast to fp32 in the forward and held by the model "
        "output, plus a contiguous fp32 copy of the shifted logits during the loss"
    )

    def terms(self, shape: LossShape) -> LossTerms:
        v = shape.vocab
        return LossTerms(
            kept=2 * v * _FP32 + _softcap(shape),
            fw_transient=v * _FP32,
            bw_transient=2 * v * _FP32,
        )


class _Chunked(LossPath):
    name = "chunked"
    summary = (
        f"torchtune CEWithChunkedOutputLoss ({CHUNKED_OUTPUT_CHUNKS} output chunks): each "
        "chunk's logits upcast in turn, logits deleted before backward; keeps the fp32 "
        "log-softmax of every chunk"
    )

    def terms(self, shape: LossShape) -> LossTerms:
        v, c, n = shape.vocab, shape.compute_bytes, CHUNKED_OUTPUT_CHUNKS
        return LossTerms(
            kept=v * _FP32 + _softcap(shape),
            fw_transient=v * c + v * _FP32 / n,
            bw_transient=2 * v * _FP32 / n,
        )


def liger_chunk_size(tokens: int, vocab: int, hidden: int) -> int:
    """Rows of logits liger's fused linear cross entropy materializes at once (0.8.5,
    ``chunk_mem_const`` 1): the next power of two of ``ceil(BT / ceil(V / H))``, at most BT."""
    inc = -(-vocab // hidden)
    rows = -(-tokens // inc)
    return min(1 << (rows - 1).bit_length(), tokens)


class _Liger(LossPath):
    name = "liger"
    summary = (
        "liger-kernel fused linear cross entropy: no full logits; the gradient of the hidden "
        "states (and of lm_head when it trains) computed in the forward and kept"
    )

    def terms(self, shape: LossShape) -> LossTerms:
        h, c = shape.hidden, shape.compute_bytes
        return LossTerms(
            kept=h * c,  # grad_input
            # fp32 loss per token; one chunk of logits, at most 2·BT·H elements
            fw_transient=_FP32 + 2 * h * c,
            bw_transient=0.0,
            reads_head_input=False,
        )

    def fixed(self, head_weight_bytes: int, head_compute_bytes: int) -> tuple[int, int]:
        return head_weight_bytes, head_weight_bytes  # grad_weight = zeros_like(weight)


class _CutCrossEntropy(LossPath):
    name = "cut-cross-entropy"
    summary = (
        "Apple cut-cross-entropy: no logits materialized; keeps the hidden states, an fp32 "
        "log-sum-exp and the valid positions; backward allocates the hidden states' gradient"
    )

    def terms(self, shape: LossShape) -> LossTerms:
        h, c = shape.hidden, shape.compute_bytes
        return LossTerms(
            kept=h * c + _FP32 + _INT64,
            fw_transient=2 * _INT64,  # nonzero's int64 pairs while the int32 copy is made
            bw_transient=h * c,  # de = zeros_like(e)
            reads_head_input=False,
        )

    def fixed(self, head_weight_bytes: int, head_compute_bytes: int) -> tuple[int, int]:
        return 0, head_compute_bytes  # dc = zeros_like(c, dtype=e.dtype)


_PATHS: dict[str, LossPath] = {
    p.name: p
    for p in (_Transformers(), _TransformersLegacy(), _Chunked(), _Liger(), _CutCrossEntropy())
}
LOSS_IMPLEMENTATIONS: tuple[str, ...] = tuple(_PATHS)


def get_loss_path(name: str) -> LossPath:
    try:
        return _PATHS[name]
    except KeyError:
        raise InvalidRequest(
            f"loss_implementation must be one of {', '.join(LOSS_IMPLEMENTATIONS)}; "
            f"got {str(name)[:40]!r}",
            field="loss_implementation",
        ) from None
