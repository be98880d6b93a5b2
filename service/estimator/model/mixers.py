"""The token mixers and feed-forwards beyond plain attention and MLP, read from a config: a
linear-attention layer's sizes (Qwen3-Next's / Qwen3.5's Gated DeltaNet, Kimi Delta Attention)
and a mixture of experts (how many, how wide, where, with which shared experts).
:mod:`.build` calls these while it builds an :class:`~.architecture.Architecture`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.estimator.errors import InvalidConfig
from service.estimator.model.config_reader import Bounds, ConfigReader, check_int
from service.estimator.model.modeling_traits import (
    Modeling,
    MoePlacement,
    MoeSchema,
    SharedExperts,
)
from service.estimator.model.shapes import LinearAttentionSpec, MoeSpec
from service.estimator.units import checkpoint_dtype

__all__ = ["kda", "kda_settings", "linear_attention", "moe"]


def linear_attention(r: ConfigReader) -> LinearAttentionSpec:
    spec = LinearAttentionSpec(
        num_key_heads=r.integer("linear_num_key_heads", high=Bounds.HEADS),
        num_value_heads=r.integer("linear_num_value_heads", high=Bounds.HEADS),
        key_head_dim=r.integer("linear_key_head_dim", high=Bounds.HEAD_DIM),
        value_head_dim=r.integer("linear_value_head_dim", high=Bounds.HEAD_DIM),
        conv_kernel=r.integer("linear_conv_kernel_dim", high=64),
        recurrent_dtype=ssm_dtype(r) if r.family.modeling.ssm_dtype_from_config else None,
    )
    if spec.num_value_heads % spec.num_key_heads:
        raise InvalidConfig(
            f"linear_num_value_heads ({spec.num_value_heads}) must be a multiple of "
            f"linear_num_key_heads ({spec.num_key_heads})",
            field="linear_num_value_heads",
        )
    return spec


def ssm_dtype(r: ConfigReader) -> str | None:
    """The recurrent state's dtype a Qwen3.5 config names (``mamba_ssm_dtype``), if any."""
    value = r.config.get("mamba_ssm_dtype")
    if value is None:
        return None
    name = checkpoint_dtype(value) if isinstance(value, str) else None
    if name is None:
        raise InvalidConfig(
            f"mamba_ssm_dtype {str(value)[:40]!r} is not a dtype this service knows "
            "(bfloat16, float16, float32)",
            field="mamba_ssm_dtype",
        )
    return name


def kda_settings(r: ConfigReader) -> Mapping[str, Any]:
    """Kimi-Linear's linear_attn_config (the checkpoint's nested form), or an empty mapping."""
    nested = r.config.get("linear_attn_config")
    if nested is None:
        return {}
    if not isinstance(nested, Mapping):
        raise InvalidConfig("linear_attn_config must be an object", field="linear_attn_config")
    return nested


def kda(r: ConfigReader) -> LinearAttentionSpec:
    """Kimi Delta Attention: ``num_heads`` heads of ``head_dim`` for queries, keys and values
    alike, each with a short convolution of ``short_conv_kernel_size`` taps (read from
    ``linear_attn_config``, else the flat ``linear_*`` keys KimiLinearConfig keeps)."""
    nested = kda_settings(r)

    def read(nested_key: str, flat_key: str, high: int) -> int:
        value = nested.get(nested_key)
        if value is not None:
            return check_int(value, f"linear_attn_config.{nested_key}", 1, high)
        return r.integer(flat_key, high=high)

    heads = read("num_heads", "linear_num_heads", Bounds.HEADS)
    head_dim = read("head_dim", "linear_head_dim", Bounds.HEAD_DIM)
    return LinearAttentionSpec(
        num_key_heads=heads,
        num_value_heads=heads,
        key_head_dim=head_dim,
        value_head_dim=head_dim,
        conv_kernel=read("short_conv_kernel_size", "linear_conv_kernel_dim", 64),
        recurrent_dtype="float32",
    )


def moe_layers(r: ConfigReader, schema: MoeSchema, layers: int) -> tuple[int, ...]:
    """Which decoder layers hold routed experts, by the family's rule."""
    placement = schema.placement
    if placement is MoePlacement.FIRST_K_DENSE:
        first = r.integer("first_k_dense_replace", low=0, high=Bounds.LAYERS)
        # Families whose config class has no moe_layer_freq (GLM-4.5) are every layer on.
        freq = r.integer(
            "moe_layer_freq",
            high=Bounds.LAYERS,
            default=... if "moe_layer_freq" in r.family.schema.defaults else 1,
        )
        if freq != 1:
            r.assumptions.append(
                f"moe_layer_freq {freq} ignored: transformers makes every layer from "
                "first_k_dense_replace on an MoE layer"
            )
        return tuple(range(first, layers))
    if placement is MoePlacement.MLP_LAYER_TYPES:
        kinds = r.raw("mlp_layer_types")
        if kinds is None:
            if schema.dense_prefix_in_config:
                first = r.integer("first_k_dense_replace", low=0, high=Bounds.LAYERS)
            else:
                first = int(r.family.schema.defaults["first_k_dense_replace"])
                r.assumptions.append(
                    f"mlp_layer_types not in config; the first {first} layer(s) dense, the "
                    f"rest experts (the {r.model_type} default, transformers)"
                )
            return tuple(range(min(first, layers), layers))
        if not isinstance(kinds, Sequence) or isinstance(kinds, str) or len(kinds) != layers:
            raise InvalidConfig(
                f"mlp_layer_types must list 'dense' or 'sparse' for each of the {layers} layers",
                field="mlp_layer_types",
            )
        if any(k not in ("dense", "sparse") for k in kinds):
            raise InvalidConfig(
                "mlp_layer_types entries must be 'dense' or 'sparse'", field="mlp_layer_types"
            )
        return tuple(i for i, k in enumerate(kinds) if k == "sparse")
    if placement is MoePlacement.INTERLEAVE:
        if r.raw("moe_layers") is not None:
            return tuple(sorted(set(r.int_list("moe_layers", layers - 1))))
        step = r.integer("interleave_moe_layer_step", high=Bounds.LAYERS)
        return tuple(range(step - 1, layers, step))
    if placement is MoePlacement.SPARSE_STEP:
        only = set(r.int_list("mlp_only_layers", Bounds.LAYERS))
        step = r.integer("decoder_sparse_step", high=Bounds.LAYERS)
        return tuple(i for i in range(layers) if i not in only and (i + 1) % step == 0)
    return tuple(range(layers))


def moe(r: ConfigReader, modeling: Modeling, layers: int) -> MoeSpec | None:
    schema = modeling.moe
    if schema is None or (schema.enabled is not None and not r.trait(schema.enabled)):
        return None
    low = 0 if schema.zero_experts_means_dense else 1
    experts = r.integer("num_experts", low=low, high=Bounds.EXPERTS)
    if experts == 0:
        return None
    top_k = r.integer("num_experts_per_tok", high=Bounds.EXPERTS)
    width = r.integer(schema.width_key, high=Bounds.INTERMEDIATE)
    shared_width, n_shared = 0, 0
    if schema.shared is SharedExperts.GATED_ONE:
        shared_width = r.integer("shared_expert_intermediate_size", low=0, high=Bounds.INTERMEDIATE)
        n_shared = 1 if shared_width else 0
    elif schema.shared is SharedExperts.ONE:
        shared_width, n_shared = width, 1
    elif schema.shared is SharedExperts.FUSED_N:
        n_shared = r.integer("n_shared_experts", low=0, high=Bounds.EXPERTS)
        shared_width = n_shared * width
    if top_k > experts:
        raise InvalidConfig(
            f"num_experts_per_tok ({top_k}) exceeds the number of experts ({experts})",
            field="num_experts_per_tok",
        )
    return MoeSpec(
        num_experts=experts,
        experts_per_token=top_k,
        expert_intermediate_size=width,
        layers=moe_layers(r, schema, layers),
        num_shared_experts=n_shared,
        shared_expert_intermediate_size=shared_width,
        shared_expert_gate=schema.shared is SharedExperts.GATED_ONE,
        router_bias=schema.router_bias,
        e_score_correction_bias=schema.e_score_correction_bias,
        expert_bias=schema.expert_bias,
        router_dtype=schema.router_dtype,
        beside_dense=schema.beside_dense,
    )
