"""The model catalog: Hugging Face configs of well-known models, validated at load.

Each ``models/*.json`` file holds ``{"models": [record, ...]}``; a record names the Hub repo
(``id``), other names it answers to (``aliases``), where its config came from (``source``)
and either

* ``config``: the ``config.json`` fields the estimator reads, under their own names, with the
  checkpoint ``dtype`` (which must match the config's ``torch_dtype``), or
* ``base``: the id of another record whose config it shares (a fine-tune, a mirror, a
  quantized upload), changed by ``config_overrides`` (top-level keys set to these values; a
  nested object is replaced whole) and ``config_drop`` (top-level keys removed, e.g. the
  ``quantization_config`` of an upcast copy). ``dtype`` is then optional and, if given, checked.

A GGUF repository (``bartowski/Llama-3.2-1B-Instruct-GGUF``) is a ``base`` record with a
``gguf`` object: ``files`` maps each quantization tag to its file name (``{"Q4_K_M":
"Llama-3.2-1B-Instruct-Q4_K_M.gguf"}``), ``mix`` says whether the files are llama-quantize's
stock presets (``stock``: priced exactly from the base's config by
:mod:`service.estimator.gguf_quant`) or carry the publisher's own per-tensor overrides
(``custom``: priced with the stock preset and said to be approximate), ``imatrix`` whether an
importance matrix was used, and ``own_output`` whether a tied base's checkpoint still stores
``lm_head`` (then the file has an ``output.weight``). Each file answers to ``<repo>:<tag>``
(llama.cpp's ``-hf`` convention), any case; every tag must be a modelled preset and the base a
shape the preset rule covers, checked at load.

Bases resolve across files in any order and may chain; a cycle or an unknown base stops
start-up. Loading builds every distinct config's :class:`Architecture` and parameter counts
once, so a bad record stops start-up instead of failing a request, and a record keeps its
whole resolved config.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from service.catalog.model_aliases import AliasRules, AliasRulesError, load_alias_rules
from service.catalog.name_resolver import NameMatch, NameResolver
from service.estimator.errors import EstimatorError, NotFound
from service.estimator.gguf_quant import get_preset, quant_model
from service.estimator.model import (
    SUPPORTED_MODEL_TYPES,
    Architecture,
    ParameterCounts,
    count_parameters,
    read_config,
)

__all__ = [
    "CatalogError",
    "GgufRepo",
    "ModelCatalog",
    "ModelEntry",
    "NameMatch",
    "load_model_catalog",
]

DEFAULT_PATH = Path(__file__).parent / "models"

_REQUIRED = ("id", "source")
_OPTIONAL = (
    "aliases",
    "published_parameters",
    "config",
    "dtype",
    "base",
    "config_overrides",
    "config_drop",
    "gguf",
)
_GGUF_KEYS = frozenset({"files", "mix", "imatrix", "own_output"})
GGUF_MIXES = ("stock", "custom")


class CatalogError(Exception):
    """A catalog file or record is malformed; raised at load, never per request."""


@dataclass(frozen=True)
class GgufRepo:
    """A repository of GGUF files of one base model, one file per quantization tag."""

    files: tuple[tuple[str, str], ...]  # (tag as the preset names it, file name)
    mix: str  # "stock" | "custom"
    imatrix: bool
    own_output: bool = False

    def file(self, tag: str) -> tuple[str, str] | None:
        """The (tag, file) answering to ``tag`` in any case."""
        key = tag.strip().upper()
        return next((f for f in self.files if f[0] == key), None)


@dataclass(frozen=True)
class ModelEntry:
    """One catalog model with its architecture and parameter counts computed at load."""

    id: str
    aliases: tuple[str, ...]
    architecture: Architecture
    counts: ParameterCounts
    dtype: str
    source: str
    config: Mapping[str, Any]
    published_parameters: str | None = None
    base: str | None = None
    """The id of the record this one shares its config with, before its overrides."""
    gguf: GgufRepo | None = None
    """For a GGUF repository: its files by quantization tag."""

    @property
    def family(self) -> str:
        return self.architecture.family_name

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


def _lookup_key(name: str) -> str:
    """How a name is looked up: case and surrounding blanks do not matter."""
    return name.strip().lower()


class ModelCatalog:
    """Models by case-insensitive id or alias; other names through the alias rules."""

    def __init__(self, entries: Iterable[ModelEntry], rules: AliasRules | None = None) -> None:
        self._entries: tuple[ModelEntry, ...] = tuple(sorted(entries, key=lambda e: e.id.lower()))
        index: dict[str, ModelEntry] = {}
        for entry in self._entries:
            for name in entry.names:
                key = name.lower()
                other = index.get(key)
                if other is not None and other is not entry:
                    raise CatalogError(f"name {name!r} is used by both {other.id} and {entry.id}")
                index[key] = entry
        self._index = index
        self.rules = rules
        self._names = (
            NameResolver(rules, self._entries, self._index.get) if rules is not None else None
        )

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, model_id: object) -> bool:
        return isinstance(model_id, str) and _lookup_key(model_id) in self._index

    def get(self, model_id: str) -> ModelEntry:
        """The entry whose id or alias is ``model_id`` (any case); NotFound otherwise."""
        entry = self._index.get(_lookup_key(model_id))
        if entry is not None:
            return entry
        names = {name.lower(): name for e in self._entries for name in e.names}
        close = difflib.get_close_matches(model_id.lower(), list(names), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(names[c] for c in close)}?)" if close else ""
        raise NotFound(
            f"model {model_id!r} is not in the catalog{hint}: post its config.json as "
            "`hf_config` (estimate and pre-flight requests), or put its files in the model "
            "store (a directory listed in LLMMEM_MODEL_DIRS; what admission and the scheduler "
            "extender read)",
            field="model",
        )

    def gguf_file(self, name: str) -> tuple[ModelEntry, str, str] | None:
        """``<repo>:<tag>`` of a catalog GGUF repository: (its entry, the tag, the file name).

        A bare ``<repo>`` picks what llama.cpp's ``-hf`` picks without a tag
        (``common/download.cpp``): Q4_K_M, else Q8_0, else the first file. None when ``name``
        names no catalog GGUF repository; a tag the repository does not hold is a NotFound
        naming those it does."""
        repo, sep, tag = name.strip().rpartition(":")
        if not sep:
            repo, tag = name.strip(), ""
        entry = self._index.get(repo.lower())
        if entry is None or entry.gguf is None:
            return None
        files = entry.gguf
        found = files.file(tag) if tag else files.file("Q4_K_M") or files.file("Q8_0")
        if found is None and not tag:
            found = files.files[0]
        if found is None:
            tags = ", ".join(t for t, _ in files.files)
            raise NotFound(
                f"{entry.id} has no {tag[:20]!r} file in the catalog; it lists {tags}",
                field="model",
            )
        return entry, found[0], found[1]

    def resolve_name(self, name: str) -> NameMatch | None:
        """A name no catalog id, alias or GGUF repository matches, read by the alias rules
        (:mod:`.model_aliases`): None when no rule reads it."""
        if self._names is None or _lookup_key(name) in self._index:
            return None
        return self._names.resolve(name)

    def copy_model(self, match: NameMatch) -> tuple[Architecture, ParameterCounts]:
        """The architecture of the copy ``match`` names: its base's config with the
        quantization and dtype the name says."""
        overrides = match.config_overrides
        if not overrides:
            return match.entry.architecture, match.entry.counts
        return _copy_model(match.entry.id, json.dumps(dict(overrides), sort_keys=True), self)

    def all(self) -> tuple[ModelEntry, ...]:
        return self._entries

    def filter(
        self,
        family: str | None = None,
        min_parameters: int | None = None,
        max_parameters: int | None = None,
    ) -> tuple[ModelEntry, ...]:
        """Entries of one family (``model_type``, or ``gemma3`` for either Gemma 3 form) and
        within a total parameter range (inclusive)."""
        out = []
        for e in self._entries:
            if family is not None and family.lower() not in (e.family, e.architecture.model_type):
                continue
            if min_parameters is not None and e.counts.total < min_parameters:
                continue
            if max_parameters is not None and e.counts.total > max_parameters:
                continue
            out.append(e)
        return tuple(out)


@lru_cache(maxsize=256)
def _copy_model(
    entry_id: str, overrides: str, catalog: ModelCatalog
) -> tuple[Architecture, ParameterCounts]:
    """Built once per (model, format): bounded by the catalog's size times its formats."""
    config = dict(catalog.get(entry_id).config)
    config.pop("dtype", None)  # transformers 5 spelling; torch_dtype below takes its place
    for key, value in json.loads(overrides).items():
        if value is None:
            config.pop(key, None)  # a dequantized copy: no quantization_config
        else:
            config[key] = value
    arch = read_config(config)
    return arch, count_parameters(arch)


@dataclass(frozen=True)
class _Raw:
    """A record as read, checked for shape but not yet resolved."""

    record: Mapping[str, Any]
    where: str
    file: str
    gguf: GgufRepo | None = None  # the record's GGUF files, read and checked once

    @property
    def id(self) -> str:
        return str(self.record["id"])


def _read(record: Any, where: str, file: str) -> _Raw:
    if not isinstance(record, Mapping):
        raise CatalogError(f"{where}: a record must be an object")
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        raise CatalogError(f"{where}: missing {', '.join(missing)}")
    unknown = set(record) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise CatalogError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
    model_id, source = record["id"], record["source"]
    if not isinstance(model_id, str) or "/" not in model_id:
        raise CatalogError(f"{where}: id must be a Hugging Face repo id (owner/name)")
    where = f"{where} ({model_id})"
    aliases = record.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise CatalogError(f"{where}: aliases must be a list of names")
    if not isinstance(source, str) or not source.strip():
        raise CatalogError(f"{where}: source must say where the config came from")
    published = record.get("published_parameters")
    if published is not None and not isinstance(published, str):
        raise CatalogError(f"{where}: published_parameters must be a string")
    if ("config" in record) == ("base" in record):
        raise CatalogError(f"{where}: give either config (a whole config) or base (a record id)")
    if "config" in record:
        if not isinstance(record["config"], Mapping):
            raise CatalogError(f"{where}: config must be an object")
        if "dtype" not in record:
            raise CatalogError(f"{where}: missing dtype (the config's torch_dtype)")
        changes = [k for k in ("config_overrides", "config_drop") if k in record]
        if changes:
            raise CatalogError(f"{where}: {', '.join(changes)} need a base; edit config instead")
    else:
        base = record["base"]
        if not isinstance(base, str) or "/" not in base:
            raise CatalogError(f"{where}: base must be the id of another catalog record")
        if not isinstance(record.get("config_overrides", {}), Mapping):
            raise CatalogError(f"{where}: config_overrides must be an object")
        drop = record.get("config_drop", [])
        if not isinstance(drop, list) or not all(isinstance(k, str) and k for k in drop):
            raise CatalogError(f"{where}: config_drop must be a list of config keys")
    gguf = None
    if "gguf" in record:
        if "base" not in record:
            raise CatalogError(f"{where}: a gguf repository names its base record")
        gguf = _read_gguf(record["gguf"], where)
    return _Raw(record=record, where=where, file=file, gguf=gguf)


def _read_gguf(gguf: Any, where: str) -> GgufRepo:
    """A record's ``gguf`` object, checked; every tag a modelled llama-quantize preset."""
    if not isinstance(gguf, Mapping):
        raise CatalogError(f"{where}: gguf must be an object")
    unknown = set(gguf) - _GGUF_KEYS
    if unknown:
        raise CatalogError(f"{where}: unknown gguf fields {', '.join(sorted(unknown))}")
    files = gguf.get("files")
    if not isinstance(files, Mapping) or not files:
        raise CatalogError(f"{where}: gguf.files must map quantization tags to file names")
    out = []
    for tag, name in files.items():
        if not isinstance(name, str) or not name.endswith(".gguf") or "/" in name:
            raise CatalogError(f"{where}: gguf.files[{tag!r}] must be a .gguf file name")
        try:
            preset = get_preset(str(tag))
        except EstimatorError as exc:
            raise CatalogError(f"{where}: gguf.files: {exc.detail}") from exc
        if preset.name != tag:
            raise CatalogError(f"{where}: gguf.files: write the tag as {preset.name!r}")
        out.append((preset.name, name))
    mix = gguf.get("mix")
    if mix not in GGUF_MIXES:
        raise CatalogError(f"{where}: gguf.mix must be one of {', '.join(GGUF_MIXES)}")
    flags = {k: gguf.get(k, False) for k in ("imatrix", "own_output")}
    for k, v in flags.items():
        if not isinstance(v, bool):
            raise CatalogError(f"{where}: gguf.{k} must be true or false")
    return GgufRepo(tuple(out), mix, flags["imatrix"], flags["own_output"])


def _resolve_configs(raws: Mapping[str, _Raw]) -> dict[str, dict[str, Any]]:
    """Every record's whole config (lower-cased id -> config), bases applied in chain order."""
    resolved: dict[str, dict[str, Any]] = {}

    def resolve(key: str, chain: tuple[str, ...]) -> dict[str, Any]:
        done = resolved.get(key)
        if done is not None:
            return done
        raw = raws[key]
        record = raw.record
        if "config" in record:
            config = dict(record["config"])
        else:
            base_key = str(record["base"]).lower()
            if base_key not in raws:
                close = difflib.get_close_matches(base_key, list(raws), n=1, cutoff=0.8)
                hint = f"; did you mean {raws[close[0]].id}?" if close else ""
                raise CatalogError(f"{raw.where}: base {record['base']!r} is not a record{hint}")
            chain = (*chain, key)
            if base_key in chain:
                cycle = " -> ".join(raws[k].id for k in (*chain[chain.index(base_key) :], base_key))
                raise CatalogError(f"{raw.where}: base cycle {cycle}")
            config = dict(resolve(base_key, chain))
            for name in record.get("config_drop", []):
                if name not in config:
                    raise CatalogError(f"{raw.where}: config_drop names {name!r}, not in base")
                del config[name]
            config.update(record.get("config_overrides", {}))
        resolved[key] = config
        return config

    for key in raws:
        resolve(key, ())
    return resolved


def _entries(raws: Mapping[str, _Raw]) -> list[ModelEntry]:
    configs = _resolve_configs(raws)
    # Records that share a config (a base and its mirrors) share one build of it.
    built: dict[str, tuple[Architecture, ParameterCounts, Mapping[str, Any]]] = {}
    entries = []
    for key, raw in raws.items():
        record, config = raw.record, configs[key]
        shape = json.dumps(config, sort_keys=True)
        if shape not in built:
            try:
                arch = read_config(config)
            except EstimatorError as exc:
                raise CatalogError(f"{raw.where}: {exc.detail}") from exc
            if arch.model_type not in SUPPORTED_MODEL_TYPES:
                # A record names its family; the generic-decoder reading is for posted configs.
                raise CatalogError(
                    f"{raw.where}: model_type {arch.model_type!r} is not a supported family (nor "
                    "do its architectures name one)"
                )
            built[shape] = (arch, count_parameters(arch), MappingProxyType(config))
        arch, counts, frozen = built[shape]
        dtype = record.get("dtype", arch.dtype)
        if dtype != arch.dtype:
            raise CatalogError(
                f"{raw.where}: dtype {dtype!r} disagrees with the config's {arch.dtype!r}"
            )
        gguf = raw.gguf
        if gguf is not None:
            try:
                quant_model(arch)
            except EstimatorError as exc:
                raise CatalogError(f"{raw.where}: {exc.detail}") from exc
        entries.append(
            ModelEntry(
                id=raw.id,
                aliases=tuple(record.get("aliases", [])),
                architecture=arch,
                counts=counts,
                dtype=arch.dtype,
                source=record["source"],
                config=frozen,
                published_parameters=record.get("published_parameters"),
                base=raws[str(record["base"]).lower()].id if "base" in record else None,
                gguf=gguf,
            )
        )
    return entries


def load_model_catalog(
    path: str | Path | None = None, rules: str | Path | None = None
) -> ModelCatalog:
    """Load and validate every ``*.json`` file under ``path`` (a file or a directory), with
    the alias rules of ``rules`` (default: ``model_aliases.toml``)."""
    root = Path(path) if path is not None else DEFAULT_PATH
    files = sorted(root.glob("*.json")) if root.is_dir() else [root]
    if not files:
        raise CatalogError(f"no model files under {root}")
    raws: dict[str, _Raw] = {}
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CatalogError(f"{file.name}: cannot read: {exc}") from exc
        if not isinstance(data, Mapping) or not isinstance(data.get("models"), list):
            raise CatalogError(f'{file.name}: expected {{"models": [...]}}')
        for n, record in enumerate(data["models"]):
            raw = _read(record, f"{file.name}[{n}]", file.name)
            key = raw.id.lower()
            if key in raws:
                raise CatalogError(f"{file.name}: {raw.id} is also defined in {raws[key].file}")
            raws[key] = raw
    try:
        alias_rules = load_alias_rules(rules)
    except AliasRulesError as exc:
        raise CatalogError(str(exc)) from exc
    return ModelCatalog(_entries(raws), alias_rules)
