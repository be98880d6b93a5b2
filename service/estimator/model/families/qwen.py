"""Alibaba's Qwen: the original Qwen (``qwen``, remote code), Qwen2 / 2.5 (``qwen2``),
Qwen1.5-MoE / Qwen2-MoE (``qwen2_moe``), Qwen3 (``qwen3``), Qwen3-MoE (``qwen3_moe``) and
Qwen3-Next (``qwen3_next``: Gated DeltaNet linear attention with full attention every
``full_attention_interval``-th layer).

transformers: ``models/qwen2``, ``models/qwen2_moe``, ``models/qwen3``, ``models/qwen3_moe``,
``models/qwen3_next``; the original Qwen is the remote code ``QWenLMHeadModel``.
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

__all__ = ["ARCHITECTURES", "FAMILIES"]

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

FAMILIES = (QWEN2, QWEN2_MOE, QWEN3, QWEN3_MOE, QWEN3_NEXT, QWEN)

ARCHITECTURES = {
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen3NextForCausalLM": "qwen3_next",
    "QWenLMHeadModel": "qwen",
}
