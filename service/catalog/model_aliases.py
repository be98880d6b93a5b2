"""The alias rules as data: which names the catalog does not hold are read as models it does.

The rules live in ``model_aliases.toml`` next to this module, one table per kind of rule
(publishers of others' weights, renamed organisations and prefixes, packaging suffixes,
quantization-format suffixes with the ``quantization_config`` each implies, formats the
service does not price, variant suffixes), every row with the reason it holds. This module
reads and checks them once at start-up (a bad file stops the service, as a bad catalog record
does); :mod:`.name_resolver` applies them to a name.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from service.estimator.errors import EstimatorError
from service.estimator.model.quantization import parse_quantization

__all__ = [
    "DEFAULT_RULES_PATH",
    "AliasRules",
    "AliasRulesError",
    "Publisher",
    "QuantFormat",
    "Renamed",
    "SameWeights",
    "Unpriced",
    "Variant",
    "load_alias_rules",
]

DEFAULT_RULES_PATH = Path(__file__).with_name("model_aliases.toml")

DTYPES = ("float16", "bfloat16", "float32")
_GGUF_MIXES = ("stock", "custom")


class AliasRulesError(Exception):
    """The rules file is malformed; raised at start-up, never per request."""


@dataclass(frozen=True, slots=True)
class Publisher:
    org: str
    reason: str
    gguf_imatrix: bool = False
    gguf_mix: str = "stock"


@dataclass(frozen=True, slots=True)
class Renamed:
    org: str | None  # None: an organisation rename (``old``/``new`` are organisations)
    old: str
    new: str
    reason: str


@dataclass(frozen=True, slots=True)
class SameWeights:
    suffix: str
    reason: str
    torch_dtype: str | None = None
    unquantized: bool = False  # a dequantized copy: the original's quantization does not hold


@dataclass(frozen=True, slots=True)
class QuantFormat:
    """A quantized copy named by a suffix: the format, the config it implies, why."""

    name: str
    suffixes: tuple[str, ...]
    reason: str
    quantization_config: Mapping[str, Any]
    torch_dtype: str | None = None


@dataclass(frozen=True, slots=True)
class Unpriced:
    suffixes: tuple[str, ...]
    reason: str
    orgs: tuple[str, ...] = ()  # empty: any organisation


@dataclass(frozen=True, slots=True)
class Variant:
    suffix: str
    reason: str


@dataclass(frozen=True, slots=True)
class AliasRules:
    publishers: Mapping[str, Publisher]  # lower-cased org -> publisher
    renamed_orgs: tuple[Renamed, ...]
    renamed: tuple[Renamed, ...]
    same_weights: tuple[SameWeights, ...]
    formats: tuple[QuantFormat, ...]
    unpriced: tuple[Unpriced, ...]
    variants: tuple[Variant, ...]

    def publisher(self, org: str | None) -> Publisher | None:
        return None if org is None else self.publishers.get(org.lower())


# ---- loading -------------------------------------------------------------------------------


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise AliasRulesError(f"{where}: {key} must be a non-empty string")
    return value


def _suffix(value: str, where: str) -> str:
    if not value.startswith(("-", ".")) or len(value) < 2:
        raise AliasRulesError(f"{where}: suffix {value!r} must start with '-' or '.'")
    return value


def _suffixes(raw: Mapping[str, Any], where: str) -> tuple[str, ...]:
    values = raw.get("suffixes")
    if not isinstance(values, list) or not values:
        raise AliasRulesError(f"{where}: suffixes must be a non-empty list")
    out = tuple(_suffix(str(v), where) for v in values)
    # Longest first, so that `-GPTQ-Int4` is taken before `-GPTQ`.
    return tuple(sorted(dict.fromkeys(s.lower() for s in out), key=len, reverse=True))


def _dtype(raw: Mapping[str, Any], where: str) -> str | None:
    value = raw.get("torch_dtype")
    if value is not None and value not in DTYPES:
        raise AliasRulesError(f"{where}: torch_dtype must be one of {', '.join(DTYPES)}")
    return value


def _table(doc: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    rows = doc.get(name, [])
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise AliasRulesError(f"[[{name}]] must be an array of tables")
    return rows


def _flag(raw: Mapping[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise AliasRulesError(f"{where}: {key} must be true or false")
    return value


def _publisher(raw: Mapping[str, Any], where: str) -> Publisher:
    mix = raw.get("gguf_mix", "stock")
    if mix not in _GGUF_MIXES:
        raise AliasRulesError(f"{where}: gguf_mix must be one of {', '.join(_GGUF_MIXES)}")
    imatrix = _flag(raw, "gguf_imatrix", where)
    return Publisher(_text(raw, "org", where), _text(raw, "reason", where), imatrix, mix)


def _format(raw: Mapping[str, Any], where: str) -> QuantFormat:
    qc = raw.get("quantization_config")
    if not isinstance(qc, Mapping):
        raise AliasRulesError(f"{where}: quantization_config must be a table")
    try:
        parse_quantization(qc)
    except EstimatorError as exc:
        raise AliasRulesError(f"{where}: quantization_config: {exc.detail}") from exc
    frozen = json.loads(json.dumps(qc))  # plain dicts and lists, detached from the document
    return QuantFormat(
        name=_text(raw, "name", where),
        suffixes=_suffixes(raw, where),
        reason=_text(raw, "reason", where),
        quantization_config=MappingProxyType(frozen),
        torch_dtype=_dtype(raw, where),
    )


def load_alias_rules(path: str | Path | None = None) -> AliasRules:
    """Read and check the rules file (``model_aliases.toml`` by default)."""
    file = Path(path) if path is not None else DEFAULT_RULES_PATH
    try:
        doc = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise AliasRulesError(f"{file.name}: cannot read: {exc}") from exc
    known = {"publisher", "renamed_org", "renamed", "same_weights", "format", "unpriced", "variant"}
    unknown = set(doc) - known
    if unknown:
        raise AliasRulesError(f"{file.name}: unknown tables {', '.join(sorted(unknown))}")
    publishers: dict[str, Publisher] = {}
    for n, raw in enumerate(_table(doc, "publisher")):
        p = _publisher(raw, f"publisher[{n}]")
        if p.org.lower() in publishers:
            raise AliasRulesError(f"publisher[{n}]: {p.org} is listed twice")
        publishers[p.org.lower()] = p
    renamed_orgs = tuple(
        Renamed(None, _text(r, "old", w), _text(r, "new", w), _text(r, "reason", w))
        for n, r in enumerate(_table(doc, "renamed_org"))
        for w in (f"renamed_org[{n}]",)
    )
    renamed = tuple(
        Renamed(_text(r, "org", w), _text(r, "old", w), _text(r, "new", w), _text(r, "reason", w))
        for n, r in enumerate(_table(doc, "renamed"))
        for w in (f"renamed[{n}]",)
    )
    same = tuple(
        SameWeights(
            _suffix(_text(r, "suffix", w), w),
            _text(r, "reason", w),
            _dtype(r, w),
            _flag(r, "unquantized", w),
        )
        for n, r in enumerate(_table(doc, "same_weights"))
        for w in (f"same_weights[{n}]",)
    )
    formats = tuple(_format(r, f"format[{n}]") for n, r in enumerate(_table(doc, "format")))
    unpriced = tuple(
        Unpriced(
            _suffixes(r, w),
            _text(r, "reason", w),
            tuple(str(o).lower() for o in r.get("orgs", [])),
        )
        for n, r in enumerate(_table(doc, "unpriced"))
        for w in (f"unpriced[{n}]",)
    )
    variants = tuple(
        Variant(_suffix(_text(r, "suffix", w), w), _text(r, "reason", w))
        for n, r in enumerate(_table(doc, "variant"))
        for w in (f"variant[{n}]",)
    )
    return AliasRules(
        MappingProxyType(publishers), renamed_orgs, renamed, same, formats, unpriced, variants
    )
