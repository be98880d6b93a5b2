"""Google's Gemma (``gemma``), Gemma 2 (``gemma2``), Gemma 3 (``gemma3_text``, also in the
``gemma3`` multimodal wrapper) and Gemma 4 (``gemma4_text`` in the ``gemma4`` wrapper).

Gemma 4 keeps Gemma 3's sandwich norms and per-head q/k norms (and adds a weightless v norm)
and changes the rest: its full-attention layers have their own head size (``global_head_dim``,
512) and, with ``attention_k_eq_v`` (26B-A4B, 31B), their own KV heads
(``num_global_key_value_heads``) and no ``v_proj``; its last ``num_kv_shared_layers`` layers
(E2B 20, E4B 18) read the cache of the last earlier layer of their type and have no k/v
projections; E2B/E4B add per-layer embeddings (``hidden_size_per_layer_input`` per layer, a
``vocab_size_per_layer_input`` table) and E2B doubles the shared layers' MLP
(``use_double_wide_mlp``); 26B-A4B runs 128 experts (``top_k_experts`` 8,
``moe_intermediate_size`` wide) beside the dense MLP on every layer, behind a router with
per-channel and per-expert scales; the last layer is always full attention.

transformers: ``models/gemma``, ``models/gemma2``, ``models/gemma3``, ``models/gemma4``
(``Gemma4TextConfig``, ``Gemma4TextAttention``, ``Gemma4TextDecoderLayer``); vLLM:
``vllm/model_executor/models/gemma4.py``.
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import SANDWICH_NORMS, frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import (
    Flag,
    LayerLayout,
    Modeling,
    MoeSchema,
    QkNorm,
)

__all__ = ["ARCHITECTURES", "FAMILIES", "WRAPPERS"]

GEMMA = Family(
    "gemma",
    schema=ConfigSchema(defaults=frozen(tie_word_embeddings=True, attention_bias=False)),
    modeling=Modeling(norm_fp32=True),
)

GEMMA2 = Family(
    "gemma2",
    schema=ConfigSchema(
        defaults=frozen(
            tie_word_embeddings=True,
            attention_bias=False,
            num_key_value_heads=4,
            sliding_window=4096,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
        )
    ),
    modeling=Modeling(
        norm_fp32=True,
        fp16_unsafe=True,
        layer_norms=SANDWICH_NORMS,
        layout=LayerLayout.ALTERNATING,
        softcapping=True,
    ),
)

GEMMA3 = GEMMA2.derive(
    "gemma3",
    model_type="gemma3_text",
    qk_norm=QkNorm(),
    layout=LayerLayout.GEMMA3,
    rope_tables=2,
    context_includes_rope_scaling=True,
    defaults=frozen(
        tie_word_embeddings=True,
        attention_bias=False,
        num_key_value_heads=4,
        sliding_window=4096,
    ),
)

_MOE_BLOCK = Flag.config("enable_moe_block")

GEMMA4 = GEMMA3.derive(
    "gemma4",
    model_type="gemma4_text",
    layout=LayerLayout.ALTERNATING,
    alternating_period=6,
    last_layer_full=True,
    global_attention=True,
    kv_sharing=True,
    per_layer_embeddings=True,
    double_wide_shared_mlp=True,
    softcapping=True,
    conditional_norms=(
        ("pre_feedforward_layernorm_2", _MOE_BLOCK),
        ("post_feedforward_layernorm_1", _MOE_BLOCK),
        ("post_feedforward_layernorm_2", _MOE_BLOCK),
    ),
    moe=MoeSchema(
        width_key="moe_intermediate_size",
        router_name="router.proj",
        router_is_nn_linear=True,
        enabled=_MOE_BLOCK,
        in_mlp=False,
        router_scales=True,
        beside_dense=True,
    ),
    keys=keys(num_experts_per_tok=("top_k_experts",)),
    # Gemma4TextConfig's defaults (transformers 5): the E2B-sized text model.
    defaults=frozen(
        tie_word_embeddings=True,
        attention_bias=False,
        num_key_value_heads=4,
        head_dim=256,
        sliding_window=512,
        global_head_dim=512,
        attention_k_eq_v=False,
        num_kv_shared_layers=0,
        hidden_size_per_layer_input=256,
        vocab_size_per_layer_input=262144,
        use_double_wide_mlp=False,
        enable_moe_block=False,
    ),
)

FAMILIES = (GEMMA, GEMMA2, GEMMA3, GEMMA4)

WRAPPERS = {"gemma3": "gemma3_text", "gemma4": "gemma4_text"}

ARCHITECTURES = {
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Gemma4ForCausalLM": "gemma4_text",
    "Gemma4ForConditionalGeneration": "gemma4",
}
