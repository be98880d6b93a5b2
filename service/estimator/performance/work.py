"""What one engine step costs one GPU: the bytes it reads and the FLOPs it runs, per stage.

Built once per serving setup from the memory model (:mod:`service.estimator.inference.setup`):
the weights each GPU holds, its KV layout, the architecture's linear modules split by their
tensor-parallel roles. A step runs ``b`` decode tokens (one per running sequence, each
attending to a context of ``L`` tokens) and ``p`` prefill tokens (chunks of prompts):

- bytes read: the weights the GPU holds, less what a forward does not stream (the input
  embedding table is gathered row by row, a vision tower is not run for text, routed experts
  no token of the step picked stay unread), plus the KV cache of every decode sequence;
- FLOPs: 2 per weight a token passes through (the linear layers it is routed to, split by TP),
  the attention products (2 matmuls × 2 FLOPs per query-key pair per head dimension), and the
  output matrix only for the positions that sample (every decode token, the last position of a
  prompt: vLLM's ``compute_logits`` runs on the sampled rows only);
- all-reduce bytes: two per layer (after attention and after the MLP) of the step's hidden
  states, Megatron row-parallel layers as vLLM's ``RowParallelLinear`` reduces them.

Formulas in words: docs/performance.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.estimator.engines.serving import ServingSetup
from service.estimator.model import Architecture, Shard
from service.estimator.parallel import pp_layer_partition
from service.estimator.units import bytes_per_element
from service.estimator.weights import shard_shape, weight_layout

__all__ = ["StageWork", "expected_experts_hit", "step_work"]


def expected_experts_hit(num_experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts ``tokens`` tokens pick in one layer with top-k routing, each token a
    uniform draw of ``top_k`` of ``num_experts``: E × (1 − (1 − k/E)^tokens)."""
    if tokens <= 0 or num_experts <= 0:
        return 0.0
    miss = max(0.0, 1.0 - top_k / num_experts)
    return float(num_experts * (1.0 - math.pow(miss, tokens)))


@dataclass(frozen=True, slots=True)
class StageWork:
    """One GPU of one pipeline stage, per step quantities (bytes, FLOPs)."""

    layers: int  # decoder layers on the stage
    dense_read_bytes: float  # weights streamed whatever tokens the step holds
    expert_bytes_per_expert_layer: float  # one routed expert of one layer, on this GPU
    moe_layers: int  # layers of the stage that hold routed experts
    num_experts: int
    experts_per_token: int
    flops_per_token: float  # linear layers a token passes through (output matrix excluded)
    head_flops_per_token: float  # the output matrix, for a sampled position
    attention_flops_per_pair: float  # per (query token, context token) pair, all layers
    kv_token_bytes: float  # KV bytes per context token, full-attention layers of the stage
    kv_window_bytes: float  # KV bytes per context token, windowed layers of the stage
    window: int | None  # the smallest window of the windowed layers
    state_bytes: float  # linear-attention state read and written per sequence per step
    allreduce_bytes_per_token: float  # the step's all-reduce payload per token (TP > 1)

    def read_bytes(self, decode: float, prefill: float, context: float) -> float:
        """Bytes streamed for ``decode`` sequences at ``context`` tokens and ``prefill``
        prompt tokens."""
        tokens = decode + prefill
        hit = expected_experts_hit(self.num_experts, self.experts_per_token, tokens)
        experts = hit * self.moe_layers * self.expert_bytes_per_expert_layer
        span = min(context, self.window) if self.window else context
        kv = decode * (self.kv_token_bytes * context + self.kv_window_bytes * span)
        return self.dense_read_bytes + experts + kv + 2 * decode * self.state_bytes

    def flops(
        self, decode: float, prefill: float, context: float, prompt_context: float, prompts: float
    ) -> float:
        """FLOPs of ``decode`` tokens at ``context`` and ``prefill`` tokens whose mean
        attended context is ``prompt_context``, of ``prompts`` prompts ending in the step."""
        linear = self.flops_per_token * (decode + prefill)
        head = self.head_flops_per_token * (decode + prompts)
        attention = self.attention_flops_per_pair * (decode * context + prefill * prompt_context)
        return linear + head + attention


def _stage_flops(arch: Architecture, tp: int, layers: range) -> tuple[float, float]:
    """(2 × weights one token passes through on one GPU of the stage, the output matrix's)."""
    body = 0.0
    head = 0.0
    for m in arch.linear_modules:
        fan_in, fan_out = shard_shape(m, arch, tp)
        if m.shard is Shard.VOCAB:
            # The output matrix splits the vocabulary over the TP ranks.
            head = 2.0 * fan_in * fan_out / tp
            continue
        if m.component == "vision":
            continue
        on_stage = sum(1 for i in m.layers if i in layers)
        body += 2.0 * fan_in * fan_out * m.active_per_layer * on_stage
    return body, head


def step_work(setup: ServingSetup) -> tuple[StageWork, ...]:
    """Per pipeline stage, first to last: what a step costs one of its GPUs."""
    arch, tp, pp = setup.arch, setup.tp, setup.pp
    one = weight_layout(arch, setup.weight_format, 1, 1)
    components = one.by_component
    act = bytes_per_element(setup.act_dtype)
    partition = pp_layer_partition(arch.num_layers, pp)
    moe = arch.moe
    moe_total = len(moe.layers) if moe is not None else 0
    experts_total = components.get("experts", 0)
    out: list[StageWork] = []
    start = 0
    for index, (stage, n) in enumerate(zip(setup.stages, partition, strict=True)):
        layers = range(start, start + n)
        start += n
        unread = 0.0
        if index == 0:
            if not arch.tie_word_embeddings or pp > 1:
                unread += components.get("embeddings", 0) / tp
            unread += components.get("vision", 0) / tp
        moe_layers = sum(1 for i in layers if moe is not None and i in arch.moe_layer_set)
        per_expert_layer = 0.0
        if moe is not None and moe_total and moe.num_experts:
            per_expert_layer = experts_total / moe_total / moe.num_experts / tp
        experts_here = per_expert_layer * moe.num_experts * moe_layers if moe is not None else 0
        dense = max(0.0, stage.weights - unread - experts_here)
        body, head = _stage_flops(arch, tp, layers)
        if index != pp - 1:
            head = 0.0
        kv = stage.kv
        windowed = kv.sliding_layers + kv.chunked_layers
        windows = [w for w in (kv.window, kv.chunk) if w]
        heads = max(1, arch.num_attention_heads // tp)
        attn_dim = heads * (arch.head_dim + arch.v_head_dim)
        out.append(
            StageWork(
                layers=n,
                dense_read_bytes=dense,
                expert_bytes_per_expert_layer=per_expert_layer,
                moe_layers=moe_layers,
                num_experts=moe.num_experts if moe is not None else 0,
                experts_per_token=moe.experts_per_token if moe is not None else 0,
                flops_per_token=body,
                head_flops_per_token=head,
                attention_flops_per_pair=2.0 * attn_dim * kv.layers,
                kv_token_bytes=float(kv.layer_token_bytes * kv.full_layers),
                kv_window_bytes=float(kv.layer_token_bytes * windowed),
                window=min(windows) if windows else None,
                state_bytes=float(kv.sequence_state_bytes),
                allreduce_bytes_per_token=2.0 * n * arch.hidden_size * act if tp > 1 else 0.0,
            )
        )
    return tuple(out)
