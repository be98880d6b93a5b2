"""Mistral AI's Mistral (``mistral``), Mixtral (``mixtral``) and Mistral 3 (the ``mistral3``
wrapper around a Mistral language model).

transformers: ``models/mistral``, ``models/mixtral``, ``models/mistral3``.
"""

from __future__ import annotations

from service.estimator.model.adapter_targets import AdapterTargets
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType
from service.estimator.model.modeling_traits import OFF, LayerLayout, Modeling, MoeSchema

__all__ = ["ARCHITECTURES", "FAMILIES", "WRAPPERS"]

MISTRAL = Family(
    "mistral",
    schema=ConfigSchema(
        defaults=frozen(tie_word_embeddings=False, num_key_value_heads=8, sliding_window=4096)
    ),
    modeling=Modeling(qkv_bias=OFF, o_bias=OFF, layout=LayerLayout.ALL_SLIDING),
    llamacpp=LlamaCppNames(LlamaCppType.TYPE_70B_WITH_GQA),
)

MIXTRAL = Family(
    "mixtral",
    schema=ConfigSchema(
        keys=keys(num_experts=("num_local_experts",)),
        defaults=frozen(
            tie_word_embeddings=False,
            num_key_value_heads=8,
            sliding_window=None,
            num_experts=8,
            num_experts_per_tok=2,
        ),
    ),
    modeling=Modeling(
        qkv_bias=OFF,
        o_bias=OFF,
        moe=MoeSchema(width_key="intermediate_size"),
        layout=LayerLayout.ALL_SLIDING,
    ),
    targets=AdapterTargets(
        expert_aliases=frozen(
            w1="experts.gate_up_proj", w3="experts.gate_up_proj", w2="experts.down_proj"
        )
    ),
)

FAMILIES = (MISTRAL, MIXTRAL)

WRAPPERS = {"mistral3": "mistral"}

ARCHITECTURES = {
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Mistral3ForConditionalGeneration": "mistral3",
}
