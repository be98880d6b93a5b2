"""Alibaba's Qwen: the original Qwen (``qwen``, remote code), Qwen2 / 2.5 (``qwen2``),
Qwen1.5-MoE / Qwen2-MoE (``qwen2_moe``), Qwen3 (``qwen3``), Qwen3-MoE (``qwen3_moe``) and
Qwen3-Next (``qwen3_next``: Gated DeltaNet linear attention with full attention every
``full_attention_interval``-th layer).

transformers: ``models/qwen2``, ``models/qwen2_moe``, ``models/qwen3``, ``models/qwen3_moe``,
``models/qwen3_next``, ``models/qwen3_5``, ``models/qwen3_5_moe``; the original Qwen is the
remote code ``QWenLMHeadModel``. Qwen3.5 / Qwen3.6 (``qwen3_5_text``, ``qwen3_5_moe_text`` in
the ``qwen3_5`` / ``qwen3_5_moe`` wrappers) keep Qwen3-Next's layout (gated q, per-head q/k
norms, Gated DeltaNet on three layers of four) with the DeltaNet's inputs projected one by
one, and carry ``mtp_num_hidden_layers`` multi-token-prediction layers transformers skips.
Qwen2-VL / Qwen2.5-VL (``qwen2_vl``, ``qwen2_5_vl``; ``models/qwen2_vl``, ``models/qwen2_5_vl``)
wrap a Qwen2 decoder with a vision tower.
"""

from __future__ import annotations

from service.estimator.model.adapter_targets import AdapterTargets, ModuleNames
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import QWEN_MOE_TARGETS, frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType
from service.estimator.model.modeling_traits import (
    OFF,
    ON,
    Attention,
    Flag,
    LayerLayout,
    Mlp,
    Modeling,
    MoePlacement,
    MoeSchema,
    QkNorm,
    SharedExperts,
)

__all__ = ["ARCHITECTURES", "FAMILIES", "FLAT_WRAPPERS", "WRAPPERS"]

QWEN2 = Family(
    "qwen2",
    schema=ConfigSchema(
        sliding_window_switch="use_sliding_window",
        defaults=frozen(
            tie_word_embeddings=False,
            use_sliding_window=False,
            sliding_window=4096,
            max_window_layers=28,
        ),
    ),
    modeling=Modeling(qkv_bias=ON, o_bias=OFF, layout=LayerLayout.QWEN2),
    llamacpp=LlamaCppNames(LlamaCppType.TYPE_70B),
)

QWEN2_MOE = Family(
    "qwen2_moe",
    schema=ConfigSchema(
        sliding_window_switch="use_sliding_window",
        keys=keys(num_experts=("num_experts", "num_local_experts")),
        defaults=frozen(
            tie_word_embeddings=False,
            qkv_bias=True,
            use_sliding_window=False,
            sliding_window=4096,
            max_window_layers=28,
            decoder_sparse_step=1,
            num_experts=60,
            num_experts_per_tok=4,
            moe_intermediate_size=1408,
            shared_expert_intermediate_size=5632,
            mlp_only_layers=[],
        ),
    ),
    modeling=Modeling(
        qkv_bias=Flag.config("qkv_bias"),
        o_bias=OFF,
        moe=MoeSchema(
            width_key="moe_intermediate_size",
            placement=MoePlacement.SPARSE_STEP,
            shared=SharedExperts.GATED_ONE,
            shared_path="shared_expert",
            zero_experts_means_dense=True,
        ),
        layout=LayerLayout.QWEN2_MOE,
    ),
    targets=AdapterTargets(expert_aliases=QWEN_MOE_TARGETS),
)

QWEN3 = Family(
    "qwen3",
    schema=ConfigSchema(
        sliding_window_switch="use_sliding_window",
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            use_sliding_window=False,
            sliding_window=4096,
            max_window_layers=28,
        ),
    ),
    modeling=Modeling(qk_norm=QkNorm(), layout=LayerLayout.QWEN2),
)

QWEN3_MOE = QWEN3.derive(
    "qwen3_moe",
    moe=MoeSchema(
        width_key="moe_intermediate_size",
        placement=MoePlacement.SPARSE_STEP,
        zero_experts_means_dense=True,
    ),
    layout=LayerLayout.ALL_SLIDING,
    keys=keys(num_experts=("num_experts", "num_local_experts")),
    defaults=frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        use_sliding_window=False,
        sliding_window=4096,
        num_key_value_heads=4,
        decoder_sparse_step=1,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        mlp_only_layers=[],
    ),
    expert_aliases=QWEN_MOE_TARGETS,
)

QWEN3_NEXT = Family(
    "qwen3_next",
    schema=ConfigSchema(
        keys=keys(num_experts=("num_experts",)),
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            num_key_value_heads=2,
            head_dim=256,
            decoder_sparse_step=1,
            num_experts=512,
            num_experts_per_tok=10,
            moe_intermediate_size=512,
            shared_expert_intermediate_size=512,
            mlp_only_layers=[],
            full_attention_interval=4,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            linear_num_key_heads=16,
            linear_num_value_heads=32,
        ),
    ),
    modeling=Modeling(
        qk_norm=QkNorm(),
        attn_output_gate=True,
        moe=MoeSchema(
            width_key="moe_intermediate_size",
            placement=MoePlacement.SPARSE_STEP,
            shared=SharedExperts.GATED_ONE,
            shared_path="shared_expert",
            zero_experts_means_dense=True,
        ),
        layout=LayerLayout.HYBRID_LINEAR,
    ),
)

# The original Qwen (Qwen-7B, Qwen-14B, Qwen-72B): remote code "QWenLMHeadModel".
QWEN = Family(
    "qwen",
    schema=ConfigSchema(
        head_dim_key="kv_channels",
        keys=keys(max_position_embeddings=("max_position_embeddings", "seq_length")),
        defaults=frozen(tie_word_embeddings=False, no_bias=True, softmax_in_fp32=False),
    ),
    modeling=Modeling(
        attention=Attention.QWEN_C_ATTN,
        qkv_bias=ON,
        o_bias=Flag.config("no_bias", negate=True),
        mlp=Mlp.QWEN_W,
        mlp_bias=Flag.config("no_bias", negate=True),
        layer_norms=("ln_1", "ln_2"),
        softmax_fp32=Flag.config("softmax_in_fp32"),
        eager_mask_kept=True,
    ),
    targets=AdapterTargets(
        names=ModuleNames(
            prefix="transformer", embed="wte", final_norm="ln_f", layers="h", attn="attn"
        )
    ),
)

# Qwen3.5 / 3.6: Qwen3-Next's hybrid layout with the Gated DeltaNet's inputs projected
# separately; the dense models have no experts, the MoE ones experts on every layer. Both come
# as a wrapper with a vision tower (qwen3_5 / qwen3_5_moe).
_QWEN3_5_DEFAULTS = {
    "tie_word_embeddings": False,
    "attention_bias": False,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
}
QWEN3_5 = QWEN3_NEXT.derive(
    "qwen3_5",
    model_type="qwen3_5_text",
    moe=None,
    linear_attention_split=True,
    ssm_dtype_from_config=True,
    mtp_key="mtp_num_hidden_layers",
    keys=keys(),
    defaults=frozen(**_QWEN3_5_DEFAULTS),
)
QWEN3_5_MOE = QWEN3_5.derive(
    "qwen3_5_moe",
    model_type="qwen3_5_moe_text",
    moe=MoeSchema(
        width_key="moe_intermediate_size",
        shared=SharedExperts.GATED_ONE,
        shared_path="shared_expert",
    ),
    # Qwen3_5MoeTextConfig has no dense MLP width: every layer holds experts, so the width
    # the formulas read as the dense one is an expert's.
    keys=keys(
        num_experts=("num_experts",),
        intermediate_size=("intermediate_size", "moe_intermediate_size"),
    ),
    defaults=frozen(
        **{**_QWEN3_5_DEFAULTS, "num_key_value_heads": 2},
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
    ),
)

# Qwen2-VL / Qwen2.5-VL: a Qwen2 decoder (Qwen2VLTextConfig / Qwen2_5_VLTextConfig, whose
# defaults are Qwen2-72B's) in a wrapper with a vision tower (.qwen2_vl_vision). The Hub's
# configs keep the decoder's keys at the top level (FLAT_WRAPPERS); transformers 5 saves them
# in text_config.
_QWEN2_VL_DEFAULTS = frozen(
    tie_word_embeddings=False,
    use_sliding_window=False,
    sliding_window=4096,
    max_window_layers=80,
)
QWEN2_VL = QWEN2.derive("qwen2_vl", model_type="qwen2_vl_text", defaults=_QWEN2_VL_DEFAULTS)
QWEN2_5_VL = QWEN2.derive("qwen2_5_vl", model_type="qwen2_5_vl_text", defaults=_QWEN2_VL_DEFAULTS)

FAMILIES = (
    QWEN2,
    QWEN2_MOE,
    QWEN3,
    QWEN3_MOE,
    QWEN3_NEXT,
    QWEN,
    QWEN3_5,
    QWEN3_5_MOE,
    QWEN2_VL,
    QWEN2_5_VL,
)

WRAPPERS = {
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen2_vl": "qwen2_vl_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
}

# Wrappers whose config may carry the language model's keys at its top level instead of in
# text_config (transformers' Qwen2VLConfig / Qwen2_5_VLConfig read them from there).
FLAT_WRAPPERS = frozenset({"qwen2_vl", "qwen2_5_vl"})

ARCHITECTURES = {
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3NextForCausalLM": "qwen3_next",
    "QWenLMHeadModel": "qwen",
    "Qwen3_5ForCausalLM": "qwen3_5_text",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
    "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe",
    "Qwen2VLForConditionalGeneration": "qwen2_vl",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
}
