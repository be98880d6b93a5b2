"""The model catalog: Hugging Face configs of well-known models, validated at load.

Each ``models/*.json`` file holds ``{"models": [record, ...]}``; a record names the Hub repo
(``id``), other names it answers to (``aliases``), the checkpoint ``dtype``, where its config
came from (``source``) and the ``config.json`` fields the estimator reads, under their own
names. Loading builds every record's :class:`Architecture` and parameter counts once, so a
bad record stops start-up instead of failing a request.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from service.estimator.errors import EstimatorError, NotFound
from service.estimator.model import Architecture, ParameterCounts, count_parameters, read_config

__all__ = ["CatalogError", "ModelCatalog", "ModelEntry", "load_model_catalog"]

DEFAULT_PATH = Path(__file__).parent / "models"

_REQUIRED = ("id", "config", "dtype", "source")
_OPTIONAL = ("aliases", "published_parameters")


class CatalogError(Exception):
    """A catalog file or record is malformed; raised at load, never per request."""


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

    @property
    def family(self) -> str:
        return self.architecture.family_name

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


class ModelCatalog:
    """Models by case-insensitive id or alias."""

    def __init__(self, entries: Iterable[ModelEntry]) -> None:
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

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, model_id: object) -> bool:
        return isinstance(model_id, str) and model_id.lower() in self._index

    def get(self, model_id: str) -> ModelEntry:
        """The entry whose id or alias is ``model_id`` (any case); NotFound otherwise."""
        entry = self._index.get(model_id.strip().lower())
        if entry is not None:
            return entry
        names = {name.lower(): name for e in self._entries for name in e.names}
        close = difflib.get_close_matches(model_id.lower(), list(names), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(names[c] for c in close)}?" if close else ""
        raise NotFound(f"model {model_id!r} is not in the catalog{hint}", field="model")

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


def _entry(record: Any, where: str) -> ModelEntry:
    if not isinstance(record, Mapping):
        raise CatalogError(f"{where}: a record must be an object")
    missing = [k for k in _REQUIRED if k not in record]
    if missing:
        raise CatalogError(f"{where}: missing {', '.join(missing)}")
    unknown = set(record) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise CatalogError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
    model_id, source, config = record["id"], record["source"], record["config"]
    if not isinstance(model_id, str) or "/" not in model_id:
        raise CatalogError(f"{where}: id must be a Hugging Face repo id (owner/name)")
    where = f"{where} ({model_id})"
    aliases = record.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise CatalogError(f"{where}: aliases must be a list of names")
    if not isinstance(source, str) or not source.strip():
        raise CatalogError(f"{where}: source must say where the config came from")
    if not isinstance(config, Mapping):
        raise CatalogError(f"{where}: config must be an object")
    try:
        arch = read_config(config)
    except EstimatorError as exc:
        raise CatalogError(f"{where}: {exc.detail}") from exc
    if record["dtype"] != arch.dtype:
        raise CatalogError(
            f"{where}: dtype {record['dtype']!r} disagrees with the config's {arch.dtype!r}"
        )
    published = record.get("published_parameters")
    if published is not None and not isinstance(published, str):
        raise CatalogError(f"{where}: published_parameters must be a string")
    return ModelEntry(
        id=model_id,
        aliases=tuple(aliases),
        architecture=arch,
        counts=count_parameters(arch),
        dtype=arch.dtype,
        source=source,
        config=MappingProxyType(dict(config)),
        published_parameters=published,
    )


def load_model_catalog(path: str | Path | None = None) -> ModelCatalog:
    """Load and validate every ``*.json`` file under ``path`` (a file or a directory)."""
    root = Path(path) if path is not None else DEFAULT_PATH
    files = sorted(root.glob("*.json")) if root.is_dir() else [root]
    if not files:
        raise CatalogError(f"no model files under {root}")
    entries: list[ModelEntry] = []
    seen: dict[str, str] = {}
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CatalogError(f"{file.name}: cannot read: {exc}") from exc
        if not isinstance(data, Mapping) or not isinstance(data.get("models"), list):
            raise CatalogError(f'{file.name}: expected {{"models": [...]}}')
        for n, record in enumerate(data["models"]):
            entry = _entry(record, f"{file.name}[{n}]")
            key = entry.id.lower()
            if key in seen:
                raise CatalogError(f"{file.name}: {entry.id} is also defined in {seen[key]}")
            seen[key] = file.name
            entries.append(entry)
    return ModelCatalog(entries)
