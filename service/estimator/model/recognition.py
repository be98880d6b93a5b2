"""Which family reads a config whose ``model_type`` the family table (:mod:`.families`) does
not know: the type whose transformers class its ``architectures`` names (Kimi-K2's ``kimi_k2``
runs as ``DeepseekV3ForCausalLM``), else the generic decoder: a Llama-style decoder whose sizes
are read under every name families give them (:data:`GENERIC_KEYS`), with routed and shared
experts, first dense layers and latent attention when its keys say so; it is refused, naming
the field, only where the config does not say (a size missing under every name, a token mixer
other than attention).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from service.estimator.errors import UnsupportedArchitecture
from service.estimator.model.config_reader import identifier
from service.estimator.model.families import ARCHITECTURE_CLASSES, LLAMA, SUPPORTED_MODEL_TYPES
from service.estimator.model.family_traits import Family
from service.estimator.model.llamacpp_names import LlamaCppNames, LlamaCppType
from service.estimator.model.modeling_traits import (
    Attention,
    MoePlacement,
    MoeSchema,
    SharedExperts,
)

__all__ = [
    "GENERIC_DECODER",
    "GENERIC_DECODER_KEYS",
    "GENERIC_KEYS",
    "NOT_A_DECODER_MIXER",
    "generic_assumptions",
    "generic_decoder",
    "outer_model_type",
    "shown_name",
]

FAMILIES_OR_WRAPPERS = frozenset(SUPPORTED_MODEL_TYPES)

#: A decoder whose family is unknown but whose config has the standard keys is read as Llama
#: (but llama.cpp's loader knows nothing of it: no Llama typing in its quantize rules).
GENERIC_DECODER = dataclasses.replace(LLAMA, llamacpp=LlamaCppNames(LlamaCppType.OTHER))

#: Canonical key -> the names decoder families give it, in order of precedence: the generic
#: reader looks each size up under every one (GPT-2's n_embd / n_layer / n_head / n_inner,
#: OPT's ffn_dim, Falcon's n_head_kv, Mixtral's num_local_experts, DeepSeek's
#: n_routed_experts, ...).
GENERIC_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "hidden_size": ("hidden_size", "n_embd", "d_model"),
        "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
        "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
        "num_key_value_heads": (
            "num_key_value_heads",
            "num_kv_heads",
            "n_head_kv",
            "n_kv_heads",
            "multi_query_group_num",
        ),
        "intermediate_size": (
            "intermediate_size",
            "ffn_dim",
            "n_inner",
            "ffn_hidden_size",
            "d_ff",
        ),
        "hidden_act": ("hidden_act", "hidden_activation", "activation_function"),
        "num_experts": (
            "num_experts",
            "num_local_experts",
            "n_routed_experts",
            "moe_num_experts",
        ),
        "num_experts_per_tok": (
            "num_experts_per_tok",
            "top_k_experts",
            "moe_top_k",
            "num_experts_per_token",
        ),
        "moe_intermediate_size": (
            "moe_intermediate_size",
            "expert_intermediate_size",
            "moe_ffn_hidden_size",
            "intermediate_size",
        ),
    }
)

#: Config keys of the standard decoder a generic read needs (under GENERIC_KEYS' names).
GENERIC_DECODER_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)

#: Keys of token mixers other than softmax attention: the config names a recurrent or
#: linear-attention mixer whose module layout only its family's code knows, so an unknown
#: config with one is refused instead of being read as attention.
NOT_A_DECODER_MIXER = (
    "linear_num_value_heads",
    "linear_attn_config",
    "ssm_state_size",
    "mamba_d_state",
    "mamba_expand",
    "rwkv_version",
    "attention_window_size",
)

_MLA_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MOE_DEFAULTS = {"decoder_sparse_step": 1, "mlp_only_layers": [], "moe_layer_freq": 1}


def shown_name(name: str) -> str:
    """A model_type as messages quote it: cut to 60 characters, so a long one stays readable."""
    return name if len(name) <= 60 else name[:57] + "..."


def outer_model_type(outer: Mapping[str, Any], notes: list[str]) -> Any:
    """The config's model_type; an unknown one is replaced by the type whose transformers
    class its ``architectures`` names (Kimi-K2: ``kimi_k2`` runs as DeepseekV3ForCausalLM)."""
    model_type = outer.get("model_type")
    if isinstance(model_type, str):
        identifier(model_type, "model_type")  # before any reading falls back to another name
    known = isinstance(model_type, str) and (
        model_type in FAMILIES_OR_WRAPPERS or outer.get("text_config") is not None
    )
    if known:
        return model_type
    archs = outer.get("architectures")
    if not isinstance(archs, Sequence) or isinstance(archs, str):
        return model_type
    for cls in archs:
        mapped = ARCHITECTURE_CLASSES.get(cls) if isinstance(cls, str) else None
        if mapped is not None:
            if model_type is not None:
                notes.append(
                    f"model_type {shown_name(str(model_type))!r} is not one this service knows; "
                    f"read as {mapped} because architectures names {cls}"
                )
            return mapped
    return model_type


def _present(config: Mapping[str, Any], key: str) -> str | None:
    """The name under which ``config`` gives canonical ``key`` (GENERIC_KEYS), if any."""
    return next((n for n in GENERIC_KEYS.get(key, (key,)) if config.get(n) is not None), None)


def generic_decoder(config: Mapping[str, Any], model_type: str) -> Family:
    """The generic decoder for an unknown model_type whose config has the standard keys
    under any of the names families use (:data:`GENERIC_KEYS`): a Llama-style dense
    decoder, with routed experts when the config counts them (shared experts, first dense
    layers, sparse steps as its keys say) and latent attention when it gives the
    ``kv_lora_rank`` family of keys. Refused, naming the field, when a size it needs is
    missing or the config names a token mixer other than attention."""
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    for key in NOT_A_DECODER_MIXER:
        if config.get(key) is not None:
            raise UnsupportedArchitecture(
                f"model_type {shown_name(model_type)!r} is not supported and its {key} names "
                "a token mixer other than attention, whose layout only its family's code "
                f"knows; supported model types: {supported}",
                field=key,
            )
    for key in GENERIC_DECODER_KEYS:
        if _present(config, key) is None:
            raise UnsupportedArchitecture(
                f"model_type {shown_name(model_type)!r} is not supported and the config has no "
                f"{key} (under any of {', '.join(GENERIC_KEYS.get(key, (key,)))}), which a "
                f"generic decoder needs; supported model types: {supported}",
                field=key,
            )
    experts = _present(config, "num_experts")
    mla = config.get("kv_lora_rank") is not None
    if experts is None and not mla:
        return dataclasses.replace(
            GENERIC_DECODER, schema=dataclasses.replace(GENERIC_DECODER.schema, keys=GENERIC_KEYS)
        )
    changes: dict[str, Any] = {"keys": GENERIC_KEYS}
    if mla:
        missing = [k for k in _MLA_KEYS if config.get(k) is None]
        if missing:
            raise UnsupportedArchitecture(
                f"model_type {shown_name(model_type)!r} is not supported: its kv_lora_rank says "
                f"latent attention but it has no {missing[0]}; supported model types: "
                f"{supported}",
                field=missing[0],
            )
        changes["attention"] = Attention.MLA
    if experts is not None:
        changes["moe"] = _generic_moe(config)
        changes["defaults"] = MappingProxyType({**GENERIC_DECODER.schema.defaults, **_MOE_DEFAULTS})
    return GENERIC_DECODER.derive("generic", **changes)


def _generic_moe(config: Mapping[str, Any]) -> MoeSchema:
    """Routed experts as their keys say: Mixtral's fused experts behind a router ``gate``;
    ``n_shared_experts`` fused into one shared MLP (DeepSeek), or one gated shared expert of
    ``shared_expert_intermediate_size`` (Qwen); experts from ``first_k_dense_replace`` on
    (DeepSeek), on every ``decoder_sparse_step``-th layer less ``mlp_only_layers`` (Qwen), or on
    every layer."""
    if config.get("n_shared_experts"):
        shared, path = SharedExperts.FUSED_N, "shared_experts"
    elif config.get("shared_expert_intermediate_size"):
        shared, path = SharedExperts.GATED_ONE, "shared_expert"
    else:
        shared, path = SharedExperts.NONE, "shared_experts"
    if config.get("first_k_dense_replace") is not None:
        placement = MoePlacement.FIRST_K_DENSE
    elif any(config.get(k) is not None for k in ("decoder_sparse_step", "mlp_only_layers")):
        placement = MoePlacement.SPARSE_STEP
    else:
        placement = MoePlacement.ALL
    return MoeSchema(
        width_key="moe_intermediate_size", placement=placement, shared=shared, shared_path=path
    )


def generic_assumptions(family: Family) -> tuple[str, ...]:
    """What a generic read assumed, in words (for the answer's ``assumptions``)."""
    notes = [
        "read as a Llama-style decoder (q/k/v/o attention, gated MLP, RMSNorm, no biases "
        "unless attention_bias/mlp_bias say so; sizes under the names of GENERIC_KEYS: "
        "n_embd, n_layer, n_head, ffn_dim, n_inner, num_local_experts, n_routed_experts, ...)"
    ]
    moe = family.modeling.moe
    if family.modeling.attention is Attention.MLA:
        notes.append(
            "kv_lora_rank: DeepSeek's latent attention (q_a/q_b or q_proj, kv_a_proj_with_mqa, "
            "kv_b_proj, o_proj, with q_a/kv_a norms)"
        )
    if moe is not None:
        shared = {
            SharedExperts.FUSED_N: "n_shared_experts fused into one shared MLP (DeepSeek)",
            SharedExperts.GATED_ONE: "one shared expert behind a sigmoid gate (Qwen)",
            SharedExperts.NONE: "no shared expert",
        }[moe.shared]
        where = {
            MoePlacement.FIRST_K_DENSE: "every layer from first_k_dense_replace on",
            MoePlacement.SPARSE_STEP: "every decoder_sparse_step-th layer less mlp_only_layers",
            MoePlacement.ALL: "every layer",
        }[moe.placement]
        notes.append(
            "routed experts as Mixtral's (a router 'gate' without bias, gate_up/down per expert "
            "of moe_intermediate_size, else intermediate_size); "
            f"{shared}; experts on {where}"
        )
    return tuple(notes)
