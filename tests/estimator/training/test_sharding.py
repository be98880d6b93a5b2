"""FSDP2 (fully_shard) per-GPU state: hand counts from torch's _fully_shard source."""

import pytest

from service.estimator.errors import InvalidRequest
from service.estimator.training import FinetuneRequest, estimate_finetune
from service.estimator.training.fit import prepare
from tests.estimator.conftest import LLAMA_1B, catalog_architecture


def _req(**kw):
    base = dict(
        architecture=catalog_architecture(LLAMA_1B),
        method="full",
        precision="bf16",
        optimizer_foreach=False,
        sequence_length=4096,
        gpu_count=4,
        zero_stage=3,
        sharding_implementation="fsdp2",
    )
    base.update(kw)
    return FinetuneRequest(**base)


def test_fsdp2_gathers_the_root_and_one_decoder_layer():
    # Llama-3.2-1B, bf16: the root's own parameters are the tied embedding (128256 × 2048)
    # and the final norm (2048); one decoder layer is q, o (2048²), k, v (512 × 2048), gate,
    # up, down (2048 × 8192) and two norms (2048).
    h, kv, inter, vocab = 2048, 512, 8192, 128256
    root = vocab * h + h
    layer = 2 * h * h + 2 * kv * h + 3 * h * inter + 2 * h
    assert prepare(_req()).stages[0].buffers == 2 * (root + layer)


def test_fsdp2_shards_weights_and_states_by_the_world_size():
    one = prepare(_req(gpu_count=2)).stages[0]
    two = prepare(_req(gpu_count=4)).stages[0]
    assert one.weights == pytest.approx(2 * two.weights, abs=8)
    assert one.states == pytest.approx(2 * two.states, abs=16)


def test_fsdp2_needs_zero_stage_3():
    with pytest.raises(InvalidRequest) as exc:
        estimate_finetune(_req(zero_stage=2))
    assert exc.value.field == "sharding_implementation"


def test_fsdp2_holds_more_than_deepspeed_per_module_gathers():
    # The root stays gathered through forward and backward under fully_shard.
    a = estimate_finetune(_req()).details["allocated_peak_bytes"]
    b = estimate_finetune(_req(sharding_implementation="deepspeed")).details["allocated_peak_bytes"]
    assert isinstance(a, int) and isinstance(b, int) and a > b


def test_fsdp2_late_backward_holdings_from_fully_shard():
    # Llama-3.2-1B (16 layers, tied embedding), bf16, 4 ranks. In layer 1's backward
    # fully_shard holds gathered: the root (tied embedding + final norm), layer 1 and layer
    # 0's prefetched all-gather output; gradients: the 14 later layers' shards, layer 1's
    # unsharded gradients, layer 2's reduce-scatter input, and the root's unsharded gradient
    # (the tied weight lm_head writes into, and the final norm's).
    h, kv, inter, vocab, n, world = 2048, 512, 8192, 128256, 16, 4
    root = vocab * h + h
    layer = 2 * h * h + 2 * kv * h + 3 * h * inter + 2 * h
    late = prepare(_req(gradient_checkpointing="full")).stages[0].late_backward
    assert late is not None
    assert late.gathered == 2 * (root + 2 * layer)
    assert late.gradients == -(-(n - 2) * layer * 2 // world) + 2 * (2 * layer) + 2 * root


def test_fsdp2_late_backward_untied_root_gradient_is_lm_head_and_norm():
    # Qwen2.5-7B (28 layers, untied, q/k/v biases), bf16, 2 ranks: the embedding's gradient
    # appears only after layer 0's backward, so the root's unsharded gradient is lm_head's
    # (152064 × 3584) and the final norm's.
    h, kv, inter, vocab, n, world = 3584, 512, 18944, 152064, 28, 2
    layer = 2 * h * h + h + 2 * (kv * h + kv) + 3 * h * inter + 2 * h
    root = 2 * vocab * h + h  # embedding, lm_head, final norm: all gathered
    req = _req(
        architecture=catalog_architecture("Qwen/Qwen2.5-7B-Instruct"),
        gradient_checkpointing="full",
        gpu_count=world,
    )
    late = prepare(req).stages[0].late_backward
    assert late is not None
    assert late.gathered == 2 * (root + 2 * layer)
    assert late.gradients == -(-(n - 2) * layer * 2 // world) + 2 * (2 * layer) + 2 * (
        vocab * h + h
    )


def test_fsdp2_late_backward_only_for_fully_shard():
    assert prepare(_req(sharding_implementation="deepspeed")).stages[0].late_backward is None
