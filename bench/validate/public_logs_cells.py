"""The vLLM KV pool on public logs, cell by cell: release-line group × GPU family, multimodal.

A row's *pool figure* is its printed KV pool (``Available KV cache memory``, or the V0
``the rest of the memory reserved for KV Cache``), or, when a row prints no pool, its token
count (``GPU KV cache size`` or ``# GPU blocks × 16``): tokens are the pool divided by the
bytes per token (exact on these rows, ``kv_bytes_per_token`` within 0.02 %), so their error is
the pool's up to one block. A row whose printed figures are not the driver's (V0 workers that
do not sample) counts with its token count, the one figure every worker shares.

Each cell reports the median and worst absolute error over its rows with the count of logs
and of distinct sources (an issue, a pull request, a repository file, a page): rows of one
source share a setting and a GPU, so the sources say how independent a cell's rows are.

Validation by source: no constant of the estimator was fitted on a public log. The register
(:mod:`service.estimator.calibration`) names the rows each fitted entry was fitted on;
:func:`fit_sources` reads their sources (the URL of each ``cuda_context.csv`` row, the
campaign of ``vllm_v0.19_h100.csv``), and :func:`shared_sources` lists any public-log source
among them: a row whose source a fit saw would not be out of sample. It is empty, and the
test suite keeps it so.
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from bench.validate import public_logs as p
from service.estimator.calibration import REGISTER

#: Release-line groups, in order: the lines each holds.
LINE_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("0.6 – 0.7 (V0)", ("0.6.3", "0.6.4", "0.6.5")),
    ("0.8 – 0.10 (V1)", ("0.8.5", "0.9.1", "0.10.1")),
    ("0.11 – 0.16", ("0.11.0", "0.11.2", "0.13", "0.16")),
    ("0.17 – 0.33", ("0.19", "0.20", "0.22")),
    ("0.34 +", ("0.34",)),
)
_GROUP_OF = {line: group for group, lines in LINE_GROUPS for line in lines}

#: GPU families, in order, each with the catalog ids (or id prefixes) it holds.
GPU_FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("H100 / H200", ("h100", "h200", "h800", "h20", "gh200")),
    ("A100 / A800", ("a100", "a800")),
    ("L4 / L40 / L40S", ("l4", "l40")),
    ("A10 / A40 / A6000", ("a10", "a40", "rtx-a6000", "rtx-6000")),
    ("consumer (RTX)", ("rtx-",)),
    ("MI300X / ROCm", ("mi",)),
)
UNNAMED = "GPU unnamed (printed total only)"

# Measured files a fit may use, by the repository they come from (data/measured/README.md).
_FIT_FILES = {"vllm_v0.19_h100": "llm-d-incubation/llm-d-planner"}


@dataclass(frozen=True)
class PoolCase:
    """One row's pool figure against the estimate."""

    row: str
    line: str
    group: str
    family: str
    multimodal: bool
    source: str
    component: str  # kv_pool | kv_tokens
    error: float


def source_of(url: str) -> str:
    """A source's identity: ``owner/repo#number`` for an issue or pull request, ``owner/repo``
    for files committed to a repository (one campaign: its logs share the author's machines
    and settings), the page otherwise."""
    url = url.strip()
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", url)
    if m:
        return f"{m.group(1)}#{m.group(2)}"
    m = re.match(r"https://github\.com/([^/]+/[^/]+)/(?:blob|tree|raw)/", url)
    if m:
        return m.group(1)
    return re.sub(r"[#?].*$", "", url)


def family_of(row: dict[str, str]) -> str:
    ref = p.GPU_REF.get(row["gpu"])
    if ref is None:
        return UNNAMED
    for family, prefixes in GPU_FAMILIES:
        if any(ref == pre or ref.startswith(pre + "-") or ref.startswith(pre) for pre in prefixes):
            return family
    return "other"


def _multimodal(row: dict[str, str]) -> bool:
    model = p._model_id(row)
    return model is not None and p._models().get(model).architecture.vision is not None


def pool_cases(cases: Iterable[p.Case] | None = None) -> list[PoolCase]:
    """Each scored row's pool figure (module docstring)."""
    if cases is None:
        cases = p.evaluate()[0]
    by_row: dict[str, dict[str, p.Case]] = {}
    for c in cases:
        if c.component in ("kv_pool", "kv_tokens"):
            by_row.setdefault(c.row, {})[c.component] = c
    rows = {r["row_id"]: r for r in p.rows()}
    out = []
    for rid, comps in by_row.items():
        case = comps.get("kv_pool") or comps["kv_tokens"]
        row = rows[rid]
        out.append(
            PoolCase(
                rid,
                case.line,
                _GROUP_OF[case.line],
                family_of(row),
                _multimodal(row),
                source_of(row["source_url"]),
                case.component,
                case.error,
            )
        )
    return out


@lru_cache(maxsize=1)
def fit_sources() -> frozenset[str]:
    """The sources of every row a register entry was fitted on."""
    context = {}
    with (p.DATA.parent / "cuda_context.csv").open() as f:
        for r in csv.DictReader(f):
            context[r["row_id"]] = source_of(r["source_url"])
    out = set()
    for entry in REGISTER.values():
        for row in entry.fitted_on:
            file, _, key = row.partition(":")
            if file == "cuda_context":
                out.add(context[key])
            elif file in _FIT_FILES:
                out.add(_FIT_FILES[file])
            else:
                out.add(file)  # the Qwen, fine-tuning and tracer files: no vLLM log among them
    return frozenset(out)


def shared_sources() -> list[str]:
    """Public-log sources that a fit also saw (expected empty)."""
    logs = {source_of(r["source_url"]) for r in p.rows()}
    return sorted(logs & fit_sources())


def _cell(cs: list[PoolCase]) -> str:
    if not cs:
        return "—"
    errs = [abs(c.error) for c in cs]
    sources = len({c.source for c in cs})
    return (
        f"{statistics.median(errs) * 100:.2f}% (worst {max(errs) * 100:.2f}%; "
        f"{len(cs)} logs, {sources} src)"
    )


def cell_table(cases: list[PoolCase]) -> tuple[list[str], list[str]]:
    """The markdown table (line group × GPU family, and a multimodal row) and the names of
    the cells no public log fills."""
    families = [f for f, _ in GPU_FAMILIES] + [UNNAMED]
    present = [f for f in families if any(c.family == f for c in cases)]
    lines = [
        "| release lines | " + " | ".join(present) + " | all GPUs |",
        "|---|" + "---:|" * (len(present) + 1),
    ]
    empty = []
    for group, _ in LINE_GROUPS:
        row = [c for c in cases if c.group == group]
        cells = [_cell([c for c in row if c.family == f]) for f in present]
        lines.append(f"| {group} | " + " | ".join(cells) + f" | {_cell(row)} |")
        empty += [f"{group} × {f}" for f in families if not any(c.family == f for c in row)]
    mm = [c for c in cases if c.multimodal]
    cells = [_cell([c for c in mm if c.family == f]) for f in present]
    lines.append("| multimodal models, all lines | " + " | ".join(cells) + f" | {_cell(mm)} |")
    lines.append(
        "| every row | "
        + " | ".join(_cell([c for c in cases if c.family == f]) for f in present)
        + f" | {_cell(cases)} |"
    )
    for group, _ in LINE_GROUPS:
        if not any(c.multimodal and c.group == group for c in cases):
            empty.append(f"{group} × multimodal models")
    return lines, empty


def report(cases: Iterable[p.Case] | None = None) -> str:
    pcs = pool_cases(cases)
    table, empty = cell_table(pcs)
    shared = shared_sources()
    out = [
        "### The KV pool per release-line group and GPU family",
        "",
        "Median |error| of each row's pool figure (its printed KV pool, or its token count "
        "where it prints no pool: bench/validate/public_logs_cells.py), with the worst, the "
        "logs and their distinct sources. No row was fitted on: the register's fits saw "
        f"{len(fit_sources())} sources (the bare-context measurements' issues, the llm-d-planner "
        "H100 campaign, the transformers and fine-tuning files), and "
        + (
            "none of them is a source of these logs."
            if not shared
            else f"these public-log sources were also fitted on: {', '.join(shared)}."
        ),
        "",
        *table,
        "",
        f"Cells with no public log at all ({len(empty)}): " + "; ".join(empty) + ".",
        "",
    ]
    return "\n".join(out)
