"""Google's Gemma (``gemma``), Gemma 2 (``gemma2``) and Gemma 3 (``gemma3_text``, also in the
``gemma3`` multimodal wrapper).

transformers: ``models/gemma``, ``models/gemma2``, ``models/gemma3``.
"""

from __future__ import annotations

from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import SANDWICH_NORMS, frozen
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import LayerLayout, Modeling, QkNorm

__all__ = ["ARCHITECTURES", "FAMILIES", "WRAPPERS"]

GEMMA = Family(
    "gemma",
    schema=ConfigSchema(defaults=frozen(tie_word_embeddings=True, attention_bias=False)),
    modeling=Modeling(norm_fp32=True),
)

GEMMA2 = Family(
    "gemma2",
    schema=ConfigSchema(
        defaults=frozen(
            tie_word_embeddings=True,
            attention_bias=False,
            num_key_value_heads=4,
            sliding_window=4096,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
        )
    ),
    modeling=Modeling(
        norm_fp32=True,
        fp16_unsafe=True,
        layer_norms=SANDWICH_NORMS,
        layout=LayerLayout.ALTERNATING,
        softcapping=True,
    ),
)

GEMMA3 = GEMMA2.derive(
    "gemma3",
    model_type="gemma3_text",
    qk_norm=QkNorm(),
    layout=LayerLayout.GEMMA3,
    rope_tables=2,
    context_includes_rope_scaling=True,
    defaults=frozen(
        tie_word_embeddings=True,
        attention_bias=False,
        num_key_value_heads=4,
        sliding_window=4096,
    ),
)

FAMILIES = (GEMMA, GEMMA2, GEMMA3)

WRAPPERS = {"gemma3": "gemma3_text"}

ARCHITECTURES = {
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
}
