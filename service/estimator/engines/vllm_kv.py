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
in every state group whatever its length. The conv state is kept in the model dtype, the
recurrent state in the model dtype too unless the family says (Kimi Delta Attention: float32;
Qwen3.5: its config's ``mamba_ssm_dtype``, float32 in the published configs).

Layers whose pages differ (Gemma 4's 512-wide full-attention heads beside 256-wide sliding
ones) are unified by growing the smaller page's block size (``unify_kv_cache_spec_page_size``);
layers that read another layer's cache (``kv_sharing_target_layer_name``) hold no page. DeepSeek
sparse attention's indexer keys (132 bytes a token per layer) and the latent are both
full-attention specs of unequal pages: vLLM keeps them in one group of per-layer specs
(``UniformTypeKVCacheSpecs``), a block of every layer's pages. From
0.21 the logged token count is ``max_concurrency × max_model_len`` (``get_kv_cache_capacity``)
instead of the pool's blocks per group × the smallest block size: a hybrid model's sliding
groups need only their window per request, so the figure is the context the pool holds at
peak (vllm-project/vllm#43308 reads the change on Gemma 4 as a tenfold gain).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from service.estimator.kv_cache import KvLayout
from service.estimator.units import bytes_per_element, cdiv

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
    # The sliding groups' block size when their page was unified by growing it (Gemma 4: a
    # sliding layer's token is half a full layer's, so its block holds twice the tokens).
    sliding_block_size: int | None = None
    # 0.21 on, the logged "GPU KV cache size" is max_concurrency × max_model_len
    # (kv_cache_utils._report_kv_cache_config / get_kv_cache_capacity), before it the pool's
    # blocks per group × the smallest block size.
    tokens_from_concurrency: bool = False

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups + self.state_groups

    @property
    def slots(self) -> int:
        return self.groups * self.group_size

    @property
    def sliding_block(self) -> int:
        return self.sliding_block_size or self.block_size

    @property
    def token_bytes(self) -> int:
        """What one token of pool costs: a layer slot in every group that holds tokens."""
        full = self.full_groups * self.group_size * self.page_bytes // self.block_size
        sliding = self.sliding_groups * self.group_size * self.page_bytes // self.sliding_block
        return full + sliding + self.extra_token_bytes

    @property
    def block_bytes(self) -> int:
        """One block of every layer slot of a group, with the drafter's share of it."""
        return self.page_bytes * self.group_size + self.extra_token_bytes * self.block_size

    def num_blocks(self, pool_bytes: int) -> int:
        return max(0, pool_bytes // self.block_bytes)

    def pool_tokens(self, num_blocks: int) -> int:
        """The token count vLLM logs ("GPU KV cache size") before 0.21."""
        smallest = min(self.block_size, self.sliding_block)
        return num_blocks // self.groups * smallest

    def logged_tokens(
        self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int
    ) -> int:
        """The token count this line logs ("GPU KV cache size")."""
        if not self.tokens_from_concurrency:
            return self.pool_tokens(num_blocks)
        per_request = self.blocks_per_request(max_model_len, max_num_batched_tokens)
        return int(num_blocks / per_request * max_model_len) if per_request else 0

    def blocks_per_request(self, seq_len: int, max_num_batched_tokens: int) -> int:
        """Blocks (of all groups) one request of `seq_len` tokens may occupy."""
        n = self.full_groups * cdiv(seq_len, self.block_size) + self.state_groups
        if self.sliding_groups:
            assert self.window is not None
            tokens = min(self.window - 1 + max_num_batched_tokens, seq_len)
            n += self.sliding_groups * (cdiv(tokens, self.sliding_block) + 1)
        return n

    def request_bytes(self, seq_len: int, max_num_batched_tokens: int) -> int:
        return self.blocks_per_request(seq_len, max_num_batched_tokens) * self.block_bytes


# vLLM's attention kernel block alignment for hybrid attention + Mamba models (non-MLA).
_STATE_BLOCK_ALIGNMENT = 16


def vllm_groups(
    layout: KvLayout, block_size: int, *, tokens_from_concurrency: bool = False
) -> VllmKvGroups:
    """Group a stage's layers the way vLLM v1 does for a uniform page size; a drafter's KV
    rides on every block (exact for one group of full-attention layers; with several groups
    it is charged on each)."""
    groups = _groups(layout, block_size)
    if tokens_from_concurrency:
        groups = dataclasses.replace(groups, tokens_from_concurrency=True)
    if layout.extra_token_bytes:
        groups = dataclasses.replace(groups, extra_token_bytes=layout.extra_token_bytes)
    return groups


def _groups(layout: KvLayout, block_size: int) -> VllmKvGroups:
    full, sliding = layout.full_layers + layout.chunked_layers, layout.sliding_layers
    if layout.linear_layers:
        return _state_groups(layout, full, block_size)
    if layout.indexer_layers and not sliding:
        # The latent and the indexer keys are full-attention specs of two page sizes: one
        # group of per-layer specs (UniformTypeKVCacheSpecs), a block of every layer's pages.
        own = layout.full_token_bytes - layout.extra_token_bytes  # the drafter's rides apart
        return VllmKvGroups(1, 1, 0, block_size * own, block_size, None)
    page = block_size * layout.layer_token_bytes
    if full and sliding:
        full_block, sliding_block, page = _unified_blocks(layout, block_size)
        small, large = min(full, sliding), max(full, sliding)
        size = large if large < small * 1.25 else small
        return VllmKvGroups(
            size, cdiv(full, size), cdiv(sliding, size), page, full_block, layout.window,
            sliding_block_size=sliding_block if sliding_block != full_block else None,
        )  # fmt: skip
    if sliding:
        page = block_size * layout.sliding_token_bytes
        return VllmKvGroups(sliding, 0, 1, page, block_size, layout.window)
    return VllmKvGroups(full, 1, 0, page, block_size, None)


def _unified_blocks(layout: KvLayout, block_size: int) -> tuple[int, int, int]:
    """(full block size, sliding block size, page bytes) once vLLM unifies the two kinds'
    pages (``unify_kv_cache_spec_page_size``): the kind with the smaller page grows its block
    size by the ratio of the pages, so that every page is the larger one (Gemma 4: sliding
    layers cache half a full layer's bytes per token and get blocks of twice the tokens, or
    the reverse). A ratio that is not whole keeps the block and pads the page (0.21 on)."""
    full_page = block_size * layout.layer_token_bytes
    sliding_page = block_size * layout.sliding_token_bytes
    page = max(full_page, sliding_page)

    def grown(own: int) -> int:
        return block_size * (page // own) if own and page % own == 0 else block_size

    return grown(full_page), grown(sliding_page), page


def _state_groups(layout: KvLayout, full: int, block_size: int) -> VllmKvGroups:
    """Attention layers and linear-attention layers with one page size (module docstring)."""
    assert layout.linear is not None
    recurrent = layout.linear.recurrent_dtype
    recurrent_bytes = bytes_per_element(recurrent) if recurrent else layout.state_dtype_bytes
    state = layout.state_bytes(layout.linear.conv_kernel - 1, recurrent_bytes)
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
