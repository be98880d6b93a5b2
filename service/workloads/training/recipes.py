"""The YAML recipes of LLaMA-Factory, axolotl and torchtune: the keys as a trainer reads them
(the file's, with the command line's overrides on top) and the helpers their readers share.

The readers are :mod:`.llamafactory`, :mod:`.axolotl` and :mod:`.torchtune`.
"""

from __future__ import annotations

from collections.abc import Mapping

from service.workloads.sources import ReadProblem, Sourced
from service.workloads.training.settings import Collected, Value

__all__ = ["Recipe", "positive_int", "read_host", "read_keys"]


class Recipe:
    """A recipe's keys (dotted for nesting) with command-line overrides over the file's."""

    def __init__(
        self, doc: Mapping[str, object], label: str, overrides: Mapping[str, Sourced[str]]
    ) -> None:
        self.doc = doc
        self.label = label
        self.overrides = overrides

    def get(self, key: str) -> Sourced[object] | None:
        if key in self.overrides:
            found = self.overrides[key]
            return Sourced(_scalar(found.value), found.source)
        node: object = self.doc
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return Sourced(node, f"{self.label} {key}")

    def value(self, key: str, default: Value, owner: str) -> Sourced[object]:
        found = self.get(key)
        if found is None or found.value is None:
            return Sourced(default, f"default ({owner})")
        return found


def _scalar(text: str) -> object:
    """A ``key=value`` override's value as YAML reads a plain scalar."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def positive_int(found: Sourced[object], problems: list[ReadProblem]) -> int | None:
    value = found.value
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    problems.append(ReadProblem(found.source, f"expected a positive integer, got {value!r}"))
    return None


def read_keys(recipe: Recipe, keys: Mapping[str, str], out: Collected) -> None:
    for key, target in keys.items():
        found = recipe.get(key)
        if found is not None and found.value is not None:
            value = found.value
            shown: Value = (
                tuple(str(v) for v in value)
                if isinstance(value, list)
                else value
                if isinstance(value, bool | int | float | str)
                else str(value)
            )
            out.read(key, shown, found.source, target=target)


def read_host(recipe: Recipe, out: Collected) -> None:
    for key in ("dataloader_num_workers", "dataloader_prefetch_factor", "dataloader_pin_memory"):
        found = recipe.get(key)
        if found is not None and isinstance(found.value, bool | int):
            out.extra[key] = Sourced(found.value, found.source)
