"""Meta's OPT (``opt``: OPT-125m to OPT-66B, vLLM's quick-start model): learned absolute
positions, LayerNorms with bias, a plain ``fc1`` / ``fc2`` MLP on the layer itself, biases
switched by ``enable_bias``; OPT-350m embeds tokens in ``word_embed_proj_dim`` (512) and maps
them to and from the 1024-wide decoder with ``project_in`` / ``project_out``, and normalizes
after each block (``do_layer_norm_before`` false: no final norm).

transformers: ``models/opt`` (``OPTForCausalLM``, ``OPTLearnedPositionalEmbedding``'s offset
of 2 rows); vLLM: ``vllm/model_executor/models/opt.py``.
"""

from __future__ import annotations

from service.estimator.model.adapter_targets import AdapterTargets, ModuleNames
from service.estimator.model.config_schema import ConfigSchema
from service.estimator.model.families.base import frozen, keys
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import Flag, Mlp, Modeling

__all__ = ["ARCHITECTURES", "FAMILIES"]

_BIAS = Flag.config("enable_bias")

OPT = Family(
    "opt",
    schema=ConfigSchema(
        embedding_size_key="word_embed_proj_dim",
        keys=keys(intermediate_size=("ffn_dim",), hidden_act=("activation_function",)),
        # OPTConfig's defaults (transformers 5): a config leaving these out is OPT-125m-like.
        defaults=frozen(
            tie_word_embeddings=True,
            enable_bias=True,
            do_layer_norm_before=True,
            max_position_embeddings=2048,
        ),
    ),
    modeling=Modeling(
        qkv_bias=_BIAS,
        o_bias=_BIAS,
        mlp=Mlp.PLAIN_FC,
        mlp_bias=_BIAS,
        norm="layernorm",
        norm_bias=True,
        layer_norms=("self_attn_layer_norm", "final_layer_norm"),
        position_table_offset=2,
        final_norm=Flag.config("do_layer_norm_before"),
    ),
    targets=AdapterTargets(
        names=ModuleNames(
            prefix="model.decoder", final_norm="final_layer_norm", mlp="", o="out_proj"
        )
    ),
)

FAMILIES = (OPT,)

ARCHITECTURES = {"OPTForCausalLM": "opt"}
