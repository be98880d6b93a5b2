"""The package's layers only point down: no import from a lower package to a higher one.

Read from the source with ``ast`` (every ``import``/``from`` statement, including those under
``TYPE_CHECKING`` and inside functions), so that a cycle cannot hide behind a lazy import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[1] / "service"

# Floor of each top-level part of the package: a module may import its own part and the
# parts on lower floors, never a higher one nor another part on its own floor.
FLOORS: dict[str, int] = {
    "estimator": 0,  # the math: plain Python
    "catalog": 1,  # GPU and model catalogs (data validated at start-up)
    "model_store": 1,  # files of a model store
    "workloads": 1,  # readers of command lines and Kubernetes objects
    "settings": 1,
    "schemas": 2,  # the wire models (pydantic)
    "application": 3,  # resolve, convert, answer, render, count
    "scheduling": 4,  # pre-flight, admission, extender services
    "api": 5,  # the HTTP layer
    "app": 6,
    "openapi": 7,
    "__main__": 7,
}


def _part(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "service" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SERVICE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_part_has_a_floor() -> None:
    parts = {
        (p.relative_to(SERVICE).parts[0].removesuffix(".py"))
        for p in _modules()
        if p.name != "__init__.py" or len(p.relative_to(SERVICE).parts) > 1
    }
    assert parts <= set(FLOORS), f"parts without a floor: {sorted(parts - set(FLOORS))}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SERVICE.parent)))
def test_imports_point_down(path: Path) -> None:
    own = path.relative_to(SERVICE).parts[0].removesuffix(".py")
    if own == "__init__":
        return
    wrong = []
    for line, module in _imports(path):
        target = _part(module)
        if target is None or target == own:
            continue
        if FLOORS[target] >= FLOORS[own]:
            wrong.append(f"line {line}: {module} (floor {FLOORS[target]} >= {FLOORS[own]})")
    assert not wrong, f"{own} (floor {FLOORS[own]}) imports upward or sideways: {wrong}"


def test_a_wrong_import_is_caught(tmp_path: Path) -> None:
    # The checker itself must see an upward import (a test that could not fail proves nothing).
    bad = tmp_path / "bad.py"
    bad.write_text("from service.api.server import run\n", encoding="utf-8")
    targets = [_part(m) for _, m in _imports(bad)]
    assert targets == ["api"] and FLOORS["api"] > FLOORS["estimator"]
