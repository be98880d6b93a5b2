"""KV-cache memory: bytes per token, per layer and per GPU, as each engine lays the cache out.

Per layer and token, one GPU holds:

- GQA/MQA/MHA: ``2 × kv_heads_per_gpu × head_dim × dtype_bytes`` (K and V; the value head may be
  narrower, ``v_head_dim``), where tensor parallelism gives each rank ``kv_heads / TP`` heads and
  replicates a head on every rank once TP exceeds the head count (vLLM's QKVParallelLinear).
- MLA: the compressed latent ``kv_lora_rank + qk_rope_head_dim``, one copy per rank, not split
  by TP (vLLM's MLAAttentionSpec; SGLang; transformers 5 caches the same latent, as the
  reference tracer shows). ``latent_mla=False`` gives the decompressed layout older
  implementations cached: ``heads × (qk_head_dim + v_head_dim)``.

How many tokens a layer holds:

- transformers' DynamicCache keeps every token for full-attention layers; a sliding layer keeps the
  window once decoding has started, but right after the prefill it still holds the prompt's
  full-length storage (the window is a view), so it is charged ``max(prompt, min(total, window))``.
  A chunked-attention layer (Llama 4's RoPE layers) is cached as a sliding layer whose window is
  ``attention_chunk_size`` (``DYNAMIC_LAYER_TYPE_MAPPING`` in ``transformers/cache_utils.py``).
- a linear-attention layer (Qwen3-Next's Gated DeltaNet) holds no per-token keys and values but a
  per-sequence state: a conv state of the last taps of its q/k/v channels and a recurrent state of
  ``key_head_dim × value_head_dim`` per value head, both split by TP. transformers'
  ``LinearAttentionLayer`` keeps ``conv_kernel`` taps in the model dtype and the recurrent state in
  float32 (its delta-rule kernels return it so); vLLM's ``MambaSpec`` keeps ``conv_kernel - 1``
  taps and both states in the model dtype (``gated_delta_net_state_shape``).
- how a paged engine lays its pool out (vLLM's KV-cache groups and blocks) is the engine's own
  (``service/estimator/engines/vllm_kv.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from service.estimator.model import SLIDING_ATTENTION, Architecture
from service.estimator.model.shapes import CHUNKED_ATTENTION, LINEAR_ATTENTION, LinearAttentionSpec
from service.estimator.parallel import pp_layer_partition
from service.estimator.units import bytes_per_element

__all__ = ["KvLayout", "kv_heads_per_gpu", "per_layer_token_bytes", "stage_kv_layouts"]


def kv_heads_per_gpu(arch: Architecture, tp: int) -> int:
    """KV heads one TP rank holds (replicated once TP exceeds the head count)."""
    return max(1, arch.num_kv_heads // tp)


def per_layer_token_bytes(
    arch: Architecture, dtype_bytes: float, tp: int = 1, *, latent_mla: bool = True
) -> int:
    """KV bytes one token costs in one attention layer on one GPU."""
    if arch.mla is not None:
        if latent_mla:
            return int(arch.mla.latent_width * dtype_bytes)
        heads = max(1, arch.num_attention_heads // tp)
        return int(heads * (arch.mla.qk_head_dim + arch.mla.v_head_dim) * dtype_bytes)
    heads = kv_heads_per_gpu(arch, tp)
    return int(heads * (arch.head_dim + arch.v_head_dim) * dtype_bytes)


@dataclass(frozen=True, slots=True)
class KvLayout:
    """The layers of the most loaded pipeline stage and what one token costs in each."""

    layer_token_bytes: int  # one layer, one token, one GPU
    full_layers: int  # full-attention layers on the stage
    sliding_layers: int  # sliding-window layers on the stage
    window: int | None
    latent: bool  # MLA latent cache (vLLM, SGLang, transformers 5)
    chunked_layers: int = 0  # chunked-attention layers on the stage
    chunk: int | None = None  # attention_chunk_size
    linear_layers: int = 0  # linear-attention layers on the stage (per-sequence state)
    linear: LinearAttentionSpec | None = None
    tp: int = 1
    state_dtype_bytes: float = 2.0  # the model dtype, which linear-attention states keep
    # A speculative drafter's KV bytes per token on this GPU, held for every token beside the
    # target's layers (:mod:`service.estimator.speculative`).
    extra_token_bytes: int = 0

    @property
    def layers(self) -> int:
        """Layers that hold per-token keys and values."""
        return self.full_layers + self.sliding_layers + self.chunked_layers

    def state_bytes(self, conv_taps: int, recurrent_dtype_bytes: float) -> int:
        """One sequence's state in one linear-attention layer on one GPU."""
        if self.linear is None:
            return 0
        conv = self.linear.conv_state_elements(self.tp, conv_taps) * self.state_dtype_bytes
        recurrent = self.linear.recurrent_state_elements(self.tp) * recurrent_dtype_bytes
        return int(conv + recurrent)

    @property
    def sequence_state_bytes(self) -> int:
        """One sequence's linear-attention state on the stage, as transformers caches it:
        ``conv_kernel`` taps in the model dtype and a float32 recurrent state."""
        if self.linear is None:
            return 0
        return self.linear_layers * self.state_bytes(self.linear.conv_kernel, 4)

    @property
    def full_token_bytes(self) -> int:
        """Bytes one token costs on every layer of the stage (no window saving)."""
        return self.layer_token_bytes * self.layers + self.extra_token_bytes

    def prefill_bytes(self, prompt_tokens: int) -> int:
        """One sequence's DynamicCache right after the prefill: every layer holds the prompt."""
        kv = self.layers * prompt_tokens * self.layer_token_bytes
        return kv + prompt_tokens * self.extra_token_bytes + self.sequence_state_bytes

    def decode_bytes(self, total_tokens: int) -> int:
        """One sequence's DynamicCache at `total_tokens`: sliding layers keep their window,
        chunked layers their chunk, linear-attention layers their state."""
        sliding = 0
        if self.sliding_layers:
            w = self.window or total_tokens
            sliding = self.sliding_layers * min(total_tokens, w)
        if self.chunked_layers:
            sliding += self.chunked_layers * min(total_tokens, self.chunk or total_tokens)
        kv = (self.full_layers * total_tokens + sliding) * self.layer_token_bytes
        return kv + total_tokens * self.extra_token_bytes + self.sequence_state_bytes


@lru_cache(maxsize=1024)
def stage_kv_layouts(
    arch: Architecture, dtype_bytes: float, tp: int, pp: int, latent_mla: bool
) -> tuple[KvLayout, ...]:
    """The KV layout of every pipeline stage, first to last."""
    ltb = per_layer_token_bytes(arch, dtype_bytes, tp, latent_mla=latent_mla)
    out = []
    start = 0
    for n in pp_layer_partition(arch.num_layers, pp):
        types = arch.layer_types[start : start + n]
        start += n
        sliding = sum(1 for t in types if t == SLIDING_ATTENTION)
        chunked = sum(1 for t in types if t == CHUNKED_ATTENTION)
        linear = sum(1 for t in types if t == LINEAR_ATTENTION)
        out.append(
            KvLayout(
                layer_token_bytes=ltb,
                full_layers=n - sliding - chunked - linear,
                sliding_layers=sliding,
                window=arch.sliding_window if sliding else None,
                latent=arch.mla is not None and latent_mla,
                chunked_layers=chunked,
                chunk=arch.attention_chunk_size if chunked else None,
                linear_layers=linear,
                linear=arch.linear_attention if linear else None,
                tp=tp,
                state_dtype_bytes=bytes_per_element(arch.dtype),
            )
        )
    return tuple(out)
