"""Which layer is what, read from a config: each layer's token mixer (full, sliding, chunked or
linear attention) by the family's layout rule, the full-attention layers' own geometry (Gemma
4), the layers that read another layer's cache (Gemma 4's KV sharing) and the layers that run
DeepSeek sparse attention's indexer. :mod:`.build` calls these while it builds an
:class:`~.architecture.Architecture`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.estimator.errors import InvalidConfig
from service.estimator.model.config_reader import Bounds, ConfigReader, check_int
from service.estimator.model.mixers import kda_settings
from service.estimator.model.modeling_traits import LayerLayout, Modeling
from service.estimator.model.shapes import (
    CHUNKED_ATTENTION,
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    GlobalAttentionSpec,
    IndexerSpec,
)

__all__ = ["global_attention", "indexer", "kv_shared_layers", "layer_types"]


def global_attention(
    r: ConfigReader, heads: int, kv_heads: int, layer_types: tuple[str, ...]
) -> GlobalAttentionSpec | None:
    """Gemma 4's full-attention geometry: ``global_head_dim`` (512 unless given) and, with
    ``attention_k_eq_v``, ``num_global_key_value_heads``; or transformers 5.24's serialized
    ``per_layer_config`` entries of the full layers, which must agree."""
    full = [i for i, t in enumerate(layer_types) if t == FULL_ATTENTION]
    if not full:
        return None
    k_eq_v = r.flag("attention_k_eq_v")
    table = r.config.get("per_layer_config")
    if isinstance(table, Mapping) and table:
        rows = {int(k): v for k, v in table.items() if str(k).isdigit() and isinstance(v, Mapping)}
        picked = {
            (rows[i].get("head_dim"), rows[i].get("num_key_value_heads")) for i in full if i in rows
        }
        if len(picked) != 1 or len({i for i in full if i in rows}) != len(full):
            raise InvalidConfig(
                "per_layer_config must give every full-attention layer the same head_dim and "
                "num_key_value_heads",
                field="per_layer_config",
            )
        head_dim, kv = picked.pop()
        head_dim = check_int(head_dim, "per_layer_config.head_dim", 1, Bounds.HEAD_DIM)
        kv = kv_heads if kv is None else check_int(kv, "per_layer_config.num_key_value_heads",
                                                   1, Bounds.HEADS)  # fmt: skip
    else:
        head_dim = r.integer("global_head_dim", high=Bounds.HEAD_DIM)
        global_kv = r.config.get("num_global_key_value_heads") if k_eq_v else None
        kv = (
            kv_heads
            if global_kv is None
            else check_int(global_kv, "num_global_key_value_heads", 1, Bounds.HEADS)
        )
    if heads % kv:
        raise InvalidConfig(
            f"num_attention_heads ({heads}) must be a multiple of the full-attention layers' "
            f"key/value heads ({kv})",
            field="num_global_key_value_heads",
        )
    return GlobalAttentionSpec(head_dim=head_dim, kv_heads=kv, k_eq_v=k_eq_v)


def kv_shared_layers(r: ConfigReader, layer_types: tuple[str, ...]) -> tuple[int, ...]:
    """Gemma 4: the last ``num_kv_shared_layers`` layers read the cache of the last earlier
    layer of their type, so every type among them needs such a producer (transformers'
    ``kv_sharing_modes``)."""
    layers = len(layer_types)
    n = r.integer("num_kv_shared_layers", low=0, high=layers)
    if not n:
        return ()
    first = layers - n
    if n < layers and set(layer_types[first:]) - set(layer_types[:first]):
        raise InvalidConfig(
            "num_kv_shared_layers leaves a shared layer type with no earlier layer of its type "
            "to read keys and values from",
            field="num_kv_shared_layers",
        )
    return tuple(range(first, layers))


def indexer(r: ConfigReader, layers: int) -> IndexerSpec:
    """The lightning indexer: its heads and key width, and the layers that run it:
    ``indexer_types`` (``"full"`` runs it, ``"shared"`` reuses the previous full layer's
    selection), else the ``index_topk_pattern`` string (``F``/``S``), else every
    ``index_topk_freq``-th layer from ``index_skip_topk_offset`` (every layer by default;
    transformers' ``GlmMoeDsaConfig``; DeepSeek-V3.2 runs it on every layer)."""
    kinds = r.raw("indexer_types")
    pattern = r.raw("index_topk_pattern")
    if kinds is None and isinstance(pattern, str):
        kinds = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern]
    if kinds is None:
        freq = max(r.integer("index_topk_freq", default=1, high=Bounds.LAYERS), 1)
        offset = r.integer("index_skip_topk_offset", default=2, low=0, high=Bounds.LAYERS)
        full = tuple(i for i in range(layers) if max(i - offset + 1, 0) % freq == 0)
    else:
        if not isinstance(kinds, Sequence) or isinstance(kinds, str) or len(kinds) != layers:
            raise InvalidConfig(
                f"indexer_types must list 'full' or 'shared' for each of the {layers} layers",
                field="indexer_types",
            )
        full = tuple(i for i, k in enumerate(kinds) if k == "full")
    return IndexerSpec(
        n_heads=r.integer("index_n_heads", high=Bounds.HEADS),
        head_dim=r.integer("index_head_dim", high=Bounds.HEAD_DIM),
        topk=r.integer("index_topk", high=Bounds.POSITIONS),
        layers=full,
    )


def kimi_linear_layer_types(r: ConfigReader, layers: int) -> tuple[str, ...]:
    """Kimi-Linear: ``layer_types``, else ``linear_attn_config``'s 1-indexed
    ``full_attn_layers`` and ``kda_layers``, else full attention on layers 4, 8, ...
    (transformers' KimiLinearConfig)."""
    if r.raw("layer_types") is not None:
        return explicit_layer_types(r, layers, None, (FULL_ATTENTION, LINEAR_ATTENTION))
    nested = kda_settings(r)
    full, kda = nested.get("full_attn_layers"), nested.get("kda_layers")
    if full is not None and kda is not None:
        types: list[str | None] = [None] * layers
        for kind, indices in ((FULL_ATTENTION, full), (LINEAR_ATTENTION, kda)):
            if not isinstance(indices, Sequence) or isinstance(indices, str):
                raise InvalidConfig(
                    "linear_attn_config layer lists must be lists", field="linear_attn_config"
                )
            for i in indices:
                types[check_int(i, "linear_attn_config layers", 1, layers) - 1] = kind
        if None in types:
            raise InvalidConfig(
                "linear_attn_config's full_attn_layers and kda_layers must cover every layer",
                field="linear_attn_config",
            )
        return tuple(t for t in types if t is not None)
    return tuple(FULL_ATTENTION if i and i % 4 == 0 else LINEAR_ATTENTION for i in range(layers))


def explicit_layer_types(
    r: ConfigReader,
    layers: int,
    window: int | None,
    allowed: tuple[str, ...] = (FULL_ATTENTION, SLIDING_ATTENTION),
) -> tuple[str, ...]:
    explicit = r.raw("layer_types")
    if not isinstance(explicit, Sequence) or isinstance(explicit, str):
        raise InvalidConfig("layer_types must be a list", field="layer_types")
    types = tuple(explicit)
    if len(types) != layers:
        raise InvalidConfig(
            f"layer_types has {len(types)} entries for {layers} layers", field="layer_types"
        )
    for t in types:
        if t not in allowed:
            raise InvalidConfig(
                f"layer type {str(t)[:40]!r} is not supported ({', '.join(allowed)})",
                field="layer_types",
            )
    if SLIDING_ATTENTION in types and window is None:
        raise InvalidConfig(
            "layer_types has sliding layers but the config has no sliding_window",
            field="sliding_window",
        )
    return types


# Layouts whose config may list its layer types explicitly (transformers' `layer_types`).
_EXPLICIT_TYPES = frozenset(
    {LayerLayout.QWEN2, LayerLayout.QWEN2_MOE, LayerLayout.ALTERNATING, LayerLayout.GEMMA3}
)


def llama4_layer_types(r: ConfigReader, layers: int) -> tuple[str, ...]:
    """Llama 4: layers that apply RoPE attend within chunks (when attention_chunk_size is
    set), the NoPE layers attend to every token. ``no_rope_layers`` lists 1 for a RoPE layer;
    empty or absent, every no_rope_layer_interval-th layer is NoPE (transformers)."""
    if r.raw("layer_types") is not None:
        kinds = (FULL_ATTENTION, CHUNKED_ATTENTION)
        return explicit_layer_types(r, layers, None, kinds)
    flags = r.int_list("no_rope_layers", 1)
    if flags and len(flags) != layers:
        raise InvalidConfig(
            f"no_rope_layers has {len(flags)} entries for {layers} layers", field="no_rope_layers"
        )
    if not flags:
        every = r.integer("no_rope_layer_interval", high=Bounds.LAYERS)
        flags = tuple(int((i + 1) % every != 0) for i in range(layers))
    if r.opt_int("attention_chunk_size", high=Bounds.WINDOW) is None:
        return (FULL_ATTENTION,) * layers
    return tuple(CHUNKED_ATTENTION if rope else FULL_ATTENTION for rope in flags)


def layer_types(
    r: ConfigReader, modeling: Modeling, layers: int
) -> tuple[int | None, tuple[str, ...]]:
    """(sliding window, per-layer attention type) by the family's layout rule."""
    layout = modeling.layout
    if layout is LayerLayout.FULL:
        return None, (FULL_ATTENTION,) * layers
    if layout is LayerLayout.LLAMA4_CHUNKED:
        return None, llama4_layer_types(r, layers)
    if layout is LayerLayout.KIMI_LINEAR:
        return None, kimi_linear_layer_types(r, layers)
    if layout is LayerLayout.HYBRID_LINEAR:
        if r.raw("layer_types") is not None:
            kinds = (FULL_ATTENTION, LINEAR_ATTENTION)
            return None, explicit_layer_types(r, layers, None, kinds)
        every = r.integer("full_attention_interval", high=Bounds.LAYERS)
        return None, tuple(
            LINEAR_ATTENTION if (i + 1) % every else FULL_ATTENTION for i in range(layers)
        )
    window = r.opt_int("sliding_window", low=0, high=Bounds.WINDOW) or None
    switch = r.family.schema.sliding_window_switch
    if switch is not None and not r.flag(switch):
        window = None
    if layout in _EXPLICIT_TYPES and r.raw("layer_types") is not None:
        return window, explicit_layer_types(r, layers, window)
    if layout is LayerLayout.ALL_SLIDING:
        kind = SLIDING_ATTENTION if window is not None else FULL_ATTENTION
        return window, (kind,) * layers
    if layout in (LayerLayout.QWEN2, LayerLayout.QWEN2_MOE):
        max_window = r.integer("max_window_layers", low=0, high=Bounds.LAYERS)
        if layout is LayerLayout.QWEN2:
            sliding = [window is not None and i >= max_window for i in range(layers)]
        else:
            sliding = [
                window is not None and (i + 1) % 2 == 1 and i < max_window for i in range(layers)
            ]
        types = tuple(SLIDING_ATTENTION if s else FULL_ATTENTION for s in sliding)
        return (window if SLIDING_ATTENTION in types else None), types
    period = (
        r.integer("sliding_window_pattern", high=Bounds.LAYERS, default=6)
        if layout is LayerLayout.GEMMA3
        else modeling.alternating_period
    )
    if window is None:
        return None, (FULL_ATTENTION,) * layers
    return window, tuple(
        SLIDING_ATTENTION if (i + 1) % period else FULL_ATTENTION for i in range(layers)
    )
