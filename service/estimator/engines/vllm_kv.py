"""vLLM v1's paged KV cache: how a stage's layers are grouped into pages and what a request needs.

vLLM v1 rounds every request up to whole blocks of ``block_size`` tokens; a sliding-window layer
is budgeted ``min(window - 1 + max_num_batched_tokens, max_model_len)`` tokens plus one block
(``SlidingWindowSpec.max_memory_usage_bytes``). Hybrid models are cut into KV-cache groups of
equal size (the smaller type's layer count, or the larger's when within 1.25x) and every group is
padded to that size: Gemma-3-27B's 10 full + 52 sliding layers become 7 groups of 10 slots. The
pool is shared page by page by one layer of every group, so a token costs
``groups × group_size`` layer slots (``vllm/v1/core/kv_cache_utils.py``).

Chunked-local attention (Llama 4) is pooled as full attention: vLLM turns its hybrid manager
off for it unless ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` is set (``VllmConfig``,
0.10 to 0.34). Linear-attention layers (Qwen3-Next) are ``MambaSpec`` groups: vLLM raises the
attention block size to the smallest multiple of 16 tokens whose page holds one layer's state
(``HybridAttentionMambaModelConfig``), pads the state page to it, and a request takes one block
in every state group whatever its length.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from service.estimator.kv_cache import KvLayout
from service.estimator.units import cdiv

__all__ = ["VllmKvGroups", "vllm_groups"]


@dataclass(frozen=True, slots=True)
class VllmKvGroups:
    """vLLM v1's KV-cache groups for one stage: how its pool is paged and what a request needs."""

    group_size: int  # layers per group (padded)
    full_groups: int
    sliding_groups: int
    page_bytes: int  # one block of one layer
    block_size: int
    window: int | None
    state_groups: int = 0  # linear-attention (MambaSpec) groups: one block per request
    # A drafter's KV bytes per token, allocated with every block (speculative decoding).
    extra_token_bytes: int = 0

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups + self.state_groups

    @property
    def slots(self) -> int:
        return self.groups * self.group_size

    @property
    def token_bytes(self) -> int:
        """What one token of pool costs: a layer slot in every group that holds tokens."""
        token_slots = (self.full_groups + self.sliding_groups) * self.group_size
        return token_slots * self.page_bytes // self.block_size + self.extra_token_bytes

    @property
    def block_bytes(self) -> int:
        """One block of every layer slot of a group, with the drafter's share of it."""
        return self.page_bytes * self.group_size + self.extra_token_bytes * self.block_size

    def num_blocks(self, pool_bytes: int) -> int:
        return max(0, pool_bytes // self.block_bytes)

    def pool_tokens(self, num_blocks: int) -> int:
        """The token count vLLM logs ("GPU KV cache size")."""
        return num_blocks // self.groups * self.block_size

    def blocks_per_request(self, seq_len: int, max_num_batched_tokens: int) -> int:
        """Blocks (of all groups) one request of `seq_len` tokens may occupy."""
        n = self.full_groups * cdiv(seq_len, self.block_size) + self.state_groups
        if self.sliding_groups:
            assert self.window is not None
            tokens = min(self.window - 1 + max_num_batched_tokens, seq_len)
            n += self.sliding_groups * (cdiv(tokens, self.block_size) + 1)
        return n

    def request_bytes(self, seq_len: int, max_num_batched_tokens: int) -> int:
        return self.blocks_per_request(seq_len, max_num_batched_tokens) * self.block_bytes


# vLLM's attention kernel block alignment for hybrid attention + Mamba models (non-MLA).
_STATE_BLOCK_ALIGNMENT = 16


def vllm_groups(layout: KvLayout, block_size: int) -> VllmKvGroups:
    """Group a stage's layers the way vLLM v1 does for a uniform page size; a drafter's KV
    rides on every block (exact for one group of full-attention layers; with several groups
    it is charged on each)."""
    groups = _groups(layout, block_size)
    if layout.extra_token_bytes:
        groups = dataclasses.replace(groups, extra_token_bytes=layout.extra_token_bytes)
    return groups


def _groups(layout: KvLayout, block_size: int) -> VllmKvGroups:
    full, sliding = layout.full_layers + layout.chunked_layers, layout.sliding_layers
    if layout.linear_layers:
        return _state_groups(layout, full, block_size)
    page = block_size * layout.layer_token_bytes
    if full and sliding:
        small, large = min(full, sliding), max(full, sliding)
        size = large if large < small * 1.25 else small
        return VllmKvGroups(
            size, cdiv(full, size), cdiv(sliding, size), page, block_size, layout.window
        )
    if sliding:
        return VllmKvGroups(sliding, 0, 1, page, block_size, layout.window)
    return VllmKvGroups(full, 1, 0, page, block_size, None)


def _state_groups(layout: KvLayout, full: int, block_size: int) -> VllmKvGroups:
    """Attention layers and linear-attention layers with one page size (module docstring)."""
    assert layout.linear is not None
    state = layout.state_bytes(layout.linear.conv_kernel - 1, layout.state_dtype_bytes)
    token = layout.layer_token_bytes
    align = _STATE_BLOCK_ALIGNMENT
    if token:
        block_size = max(block_size, align * cdiv(state, align * token))
    page = max(block_size * token, state)
    linear = layout.linear_layers
    if not full:
        return VllmKvGroups(linear, 0, 0, page, block_size, None, state_groups=1)
    small, large = min(full, linear), max(full, linear)
    size = large if large < small * 1.25 else small
    return VllmKvGroups(
        size, cdiv(full, size), 0, page, block_size, None, state_groups=cdiv(linear, size)
    )
