"""Meta's Llama (``llama``, Llama 2 / 3 / 3.1 / 3.2 / 3.3), IBM's Granite (``granite``, built as
Llama), Llama 3.2 Vision (``mllama_text_model`` in the ``mllama`` wrapper) and Llama 4
(``llama4_text`` in the ``llama4`` wrapper).

transformers: ``models/llama``, ``models/granite``, ``models/mllama``
(``MllamaCrossAttentionDecoderLayer``, ``MllamaTextModel``'s ``vocab_size + 8`` embedding),
``models/llama4``.
"""

from __future__ import annotations

from service.estimator.model.adapter_targets import AdapterTargets, ModuleNames
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType
from service.estimator.model.modeling_traits import (
    OFF,
    Flag,
    LayerLayout,
    Modeling,
    MoePlacement,
    MoeSchema,
    QkNorm,
    SharedExperts,
)

__all__ = ["ARCHITECTURES", "FAMILIES", "LLAMA", "WRAPPERS"]

LLAMA = Family(
    "llama",
    schema=ConfigSchema(
        defaults=frozen(tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    ),
    modeling=Modeling(mlp_bias=Flag.config("mlp_bias")),
    llamacpp=LlamaCppNames(LlamaCppType.TYPE_70B_WITH_GQA),
)

GRANITE = LLAMA.derive("granite", type=LlamaCppType.OTHER)

LLAMA4 = Family(
    "llama4",
    schema=ConfigSchema(
        model_type="llama4_text",
        keys=keys(
            num_experts=("num_local_experts",),
            intermediate_size=("intermediate_size_mlp",),
            expert_intermediate_size=("intermediate_size",),
        ),
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            num_key_value_heads=8,
            num_experts=16,
            num_experts_per_tok=1,
            intermediate_size=16384,
            expert_intermediate_size=8192,
            interleave_moe_layer_step=1,
            no_rope_layer_interval=4,
            attention_chunk_size=8192,
        ),
    ),
    modeling=Modeling(
        moe=MoeSchema(
            width_key="expert_intermediate_size",
            placement=MoePlacement.INTERLEAVE,
            shared=SharedExperts.ONE,
            shared_path="shared_expert",
            router_name="router",
            router_is_nn_linear=True,
        ),
        layout=LayerLayout.LLAMA4_CHUNKED,
    ),
    targets=AdapterTargets(names=ModuleNames(mlp="feed_forward")),
)

# Llama 3.2 Vision (mllama_text_model in the mllama wrapper): Llama layers, with the layers
# cross_attention_layers lists attending to the image (cross_attn, per-head q/k norms, two
# scalar gates), and an embedding of vocab_size + 8 rows.
MLLAMA = LLAMA.derive(
    "mllama",
    model_type="mllama_text_model",
    qk_norm=QkNorm(),
    cross_attention=True,
    extra_embedding_rows=8,
    mlp_bias=OFF,
    type=LlamaCppType.OTHER,
    defaults=frozen(
        tie_word_embeddings=False,
        attention_bias=False,
        num_key_value_heads=8,
        cross_attention_layers=(3, 8, 13, 18, 23, 28, 33, 38),
    ),
)

FAMILIES = (LLAMA, GRANITE, LLAMA4, MLLAMA)

WRAPPERS = {"llama4": "llama4_text", "mllama": "mllama_text_model"}

ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "GraniteForCausalLM": "granite",
    "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4",
    "MllamaForCausalLM": "mllama_text_model",
    "MllamaForConditionalGeneration": "mllama",
}
