"""Zhipu's GLM-4 (``glm``), GLM-4.5 / 4.6 / 4.7 (``glm4_moe``), GLM-4.7-Flash
(``glm4_moe_lite``: DeepSeek-V3's latent attention) and GLM-5 (``glm_moe_dsa``: with
DeepSeek sparse attention's indexer).

transformers: ``models/glm``, ``models/glm4_moe``, ``models/glm4_moe_lite``,
``models/glm_moe_dsa``.
"""

from __future__ import annotations

import dataclasses

from service.estimator.model.adapter_targets import AdapterTargets
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import QWEN_MOE_TARGETS, frozen, keys
from service.estimator.model.families.deepseek import DEEPSEEK_V2_MOE
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import (
    OFF,
    Attention,
    Flag,
    Mlp,
    Modeling,
    MoePlacement,
    QkNorm,
)

__all__ = ["ARCHITECTURES", "FAMILIES"]

GLM = Family(
    "glm",
    schema=ConfigSchema(
        defaults=frozen(tie_word_embeddings=False, attention_bias=True, num_key_value_heads=2)
    ),
    modeling=Modeling(o_bias=OFF, mlp=Mlp.FUSED_GATE_UP),
)

GLM4_MOE = Family(
    "glm4_moe",
    schema=ConfigSchema(
        keys=keys(num_experts=("n_routed_experts",)),
        mtp_key="num_nextn_predict_layers",
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            use_qk_norm=False,
            first_k_dense_replace=1,
            n_shared_experts=1,
        ),
    ),
    modeling=Modeling(
        o_bias=OFF,
        qk_norm=QkNorm(enabled=Flag.config("use_qk_norm")),
        moe=dataclasses.replace(DEEPSEEK_V2_MOE, e_score_correction_bias=True),
    ),
    targets=AdapterTargets(expert_aliases=QWEN_MOE_TARGETS),
)

_GLM_MLA_MOE = dataclasses.replace(
    DEEPSEEK_V2_MOE,
    placement=MoePlacement.MLP_LAYER_TYPES,
    e_score_correction_bias=True,
    shared_bias_follows_mlp_bias=False,
)

# GLM-4.7-Flash: DeepSeek-V3's latent attention and experts, the dense layers listed by
# mlp_layer_types (the first one by default).
GLM4_MOE_LITE = Family(
    "glm4_moe_lite",
    schema=ConfigSchema(
        keys=keys(num_experts=("n_routed_experts",)),
        mtp_key="num_nextn_predict_layers",
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            first_k_dense_replace=1,
            n_shared_experts=1,
        ),
    ),
    modeling=Modeling(
        attention=Attention.MLA,
        mlp_bias=OFF,
        moe=dataclasses.replace(_GLM_MLA_MOE, dense_prefix_in_config=False),
    ),
    targets=AdapterTargets(expert_aliases=QWEN_MOE_TARGETS),
)

# GLM-5: GLM-4.7-Flash's layout with DeepSeek sparse attention's indexer on the layers
# indexer_types marks "full" (every layer by default).
GLM_MOE_DSA = GLM4_MOE_LITE.derive(
    "glm_moe_dsa",
    indexer=True,
    moe=_GLM_MLA_MOE,
    defaults=frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        first_k_dense_replace=3,
        n_shared_experts=1,
        index_n_heads=32,
        index_head_dim=128,
        index_topk=2048,
    ),
)

FAMILIES = (GLM, GLM4_MOE, GLM4_MOE_LITE, GLM_MOE_DSA)

ARCHITECTURES = {
    "GlmForCausalLM": "glm",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite",
    "GlmMoeDsaForCausalLM": "glm_moe_dsa",
}
