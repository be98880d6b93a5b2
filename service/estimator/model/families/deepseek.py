"""DeepSeek-V2 / V2.5 (``deepseek_v2``), DeepSeek-V3 / R1 (``deepseek_v3``, which Kimi-K2 runs
as) and DeepSeek-V3.2 (``deepseek_v32``: V3 with DeepSeek sparse attention's indexer):
multi-head latent attention and fine-grained experts behind the first dense layers.

transformers: ``models/deepseek_v2``, ``models/deepseek_v3``, ``models/deepseek_v32``.
"""

from __future__ import annotations

import dataclasses

from service.estimator.model.adapter_targets import AdapterTargets
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import QWEN_MOE_TARGETS, frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import (
    OFF,
    Attention,
    Flag,
    Modeling,
    MoePlacement,
    MoeSchema,
    SharedExperts,
)

__all__ = ["ARCHITECTURES", "DEEPSEEK_V2_MOE", "FAMILIES"]

DEEPSEEK_V2_MOE = MoeSchema(
    width_key="moe_intermediate_size",
    placement=MoePlacement.FIRST_K_DENSE,
    shared=SharedExperts.FUSED_N,
    router_dtype="float32",
    shared_bias_follows_mlp_bias=True,
)

DEEPSEEK_V2 = Family(
    "deepseek_v2",
    schema=ConfigSchema(
        keys=keys(num_experts=("n_routed_experts",)),
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
            first_k_dense_replace=0,
            n_shared_experts=2,
            moe_layer_freq=1,
        ),
    ),
    modeling=Modeling(
        attention=Attention.MLA, mlp_bias=Flag.config("mlp_bias"), moe=DEEPSEEK_V2_MOE
    ),
    targets=AdapterTargets(expert_aliases=QWEN_MOE_TARGETS),
)

DEEPSEEK_V3_MOE = dataclasses.replace(
    DEEPSEEK_V2_MOE, e_score_correction_bias=True, shared_bias_follows_mlp_bias=False
)

DEEPSEEK_V3 = DEEPSEEK_V2.derive(
    "deepseek_v3",
    mlp_bias=OFF,
    moe=DEEPSEEK_V3_MOE,
    defaults=frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        first_k_dense_replace=3,
        n_shared_experts=1,
        moe_layer_freq=1,
    ),
)

# DeepSeek-V3.2: V3 with DeepSeek sparse attention's lightning indexer on every layer
# (transformers' DeepseekV32Indexer; vLLM caches one fp8 key of index_head_dim per token).
DEEPSEEK_V32 = DEEPSEEK_V3.derive(
    "deepseek_v32",
    indexer=True,
    # mlp_layer_types when the config lists it, else first_k_dense_replace (DeepseekV32Config).
    moe=dataclasses.replace(DEEPSEEK_V3_MOE, placement=MoePlacement.MLP_LAYER_TYPES),
    mtp_key="num_nextn_predict_layers",
    defaults=frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        first_k_dense_replace=3,
        n_shared_experts=1,
        moe_layer_freq=1,
        index_n_heads=64,
        index_head_dim=128,
        index_topk=2048,
    ),
)

FAMILIES = (DEEPSEEK_V2, DEEPSEEK_V3, DEEPSEEK_V32)

ARCHITECTURES = {
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV32ForCausalLM": "deepseek_v32",
}
