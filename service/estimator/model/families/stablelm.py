"""Stability AI's StableLM (``stablelm``): LayerNorms with bias, an optional parallel residual
(one norm per layer) and optional per-head q/k LayerNorms.

transformers: ``models/stablelm``.
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import OFF, Flag, Modeling, QkNorm

__all__ = ["ARCHITECTURES", "FAMILIES"]

STABLELM = Family(
    "stablelm",
    schema=ConfigSchema(
        defaults=frozen(
            tie_word_embeddings=False,
            use_qkv_bias=False,
            qk_layernorm=False,
            use_parallel_residual=False,
            num_key_value_heads=32,
        )
    ),
    modeling=Modeling(
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
    ),
)

FAMILIES = (STABLELM,)

ARCHITECTURES = {"StableLmForCausalLM": "stablelm"}
