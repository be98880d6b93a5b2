"""Where models sit under a store root: Hugging Face hub-cache repos and plain directories.

- Hub cache (``huggingface_hub``'s layout, ``HF_HUB_CACHE``): ``models--<org>--<name>/`` with
  ``refs/main`` (the commit the main branch points at), ``snapshots/<commit>/`` (the files, as
  links into ``blobs/``). The model is ``<org>/<name>`` at the snapshot ``refs/main`` names,
  else the most recently modified snapshot.
- Plain directories: a directory holding a ``config.json`` or ``.gguf`` files is a model; its
  id is its path relative to the root (``org/name``). A directory named by a quantization
  tag (``Q4_K_M/``) holding split GGUF parts belongs to its parent.

The walk is bounded (entries visited, depth), never follows a link whose target lies outside
the root (targets are resolved and checked for containment), never enters a directory twice
(link cycles) and reads nothing but directory listings and ``refs/main``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from service.model_store.gguf_file import quant_tag

__all__ = ["ModelDir", "Skip", "WalkLimits", "discover", "inside"]

_HUB_PREFIX = "models--"
_WEIGHT_SUFFIXES = (".safetensors", ".gguf")


@dataclass(frozen=True, slots=True)
class WalkLimits:
    max_entries: int = 100_000
    max_depth: int = 8


@dataclass(frozen=True, slots=True)
class Skip:
    """Something under a root that is not indexed, and why."""

    path: str  # relative to the root
    reason: str


@dataclass(slots=True)
class ModelDir:
    """One model directory: its id, where it is (relative to its root), and its files
    (resolved paths, checked to lie inside the root) by name relative to the directory."""

    id: str
    path: str
    revision: str | None
    files: dict[str, Path] = field(default_factory=dict)


def inside(root_real: str, path: str) -> str | None:
    """``path`` resolved, if it lies inside ``root_real`` (None: outside, or unresolvable)."""
    try:
        real = os.path.realpath(path, strict=True)
    except OSError:
        return None
    if real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep):
        return real
    return None


class _Walk:
    def __init__(self, root: Path, limits: WalkLimits) -> None:
        self.root = str(root)
        self.root_real = os.path.realpath(root)
        self.limits = limits
        self.entries = 0
        self.seen: set[str] = set()
        self.skips: list[Skip] = []
        self.truncated = False

    def rel(self, path: str) -> str:
        return Path(os.path.relpath(path, self.root)).as_posix()

    def listing(self, directory: str) -> list[os.DirEntry[str]]:
        """Entries of ``directory`` (sorted), counted against the budget."""
        try:
            with os.scandir(directory) as it:
                out = []
                for e in it:
                    self.entries += 1
                    if self.entries > self.limits.max_entries:
                        self.truncated = True
                        break
                    out.append(e)
        except OSError as exc:
            self.skips.append(Skip(self.rel(directory), f"cannot list: {exc.strerror}"))
            return []
        return sorted(out, key=lambda e: e.name)

    def resolve_path(self, path: str) -> str | None:
        real = inside(self.root_real, path)
        if real is None:
            self.skips.append(Skip(self.rel(path), "outside the root or unresolvable"))
        return real

    def resolve(self, entry: os.DirEntry[str]) -> str | None:
        real = inside(self.root_real, entry.path)
        if real is None:
            reason = "link target outside the root" if entry.is_symlink() else "unresolvable"
            self.skips.append(Skip(self.rel(entry.path), reason))
        return real


def discover(root: Path, limits: WalkLimits) -> tuple[list[ModelDir], list[Skip], bool]:
    """Every model directory under ``root``, what was skipped, and whether the walk stopped
    at its entry budget."""
    walk = _Walk(root, limits)
    models = list(_walk(walk, walk.root, 0))
    return models, walk.skips, walk.truncated


def _walk(w: _Walk, directory: str, depth: int) -> Iterator[ModelDir]:
    real = os.path.realpath(directory)
    if real in w.seen or w.truncated:
        return
    w.seen.add(real)
    entries = w.listing(directory)
    names = {e.name for e in entries}
    if depth > 0 and ("config.json" in names or any(n.endswith(".gguf") for n in names)):
        yield _plain(w, directory, entries)
        return
    for e in entries:
        if w.truncated:
            return
        if not e.is_dir(follow_symlinks=True):
            continue
        if w.resolve(e) is None:
            continue
        if e.name.startswith(_HUB_PREFIX) and e.name.count("--") >= 2:
            hub = _hub(w, e.path, e.name)
            if hub is not None:
                yield hub
            continue
        if e.name.startswith(".") or e.name in ("blobs", "refs"):
            continue
        if depth + 1 > w.limits.max_depth:
            w.skips.append(Skip(w.rel(e.path), f"deeper than {w.limits.max_depth} levels"))
            continue
        yield from _walk(w, e.path, depth + 1)


def _files(w: _Walk, directory: str, prefix: str, out: dict[str, Path], depth: int) -> None:
    """Weight and config files under ``directory`` (one level of quant-tag subdirectories)."""
    for e in w.listing(directory):
        name = prefix + e.name
        if e.is_dir(follow_symlinks=True):
            if depth == 0 and quant_tag(e.name) is not None and w.resolve(e) is not None:
                _files(w, e.path, name + "/", out, depth + 1)
            continue
        if not (e.name.endswith(_WEIGHT_SUFFIXES) or e.name.endswith(".json")):
            continue
        real = w.resolve(e)
        if real is not None:
            out[name] = Path(real)


def _plain(w: _Walk, directory: str, entries: list[os.DirEntry[str]]) -> ModelDir:
    rel = w.rel(directory)
    model = ModelDir(id=rel, path=rel, revision=None)
    _files(w, directory, "", model.files, 0)
    return model


def _hub(w: _Walk, repo_dir: str, name: str) -> ModelDir | None:
    org, _, rest = name[len(_HUB_PREFIX) :].partition("--")
    model_id = f"{org}/{rest.replace('--', '/')}" if rest else org
    snapshots = os.path.join(repo_dir, "snapshots")
    revision = None
    ref = os.path.join(repo_dir, "refs", "main")
    if inside(w.root_real, ref) is not None:
        try:
            with open(ref, encoding="ascii", errors="replace") as f:
                revision = f.read(100).strip() or None
        except OSError:
            revision = None
    candidates = [e for e in w.listing(snapshots) if e.is_dir(follow_symlinks=True)]
    if revision is None or revision not in {e.name for e in candidates}:
        if not candidates:
            w.skips.append(Skip(w.rel(repo_dir), "hub repo without a snapshot"))
            return None
        newest = max(candidates, key=lambda e: e.stat().st_mtime_ns)
        revision = newest.name
    snapshot = os.path.join(snapshots, revision)
    if w.resolve_path(snapshot) is None:
        return None
    rel = w.rel(snapshot)
    model = ModelDir(id=model_id, path=rel, revision=revision)
    _files(w, snapshot, "", model.files, 0)
    return model
