"""Ai2's OLMo (``olmo``: LayerNorms without weights), OLMo 2 (``olmo2``: norms after each
block, q/k norms over the whole projection) and Olmo 3 (``olmo3``: OLMo 2 with sliding-window
attention on three layers of four, ``layer_types`` when the config lists them).

transformers: ``models/olmo``, ``models/olmo2``, ``models/olmo3`` (``Olmo3Config`` derives
``layer_types`` as sliding unless ``(i + 1) % 4 == 0``, window 4096 by default).
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType
from service.estimator.model.modeling_traits import LayerLayout, Modeling, QkNorm

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

OLMO3 = OLMO2.derive(
    "olmo3",
    layout=LayerLayout.ALTERNATING,
    alternating_period=4,
    defaults=frozen(tie_word_embeddings=False, attention_bias=False, sliding_window=4096),
)

FAMILIES = (OLMO2, OLMO, OLMO3)

ARCHITECTURES = {
    "OlmoForCausalLM": "olmo",
    "Olmo2ForCausalLM": "olmo2",
    "Olmo3ForCausalLM": "olmo3",
}
