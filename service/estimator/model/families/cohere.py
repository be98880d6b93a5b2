"""Cohere's Command R / R+ (``cohere``): one LayerNorm per layer (parallel attention and MLP),
optional q/k norms over the whole projection.

transformers: ``models/cohere``.
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import Flag, Modeling, QkNorm

__all__ = ["ARCHITECTURES", "FAMILIES"]

COHERE = Family(
    "cohere",
    schema=ConfigSchema(
        defaults=frozen(tie_word_embeddings=True, attention_bias=False, use_qk_norm=False)
    ),
    modeling=Modeling(
        norm="layernorm",
        layer_norms=("input_layernorm",),
        # Cohere's q/k norms hold (heads, head_dim) weights: the whole projection's width.
        qk_norm=QkNorm(per_head=False, enabled=Flag.config("use_qk_norm")),
    ),
)

FAMILIES = (COHERE,)

ARCHITECTURES = {"CohereForCausalLM": "cohere"}
