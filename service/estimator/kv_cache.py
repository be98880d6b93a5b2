"""KV-cache memory: bytes per token, per layer and per GPU, as each engine lays the cache out.

Per layer and token, one GPU holds:

- GQA/MQA/MHA: ``2 × kv_heads_per_gpu × head_dim × dtype_bytes`` (K and V; the value head may be
  narrower, ``v_head_dim``), where tensor parallelism gives each rank ``kv_heads / TP`` heads and
  replicates a head on every rank once TP exceeds the head count (vLLM's QKVParallelLinear).
- MLA: the compressed latent ``kv_lora_rank + qk_rope_head_dim``, one copy per rank, not split
  by TP (vLLM's MLAAttentionSpec; SGLang; transformers 5 caches the same latent, as the
  reference tracer shows), unless the engine runs the family's latent attention as standard
  attention over its heads (:class:`MlaCache`): ``heads × (qk_head_dim + v_head_dim)``, split
  by TP (llama.cpp's ``src/models/minicpm3.cpp``), or ``heads × 2 × qk_head_dim`` where the
  value is padded to the key's width (vLLM's ``minicpm3.py``).

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
- Gemma 4: a full-attention layer caches ``global_head_dim``-wide heads (and, with
  ``attention_k_eq_v``, its own KV heads, K and V both cached), a sliding layer
  ``head_dim``-wide ones; the last ``num_kv_shared_layers`` layers read an earlier layer's
  cache and hold none (transformers' ``kv_sharing_modes``, vLLM's
  ``kv_sharing_target_layer_name``).
- DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): every layer that runs the lightning indexer
  also caches one ``index_head_dim`` key per token, in fp8 with a float32 scale per 128 values
  (vLLM's ``DeepseekV32IndexerCache``: 128 + 4 = 132 bytes), beside the latent; priced so for
  every engine (transformers keeps it in the model dtype, 256 bytes: not modelled).
- how a paged engine lays its pool out (vLLM's KV-cache groups and blocks) is the engine's own
  (``service/estimator/engines/vllm_kv.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from service.estimator.memo import memoized
from service.estimator.model import FULL_ATTENTION, SLIDING_ATTENTION, Architecture
from service.estimator.model.shapes import CHUNKED_ATTENTION, LINEAR_ATTENTION, LinearAttentionSpec
from service.estimator.parallel import pp_layer_partition
from service.estimator.units import bytes_per_element

__all__ = [
    "KvLayout",
    "MlaCache",
    "indexer_key_bytes",
    "kv_heads_per_gpu",
    "per_layer_token_bytes",
    "stage_kv_layouts",
]


def kv_heads_per_gpu(arch: Architecture, tp: int) -> int:
    """KV heads one TP rank holds (replicated once TP exceeds the head count)."""
    return max(1, arch.num_kv_heads // tp)


class MlaCache(StrEnum):
    """What an engine caches per token and layer for latent attention (module docstring)."""

    LATENT = "latent"  # kv_lora_rank + qk_rope_head_dim, one copy per rank
    HEADS = "heads"  # K (qk_head_dim) and V (v_head_dim) of every head, split by TP
    HEADS_PADDED_V = "heads_padded_v"  # as HEADS with V padded to qk_head_dim


def per_layer_token_bytes(
    arch: Architecture,
    dtype_bytes: float,
    tp: int = 1,
    *,
    mla_cache: MlaCache = MlaCache.LATENT,
    layer_type: str | None = None,
) -> int:
    """KV bytes one token costs in one attention layer (of ``layer_type``, where the
    full-attention layers have a geometry of their own) on one GPU."""
    if arch.mla is not None:
        m = arch.mla
        if mla_cache is MlaCache.LATENT:
            return int(m.latent_width * dtype_bytes)
        heads = max(1, arch.num_attention_heads // tp)
        v = m.qk_head_dim if mla_cache is MlaCache.HEADS_PADDED_V else m.v_head_dim
        return int(heads * (m.qk_head_dim + v) * dtype_bytes)
    g = arch.global_attention
    if g is not None and layer_type == FULL_ATTENTION:
        # Gemma 4's full layers: their own head size and KV heads; with attention_k_eq_v the
        # keys serve as values, yet both K and V are cached (vLLM loads k_proj into both
        # slots of qkv_proj; transformers caches the value states it aliases).
        return int(max(1, g.kv_heads // tp) * 2 * g.head_dim * dtype_bytes)
    heads = kv_heads_per_gpu(arch, tp)
    return int(heads * (arch.head_dim + arch.v_head_dim) * dtype_bytes)


# vLLM's indexer stores its keys in fp8 with one float32 scale per 128 values
# (vllm/model_executor/models/deepseek_v2.py: Indexer, quant_block_size 128;
# DeepseekV32IndexerCache's head_size head_dim + head_dim // 128 * 4, dtype uint8).
_INDEXER_QUANT_BLOCK = 128
_INDEXER_SCALE_BYTES = 4


def indexer_key_bytes(head_dim: int) -> int:
    """Bytes one token's indexer key takes in one layer (fp8 values and their scales)."""
    return head_dim + head_dim // _INDEXER_QUANT_BLOCK * _INDEXER_SCALE_BYTES


@dataclass(frozen=True, slots=True)
class KvLayout:
    """The layers of the most loaded pipeline stage and what one token costs in each."""

    layer_token_bytes: int  # one layer, one token, one GPU
    full_layers: int  # full-attention layers on the stage
    sliding_layers: int  # sliding-window layers on the stage
    window: int | None
    latent: bool  # MLA latent cache (MlaCache.LATENT)
    chunked_layers: int = 0  # chunked-attention layers on the stage
    chunk: int | None = None  # attention_chunk_size
    linear_layers: int = 0  # linear-attention layers on the stage (per-sequence state)
    linear: LinearAttentionSpec | None = None
    tp: int = 1
    state_dtype_bytes: float = 2.0  # the model dtype, which linear-attention states keep
    # A speculative drafter's KV bytes per token on this GPU, held for every token beside the
    # target's layers (:mod:`service.estimator.speculative`).
    extra_token_bytes: int = 0
    # One sliding layer's bytes per token when they differ from a full layer's (Gemma 4: 256-
    # vs 512-wide heads); None: the same.
    sliding_layer_token_bytes: int | None = None
    # DeepSeek sparse attention: layers on the stage whose indexer caches one key per token, and
    # that key's bytes.
    indexer_layers: int = 0
    indexer_token_bytes: int = 0

    @property
    def indexer_bytes(self) -> int:
        """What one token costs in the stage's indexer caches."""
        return self.indexer_layers * self.indexer_token_bytes

    @property
    def layers(self) -> int:
        """Layers that hold per-token keys and values."""
        return self.full_layers + self.sliding_layers + self.chunked_layers

    @property
    def sliding_token_bytes(self) -> int:
        """One sliding layer's bytes per token."""
        if self.sliding_layer_token_bytes is None:
            return self.layer_token_bytes
        return self.sliding_layer_token_bytes

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
        full = self.layer_token_bytes * (self.full_layers + self.chunked_layers)
        sliding = self.sliding_token_bytes * self.sliding_layers
        return full + sliding + self.indexer_bytes + self.extra_token_bytes

    def prefill_bytes(self, prompt_tokens: int) -> int:
        """One sequence's DynamicCache right after the prefill: every layer holds the prompt."""
        kv = prompt_tokens * self.full_token_bytes
        return kv + self.sequence_state_bytes

    def decode_bytes(self, total_tokens: int) -> int:
        """One sequence's DynamicCache at `total_tokens`: sliding layers keep their window,
        chunked layers their chunk, linear-attention layers their state."""
        sliding = 0
        if self.sliding_layers:
            w = self.window or total_tokens
            sliding = self.sliding_layers * min(total_tokens, w) * self.sliding_token_bytes
        chunked = 0
        if self.chunked_layers:
            chunked = self.chunked_layers * min(total_tokens, self.chunk or total_tokens)
        kv = (self.full_layers * total_tokens + chunked) * self.layer_token_bytes + sliding
        per_token = self.indexer_bytes + self.extra_token_bytes
        return kv + total_tokens * per_token + self.sequence_state_bytes


# In the byte-bounded memo, not an lru_cache: see weights.weight_layout.
@memoized
def stage_kv_layouts(
    arch: Architecture, dtype_bytes: float, tp: int, pp: int, mla_cache: MlaCache
) -> tuple[KvLayout, ...]:
    """The KV layout of every pipeline stage, first to last."""
    ltb = per_layer_token_bytes(
        arch, dtype_bytes, tp, mla_cache=mla_cache, layer_type=FULL_ATTENTION
    )
    sliding_ltb = per_layer_token_bytes(
        arch, dtype_bytes, tp, mla_cache=mla_cache, layer_type=SLIDING_ATTENTION
    )
    shared = frozenset(arch.kv_shared_layers)
    indexer_layers = arch.indexer.layers if arch.indexer is not None else ()
    index_bytes = indexer_key_bytes(arch.indexer.head_dim) if arch.indexer is not None else 0
    out = []
    start = 0
    for n in pp_layer_partition(arch.num_layers, pp):
        # A layer that reads another layer's keys and values holds no cache of its own.
        types = [t for i, t in enumerate(arch.layer_types[start : start + n], start)
                 if i not in shared]  # fmt: skip
        stage_start = start
        start += n
        sliding = sum(1 for t in types if t == SLIDING_ATTENTION)
        chunked = sum(1 for t in types if t == CHUNKED_ATTENTION)
        linear = sum(1 for t in types if t == LINEAR_ATTENTION)
        indexed = sum(1 for i in indexer_layers if stage_start <= i < start)
        out.append(
            KvLayout(
                layer_token_bytes=ltb,
                sliding_layer_token_bytes=sliding_ltb if sliding_ltb != ltb else None,
                indexer_layers=indexed,
                indexer_token_bytes=index_bytes if indexed else 0,
                full_layers=len(types) - sliding - chunked - linear,
                sliding_layers=sliding,
                window=arch.sliding_window if sliding else None,
                latent=arch.mla is not None and mla_cache is MlaCache.LATENT,
                chunked_layers=chunked,
                chunk=arch.attention_chunk_size if chunked else None,
                linear_layers=linear,
                linear=arch.linear_attention if linear else None,
                tp=tp,
                state_dtype_bytes=bytes_per_element(arch.dtype),
            )
        )
    return tuple(out)
