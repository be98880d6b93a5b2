"""Preparation of a quantized base for training: peft's ``prepare_model_for_kbit_training``.

The standard Hugging Face QLoRA recipe (peft's QLoRA guide, TRL's ``SFTTrainer`` for a model
loaded in 4 or 8 bits) calls ``prepare_model_for_kbit_training`` before adding the adapters
(read from peft 0.12.0 and 0.13.2 ``utils/other.py``, unchanged between them): it freezes the
base and casts every fp16/bf16 parameter that is not a ``Params4bit`` to fp32, that is the
embeddings, lm_head, every norm weight and the biases of the quantized linears. What follows
from it, with bitsandbytes 0.44 ``nn.Linear4bit.forward`` (casts its input to the compute
dtype and returns ``out.to(inp_dtype)``) and peft's LoRA layers (``x.to(lora_A.weight.dtype)``,
fp32 adapters):

- the embedding output is fp32, so the residual stream is fp32: a checkpointed layer keeps a
  4-byte input, the backward's hidden-width rows are fp32;
- an RMSNorm with an fp32 weight returns fp32, and a quantized linear fed an fp32 input
  returns fp32: q, k, v, the MLP's gate, up, their activation and product are fp32 (the
  layer's recomputation and, without checkpointing, every layer keeps them at 4 bytes);
  flash attention casts fp32 q/k/v back to the 16-bit dtype (transformers
  ``_flash_attention_forward``), SDPA and eager attention outside autocast run in fp32;
- without autocast an adapter's ``x.to(float32)`` is a no-op on an fp32 input, so the
  adapters reading one norm output (q/k/v; gate/up) keep that one tensor instead of a copy
  each; under autocast each adapter's matmul keeps its own 16-bit cast, as before;
- lm_head in fp32 returns fp32 logits outside autocast; under autocast it keeps a 16-bit
  copy of its weight for backward (autocast casts the frozen fp32 weight, and the matmul
  saves it to compute the input's gradient).

``none``: the base as loaded (16-bit non-quantized parameters), as trainers that do not call
peft's helper run it (LitGPT, ms-swift 1.x). TRL's ``SFTTrainer`` handed a ``PeftConfig`` with
``bf16`` casts embeddings and lm_head back to bf16 after the preparation
(``peft_module_casting_to_bf16``); that variant is not modelled.
"""

from __future__ import annotations

from service.estimator.errors import InvalidRequest

__all__ = ["KBIT_PREPARATIONS", "resolve_kbit_preparation"]

#: What a request may name (the API enum is built from this tuple).
KBIT_PREPARATIONS: tuple[str, ...] = ("peft", "none")


def resolve_kbit_preparation(method: str, value: str | None) -> str:
    """The preparation a request runs: ``peft`` for QLoRA unless told otherwise, ``none`` for
    a base that is not quantized (the helper is only called for a quantized model)."""
    if value is None:
        return "peft" if method == "qlora" else "none"
    if value not in KBIT_PREPARATIONS:
        raise InvalidRequest(
            f"kbit_preparation must be one of {', '.join(KBIT_PREPARATIONS)}; "
            f"got {str(value)[:40]!r}",
            field="kbit_preparation",
        )
    if value == "peft" and method != "qlora":
        raise InvalidRequest(
            "kbit_preparation 'peft' prepares a quantized base: it applies to method 'qlora' "
            "only; leave it unset or use 'none'",
            field="kbit_preparation",
        )
    return value
