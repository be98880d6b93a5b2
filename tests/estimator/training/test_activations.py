"""Per-layer activation bytes, against the reference tracer's published per-layer figure and
hand-written counts of the tensors HF Llama keeps for backward."""

from service.estimator.model import read_config
from service.estimator.training.activations import activation_coefficients
from tests.estimator.conftest import LLAMA_1B, catalog_architecture, full_bf16_activation_setup


def _setup(**kw):
    arch = kw.pop("arch", None) or catalog_architecture(LLAMA_1B)
    return full_bf16_activation_setup(arch, **kw)


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
    names = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    full = activation_coefficients(_setup()).layer_lin[0]
    lora = activation_coefficients(
        _setup(base_trainable=False, trainable_from=16, lora_names=names)
    ).layer_lin[5]
    assert round((lora - full) / 2048) == 24


def test_checkpointing_keeps_layer_inputs_only():
    coef = activation_coefficients(_setup(checkpointing="full"))
    assert all(x == 2 * 2048 for x in coef.layer_lin)
    assert coef.recompute_lin > activation_coefficients(_setup()).layer_lin[0]


def test_eager_adds_score_matrices():
    coef = activation_coefficients(_setup(attention="eager"))
    assert coef.layer_quad[0] == 32 * (4 + 2)  # fp32 softmax + bf16 probabilities per head


def test_old_bitsandbytes_keeps_frozen_linear_inputs():
    # bitsandbytes < 0.43.2 kept `ctx.tensors = (A, B)` in MatMul4Bit: with every base linear
    # frozen, each layer still keeps the q/k/v input (h, shared), the gate/up input (h,
    # shared) and the down_proj input (the SwiGLU product, I), in bf16; o_proj reads the SDPA
    # output already kept. Hand count: 2·(2h + I) bytes per token more than without.
    names = frozenset({"q_proj", "v_proj"})
    common = dict(base_trainable=False, trainable_from=16, lora_names=names)
    new = activation_coefficients(_setup(**common)).layer_lin[3]
    old = activation_coefficients(_setup(frozen_inputs_kept=True, **common)).layer_lin[3]
    assert old - new == 2 * (2 * 2048 + 8192)


GEMMA2_2B = {
    "model_type": "gemma2",
    "num_hidden_layers": 2,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "vocab_size": 256000,
    "tie_word_embeddings": True,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
}


def test_gemma2_softcapping_keeps_tanh_outputs():
    arch = read_config(GEMMA2_2B)
    coef = activation_coefficients(_setup(arch=arch, attention="eager"))
    # scores: tanh output (bf16) + fp32 softmax + bf16 probabilities, per head
    assert coef.layer_quad[0] == 8 * (2 + 4 + 2)
    # loss path: bf16 logits + tanh output of the final softcap (bf16) + fp32 log-softmax;
    # Gemma's final norm keeps its input in fp32 twice (4h + 4h) plus lm_head's input (2h)
    v, h = 256000, 2304
    assert coef.head_kept == (2 + 2 + 4) * v + 10 * h


QWEN_V1_7B = {
    "model_type": "qwen",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_attention_heads": 32,
    "vocab_size": 151936,
    "kv_channels": 128,
}


def test_qwen_v1_eager_softmax_in_compute_dtype():
    # Qwen (v1) remote code: softmax in bf16 (softmax_in_fp32 off), its output read by the
    # value matmul (2 bytes per score and head), plus the boolean causal mask (1 byte).
    arch = read_config(QWEN_V1_7B)
    coef = activation_coefficients(_setup(arch=arch, attention="eager"))
    assert coef.layer_quad[0] == 32 * 2 + 1
