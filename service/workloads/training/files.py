"""Config files a training job names, as the request carries them, and their bounded parsing.

A trainer reads most of its settings from files: a DeepSpeed JSON, an accelerate config, a
LLaMA-Factory, axolotl or torchtune YAML recipe. The service never reads a file system: a file
is known when the request carries its text, posted alongside the command (``files``: path to
text) or as a ConfigMap in the same request mounted into the container. A path is looked up
as written, then against the container's working directory, then by its file name when exactly
one carried file has it (noted). A file that is not carried is named as unknown by the reader.

Parsing is bounded: at most `MAX_FILE_CHARS` characters, YAML without aliases (an alias can
make a small document expand without bound), at most `MAX_DEPTH` levels and `MAX_NODES`
values. JSON is read by the YAML reader (YAML 1.1 is a superset of the JSON trainers write),
except that ``.json`` files go through ``json`` first for exact JSON semantics.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints

from service.workloads.sources import ReadProblem

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_CHARS",
    "MAX_NODES",
    "ConfigFiles",
    "FoundFile",
    "parse_document",
]

MAX_FILE_CHARS = 1 << 20
MAX_DEPTH = 24
MAX_NODES = 20_000


@dataclass(frozen=True)
class FoundFile:
    """A carried file: its text, where the text came from, and how the path matched."""

    path: str
    text: str
    source: str
    matched_by_name: bool = False


@dataclass(frozen=True)
class ConfigFiles:
    """The files a request carries, by the path the container would open."""

    by_path: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Path -> (text, where the text came from)."""

    def find(self, path: str, working_dir: str | None = None) -> FoundFile | None:
        """The file the trainer would open at ``path``; None when the request lacks it."""
        candidates = [path, posixpath.normpath(path)]
        if working_dir and not path.startswith("/"):
            candidates.append(posixpath.normpath(posixpath.join(working_dir, path)))
        for candidate in candidates:
            if candidate in self.by_path:
                text, source = self.by_path[candidate]
                return FoundFile(candidate, text, source)
        name = posixpath.basename(path)
        same = [p for p in self.by_path if posixpath.basename(p) == name]
        if name and len(same) == 1:
            text, source = self.by_path[same[0]]
            return FoundFile(same[0], text, source, matched_by_name=True)
        return None

    def with_files(self, more: Mapping[str, tuple[str, str]]) -> ConfigFiles:
        return ConfigFiles({**self.by_path, **more})


class _NoAliasLoader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader, refusing aliases (``*name``)."""

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.constructor.ConstructorError(
                None, None, "aliases are not read", event.start_mark
            )
        return super().compose_node(parent, index)


def _bounded(value: object) -> str | None:
    stack: list[tuple[object, int]] = [(value, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        children: list[object]
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = list(node)
        else:
            continue
        for child in children:
            count += 1
            if count > MAX_NODES or depth + 1 > MAX_DEPTH:
                return f"more than {MAX_DEPTH} levels or {MAX_NODES} values"
            stack.append((child, depth + 1))
    return None


def parse_document(found: FoundFile, field_name: str) -> Mapping[str, object] | ReadProblem:
    """A config file's top-level mapping, or a problem naming the file and what is wrong."""
    where = f"{field_name} ({found.source})"
    if len(found.text) > MAX_FILE_CHARS:
        return ReadProblem(where, f"the file is longer than {MAX_FILE_CHARS} characters")
    try:
        if found.path.endswith(".json"):
            data: object = json.loads(found.text)
        else:
            data = yaml.load(found.text, Loader=_NoAliasLoader)  # a SafeLoader
    except (ValueError, yaml.YAMLError) as exc:
        detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return ReadProblem(where, f"the file cannot be parsed: {detail}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        return ReadProblem(where, "the file does not hold a mapping of keys to values")
    too_big = _bounded(data)
    if too_big is not None:
        return ReadProblem(where, f"the file holds {too_big}")
    return {str(k): v for k, v in data.items()}
