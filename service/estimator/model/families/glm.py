"""Zhipu's GLM-4 (``glm``) and GLM-4.5 / 4.6 (``glm4_moe``).

transformers: ``models/glm``, ``models/glm4_moe``.
"""

from __future__ import annotations

import dataclasses

from service.estimator.model.adapter_targets import AdapterTargets
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import QWEN_MOE_TARGETS, frozen, keys
from service.estimator.model.families.deepseek import DEEPSEEK_V2_MOE
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import OFF, Flag, Mlp, Modeling, QkNorm

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

FAMILIES = (GLM, GLM4_MOE)

ARCHITECTURES = {
    "GlmForCausalLM": "glm",
    "Glm4MoeForCausalLM": "glm4_moe",
}
