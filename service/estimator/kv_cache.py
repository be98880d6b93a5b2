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
- vLLM v1 rounds every request up to whole blocks of ``block_size`` tokens; a sliding-window layer
  is budgeted ``min(window - 1 + max_num_batched_tokens, max_model_len)`` tokens plus one block
  (SlidingWindowSpec.max_memory_usage_bytes). Hybrid models are cut into KV-cache groups of equal
  size (the smaller type's layer count, or the larger's when within 1.25x) and every group is
  padded to that size: Gemma-3-27B's 10 full + 52 sliding layers become 7 groups of 10 slots.
  The pool is shared page by page by one layer of every group, so a token costs
  ``groups × group_size`` layer slots (vLLM's kv_cache_utils).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from service.estimator.architecture import SLIDING_ATTENTION, Architecture
from service.estimator.weights import pp_layer_partition

__all__ = [
    "KvLayout",
    "VllmKvGroups",
    "kv_layout",
    "per_layer_token_bytes",
    "stage_kv_layouts",
    "vllm_groups",
]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_heads_per_gpu(arch: Architecture, tp: int) -> int:
    """KV heads one TP rank holds (replicated once TP exceeds the head count)."""
    return max(1, arch.num_kv_heads // tp)


def per_layer_token_bytes(
    arch: Architecture, dtype_bytes: float, tp: int = 1, *, latent_mla: bool = True
) -> int:
    """KV bytes one token costs in one attention layer on one GPU."""
    if arch.mla is not None:
        if latent_mla:
            return int((arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim) * dtype_bytes)
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
    latent: bool  # MLA latent cache (vLLM / SGLang)

    @property
    def layers(self) -> int:
        return self.full_layers + self.sliding_layers

    @property
    def full_token_bytes(self) -> int:
        """Bytes one token costs on every layer of the stage (no window saving)."""
        return self.layer_token_bytes * self.layers

    def prefill_bytes(self, prompt_tokens: int) -> int:
        """One sequence's DynamicCache right after the prefill: every layer holds the prompt."""
        return self.layers * prompt_tokens * self.layer_token_bytes

    def decode_bytes(self, total_tokens: int) -> int:
        """One sequence's DynamicCache at `total_tokens`: sliding layers keep their window."""
        sliding = 0
        if self.sliding_layers:
            w = self.window or total_tokens
            sliding = self.sliding_layers * min(total_tokens, w)
        return (self.full_layers * total_tokens + sliding) * self.layer_token_bytes


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
        out.append(
            KvLayout(
                layer_token_bytes=ltb,
                full_layers=n - sliding,
                sliding_layers=sliding,
                window=arch.sliding_window if sliding else None,
                latent=arch.mla is not None and latent_mla,
            )
        )
    return tuple(out)


@lru_cache(maxsize=1024)
def kv_layout(
    arch: Architecture, dtype_bytes: float, tp: int, pp: int, latent_mla: bool
) -> KvLayout:
    """The KV layout of the pipeline stage that holds the most cache."""
    parts = pp_layer_partition(arch.num_layers, pp)
    best: tuple[int, int] = (0, 0)
    start = 0
    for n in parts:
        types = arch.layer_types[start : start + n]
        start += n
        sliding = sum(1 for t in types if t == SLIDING_ATTENTION)
        cand = (n - sliding, sliding)
        if cand[0] > best[0] or (cand[0] == best[0] and cand[1] > best[1]):
            best = cand
    return KvLayout(
        layer_token_bytes=per_layer_token_bytes(arch, dtype_bytes, tp, latent_mla=latent_mla),
        full_layers=best[0],
        sliding_layers=best[1],
        window=arch.sliding_window if best[1] else None,
        latent=arch.mla is not None and latent_mla,
    )


@dataclass(frozen=True, slots=True)
class VllmKvGroups:
    """vLLM v1's KV-cache groups for one stage: how its pool is paged and what a request needs."""

    group_size: int  # layers per group (padded)
    full_groups: int
    sliding_groups: int
    page_bytes: int  # one block of one layer
    block_size: int
    window: int | None

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups

    @property
    def slots(self) -> int:
        return self.groups * self.group_size

    @property
    def token_bytes(self) -> int:
        """What one token of pool costs: a layer slot in every group."""
        return self.slots * self.page_bytes // self.block_size

    def num_blocks(self, pool_bytes: int) -> int:
        return max(0, pool_bytes // self.page_bytes // self.group_size)

    def pool_tokens(self, num_blocks: int) -> int:
        """The token count vLLM logs ("GPU KV cache size")."""
        return num_blocks // self.groups * self.block_size

    def blocks_per_request(self, seq_len: int, max_num_batched_tokens: int) -> int:
        """Blocks (of all groups) one request of `seq_len` tokens may occupy."""
        full = _cdiv(seq_len, self.block_size)
        n = self.full_groups * full
        if self.sliding_groups:
            assert self.window is not None
            tokens = min(self.window - 1 + max_num_batched_tokens, seq_len)
            n += self.sliding_groups * (_cdiv(tokens, self.block_size) + 1)
        return n

    def request_bytes(self, seq_len: int, max_num_batched_tokens: int) -> int:
        return (
            self.blocks_per_request(seq_len, max_num_batched_tokens)
            * self.page_bytes
            * self.group_size
        )


def vllm_groups(layout: KvLayout, block_size: int) -> VllmKvGroups:
    """Group a stage's layers the way vLLM v1 does for a uniform page size."""
    full, sliding = layout.full_layers, layout.sliding_layers
    page = block_size * layout.layer_token_bytes
    if full and sliding:
        small, large = min(full, sliding), max(full, sliding)
        size = large if large < small * 1.25 else small
        return VllmKvGroups(
            size, _cdiv(full, size), _cdiv(sliding, size), page, block_size, layout.window
        )
    if sliding:
        return VllmKvGroups(sliding, 0, 1, page, block_size, layout.window)
    return VllmKvGroups(full, 1, 0, page, block_size, None)
