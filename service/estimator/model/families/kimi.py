"""Moonshot's Kimi-Linear (``kimi_linear``): Kimi Delta Attention (a Gated DeltaNet with a
per-channel forget gate) on three layers of four and DeepSeek's latent attention on the others,
with DeepSeek-style experts (a fused shared expert) after the first dense layer. Kimi-K2 runs as
DeepSeek-V3 (``architectures`` names ``DeepseekV3ForCausalLM``; :mod:`.recognition`).

transformers: ``models/kimi_linear`` (``KimiLinearConfig``'s ``attribute_map`` reads the
checkpoint's ``num_experts``, ``num_experts_per_token``, ``num_shared_experts`` and
``model_max_length``; ``linear_attn_config`` holds the KDA sizes and 1-indexed layer lists);
vLLM: ``vllm/model_executor/models/kimi_linear.py`` (KDA state: three short-conv states in the
model dtype and a float32 recurrent state, ``mamba_utils.kda_state_dtype``).
"""

from __future__ import annotations

import dataclasses

from service.estimator.model.adapter_targets import AdapterTargets
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import QWEN_MOE_TARGETS, frozen, keys
from service.estimator.model.families.deepseek import DEEPSEEK_V3_MOE
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import (
    OFF,
    Attention,
    LayerLayout,
    LinearMixer,
    Modeling,
    MoePlacement,
)

__all__ = ["ARCHITECTURES", "FAMILIES"]

KIMI_LINEAR = Family(
    "kimi_linear",
    schema=ConfigSchema(
        keys=keys(
            num_experts=("num_experts", "num_local_experts"),
            num_experts_per_tok=("num_experts_per_token", "num_experts_per_tok"),
            n_shared_experts=("num_shared_experts", "n_shared_experts"),
            max_position_embeddings=("model_max_length", "max_position_embeddings"),
        ),
        # KimiLinearConfig's defaults (transformers 5): Kimi-Linear-48B-A3B-Instruct.
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            q_lora_rank=None,
            num_experts=256,
            num_experts_per_tok=8,
            n_shared_experts=1,
            first_k_dense_replace=1,
            linear_head_dim=128,
            linear_num_heads=32,
            linear_conv_kernel_dim=4,
        ),
    ),
    modeling=Modeling(
        attention=Attention.MLA,
        mlp_bias=OFF,
        moe=dataclasses.replace(DEEPSEEK_V3_MOE, placement=MoePlacement.MLP_LAYER_TYPES),
        layout=LayerLayout.KIMI_LINEAR,
        linear_mixer=LinearMixer.KDA,
    ),
    targets=AdapterTargets(expert_aliases=QWEN_MOE_TARGETS),
)

FAMILIES = (KIMI_LINEAR,)

ARCHITECTURES = {"KimiLinearForCausalLM": "kimi_linear"}
