"""TII's Falcon (``falcon``): fused q/k/v, multi-query or grouped heads by config flags, norms
by the parallel-attention rule, a 4 x hidden plain MLP unless ``ffn_hidden_size`` says.

transformers: ``models/falcon``.
"""

from __future__ import annotations

from service.estimator.model.adapter_targets import AdapterTargets, ModuleNames
from service.estimator.model.config_schema import ConfigSchema, KvHeads
from service.estimator.model.families.base import frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType
from service.estimator.model.modeling_traits import Attention, Flag, Mlp, Modeling, NormRule

__all__ = ["ARCHITECTURES", "FAMILIES"]

FALCON = Family(
    "falcon",
    schema=ConfigSchema(
        kv_heads=KvHeads.FALCON,
        intermediate_ratio=4,
        keys=keys(
            intermediate_size=("ffn_hidden_size",),
            num_key_value_heads=("num_kv_heads", "n_head_kv"),
            hidden_act=("activation",),
        ),
        defaults=frozen(
            tie_word_embeddings=True,
            bias=False,
            multi_query=True,
            new_decoder_architecture=False,
            parallel_attn=True,
        ),
    ),
    modeling=Modeling(
        attention=Attention.FUSED_QKV,
        qkv_bias=Flag.config("bias"),
        o_bias=Flag.config("bias"),
        mlp=Mlp.PLAIN_DENSE,
        mlp_bias=Flag.config("bias"),
        norm="layernorm",
        norm_bias=True,
        norm_rule=NormRule.FALCON,
    ),
    targets=AdapterTargets(
        names=ModuleNames(
            prefix="transformer",
            embed="word_embeddings",
            final_norm="ln_f",
            layers="h",
            attn="self_attention",
            qkv="query_key_value",
            o="dense",
        )
    ),
    llamacpp=LlamaCppNames(LlamaCppType.FALCON),
)

FAMILIES = (FALCON,)

ARCHITECTURES = {"FalconForCausalLM": "falcon"}
