"""The store's index: every model found under the store roots, built from headers only.

For each model directory (:mod:`.layout`) the index reads ``config.json`` (its
``quantization_config`` included), ``model.safetensors.index.json`` (``metadata.total_size``
and the ``weight_map`` of tensors to shards) and the header of every shard present, or the
metadata and tensor infos of its ``.gguf`` files, and builds the
:class:`~service.estimator.model.Architecture` and the checkpoint's exact bytes per component
(:class:`~service.estimator.checkpoint.CheckpointWeights`), whatever the family. Shards the
index lists but the directory lacks (a download in progress, a metadata-only copy) count with
the bytes the index's total leaves after the shards present; ``.safetensors`` files the index
does not list (``consolidated.safetensors``) are another packaging and are not counted.
A file or model that cannot be read is skipped with its reason (logged and kept in
:attr:`StoreIndex.skipped`); nothing stops the index.

Headers are re-read only for files whose size or modification time changed since the last
scan; a scan reads at most ``max_header_bytes_per_scan`` bytes of headers, visits at most
``max_entries`` directory entries and indexes at most ``max_models`` models holding at most
``max_index_bytes`` in memory.

What a scan holds in memory is bounded whatever the files say (issue 28 §1): each header is
streamed (:mod:`.gguf_file`, :mod:`.safetensors_header`, :mod:`.json_stream`), so reading one
costs about a megabyte of buffer and the reader's small records; a ``config.json`` is parsed
only if the bound of what its parse allocates fits ``json_parse_budget``; the index's entries
are held to ``max_index_bytes``; the parse cache keeps per-file totals and each index's shard
names, not tensor lists; and each model's files must be read within ``read_timeout_s``.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from service.estimator.checkpoint import MTP, TEXT, VISION, CheckpointWeights
from service.estimator.errors import EstimatorError
from service.estimator.memo import deep_size
from service.estimator.model import Architecture, ParameterCounts, count_parameters, read_config
from service.model_store.deadline import ReadTimeout
from service.model_store.gguf_file import GgufError, quant_tag, read_gguf, split_part
from service.model_store.json_stream import JsonBoundError, ObjectReader, loads_bounded
from service.model_store.layout import ModelDir, WalkLimits, discover
from service.model_store.safetensors_header import HeaderError, tensor_entries

__all__ = ["ScanLimits", "Skipped", "StoreEntry", "StoreIndex", "build_index", "root_paths"]

log = logging.getLogger("service.model_store")

_MAX_JSON_BYTES = 8 * 2**20  # config.json (the index.json is streamed)
# GGUF files llama.cpp's `-hf` never takes for the model (common/download.cpp).
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_VISION_MARKERS = (
    "vision_tower",
    "vision_model",
    "visual.",
    "vision.",
    "multi_modal_projector",
    "mm_projector",
    "image_newline",
    "audio_tower",
    "vision_embed",
)
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True, slots=True)
class ScanLimits:
    walk: WalkLimits = field(default_factory=WalkLimits)
    max_safetensors_header_bytes: int = 100_000_000
    max_gguf_metadata_bytes: int = 64 * 2**20
    max_header_bytes_per_scan: int = 2**30
    max_models: int = 2000
    # What the index's entries may hold in memory (their architectures and byte counts, as
    # the estimator's cache measures objects): a catalog model's is 16 KiB at the median and
    # 34 KiB at most, but a config may ask for 1024 layers.
    max_index_bytes: int = 64 * 2**20
    read_timeout_s: float = 10.0
    json_parse_budget: int = 16 * 2**20


@dataclass(frozen=True, slots=True)
class StoreEntry:
    """One model of the store, as an estimate resolves it."""

    id: str
    root_index: int
    path: str  # relative to its root
    revision: str | None
    format: str  # "safetensors" | "gguf" | "config"
    architecture: Architecture
    counts: ParameterCounts
    checkpoint: CheckpointWeights | None
    notes: tuple[str, ...] = ()

    @property
    def dtype(self) -> str:
        return self.architecture.dtype


@dataclass(frozen=True, slots=True)
class Skipped:
    root_index: int
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class StoreIndex:
    entries: Mapping[str, StoreEntry]  # lower-cased id -> entry
    skipped: tuple[Skipped, ...] = ()
    complete: bool = True  # False: a bound stopped the scan early
    scanned_at: float = 0.0
    duration_s: float = 0.0
    header_bytes: int = 0

    def get(self, model_id: str) -> StoreEntry | None:
        return self.entries.get(model_id.strip().lower())

    def all(self) -> tuple[StoreEntry, ...]:
        return tuple(sorted(self.entries.values(), key=lambda e: e.id.lower()))


@dataclass
class _Scan:
    limits: ScanLimits
    previous: Mapping[tuple[Any, ...], Any]
    cache: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    header_bytes: int = 0
    complete: bool = True
    model_started: float = 0.0

    def start_model(self) -> None:
        self.model_started = time.monotonic()

    def deadline(self) -> float:
        """When the current model's files must have been read (time.monotonic())."""
        return self.model_started + self.limits.read_timeout_s

    def cached(self, key: tuple[Any, ...], read: Any, cost: int) -> Any:
        """The parse of ``key`` from the last scan, or ``read()`` if the budget allows. A
        read past the deadline is not kept: the next scan tries it again."""
        if key in self.previous:
            self.cache[key] = self.previous[key]
            return self.cache[key]
        if self.header_bytes + cost > self.limits.max_header_bytes_per_scan:
            self.complete = False
            raise _Budget
        try:
            value = read()
        except ReadTimeout as exc:
            self.header_bytes += cost
            return _Failed(str(exc), retry=True)
        except (HeaderError, GgufError, JsonBoundError, OSError, ValueError) as exc:
            value = _Failed(str(exc))
        except Exception as exc:  # a hostile file must never stop the scan
            value = _Failed(f"unreadable ({type(exc).__name__}: {str(exc)[:200]})")
        self.header_bytes += cost
        self.cache[key] = value
        return value


class _Budget(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Failed:
    reason: str
    retry: bool = False  # past the read deadline: not kept, read again next scan


def _key(path: Path) -> tuple[Any, ...]:
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns)


def _read_json(path: Path, budget: int) -> Any:
    if path.stat().st_size > _MAX_JSON_BYTES:
        raise ValueError(f"larger than {_MAX_JSON_BYTES} bytes")
    return loads_bounded(path.read_bytes(), budget)


def _safetensors_totals(
    path: Path, cap: int, num_layers: int, deadline: float
) -> tuple[tuple[str, int], ...]:
    """Bytes per checkpoint component of one safetensors file, from its streamed header."""
    totals: dict[str, int] = {}
    for t in tensor_entries(path, cap, deadline):
        c = _component(t.name, num_layers)
        totals[c] = totals.get(c, 0) + t.nbytes
    return tuple(sorted(totals.items()))


def _component(name: str, num_layers: int) -> str:
    lowered = name.lower()
    if any(m in lowered for m in _VISION_MARKERS):
        return VISION
    if "mtp" in lowered:
        return MTP
    m = _LAYER.search(name)
    if m is not None and int(m.group(1)) >= num_layers:
        return MTP  # DeepSeek-V3 style: the layers past num_hidden_layers are MTP modules
    return TEXT


@dataclass(frozen=True, slots=True)
class _ShardIndex:
    """``model.safetensors.index.json``: the checkpoint's total, and for each shard file it
    lists the checkpoint components its tensors belong to (not the tensor names: a large
    model's ``weight_map`` is megabytes)."""

    total: int | None
    shards: Mapping[str, frozenset[str]]  # shard file -> components of its tensors


# Shard files one index may list (the largest public checkpoints have a few hundred), and the
# length of a shard's name (NAME_MAX: a longer one cannot be a file of the directory).
_MAX_SHARDS = 10_000
_MAX_SHARD_NAME = 255


def _read_shard_index(path: Path, num_layers: int, deadline: float) -> _ShardIndex:
    """The index read member by member (:class:`ObjectReader`), its ``weight_map`` one pair
    at a time, so what it holds is bounded by ``_MAX_SHARDS`` names whatever the file says.
    A ``weight_map`` value that is not a shard file beside the index is ignored."""
    total: Any = None
    shards: dict[str, set[str]] = {}
    with path.open("rb") as f:
        reader = ObjectReader(f, path.stat().st_size, deadline=deadline)
        for key in reader.members():
            if key == "weight_map" and reader.peek() == "{":
                for tensor, shard in reader.string_members():
                    if not shard.endswith(".safetensors") or "/" in shard:
                        continue
                    if len(shard) > _MAX_SHARD_NAME:
                        raise JsonBoundError(f"a shard name longer than {_MAX_SHARD_NAME}")
                    kinds = shards.get(shard)
                    if kinds is None:
                        if len(shards) >= _MAX_SHARDS:
                            raise JsonBoundError(f"more than {_MAX_SHARDS} shard files")
                        kinds = shards[shard] = set()
                    kinds.add(_component(tensor, num_layers))
                continue
            value = reader.value()
            if key == "metadata":
                total = value.get("total_size") if isinstance(value, dict) else None
        reader.end()
    if isinstance(total, str) and total.isdigit():
        total = int(total)
    if not isinstance(total, int) or isinstance(total, bool) or total < 0:
        total = None
    return _ShardIndex(total, MappingProxyType({k: frozenset(v) for k, v in shards.items()}))


def _shard_index(
    scan: _Scan, model: ModelDir, arch: Architecture, notes: list[str]
) -> _ShardIndex | None:
    path = model.files.get("model.safetensors.index.json")
    if path is None:
        return None
    index = scan.cached(
        ("idx", *_key(path), arch.num_layers),
        lambda: _read_shard_index(path, arch.num_layers, scan.deadline()),
        path.stat().st_size,
    )
    if isinstance(index, _Failed):
        if index.retry:  # past the read deadline: the totals would be wrong, try next scan
            raise _ModelSkip(f"model.safetensors.index.json: {index.reason}")
        notes.append(f"model.safetensors.index.json unreadable ({index.reason}): ignored")
        return None
    assert isinstance(index, _ShardIndex)
    return index


def _safetensors_entry(
    scan: _Scan, model: ModelDir, arch: Architecture
) -> tuple[CheckpointWeights | None, list[str]]:
    """The checkpoint's bytes by component: the headers of its shards, and for shards the
    directory lacks (a partial download, a metadata-only copy) the index's ``total_size``
    less the shards present. With an index, only the shards it lists are the transformers
    checkpoint (``consolidated.safetensors`` beside them is another format of the same
    weights)."""
    notes: list[str] = []
    shards = _shard_index(scan, model, arch, notes)
    present = sorted(n for n in model.files if n.endswith(".safetensors") and "/" not in n)
    listed = sorted(shards.shards) if shards and shards.shards else None
    if listed is not None:
        others = [n for n in present if n not in listed]
        if others:
            notes.append(
                f"{', '.join(others[:3])} not listed in model.safetensors.index.json: not counted "
                "(another packaging of the weights)"
            )
        present = [n for n in present if n in listed]
    total = shards.total if shards else None
    if not present and total is None:
        return None, [*notes, "no .safetensors files: weights from the config"]
    components: dict[str, int] = {}
    cap = scan.limits.max_safetensors_header_bytes
    for name in present:
        path = model.files[name]
        cost = min(path.stat().st_size, cap + 8)
        totals = scan.cached(
            ("st", *_key(path), arch.num_layers),
            lambda p=path: _safetensors_totals(p, cap, arch.num_layers, scan.deadline()),
            cost,
        )
        if isinstance(totals, _Failed):
            raise _ModelSkip(f"{name}: {totals.reason}")
        for c, nbytes in totals:
            components[c] = components.get(c, 0) + nbytes
    header_total = sum(components.values())
    missing = [n for n in listed or () if n not in present]
    if total is not None and (missing or not present):
        _add_missing_shards(components, shards, missing, total, header_total, arch, notes)
    elif total is not None and total != header_total:
        notes.append(
            f"model.safetensors.index.json gives total_size {total} bytes, the headers "
            f"{header_total}: the headers are used"
        )
    checkpoint = CheckpointWeights("safetensors", tuple(sorted(components.items())))
    return checkpoint, notes


def _add_missing_shards(
    components: dict[str, int],
    shards: _ShardIndex | None,
    missing: list[str],
    total: int,
    header_total: int,
    arch: Architecture,
    notes: list[str],
) -> None:
    """The bytes of the shards the directory lacks, from the index's ``total_size``, under
    the component their tensors belong to (by the index's ``weight_map``)."""
    rest = total - header_total
    if rest < 0:
        notes.append(
            f"model.safetensors.index.json gives total_size {total} bytes, less than the "
            f"headers present ({header_total}): the headers are used"
        )
        return
    kinds = {k for f in missing for k in (shards.shards[f] if shards else ())} or {TEXT}
    target = next(iter(kinds)) if len(kinds) == 1 else TEXT
    components[target] = components.get(target, 0) + rest
    what = (
        f"{len(missing)} shard(s) listed in it are not in the directory"
        if missing
        else ("no shard is in the directory")
    )
    note = (
        f"weights from model.safetensors.index.json: {what}; their {rest} bytes taken from "
        f"its metadata.total_size ({total} bytes in all)"
    )
    if len(kinds) > 1:
        note += f" and counted as {TEXT} (they hold {', '.join(sorted(kinds))} tensors)"
    notes.append(note)


class _ModelSkip(Exception):
    pass


def _entries_of(
    scan: _Scan, model: ModelDir, root_index: int, skipped: list[Skipped]
) -> list[StoreEntry]:
    out: list[StoreEntry] = []
    config_path = model.files.get("config.json")
    if config_path is not None:
        try:
            out.append(_hf_entry(scan, model, root_index, config_path))
        except _ModelSkip as exc:
            skipped.append(Skipped(root_index, model.path, str(exc)))
    groups: dict[str, list[tuple[int, int, str]]] = {}
    for name in model.files:
        if not name.endswith(".gguf"):
            continue
        base = name.rsplit("/", 1)[-1].lower()
        if any(base.startswith(p) or f"-{p}" in base for p in _NOT_MODELS):
            continue
        stem, part, of = split_part(name[:-5])
        groups.setdefault(stem, []).append((part, of, name))
    for stem, parts in sorted(groups.items()):
        try:
            out.append(_gguf_entry(scan, model, root_index, stem, sorted(parts)))
        except _ModelSkip as exc:
            skipped.append(Skipped(root_index, f"{model.path}/{stem}.gguf", str(exc)))
    return out


def _architecture(path: Path, budget: int) -> Architecture:
    """The architecture a ``config.json`` describes (its parsed JSON is not kept)."""
    try:
        config = _read_json(path, budget)
    except (ValueError, OSError) as exc:
        raise ValueError(f"config.json is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError("config.json is not a JSON object")
    try:
        return read_config(config)
    except EstimatorError as exc:
        raise ValueError(f"config.json: {exc.detail}") from None


def _hf_entry(scan: _Scan, model: ModelDir, root_index: int, config_path: Path) -> StoreEntry:
    budget = scan.limits.json_parse_budget
    arch = scan.cached(("arch", *_key(config_path)), lambda: _architecture(config_path, budget), 0)
    if isinstance(arch, _Failed):
        raise _ModelSkip(arch.reason)
    checkpoint, notes = _safetensors_entry(scan, model, arch)
    return StoreEntry(
        id=model.id,
        root_index=root_index,
        path=model.path,
        revision=model.revision,
        format="safetensors" if checkpoint else "config",
        architecture=arch,
        counts=count_parameters(arch),
        checkpoint=checkpoint,
        notes=tuple(notes),
    )


def _gguf_entry(
    scan: _Scan, model: ModelDir, root_index: int, stem: str, parts: list[tuple[int, int, str]]
) -> StoreEntry:
    of = parts[0][1]
    if [p for p, _, _ in parts] != list(range(1, of + 1)) or any(o != of for _, o, _ in parts):
        raise _ModelSkip(f"split GGUF incomplete: {len(parts)} of {of} parts present")
    paths = [model.files[name] for _, _, name in parts]
    key = ("gguf", *(k for p in paths for k in _key(p)))
    cap = scan.limits.max_gguf_metadata_bytes
    cost = min(sum(p.stat().st_size for p in paths), cap * len(paths))
    read = scan.cached(key, lambda: read_gguf(paths, cap, scan.deadline()), cost)
    if isinstance(read, _Failed):
        raise _ModelSkip(read.reason)
    tag = quant_tag(stem.rsplit("/", 1)[-1]) or read.file_type or stem.rsplit("/", 1)[-1]
    try:
        arch = read_config(read.config)
    except EstimatorError as exc:
        raise _ModelSkip(f"GGUF metadata: {exc.detail}") from None
    w = read.weights
    checkpoint = CheckpointWeights("gguf", ((TEXT, w.total_bytes),), gguf=w)
    notes = (
        f"GGUF {tag}: tensor types "
        + ", ".join(f"{n} × {t}" for t, n in w.types)
        + f" ({w.total_bytes} bytes)",
    )
    return StoreEntry(
        id=f"{model.id}:{tag}",
        root_index=root_index,
        path=f"{model.path}/{parts[0][2]}",
        revision=model.revision,
        format="gguf",
        architecture=arch,
        counts=count_parameters(arch),
        checkpoint=checkpoint,
        notes=notes,
    )


def build_index(
    roots: tuple[Path, ...],
    limits: ScanLimits = ScanLimits(),
    previous: StoreIndex | None = None,
    previous_cache: Mapping[tuple[Any, ...], Any] | None = None,
) -> tuple[StoreIndex, dict[tuple[Any, ...], Any]]:
    """Scan ``roots`` (in order: an id found under an earlier root wins) into an index.

    Returns the index and the parse cache the next scan reuses."""
    started = time.monotonic()
    scan = _Scan(limits, previous_cache or {})
    entries: dict[str, StoreEntry] = {}
    skipped: list[Skipped] = []
    index_bytes = 0
    budget_spent = False  # from then on, models are skipped unread
    for root_index, root in enumerate(roots):
        if not root.is_dir():
            skipped.append(Skipped(root_index, ".", "not a directory"))
            continue
        models, skips, truncated = discover(root, limits.walk)
        if truncated:
            scan.complete = False
            skipped.append(
                Skipped(root_index, ".", f"scan stopped after {limits.walk.max_entries} entries")
            )
        skipped.extend(Skipped(root_index, s.path, s.reason) for s in skips)
        for model in models:
            if len(entries) >= limits.max_models or budget_spent:
                scan.complete = False
                why = (
                    f"the index's memory budget ({limits.max_index_bytes} bytes) is spent"
                    if budget_spent
                    else f"model limit ({limits.max_models}) reached"
                )
                skipped.append(Skipped(root_index, model.path, why))
                continue
            scan.start_model()
            try:
                found = _entries_of(scan, model, root_index, skipped)
            except _Budget:
                skipped.append(Skipped(root_index, model.path, "header budget of this scan spent"))
                continue
            except OSError as exc:
                skipped.append(Skipped(root_index, model.path, f"unreadable: {exc.strerror}"))
                continue
            for entry in found:
                key = entry.id.lower()
                if key in entries:
                    other = entries[key]
                    skipped.append(
                        Skipped(
                            root_index,
                            entry.path,
                            f"id {entry.id} already indexed from root {other.root_index} "
                            f"({other.path})",
                        )
                    )
                    continue
                size = deep_size(entry)
                if index_bytes + size > limits.max_index_bytes:
                    scan.complete = False
                    budget_spent = True
                    skipped.append(
                        Skipped(
                            root_index,
                            entry.path,
                            f"the index's memory budget ({limits.max_index_bytes} bytes) is spent",
                        )
                    )
                    continue
                index_bytes += size
                entries[key] = entry
    for s in skipped:
        if previous is None or s not in previous.skipped:
            log.warning(
                "model store: skipped %s (root %d): %s",
                s.path,
                s.root_index,
                s.reason,
                extra={"store_root": s.root_index, "store_path": s.path},
            )
    index = StoreIndex(
        entries=MappingProxyType(entries),
        skipped=tuple(skipped),
        complete=scan.complete,
        scanned_at=time.time(),
        duration_s=time.monotonic() - started,
        header_bytes=scan.header_bytes,
    )
    return index, scan.cache


def root_paths(value: str) -> tuple[Path, ...]:
    """``LLMMEM_MODEL_DIRS`` (os.pathsep-separated) as paths, empty parts dropped."""
    return tuple(Path(p) for p in value.split(os.pathsep) if p.strip())
