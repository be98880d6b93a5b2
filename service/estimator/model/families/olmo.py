"""Ai2's OLMo (``olmo``: LayerNorms without weights) and OLMo 2 (``olmo2``: norms after each
block, q/k norms over the whole projection).

transformers: ``models/olmo``, ``models/olmo2``.
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType
from service.estimator.model.modeling_traits import Modeling, QkNorm

__all__ = ["ARCHITECTURES", "FAMILIES"]

OLMO2 = Family(
    "olmo2",
    schema=ConfigSchema(defaults=frozen(tie_word_embeddings=False, attention_bias=False)),
    modeling=Modeling(
        layer_norms=("post_attention_layernorm", "post_feedforward_layernorm"),
        qk_norm=QkNorm(per_head=False),
    ),
)

OLMO = Family(
    "olmo",
    schema=ConfigSchema(defaults=frozen(tie_word_embeddings=False, attention_bias=False)),
    modeling=Modeling(norm="layernorm", norm_weights=False),
    llamacpp=LlamaCppNames(LlamaCppType.TYPE_70B),
)

FAMILIES = (OLMO2, OLMO)

ARCHITECTURES = {
    "OlmoForCausalLM": "olmo",
    "Olmo2ForCausalLM": "olmo2",
}
