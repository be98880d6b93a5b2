"""What a step reads and computes, against Llama-3.1-8B's shape worked by hand."""

from __future__ import annotations

import math

import pytest

from service.estimator.inference.request import resolved, setup_for
from service.estimator.performance import expected_experts_hit
from service.estimator.performance.work import step_work
from tests.estimator.performance.conftest import request

# Llama-3.1-8B (config.json): hidden 4096, 32 layers, MLP 14336, 32 heads and 8 KV heads of
# 128, vocabulary 128256, untied embeddings, bf16.
H, L, FF, V, HEADS, KV, D = 4096, 32, 14336, 128256, 32, 8, 128
LINEAR_PER_LAYER = H * H * 2 + H * KV * D * 2 + 3 * H * FF  # q, o; k, v; gate, up, down


def test_dense_step_terms_llama_8b() -> None:
    setup = setup_for(resolved(request()))
    (work,) = step_work(setup)
    # The input embedding table is gathered row by row, never streamed whole.
    assert setup.stages[0].weights - work.dense_read_bytes == V * H * 2
    assert work.flops_per_token == 2 * LINEAR_PER_LAYER * L
    assert work.head_flops_per_token == 2 * H * V
    # QK^T and PV: 2 FLOPs per multiply-add, query and value heads of 128, every layer.
    assert work.attention_flops_per_pair == 2 * HEADS * (D + D) * L
    assert work.kv_token_bytes == L * 2 * KV * D * 2
    assert work.allreduce_bytes_per_token == 0  # TP 1


def test_tensor_parallel_splits_and_reduces() -> None:
    setup = setup_for(resolved(request(tensor_parallel_size=2)))
    (work,) = step_work(setup)
    assert work.flops_per_token == 2 * LINEAR_PER_LAYER * L / 2
    assert work.head_flops_per_token == 2 * H * V / 2
    assert work.kv_token_bytes == L * 2 * (KV // 2) * D * 2
    # Two all-reduces per layer of one token's bf16 hidden state.
    assert work.allreduce_bytes_per_token == 2 * L * H * 2


def test_read_bytes_grow_with_the_context_of_each_sequence() -> None:
    (work,) = step_work(setup_for(resolved(request())))
    base = work.read_bytes(decode=1, prefill=0, context=0)
    assert work.read_bytes(decode=4, prefill=0, context=1000) - base == 4 * 1000 * 131072


@pytest.mark.parametrize(
    ("experts", "top_k", "tokens", "expected"),
    [
        (8, 2, 1, 2.0),  # one token: exactly its k experts
        (8, 2, 2, 8 * (1 - 0.75**2)),
        (128, 8, 0, 0.0),
        (128, 8, 10_000, 128.0),  # a large batch touches every expert
    ],
)
def test_expected_experts_hit(experts: int, top_k: int, tokens: int, expected: float) -> None:
    assert math.isclose(expected_experts_hit(experts, top_k, tokens), expected, rel_tol=1e-9)


def test_moe_step_reads_only_the_experts_its_tokens_pick() -> None:
    setup = setup_for(resolved(request("Qwen/Qwen3-30B-A3B", "h200-sxm-141gb")))
    (work,) = step_work(setup)
    one = work.read_bytes(decode=1, prefill=0, context=0)
    many = work.read_bytes(decode=4096, prefill=0, context=0)
    per_expert = work.expert_bytes_per_expert_layer * work.moe_layers
    # One token reads its 8 of 128 experts per layer; a big batch reads all 128.
    assert one - work.dense_read_bytes == pytest.approx(8 * per_expert)
    assert many - work.dense_read_bytes == pytest.approx(128 * per_expert, rel=1e-6)
