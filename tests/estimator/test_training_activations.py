"""Per-layer activation bytes, against the reference tracer's published per-layer figure and
hand-written counts of the tensors HF Llama keeps for backward."""

from service.estimator.architecture import Architecture
from service.estimator.training_activations import ActivationSetup, activation_coefficients

LLAMA_1B = {
    "model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048,
    "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 64, "vocab_size": 128256, "tie_word_embeddings": True,
}


def _setup(**kw):
    arch = Architecture.from_hf_config(LLAMA_1B)
    base = dict(arch=arch, compute_bytes=2, residual_bytes=2, autocast=False,
                base_trainable=True, trainable_from=0, lora_names=frozenset(), lora_rank=16,
                attention="sdpa", checkpointing="none")
    base.update(kw)
    return ActivationSetup(**base)


def test_full_bf16_layer_matches_hand_count():
    # Two RMSNorms (fp32 copy 4h + bf16 normalized 2h + output 2h), q/k/v after RoPE and the
    # SDPA output (2h + 2·512·2 + 2h), fp32 log-sum-exp (4 bytes × 32 heads), four SwiGLU
    # tensors (4 × 2I): 20h + 4·kv·hd + 4·heads + 8I bytes per token.
    h, kvd, heads, inter = 2048, 512, 32, 8192
    expected = 20 * h + 4 * kvd + 4 * heads + 8 * inter
    coef = activation_coefficients(_setup())
    assert coef.layer_lin[0] == expected


def test_loss_path():
    coef = activation_coefficients(_setup())
    v = 128256
    assert coef.head_kept - 8 * 2048 == 6 * v  # bf16 logits + fp32 log-softmax
    assert coef.bw_transient == 8 * v  # two fp32 b·s·V tensors at the start of backward


def test_lora_keeps_more_than_full():
    # The tracer README: 79 vs 55 s·h bytes per layer for LoRA on all seven projections.
    names = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                       "down_proj"})
    full = activation_coefficients(_setup()).layer_lin[0]
    lora = activation_coefficients(
        _setup(base_trainable=False, trainable_from=16, lora_names=names)).layer_lin[5]
    assert round((lora - full) / 2048) == 24


def test_checkpointing_keeps_layer_inputs_only():
    coef = activation_coefficients(_setup(checkpointing="full"))
    assert all(x == 2 * 2048 for x in coef.layer_lin)
    assert coef.recompute_lin > activation_coefficients(_setup()).layer_lin[0]


def test_eager_adds_score_matrices():
    coef = activation_coefficients(_setup(attention="eager"))
    assert coef.layer_quad[0] == 32 * (4 + 2)  # fp32 softmax + bf16 probabilities per head
