"""Typed, bounded reads of a Hugging Face ``config.json``.

A :class:`ConfigReader` answers for one config and its family: it looks a canonical key up
under the names the config may use (the family's own ``keys``, then the aliases below, as
transformers' ``attribute_map`` maps foreign names onto canonical ones), checks type and
bounds, falls back to the family's default and records each default it applied as an
assumption. Errors name the key as the family's config spells it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from service.estimator.errors import InvalidConfig
from service.estimator.model.family_traits import Family
from service.estimator.model.modeling_traits import Flag

__all__ = [
    "ALIASES",
    "MAX_IDENTIFIER_CHARS",
    "Bounds",
    "ConfigReader",
    "check_int",
    "identifier",
    "module_pattern_matches",
    "str_tuple",
]


class Bounds:
    """Limits on every size read from a config: generous for real models, small enough that
    the arithmetic downstream stays meaningful."""

    HIDDEN = 65_536
    LAYERS = 1_024
    VOCAB = 4_194_304
    HEADS = 1_024
    HEAD_DIM = 4_096
    INTERMEDIATE = 1_048_576
    EXPERTS = 1_024
    RANK = 65_536
    POSITIONS = 1 << 26
    WINDOW = 1 << 26
    SOFTCAP = 1e6


#: Canonical key -> other names configs use for it (any family), in order of precedence.
ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "hidden_act": ("hidden_activation",),
        "torch_dtype": ("dtype",),
        "num_experts": ("num_local_experts", "n_routed_experts"),
        "hidden_size": ("n_embd", "d_model"),
        "num_hidden_layers": ("n_layer", "num_layers"),
        "num_attention_heads": ("n_head",),
        "rope_scaling": ("rope_parameters",),
    }
)

# The longest value echoed back in an error message: a config may hold megabytes.
_ECHO_CHARS = 60


def echo(value: Any) -> str:
    """A bounded repr of a config value for an error message."""
    text = repr(value)
    return text if len(text) <= _ECHO_CHARS else text[: _ECHO_CHARS - 3] + "..."


def check_int(value: Any, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidConfig(f"{key} must be an integer, got {echo(value)}", field=key)
    if isinstance(value, float) and not value.is_integer():
        raise InvalidConfig(f"{key} must be an integer, got {echo(value)}", field=key)
    number = int(value)
    if number < low or number > high:
        raise InvalidConfig(f"{key} must be between {low} and {high}, got {number}", field=key)
    return number


# Longest identifier (a model_type, a class name in architectures) read: real ones are tens of
# characters, and an identifier is echoed back in answers and problems.
MAX_IDENTIFIER_CHARS = 128


def identifier(value: str, key: str) -> str:
    """``value`` if it is short enough to be a config identifier, else InvalidConfig."""
    if len(value) > MAX_IDENTIFIER_CHARS:
        raise InvalidConfig(
            f"{key} is {len(value)} characters long; an identifier has at most "
            f"{MAX_IDENTIFIER_CHARS}",
            field=key,
        )
    return value


def str_tuple(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise InvalidConfig(f"{key} must be a list of module names", field=key)
    return tuple(value)


def module_pattern_matches(pattern: str, path: str) -> bool:
    """A quantizer exclusion pattern (``re:...``, a glob, or a substring) against a path."""
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], path) is not None
        except re.error:
            return False
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + ".*")
    return pattern in path


class ConfigReader:
    """Reads typed, bounded values from one config, recording the defaults it applies."""

    def __init__(self, config: Mapping[str, Any], family: Family, model_type: str) -> None:
        self.config = config
        self.family = family
        self.model_type = model_type
        self.assumptions: list[str] = []

    def keys_for(self, key: str) -> tuple[str, ...]:
        """The config keys that may hold canonical ``key``, in order of precedence."""
        own = self.family.schema.keys.get(key)
        if own is not None:
            return own
        return (key, *ALIASES.get(key, ()))

    def _lookup(self, key: str) -> tuple[str, Any]:
        """(the key found, its value), or (the family's spelling, None) when absent."""
        names = self.keys_for(key)
        for name in names:
            if self.config.get(name) is not None:
                return name, self.config[name]
        return names[0], None

    def has(self, key: str) -> bool:
        return self._lookup(key)[1] is not None

    def raw(self, key: str) -> Any:
        return self._lookup(key)[1]

    def present(self, key: str) -> bool:
        """Whether the config names ``key`` at all (null counts: it can mean "off")."""
        return any(name in self.config for name in self.keys_for(key))

    def _default(self, key: str, name: str) -> Any:
        if key not in self.family.schema.defaults:
            raise InvalidConfig(f"config is missing required field {name!r}", field=name)
        value = self.family.schema.defaults[key]
        note = f"{name} not in config; used the {self.model_type} default {value!r} (transformers)"
        if note not in self.assumptions:
            self.assumptions.append(note)
        return value

    def integer(self, key: str, *, low: int = 1, high: int, default: Any = ...) -> int:
        name, value = self._lookup(key)
        if value is None:
            if default is not ...:
                return int(default)
            value = self._default(key, name)
        return check_int(value, name, low, high)

    def _optional(self, key: str) -> tuple[str, Any]:
        """The config's value, else the family default, else None (null is a value too)."""
        for name in self.keys_for(key):
            if name in self.config:
                return name, self.config[name]
        name = self.keys_for(key)[0]
        if key in self.family.schema.defaults:
            return name, self._default(key, name)
        return name, None

    def opt_int(self, key: str, *, low: int = 1, high: int) -> int | None:
        """An int that may legitimately be null (q_lora_rank, sliding_window)."""
        name, value = self._optional(key)
        return None if value is None else check_int(value, name, low, high)

    def opt_float(self, key: str, *, low: float, high: float) -> float | None:
        """A positive float that may legitimately be null (softcapping: null means off)."""
        name, value = self._optional(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidConfig(f"{name} must be a number or null, got {echo(value)}", field=name)
        number = float(value)
        if not low < number <= high:
            raise InvalidConfig(
                f"{name} must be above {low:g} and at most {high:g}, got {echo(value)}", field=name
            )
        return number

    def flag(self, key: str) -> bool:
        name, value = self._lookup(key)
        if value is None:
            value = self._default(key, name)
        if not isinstance(value, bool):
            raise InvalidConfig(f"{name} must be true or false, got {echo(value)}", field=name)
        return value

    def trait(self, flag: Flag) -> bool:
        """A family's boolean trait: its constant, or its config key (negated if so marked)."""
        if flag.key is None:
            return flag.const
        return self.flag(flag.key) != flag.negate

    def int_list(self, key: str, high: int) -> tuple[int, ...]:
        name, value = self._lookup(key)
        if value is None:
            return ()
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise InvalidConfig(f"{name} must be a list of layer indices", field=name)
        return tuple(check_int(v, name, 0, high) for v in value)
