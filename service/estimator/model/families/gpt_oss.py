"""OpenAI's gpt-oss (``gpt_oss``): alternating sliding and full attention with per-head
sinks, every layer a mixture of experts with biased experts and router.

transformers: ``models/gpt_oss``.
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import LayerLayout, Modeling, MoeSchema

__all__ = ["ARCHITECTURES", "FAMILIES"]

GPT_OSS = Family(
    "gpt_oss",
    schema=ConfigSchema(
        keys=keys(num_experts=("num_local_experts",)),
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=True,
            num_key_value_heads=8,
            sliding_window=128,
            num_experts=128,
            num_experts_per_tok=4,
        ),
    ),
    modeling=Modeling(
        moe=MoeSchema(
            width_key="intermediate_size", router_name="router", router_bias=True, expert_bias=True
        ),
        layout=LayerLayout.ALTERNATING,
        sinks=True,
        vllm_rope_fp32=True,
    ),
)

FAMILIES = (GPT_OSS,)

ARCHITECTURES = {"GptOssForCausalLM": "gpt_oss"}
