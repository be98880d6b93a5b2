"""What a family's ``config.json`` says and how: its schema, as transformers' ``configuration_X``.

A :class:`ConfigSchema` holds what a family's ``*Config`` class knows about its keys, apart
from what its modeling code builds from them (:mod:`.modeling_traits`): the ``model_type`` it
is registered under, the keys it reads under other names (transformers' ``attribute_map``),
the defaults it applies to keys a config leaves out, the key of the head size, how the config
gives its key/value heads, a width it derives when the key is absent, the switch that turns
its sliding window on, the key that counts extra multi-token-prediction layers, and whether
latent attention's value head size defaults to the standard head size.
:class:`~.config_reader.ConfigReader` reads a config through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

__all__ = ["ConfigSchema", "KvHeads"]


class KvHeads(StrEnum):
    """How the config says how many key/value heads there are."""

    STANDARD = "standard"  # num_key_value_heads (family keys), else every head
    # Falcon: num_kv_heads with new_decoder_architecture, else 1 with multi_query, else all.
    FALCON = "falcon"


@dataclass(frozen=True)
class ConfigSchema:
    """The keys of one family's config class (module docstring)."""

    model_type: str = ""  # the config's model_type, when not the family's name (gemma3_text)
    head_dim_key: str = "head_dim"
    # Canonical key -> the keys this family's config uses for it, in order of precedence.
    keys: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    kv_heads: KvHeads = KvHeads.STANDARD
    # The dense MLP width as a multiple of hidden_size when the config gives none (Falcon).
    intermediate_ratio: int | None = None
    # A config flag that must be on for the sliding window to apply (Qwen's use_sliding_window).
    sliding_window_switch: str | None = None
    # Checkpoints carry this many multi-token-prediction layers beyond num_hidden_layers
    # (config key); neither transformers nor vLLM's main model builds them.
    mtp_key: str | None = None
    # The key of the token embedding's width when it may differ from hidden_size (OPT's
    # word_embed_proj_dim); None: the embedding is hidden_size wide.
    embedding_size_key: str | None = None
    # Latent attention's value head size when the config gives none: the standard head size
    # hidden_size // num_attention_heads (MiniCPM3Config) instead of a required key.
    v_head_dim_from_heads: bool = False
