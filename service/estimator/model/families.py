"""The family table: how each transformers model family builds its modules, as data.

One :class:`Family` per ``model_type`` says, field by field, what the family's modeling code
does: which attention and MLP layout it instantiates, where its biases come from, its norms
and their dtype, how its layers alternate between full and sliding-window attention, its
mixture of experts, the config keys it reads under other names (transformers'
``attribute_map``) and the defaults its ``*Config`` class applies to keys a config leaves out.
Formulas read these traits from the :class:`~service.estimator.model.Architecture`; nothing
asks for a family by name. A family that differs from its parent says only how
(``dataclasses.replace``), as transformers' ``modular_*.py`` files do.

The value types the entries are made of are in :mod:`.family_traits`. Adding a family is one
entry here (docs/CONTRIBUTING.md); its counting rules are written out in docs/architectures.md
and checked against transformers on the meta device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from service.estimator.model.family_traits import (
    OFF,
    ON,
    Attention,
    Family,
    Flag,
    KvHeads,
    LayerLayout,
    LlamaCppType,
    Mlp,
    ModuleNames,
    MoePlacement,
    MoeSchema,
    NormRule,
    QkNorm,
    SharedExperts,
)

__all__ = [
    "ARCHITECTURE_CLASSES",
    "FAMILIES",
    "SUPPORTED_MODEL_TYPES",
    "WRAPPER_TEXT_TYPES",
    "family_for",
]


def _frozen(**kw: Any) -> Mapping[str, Any]:
    return MappingProxyType(kw)


def _keys(**kw: tuple[str, ...]) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType(kw)


_QWEN_MOE_TARGETS = _frozen(
    gate_proj="experts.gate_up_proj", up_proj="experts.gate_up_proj", down_proj="experts.down_proj"
)
_SANDWICH_NORMS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)

LLAMA = Family(
    "llama",
    mlp_bias=Flag.config("mlp_bias"),
    llamacpp_type=LlamaCppType.TYPE_70B_WITH_GQA,
    defaults=_frozen(tie_word_embeddings=False, attention_bias=False, mlp_bias=False),
)
MISTRAL = Family(
    "mistral",
    llamacpp_type=LlamaCppType.TYPE_70B_WITH_GQA,
    qkv_bias=OFF,
    o_bias=OFF,
    layout=LayerLayout.ALL_SLIDING,
    defaults=_frozen(tie_word_embeddings=False, num_key_value_heads=8, sliding_window=4096),
)
QWEN2 = Family(
    "qwen2",
    llamacpp_type=LlamaCppType.TYPE_70B,
    qkv_bias=ON,
    o_bias=OFF,
    layout=LayerLayout.QWEN2,
    sliding_window_switch="use_sliding_window",
    defaults=_frozen(
        tie_word_embeddings=False,
        use_sliding_window=False,
        sliding_window=4096,
        max_window_layers=28,
    ),
)
QWEN3 = Family(
    "qwen3",
    qk_norm=QkNorm(),
    layout=LayerLayout.QWEN2,
    sliding_window_switch="use_sliding_window",
    defaults=_frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        use_sliding_window=False,
        sliding_window=4096,
        max_window_layers=28,
    ),
)
GEMMA2 = Family(
    "gemma2",
    norm_fp32=True,
    fp16_unsafe=True,
    layer_norms=_SANDWICH_NORMS,
    layout=LayerLayout.ALTERNATING,
    softcapping=True,
    defaults=_frozen(
        tie_word_embeddings=True,
        attention_bias=False,
        num_key_value_heads=4,
        sliding_window=4096,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
    ),
)
GEMMA3 = dataclasses.replace(
    GEMMA2,
    name="gemma3",
    model_type="gemma3_text",
    qk_norm=QkNorm(),
    layout=LayerLayout.GEMMA3,
    rope_tables=2,
    context_includes_rope_scaling=True,
    defaults=_frozen(
        tie_word_embeddings=True,
        attention_bias=False,
        num_key_value_heads=4,
        sliding_window=4096,
    ),
)
DEEPSEEK_V2_MOE = MoeSchema(
    width_key="moe_intermediate_size",
    placement=MoePlacement.FIRST_K_DENSE,
    shared=SharedExperts.FUSED_N,
    router_dtype="float32",
    shared_bias_follows_mlp_bias=True,
)
DEEPSEEK_V2 = Family(
    "deepseek_v2",
    attention=Attention.MLA,
    mlp_bias=Flag.config("mlp_bias"),
    moe=DEEPSEEK_V2_MOE,
    keys=_keys(num_experts=("n_routed_experts",)),
    defaults=_frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        first_k_dense_replace=0,
        n_shared_experts=2,
        moe_layer_freq=1,
    ),
    expert_target_aliases=_QWEN_MOE_TARGETS,
)

_TABLE: tuple[Family, ...] = (
    LLAMA,
    dataclasses.replace(LLAMA, name="granite", llamacpp_type=LlamaCppType.OTHER),
    MISTRAL,
    Family(
        "mixtral",
        qkv_bias=OFF,
        o_bias=OFF,
        moe=MoeSchema(width_key="intermediate_size"),
        layout=LayerLayout.ALL_SLIDING,
        keys=_keys(num_experts=("num_local_experts",)),
        defaults=_frozen(
            tie_word_embeddings=False,
            num_key_value_heads=8,
            sliding_window=None,
            num_experts=8,
            num_experts_per_tok=2,
        ),
        expert_target_aliases=_frozen(
            w1="experts.gate_up_proj", w3="experts.gate_up_proj", w2="experts.down_proj"
        ),
    ),
    QWEN2,
    Family(
        "qwen2_moe",
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
        sliding_window_switch="use_sliding_window",
        keys=_keys(num_experts=("num_experts", "num_local_experts")),
        defaults=_frozen(
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
        expert_target_aliases=_QWEN_MOE_TARGETS,
    ),
    QWEN3,
    dataclasses.replace(
        QWEN3,
        name="qwen3_moe",
        moe=MoeSchema(
            width_key="moe_intermediate_size",
            placement=MoePlacement.SPARSE_STEP,
            zero_experts_means_dense=True,
        ),
        layout=LayerLayout.ALL_SLIDING,
        keys=_keys(num_experts=("num_experts", "num_local_experts")),
        defaults=_frozen(
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
        expert_target_aliases=_QWEN_MOE_TARGETS,
    ),
    Family(
        "gemma",
        norm_fp32=True,
        defaults=_frozen(tie_word_embeddings=True, attention_bias=False),
    ),
    GEMMA2,
    GEMMA3,
    Family(
        "phi3",
        attention=Attention.FUSED_QKV,
        qkv_bias=OFF,
        o_bias=OFF,
        mlp=Mlp.FUSED_GATE_UP,
        layout=LayerLayout.ALL_SLIDING,
        defaults=_frozen(tie_word_embeddings=False, sliding_window=None),
    ),
    Family(
        "phimoe",
        norm="layernorm",
        norm_bias=True,
        moe=MoeSchema(
            width_key="intermediate_size", router_name="router", router_is_nn_linear=True
        ),
        layout=LayerLayout.ALL_SLIDING,
        lm_head_bias=Flag.config("lm_head_bias"),
        keys=_keys(num_experts=("num_local_experts",)),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            lm_head_bias=False,
            num_key_value_heads=8,
            sliding_window=None,
            num_experts=16,
            num_experts_per_tok=2,
        ),
    ),
    DEEPSEEK_V2,
    dataclasses.replace(
        DEEPSEEK_V2,
        name="deepseek_v3",
        mlp_bias=OFF,
        moe=dataclasses.replace(
            DEEPSEEK_V2_MOE, e_score_correction_bias=True, shared_bias_follows_mlp_bias=False
        ),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            first_k_dense_replace=3,
            n_shared_experts=1,
            moe_layer_freq=1,
        ),
    ),
    Family(
        "gpt_oss",
        moe=MoeSchema(
            width_key="intermediate_size", router_name="router", router_bias=True, expert_bias=True
        ),
        layout=LayerLayout.ALTERNATING,
        sinks=True,
        keys=_keys(num_experts=("num_local_experts",)),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=True,
            num_key_value_heads=8,
            sliding_window=128,
            num_experts=128,
            num_experts_per_tok=4,
        ),
    ),
    Family(
        "olmo2",
        layer_norms=("post_attention_layernorm", "post_feedforward_layernorm"),
        qk_norm=QkNorm(per_head=False),
        defaults=_frozen(tie_word_embeddings=False, attention_bias=False),
    ),
    Family(
        "cohere",
        norm="layernorm",
        layer_norms=("input_layernorm",),
        # Cohere's q/k norms hold (heads, head_dim) weights: the whole projection's width.
        qk_norm=QkNorm(per_head=False, enabled=Flag.config("use_qk_norm")),
        defaults=_frozen(tie_word_embeddings=True, attention_bias=False, use_qk_norm=False),
    ),
    Family(
        "glm",
        o_bias=OFF,
        mlp=Mlp.FUSED_GATE_UP,
        defaults=_frozen(tie_word_embeddings=False, attention_bias=True, num_key_value_heads=2),
    ),
    Family(
        "starcoder2",
        qkv_bias=Flag.config("use_bias"),
        o_bias=Flag.config("use_bias"),
        mlp=Mlp.PLAIN,
        mlp_bias=Flag.config("use_bias"),
        norm="layernorm",
        norm_bias=True,
        layout=LayerLayout.ALL_SLIDING,
        defaults=_frozen(
            tie_word_embeddings=True, use_bias=True, num_key_value_heads=2, sliding_window=None
        ),
    ),
    # The original Qwen (Qwen-7B, Qwen-14B, Qwen-72B): remote code "QWenLMHeadModel".
    Family(
        "qwen",
        attention=Attention.QWEN_C_ATTN,
        qkv_bias=ON,
        o_bias=Flag.config("no_bias", negate=True),
        mlp=Mlp.QWEN_W,
        mlp_bias=Flag.config("no_bias", negate=True),
        layer_norms=("ln_1", "ln_2"),
        names=ModuleNames(
            prefix="transformer", embed="wte", final_norm="ln_f", layers="h", attn="attn"
        ),
        softmax_fp32=Flag.config("softmax_in_fp32"),
        eager_mask_kept=True,
        head_dim_key="kv_channels",
        keys=_keys(max_position_embeddings=("max_position_embeddings", "seq_length")),
        defaults=_frozen(tie_word_embeddings=False, no_bias=True, softmax_in_fp32=False),
    ),
)

_NEW: tuple[Family, ...] = (
    Family(
        "llama4",
        model_type="llama4_text",
        moe=MoeSchema(
            width_key="expert_intermediate_size",
            placement=MoePlacement.INTERLEAVE,
            shared=SharedExperts.ONE,
            shared_path="shared_expert",
            router_name="router",
            router_is_nn_linear=True,
        ),
        layout=LayerLayout.LLAMA4_CHUNKED,
        names=ModuleNames(mlp="feed_forward"),
        keys=_keys(
            num_experts=("num_local_experts",),
            intermediate_size=("intermediate_size_mlp",),
            expert_intermediate_size=("intermediate_size",),
        ),
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            num_key_value_heads=8,
            num_experts=16,
            num_experts_per_tok=1,
            intermediate_size=16384,
            expert_intermediate_size=8192,
            interleave_moe_layer_step=1,
            no_rope_layer_interval=4,
            attention_chunk_size=8192,
        ),
    ),
    Family(
        "qwen3_next",
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
        keys=_keys(num_experts=("num_experts",)),
        defaults=_frozen(
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
    Family(
        "glm4_moe",
        o_bias=OFF,
        qk_norm=QkNorm(enabled=Flag.config("use_qk_norm")),
        moe=dataclasses.replace(DEEPSEEK_V2_MOE, e_score_correction_bias=True),
        keys=_keys(num_experts=("n_routed_experts",)),
        mtp_key="num_nextn_predict_layers",
        defaults=_frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            use_qk_norm=False,
            first_k_dense_replace=1,
            n_shared_experts=1,
        ),
        expert_target_aliases=_QWEN_MOE_TARGETS,
    ),
    Family(
        "falcon",
        llamacpp_type=LlamaCppType.FALCON,
        attention=Attention.FUSED_QKV,
        qkv_bias=Flag.config("bias"),
        o_bias=Flag.config("bias"),
        mlp=Mlp.PLAIN_DENSE,
        mlp_bias=Flag.config("bias"),
        norm="layernorm",
        norm_bias=True,
        norm_rule=NormRule.FALCON,
        kv_heads=KvHeads.FALCON,
        intermediate_ratio=4,
        names=ModuleNames(
            prefix="transformer",
            embed="word_embeddings",
            final_norm="ln_f",
            layers="h",
            attn="self_attention",
            qkv="query_key_value",
            o="dense",
        ),
        keys=_keys(
            intermediate_size=("ffn_hidden_size",),
            num_key_value_heads=("num_kv_heads", "n_head_kv"),
            hidden_act=("activation",),
        ),
        defaults=_frozen(
            tie_word_embeddings=True,
            bias=False,
            multi_query=True,
            new_decoder_architecture=False,
            parallel_attn=True,
        ),
    ),
    Family(
        "phi",
        qkv_bias=ON,
        o_bias=ON,
        mlp=Mlp.PLAIN_FC,
        mlp_bias=ON,
        lm_head_bias=ON,
        norm="layernorm",
        norm_bias=True,
        layer_norms=("input_layernorm",),
        qk_norm=QkNorm(
            enabled=Flag.config("qk_layernorm"), names=("q_layernorm", "k_layernorm"), bias=True
        ),
        names=ModuleNames(final_norm="final_layernorm", o="dense"),
        defaults=_frozen(tie_word_embeddings=False, qk_layernorm=False),
    ),
    Family(
        "stablelm",
        qkv_bias=Flag.config("use_qkv_bias"),
        o_bias=OFF,
        norm="layernorm",
        norm_bias=True,
        layer_norms=("input_layernorm",),
        conditional_norms=(
            ("post_attention_layernorm", Flag.config("use_parallel_residual", negate=True)),
        ),
        # One LayerNorm (weight only) per head: the whole projection's width.
        qk_norm=QkNorm(
            per_head=False,
            enabled=Flag.config("qk_layernorm"),
            names=("q_layernorm", "k_layernorm"),
        ),
        defaults=_frozen(
            tie_word_embeddings=False,
            use_qkv_bias=False,
            qk_layernorm=False,
            use_parallel_residual=False,
            num_key_value_heads=32,
        ),
    ),
    Family(
        "olmo",
        llamacpp_type=LlamaCppType.TYPE_70B,
        norm="layernorm",
        norm_weights=False,
        defaults=_frozen(tie_word_embeddings=False, attention_bias=False),
    ),
)

#: model_type -> family. gemma3_text is the language model of the gemma3 wrapper.
FAMILIES: Mapping[str, Family] = MappingProxyType(
    {(f.model_type or f.name): f for f in (*_TABLE, *_NEW)}
)

#: Outer model_type of a multimodal wrapper -> model_type of its language model, when the
#: inner config does not name one.
WRAPPER_TEXT_TYPES: Mapping[str, str] = MappingProxyType(
    {"gemma3": "gemma3_text", "llama4": "llama4_text", "mistral3": "mistral"}
)

#: model_type values (inner model_type for multimodal wrappers) this package can describe.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted({*FAMILIES, *WRAPPER_TEXT_TYPES}))

#: transformers model classes (a config's ``architectures``) -> the model_type that builds
#: them, for configs whose model_type this table does not know (Kimi-K2's ``kimi_k2`` runs
#: as ``DeepseekV3ForCausalLM``). Wrapper classes map to the wrapper's type.
ARCHITECTURE_CLASSES: Mapping[str, str] = MappingProxyType(
    {
        "LlamaForCausalLM": "llama",
        "GraniteForCausalLM": "granite",
        "MistralForCausalLM": "mistral",
        "MixtralForCausalLM": "mixtral",
        "Qwen2ForCausalLM": "qwen2",
        "Qwen2MoeForCausalLM": "qwen2_moe",
        "Qwen3ForCausalLM": "qwen3",
        "Qwen3MoeForCausalLM": "qwen3_moe",
        "Qwen3NextForCausalLM": "qwen3_next",
        "GemmaForCausalLM": "gemma",
        "Gemma2ForCausalLM": "gemma2",
        "Gemma3ForCausalLM": "gemma3_text",
        "Gemma3ForConditionalGeneration": "gemma3",
        "Phi3ForCausalLM": "phi3",
        "PhiMoEForCausalLM": "phimoe",
        "PhiForCausalLM": "phi",
        "DeepseekV2ForCausalLM": "deepseek_v2",
        "DeepseekV3ForCausalLM": "deepseek_v3",
        "GptOssForCausalLM": "gpt_oss",
        "OlmoForCausalLM": "olmo",
        "Olmo2ForCausalLM": "olmo2",
        "CohereForCausalLM": "cohere",
        "GlmForCausalLM": "glm",
        "Glm4MoeForCausalLM": "glm4_moe",
        "Starcoder2ForCausalLM": "starcoder2",
        "QWenLMHeadModel": "qwen",
        "Llama4ForCausalLM": "llama4_text",
        "Llama4ForConditionalGeneration": "llama4",
        "Mistral3ForConditionalGeneration": "mistral3",
        "FalconForCausalLM": "falcon",
        "StableLmForCausalLM": "stablelm",
    }
)


def family_for(model_type: str) -> Family | None:
    return FAMILIES.get(model_type)
