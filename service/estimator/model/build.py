"""Building an :class:`Architecture` from a Hugging Face ``config.json``.

It follows the modeling code of transformers 5.x: which modules each family instantiates,
their sizes, biases and norms, and the defaults its ``*Config`` class applies to keys a config
leaves out (every default applied is recorded in ``assumptions``). What differs between
families comes from the family table (:mod:`.families`); this module only reads the config
through it (a ``model_type`` the table lacks is recognized by :mod:`.recognition`). A
multimodal wrapper (``text_config`` inside) is read for its language model, with the
wrapper's top-level dtype, quantization and tying applied to it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from service.estimator.errors import InvalidConfig
from service.estimator.model import layer_layout, mixers
from service.estimator.model.architecture import Architecture
from service.estimator.model.audio import attach_audio
from service.estimator.model.config_reader import (
    Bounds,
    ConfigReader,
    check_int,
    identifier,
    str_tuple,
)
from service.estimator.model.config_schema import KvHeads
from service.estimator.model.families import (
    FLAT_WRAPPER_TYPES,
    WRAPPER_TEXT_TYPES,
    family_for,
)
from service.estimator.model.modeling_traits import (
    Attention,
    LinearMixer,
    Mlp,
    NormRule,
)
from service.estimator.model.quantization import parse_quantization
from service.estimator.model.recognition import (
    GENERIC_DECODER,
    generic_assumptions,
    generic_decoder,
    outer_model_type,
    shown_name,
)
from service.estimator.model.shapes import (
    CHUNKED_ATTENTION,
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    MlaSpec,
)
from service.estimator.model.vision import attach_vision
from service.estimator.units import checkpoint_dtype

__all__ = ["read_config"]

# MLPs without a gate: one activation between two projections (StarCoder2, Phi-1/2, Falcon, OPT).
_PLAIN_MLPS = frozenset({Mlp.PLAIN, Mlp.PLAIN_FC, Mlp.PLAIN_DENSE})

_LLAMA_STYLE_NOTE = (
    "model_type {name!r} is not one this service knows; its config has the standard decoder "
    "keys, so it was read as a Llama-style decoder (gated MLP, RMSNorm, no biases unless "
    "attention_bias/mlp_bias say so): post the config with a supported model_type or "
    "architectures if it is not one"
)
_GENERIC_NOTE = (
    "model_type {name!r} is not one this service knows; its config has the standard decoder "
    "keys and counts routed experts or latent attention, so it was read by the generic "
    "decoder: post the config with a supported model_type or architectures if it is not one"
)

# Keys a wrapper keeps at its top level that apply to its language model too.
_WRAPPER_SHARED_KEYS = ("torch_dtype", "dtype", "quantization_config")
# Keys of a flat wrapper config (FLAT_WRAPPER_TYPES) that are the wrapper's, not its decoder's.
_FLAT_WRAPPER_OWN_KEYS = frozenset({"model_type", "architectures", "vision_config"})


def read_config(config: Mapping[str, Any]) -> Architecture:
    """Build and validate the architecture a Hugging Face ``config.json`` describes."""
    if not isinstance(config, Mapping):
        raise InvalidConfig("the model config must be a JSON object")
    outer = config
    notes: list[str] = []
    outer_type = outer_model_type(outer, notes)
    wrapper: str | None = None
    text = outer.get("text_config")
    if text is None and outer_type in FLAT_WRAPPER_TYPES:
        # The language model's keys sit beside vision_config (Qwen2-VL's Hub configs).
        text = {k: v for k, v in outer.items() if k not in _FLAT_WRAPPER_OWN_KEYS}
    if text is not None:
        if not isinstance(text, Mapping):
            raise InvalidConfig("text_config must be an object", field="text_config")
        model_type = text.get("model_type")
        if model_type is None and isinstance(outer_type, str):
            model_type = WRAPPER_TEXT_TYPES.get(outer_type, outer_type)
        wrapper = outer_type if isinstance(outer_type, str) else None
        merged = dict(text)
        for key in _WRAPPER_SHARED_KEYS:
            if merged.get(key) is None and outer.get(key) is not None:
                merged[key] = outer[key]
        if "tie_word_embeddings" not in merged and "tie_word_embeddings" in outer:
            merged["tie_word_embeddings"] = outer["tie_word_embeddings"]
        config = merged
    else:
        model_type = outer_type
    if model_type is None:
        raise InvalidConfig("config is missing model_type", field="model_type")
    if not isinstance(model_type, str):
        raise InvalidConfig("model_type must be a string", field="model_type")
    identifier(model_type, "model_type")
    if text is None and model_type in WRAPPER_TEXT_TYPES:
        raise InvalidConfig(
            f"a {model_type} config must carry its language model in text_config",
            field="text_config",
        )
    family = family_for(model_type)
    if family is None:
        family = generic_decoder(config, model_type)
        name = shown_name(model_type)
        if family.name != GENERIC_DECODER.name:
            notes.append(_GENERIC_NOTE.format(name=name))
            notes.extend(generic_assumptions(family))
        else:
            notes.append(_LLAMA_STYLE_NOTE.format(name=name))
    reader = ConfigReader(config, family, model_type)
    reader.assumptions.extend(notes)
    arch = _build(reader, wrapper)
    if text is not None and outer.get("vision_config") is not None:
        arch = attach_vision(arch, outer, outer["vision_config"])
    if text is not None and outer.get("audio_config") is not None:
        arch = attach_audio(arch, outer["audio_config"])
    return arch


def _exact_div(hidden: int, heads: int) -> int:
    if hidden % heads != 0:
        raise InvalidConfig(
            f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}) and the "
            "config gives no head_dim",
            field="head_dim",
        )
    return hidden // heads


def _mla(r: ConfigReader, hidden: int, heads: int) -> MlaSpec:
    v_default: Any = ...
    if r.family.schema.v_head_dim_from_heads and not r.present("v_head_dim"):
        v_default = _exact_div(hidden, heads)
        r.assumptions.append(
            f"v_head_dim not in config; used hidden_size // num_attention_heads = {v_default} "
            f"(the {r.model_type} default, transformers)"
        )
    return MlaSpec(
        q_lora_rank=r.opt_int("q_lora_rank", high=Bounds.RANK),
        kv_lora_rank=r.integer("kv_lora_rank", high=Bounds.RANK),
        qk_nope_head_dim=r.integer("qk_nope_head_dim", high=Bounds.HEAD_DIM),
        qk_rope_head_dim=r.integer("qk_rope_head_dim", high=Bounds.HEAD_DIM),
        v_head_dim=r.integer("v_head_dim", high=Bounds.HEAD_DIM, default=v_default),
    )


def _dtype(r: ConfigReader) -> str:
    value = r.raw("torch_dtype")
    if value is None:
        if r.config.get("bf16") is True:
            value = "bfloat16"
        elif r.config.get("fp16") is True:
            value = "float16"
    if value is None:
        r.assumptions.append(
            "config names no torch_dtype; assumed float32, the dtype transformers loads it in"
        )
        return "float32"
    name = checkpoint_dtype(value) if isinstance(value, str) else None
    if name is None:
        raise InvalidConfig(
            f"torch_dtype {str(value)[:40]!r} is not a checkpoint dtype this service knows "
            "(bfloat16, float16, float32)",
            field="torch_dtype",
        )
    return name


def _build(r: ConfigReader, wrapper: str | None) -> Architecture:
    modeling, schema = r.family.modeling, r.family.schema
    hidden = r.integer("hidden_size", high=Bounds.HIDDEN)
    layers = r.integer("num_hidden_layers", high=Bounds.LAYERS)
    vocab = r.integer("vocab_size", high=Bounds.VOCAB)
    heads = r.integer("num_attention_heads", high=Bounds.HEADS)
    kv_heads = _KV_HEADS[schema.kv_heads](r, heads)
    if heads % kv_heads != 0:
        raise InvalidConfig(
            f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})",
            field="num_key_value_heads",
        )

    mla = _mla(r, hidden, heads) if modeling.attention is Attention.MLA else None
    if mla is not None:
        head_dim, v_head_dim = mla.qk_head_dim, mla.v_head_dim
    else:
        if r.has(schema.head_dim_key):
            head_dim = r.integer(schema.head_dim_key, high=Bounds.HEAD_DIM)
        else:
            head_dim = _exact_div(hidden, heads)
        v_head_dim = head_dim

    qkv_bias, o_bias = r.trait(modeling.qkv_bias), r.trait(modeling.o_bias)
    mlp_bias = r.trait(modeling.mlp_bias)
    moe = mixers.moe(r, modeling, layers)
    if modeling.mlp is Mlp.QWEN_W:
        # Qwen v1's intermediate_size counts w1 and w2 together.
        intermediate = r.integer("intermediate_size", high=Bounds.INTERMEDIATE * 2) // 2
        if intermediate < 1:
            raise InvalidConfig("intermediate_size must be at least 2", field="intermediate_size")
    elif schema.intermediate_ratio is not None and not r.has("intermediate_size"):
        intermediate = schema.intermediate_ratio * hidden
        r.assumptions.append(
            f"{r.keys_for('intermediate_size')[0]} not in config; used "
            f"{schema.intermediate_ratio} x hidden_size = {intermediate} (transformers)"
        )
    else:
        intermediate = r.integer("intermediate_size", high=Bounds.INTERMEDIATE)

    act = r.raw("hidden_act")
    if act is None:
        act = "silu"
    if not isinstance(act, str):
        raise InvalidConfig("hidden_act must be a string", field="hidden_act")

    qk_norm = None
    if modeling.qk_norm is not None and r.trait(modeling.qk_norm.enabled):
        qk_norm = "per_head" if modeling.qk_norm.per_head else "full_width"
    window, layer_types = layer_layout.layer_types(r, modeling, layers)
    if modeling.last_layer_full and layer_types and layer_types[-1] == SLIDING_ATTENTION:
        layer_types = (*layer_types[:-1], FULL_ATTENTION)
    global_attention = (
        layer_layout.global_attention(r, heads, kv_heads, layer_types)
        if modeling.global_attention
        else None
    )
    kv_shared = layer_layout.kv_shared_layers(r, layer_types) if modeling.kv_sharing else ()
    per_layer_input = per_layer_vocab = 0
    if modeling.per_layer_embeddings:
        per_layer_input = r.integer("hidden_size_per_layer_input", low=0, high=Bounds.HIDDEN)
        if per_layer_input:
            per_layer_vocab = r.integer("vocab_size_per_layer_input", high=Bounds.VOCAB)
    cross: tuple[int, ...] = ()
    if modeling.cross_attention:
        cross = tuple(sorted(set(r.int_list("cross_attention_layers", layers - 1))))
        if not cross and r.raw("cross_attention_layers") is None:
            cross = tuple(r.family.schema.defaults.get("cross_attention_layers", ()))
            r.assumptions.append(
                f"cross_attention_layers not in config; used the {r.model_type} default "
                f"{list(cross)} (transformers)"
            )
        if any(i >= layers for i in cross):
            raise InvalidConfig(
                f"cross_attention_layers must index the {layers} layers",
                field="cross_attention_layers",
            )
    indexer = layer_layout.indexer(r, layers) if modeling.indexer else None
    if indexer is not None and (mla is None or mla.q_lora_rank is None):
        raise InvalidConfig(
            "the sparse-attention indexer projects the query latent: q_lora_rank is required",
            field="q_lora_rank",
        )
    wide: tuple[int, ...] = ()
    if modeling.double_wide_shared_mlp and r.flag("use_double_wide_mlp"):
        wide = kv_shared
    norm_names = _NORM_RULES[modeling.norm_rule](r)
    linear = None
    if LINEAR_ATTENTION in layer_types:
        linear = (
            mixers.kda(r)
            if modeling.linear_mixer is LinearMixer.KDA
            else mixers.linear_attention(r)
        )
    chunk = None
    if CHUNKED_ATTENTION in layer_types:
        chunk = r.opt_int("attention_chunk_size", high=Bounds.WINDOW)
    _note_mtp_layers(r, layers)

    max_pos = r.raw("max_position_embeddings")
    max_pos = (
        None
        if max_pos is None
        else check_int(max_pos, "max_position_embeddings", 1, Bounds.POSITIONS)
    )
    archs = r.config.get("architectures")
    embedding_size = None
    if schema.embedding_size_key is not None:
        embedding_size = r.opt_int(schema.embedding_size_key, high=Bounds.HIDDEN)
        embedding_size = None if embedding_size == hidden else embedding_size
    positions = 0
    if modeling.position_table_offset is not None:
        if max_pos is None:
            raise InvalidConfig(
                "max_position_embeddings is required: it sizes the learned position table",
                field="max_position_embeddings",
            )
        positions = max_pos + modeling.position_table_offset
    attn_cap = final_cap = None
    if modeling.softcapping:
        attn_cap = r.opt_float("attn_logit_softcapping", low=0.0, high=Bounds.SOFTCAP)
        final_cap = r.opt_float("final_logit_softcapping", low=0.0, high=Bounds.SOFTCAP)

    return Architecture(
        model_type=r.model_type,
        family=r.family,
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        intermediate_size=intermediate,
        gated_mlp=modeling.mlp not in _PLAIN_MLPS,
        hidden_act=act,
        tie_word_embeddings=r.flag("tie_word_embeddings"),
        attention_bias=qkv_bias,
        attention_out_bias=o_bias,
        mlp_bias=mlp_bias,
        lm_head_bias=r.trait(modeling.lm_head_bias),
        norm=modeling.norm,
        norm_bias=modeling.norm_bias,
        norms_per_layer=len(norm_names),
        qk_norm=qk_norm,
        dtype=_dtype(r),
        max_position_embeddings=max_pos,
        sliding_window=window,
        layer_types=layer_types,
        mla=mla,
        moe=moe,
        quantization=parse_quantization(r.config.get("quantization_config")),
        attention_sinks=modeling.sinks,
        fused_qkv=modeling.attention in (Attention.FUSED_QKV, Attention.QWEN_C_ATTN),
        fused_gate_up=modeling.mlp is Mlp.FUSED_GATE_UP,
        wrapper_model_type=wrapper,
        architectures=tuple(
            identifier(a, "architectures") for a in str_tuple(archs, "architectures")
        ),
        assumptions=tuple(r.assumptions),
        rope_scaling_factor=_rope_scaling_factor(r),
        **_rope_spec(r),
        model_max_length=_optional_positions(r, "model_max_length"),
        attn_logit_softcapping=attn_cap,
        final_logit_softcapping=final_cap,
        attention_softmax_fp32=r.trait(modeling.softmax_fp32),
        layer_norm_names=norm_names,
        linear_attention=linear,
        attention_chunk_size=chunk,
        embedding_size=embedding_size,
        position_embeddings=positions,
        final_norm=r.trait(modeling.final_norm),
        global_attention=global_attention,
        kv_shared_layers=kv_shared,
        per_layer_input=per_layer_input,
        per_layer_vocab=per_layer_vocab,
        wide_mlp_layers=wide,
        cross_attention_layers=cross,
        indexer=indexer,
    )


def _standard_kv_heads(r: ConfigReader, heads: int) -> int:
    if r.has("num_key_value_heads") or "num_key_value_heads" in r.family.schema.defaults:
        return r.integer("num_key_value_heads", high=Bounds.HEADS)
    return heads


def _falcon_kv_heads(r: ConfigReader, heads: int) -> int:
    """Falcon: the grouped heads of new_decoder_architecture (num_kv_heads, every head when
    absent), else one shared head with multi_query, else every head."""
    if r.flag("new_decoder_architecture"):
        return r.integer("num_key_value_heads", high=Bounds.HEADS, default=heads)
    return 1 if r.flag("multi_query") else heads


_KV_HEADS: dict[KvHeads, Callable[[ConfigReader, int], int]] = {
    KvHeads.STANDARD: _standard_kv_heads,
    KvHeads.FALCON: _falcon_kv_heads,
}


def _fixed_norms(r: ConfigReader) -> tuple[str, ...]:
    extra = tuple(name for name, flag in r.family.modeling.conditional_norms if r.trait(flag))
    return (*r.family.modeling.layer_norms, *extra)


def _falcon_norms(r: ConfigReader) -> tuple[str, ...]:
    if not r.flag("parallel_attn"):
        return ("input_layernorm", "post_attention_layernorm")
    count = r.config.get("num_ln_in_parallel_attn")
    if count is None and r.flag("new_decoder_architecture"):
        count = 2
    return ("ln_attn", "ln_mlp") if count == 2 else ("input_layernorm",)


_NORM_RULES: dict[NormRule, Callable[[ConfigReader], tuple[str, ...]]] = {
    NormRule.FIXED: _fixed_norms,
    NormRule.FALCON: _falcon_norms,
}


def _note_mtp_layers(r: ConfigReader, layers: int) -> None:
    """Multi-token-prediction layers a checkpoint carries beyond num_hidden_layers."""
    key = r.family.schema.mtp_key
    value = r.config.get(key) if key is not None else None
    if key is None or value is None:
        return
    count = check_int(value, key, 0, Bounds.LAYERS)
    if count:
        r.assumptions.append(
            f"{key} {count}: the checkpoint's {count} multi-token-prediction layer(s) "
            f"(model.layers.{layers} on) are not counted: transformers does not build them "
            "and vLLM loads them only as the draft model of MTP speculative decoding"
        )


def _rope_scaling_factor(r: ConfigReader) -> float:
    """The factor of a linear / dynamic-NTK rope scaling (``rope_scaling`` or transformers 5's
    ``rope_parameters``, per layer type for Gemma 3: the full-attention entry), else 1.0: the
    scaled range a precomputed rotary table spans."""
    spec = _rope_section(r)
    if spec is None:
        return 1.0
    kind = spec.get("rope_type", spec.get("type"))
    factor = spec.get("factor")
    if kind not in ("linear", "dynamic") or isinstance(factor, bool):
        return 1.0
    if not isinstance(factor, int | float) or not 1.0 <= factor <= 1024.0:
        raise InvalidConfig("rope_scaling.factor must be between 1 and 1024", field="rope_scaling")
    return float(factor)


def _rope_section(r: ConfigReader) -> Mapping[str, Any] | None:
    spec = r.raw("rope_scaling")
    if isinstance(spec, Mapping) and isinstance(spec.get("full_attention"), Mapping):
        spec = spec["full_attention"]
    return spec if isinstance(spec, Mapping) else None


def _rope_spec(r: ConfigReader) -> dict[str, Any]:
    """The config's rope scaling as written: type, factor and original context (any type)."""
    spec = _rope_section(r)
    if spec is None:
        return {"rope_type": None, "rope_factor": 1.0, "original_max_position_embeddings": None}
    kind = spec.get("rope_type", spec.get("type"))
    factor = spec.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1024:
        factor = 1.0
    original = spec.get("original_max_position_embeddings")
    if original is None:
        original = r.config.get("original_max_position_embeddings")
    return {
        "rope_type": kind if isinstance(kind, str) else None,
        "rope_factor": float(factor),
        "original_max_position_embeddings": (
            None
            if original is None
            else check_int(original, "original_max_position_embeddings", 1, Bounds.POSITIONS)
        ),
    }


def _optional_positions(r: ConfigReader, key: str) -> int | None:
    value = r.config.get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return None  # absent, or a tokenizer-style sentinel
    return value if 0 < value <= Bounds.POSITIONS else None
