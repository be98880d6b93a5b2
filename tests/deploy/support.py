"""Shared helpers for the deployment checks: tool lookup, kustomize rendering, Dockerfile parsing.

The checks read the files a release ships (Dockerfile, deploy/k8s) exactly as the image build
and `kubectl apply -k` would see them, so a regression in either fails the suite.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
K8S_DIR = REPO / "deploy" / "k8s"
OVERLAYS_DIR = K8S_DIR / "overlays"
OVERLAYS = sorted(p.name for p in OVERLAYS_DIR.iterdir() if (p / "kustomization.yaml").is_file())
KUBERNETES_VERSION = (K8S_DIR / "KUBERNETES_VERSION").read_text().strip()
VENV_BIN = Path(sys.executable).parent


def find_tool(name: str, hint: str) -> str:
    """Path of a command-line tool: the venv's first, then PATH; fails (never skips) if absent."""
    candidate = VENV_BIN / name
    if candidate.is_file():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found (looked in {VENV_BIN} and on PATH): {hint}", pytrace=False)
    return found


def kubectl() -> str:
    return find_tool(
        "kubectl",
        "the deployment checks render deploy/k8s with `kubectl kustomize`; install kubectl "
        ">= 1.27 (it is on the project machine image at /usr/bin/kubectl)",
    )


def render(path: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize PATH`, parsed; fails with kubectl's message if rendering fails."""
    proc = subprocess.run(
        [kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        pytest.fail(f"kubectl kustomize {path} failed:\n{proc.stderr}", pytrace=False)
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def one(resources: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    matches = [r for r in resources if r["kind"] == kind]
    assert len(matches) == 1, f"expected exactly one {kind}, found {len(matches)}"
    return matches[0]


@dataclass(frozen=True)
class Instruction:
    stage: int  # index of the FROM this instruction belongs to (0-based; -1 before any FROM)
    keyword: str  # upper-case, e.g. "RUN"
    args: str  # the rest of the logical line, continuations joined


def parse_dockerfile(text: str) -> list[Instruction]:
    """Logical instructions of a Dockerfile: comments dropped, `\\` continuations joined."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical = (pending + line).strip()
        pending = ""
        if not logical:
            continue
        keyword, _, args = logical.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(stage, keyword, args.strip()))
    return instructions


def exec_form(args: str) -> list[str]:
    """The JSON array of an exec-form ENTRYPOINT/CMD; fails if it is shell form."""
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        pytest.fail(f"not exec (JSON) form: {args}", pytrace=False)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def env_pairs(args: str) -> dict[str, str]:
    """`ENV A=1 B="two"` as a dict (the key=value form only, which hadolint requires)."""
    pairs = {}
    for token in shlex.split(args):
        key, sep, value = token.partition("=")
        assert sep, f"ENV must use key=value form: {token}"
        pairs[key] = value
    return pairs
