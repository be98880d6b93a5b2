"""BigCode's StarCoder2 (``starcoder2``): a plain MLP, LayerNorms with bias, biases switched by
``use_bias``.

transformers: ``models/starcoder2``.
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import Flag, LayerLayout, Mlp, Modeling

__all__ = ["ARCHITECTURES", "FAMILIES"]

STARCODER2 = Family(
    "starcoder2",
    schema=ConfigSchema(
        defaults=frozen(
            tie_word_embeddings=True, use_bias=True, num_key_value_heads=2, sliding_window=None
        )
    ),
    modeling=Modeling(
        qkv_bias=Flag.config("use_bias"),
        o_bias=Flag.config("use_bias"),
        mlp=Mlp.PLAIN,
        mlp_bias=Flag.config("use_bias"),
        norm="layernorm",
        norm_bias=True,
        layout=LayerLayout.ALL_SLIDING,
    ),
)

FAMILIES = (STARCODER2,)

ARCHITECTURES = {"Starcoder2ForCausalLM": "starcoder2"}
