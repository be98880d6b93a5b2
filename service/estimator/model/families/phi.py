"""Microsoft's Phi-1 / 1.5 / 2 (``phi``), Phi-3 / 3.5 / 4 (``phi3``) and Phi-3.5-MoE
(``phimoe``).

transformers: ``models/phi``, ``models/phi3``, ``models/phimoe``.
"""

from __future__ import annotations

from service.estimator.model.adapter_targets import AdapterTargets, ModuleNames
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import (
    OFF,
    ON,
    Attention,
    Flag,
    LayerLayout,
    Mlp,
    Modeling,
    MoeSchema,
    QkNorm,
)

__all__ = ["ARCHITECTURES", "FAMILIES"]

PHI3 = Family(
    "phi3",
    schema=ConfigSchema(defaults=frozen(tie_word_embeddings=False, sliding_window=None)),
    modeling=Modeling(
        attention=Attention.FUSED_QKV,
        qkv_bias=OFF,
        o_bias=OFF,
        mlp=Mlp.FUSED_GATE_UP,
        layout=LayerLayout.ALL_SLIDING,
    ),
)

PHIMOE = Family(
    "phimoe",
    schema=ConfigSchema(
        keys=keys(num_experts=("num_local_experts",)),
        defaults=frozen(
            tie_word_embeddings=False,
            attention_bias=False,
            lm_head_bias=False,
            num_key_value_heads=8,
            sliding_window=None,
            num_experts=16,
            num_experts_per_tok=2,
        ),
    ),
    modeling=Modeling(
        norm="layernorm",
        norm_bias=True,
        moe=MoeSchema(
            width_key="intermediate_size", router_name="router", router_is_nn_linear=True
        ),
        layout=LayerLayout.ALL_SLIDING,
        lm_head_bias=Flag.config("lm_head_bias"),
    ),
)

PHI = Family(
    "phi",
    schema=ConfigSchema(defaults=frozen(tie_word_embeddings=False, qk_layernorm=False)),
    modeling=Modeling(
        qkv_bias=ON,
        o_bias=ON,
        mlp=Mlp.PLAIN_FC,
        mlp_bias=ON,
        lm_head_bias=ON,
        norm="layernorm",
        norm_bias=True,
        layer_norms=("input_layernorm",),
        qk_norm=QkNorm(
            enabled=Flag.config("qk_layernorm"), names=("q_layernorm", "k_layernorm"), bias=True
        ),
    ),
    targets=AdapterTargets(names=ModuleNames(final_norm="final_layernorm", o="dense")),
)

FAMILIES = (PHI3, PHIMOE, PHI)

ARCHITECTURES = {
    "Phi3ForCausalLM": "phi3",
    "PhiMoEForCausalLM": "phimoe",
    "PhiForCausalLM": "phi",
}
