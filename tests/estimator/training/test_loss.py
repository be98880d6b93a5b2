"""The loss paths (training/loss.py): hand counts of the tensors each implementation allocates,
written from its source (named in each test), and their effect on a whole estimate.

The transformers, transformers-legacy and chunked paths are also checked against the reference
tracer running each implementation (bench/validate/train_tracer.py, ``loss-*`` flags)."""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.estimator.errors import InvalidRequest
from service.estimator.training import FinetuneRequest, LoraSpec, estimate_finetune
from service.estimator.training.activations import activation_coefficients
from service.estimator.training.loss import (
    LOSS_IMPLEMENTATIONS,
    LossShape,
    get_loss_path,
    liger_chunk_size,
)
from tests.estimator.conftest import (
    LLAMA_1B,
    LLAMA_8B,
    catalog_architecture,
    full_bf16_activation_setup,
)

V, H = 128256, 2048  # Llama-3.2-1B's vocabulary and hidden width
BF16 = LossShape(vocab=V, hidden=H, compute_bytes=2, head_trains=True)


def _setup(loss: str, **kw):
    return full_bf16_activation_setup(catalog_architecture(LLAMA_1B), loss=loss, **kw)


def test_transformers_keeps_bf16_logits_and_fp32_log_softmax():
    # transformers >= 4.45: bf16 logits (2V) held by the output, log_softmax's fp32 output
    # (4V); the fp32 upcast (4V) lives until the loss returns; backward: NLL and log-softmax
    # gradients, both fp32 (8V).
    t = get_loss_path("transformers").terms(BF16)
    assert (t.kept, t.fw_transient, t.bw_transient) == (6 * V, 4 * V, 8 * V)
    fp32 = get_loss_path("transformers").terms(dataclasses.replace(BF16, compute_bytes=4))
    assert (fp32.kept, fp32.fw_transient) == (8 * V, 0)  # .float() on fp32 logits is a no-op


def test_legacy_keeps_fp32_logits_and_a_shifted_copy_during_the_loss():
    # transformers 4.44.2 LlamaForCausalLM.forward: `logits = logits.float()` (4V, returned),
    # `logits[..., :-1, :].contiguous()` (4V until forward returns), log_softmax output (4V).
    t = get_loss_path("transformers-legacy").terms(BF16)
    assert (t.kept, t.fw_transient, t.bw_transient) == (8 * V, 4 * V, 8 * V)


def test_chunked_upcasts_one_chunk_at_a_time():
    # torchtune CEWithChunkedOutputLoss, 8 chunks: bf16 chunks (2V) exist during the forward
    # and are deleted before backward; each chunk's fp32 copy (4V/8) is freed after its loss,
    # its log_softmax output (4V/8) kept; backward works one chunk at a time (2 × 4V/8).
    t = get_loss_path("chunked").terms(BF16)
    assert (t.kept, t.fw_transient, t.bw_transient) == (4 * V, 2 * V + V / 2, V)


def test_liger_chunk_rule_matches_its_source_example():
    # liger-kernel's comment in fused_linear_cross_entropy.py: BT = 4096·4, V = 32000,
    # H = 4096 -> inc_factor 8, chunk_size 2048.
    assert liger_chunk_size(4096 * 4, 32000, 4096) == 2048
    # next power of two of ceil(BT / ceil(V / H)): Llama-3.2-1B, BT = 5000 -> ceil(5000/63)
    # = 80 -> 128 rows; never more than BT.
    assert liger_chunk_size(5000, V, H) == 128
    assert liger_chunk_size(3, V, H) == 1


@given(st.integers(1, 1 << 20), st.integers(1000, 300_000), st.integers(256, 16384))
def test_liger_chunk_is_within_its_counted_bound(tokens, vocab, hidden):
    # The estimate counts the chunk of logits at 2·BT·H elements: never below the real chunk.
    rows = liger_chunk_size(tokens, vocab, hidden)
    assert 1 <= rows <= tokens
    assert rows * vocab <= 2 * tokens * hidden + vocab


def test_liger_keeps_the_input_gradient_and_allocates_the_head_gradient_in_forward():
    # grad_input = zeros_like(_input) (BT × H, bf16) kept for backward; loss_1d fp32 per token
    # and one chunk of logits transient; grad_weight = zeros_like(weight) from the forward on.
    path = get_loss_path("liger")
    t = path.terms(BF16)
    assert (t.kept, t.fw_transient, t.bw_transient) == (2 * H, 4 + 4 * H, 0)
    assert not t.reads_head_input
    assert path.fixed(V * H * 2, V * H * 2) == (V * H * 2, V * H * 2)


def test_cut_cross_entropy_keeps_hidden_states_lse_and_valid_positions():
    # cce.py saves e (BT × H, bf16), lse (fp32) and the int64 valid positions; backward
    # allocates de = zeros_like(e) and, when the classifier trains, dc in e's dtype.
    path = get_loss_path("cut-cross-entropy")
    t = path.terms(BF16)
    assert (t.kept, t.fw_transient, t.bw_transient) == (2 * H + 4 + 8, 16, 2 * H)
    assert path.fixed(V * H * 4, V * H * 2) == (0, V * H * 2)


def test_fused_paths_drop_the_lm_head_input_and_the_logits():
    # Full fine-tuning: the transformers path keeps lm_head's input (2H) besides the logits;
    # liger keeps its input gradient instead (the same 2H), CCE the input itself plus 12 bytes.
    head = {p: activation_coefficients(_setup(p)).head_kept for p in LOSS_IMPLEMENTATIONS}
    norm = 6 * H  # the final RMSNorm: its fp32 copy (4H) and bf16 normalized value (2H)
    assert head["transformers"] == norm + 2 * H + 6 * V
    assert head["liger"] == norm + 2 * H
    assert head["cut-cross-entropy"] == norm + 2 * H + 12


def test_unknown_loss_implementation_is_refused_naming_the_field():
    req = FinetuneRequest(architecture=catalog_architecture(LLAMA_1B), loss_implementation="x")
    with pytest.raises(InvalidRequest) as exc:
        estimate_finetune(req)
    assert exc.value.field == "loss_implementation"


def _qlora(loss: str, seq: int, kbit: str = "none") -> FinetuneRequest:
    # an unprepared base (16-bit lm_head) unless told: the paths differ in the logits' dtype
    return FinetuneRequest(
        architecture=catalog_architecture(LLAMA_8B),
        method="qlora",
        lora=LoraSpec(rank=32),
        precision="bf16",
        sequence_length=seq,
        gradient_checkpointing="full",
        loss_implementation=loss,
        kbit_preparation=kbit,
    )


def test_legacy_costs_two_vocab_rows_per_token_more_than_today():
    # At the backward's start legacy holds fp32 logits (4V) where today's path holds bf16
    # logits (2V): 2·V bytes per token more, all else equal.
    seq = 16384
    a = estimate_finetune(_qlora("transformers", seq)).details["allocated_peak_bytes"]
    b = estimate_finetune(_qlora("transformers-legacy", seq)).details["allocated_peak_bytes"]
    assert isinstance(a, int) and isinstance(b, int)
    assert b - a == pytest.approx(2 * 128256 * seq, abs=8)


def test_prepared_base_returns_fp32_logits_so_legacy_adds_only_the_shifted_copy():
    # peft's preparation leaves lm_head in fp32: outside autocast the logits are fp32 on
    # both paths (kept 4V + the fp32 log-softmax 4V), and today's ``.float()`` in the loss is
    # a no-op. Legacy adds its contiguous shifted copy (4V) at the forward's end only, so the
    # backward's start (8V more) is the same peak on both paths.
    seq = 16384
    a = estimate_finetune(_qlora("transformers", seq, "peft")).details["allocated_peak_bytes"]
    b = estimate_finetune(_qlora("transformers-legacy", seq, "peft"))
    assert b.details["allocated_peak_bytes"] == a


def test_every_path_is_named_in_the_assumptions():
    for loss in LOSS_IMPLEMENTATIONS:
        est = estimate_finetune(_qlora(loss, 4096))
        assert any(a.startswith(f"loss_implementation {loss}:") for a in est.assumptions)


@given(st.sampled_from(LOSS_IMPLEMENTATIONS), st.integers(1, 1 << 16))
def test_more_tokens_never_need_less_memory(loss, seq):
    small = estimate_finetune(_qlora(loss, seq)).details["allocated_peak_bytes"]
    large = estimate_finetune(_qlora(loss, seq + 512)).details["allocated_peak_bytes"]
    assert isinstance(small, int) and isinstance(large, int)
    assert large >= small


def test_fused_paths_never_need_more_than_materialized_logits():
    for seq in (512, 8192, 65536):
        peaks = {
            p: estimate_finetune(_qlora(p, seq)).details["allocated_peak_bytes"]
            for p in LOSS_IMPLEMENTATIONS
        }
        assert peaks["liger"] <= peaks["chunked"] <= peaks["transformers"]
        assert peaks["cut-cross-entropy"] <= peaks["transformers"]
        assert peaks["transformers"] <= peaks["transformers-legacy"]
