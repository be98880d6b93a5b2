"""Held-out check: SGLang start-up figures printed in public logs against the estimate.

``data/public_logs_sglang.csv`` holds one row per SGLang start-up (or refusal) copied from a
public issue, pull request or committed benchmark output (``source_url``, ``comment``); no
figure of it was used to write or fit the SGLang engine, so every comparison here is out of
sample. ``docs/inference.md`` describes the columns' units: SGLang prints GiB labelled "GB".

Each row is estimated under its own release line (the printed or stated version, else the
last release uploaded to PyPI on or before the post's date), GPU and flags. Compared, where
the row prints them:

- ``weights``: the "Load weight end ... mem usage" figure, against the weights per GPU;
- ``kv_tokens``: ``max_total_num_tokens`` (or ``token_capacity``), against the pool's tokens;
- ``k_size``: the "KV Cache is allocated ... K size" figure, against the K buffers at the
  printed token count (``(tokens + page_size)`` rows, so it checks the bytes per token);
- ``kv_total``: ``memory_usage.kvcache`` (K and V), likewise at the printed token count;
- ``free_before_init``: free memory at "Init torch distributed begin" (the CUDA total less
  the CUDA context), which needs only the GPU;
- ``free_at_weights``: free memory at "Load weight begin" (the CUDA total less the CUDA
  context and the TP group's communicators: the memory free at start the budget is a fraction
  of), against the engine's ``free_at_start``;
- ``init_mem_usage``: "Init torch distributed ends. mem usage" (the communicators SGLang's TP
  group sets up), against the NCCL term of the engine's overheads for the row's TP, board;
- ``cuda_graph``: "Capture cuda graph end ... mem usage", against SGLang's own 2 MiB per
  decode batch size, which needs only the GPU and the captured batch sizes;
- ``max_running_requests``: the scheduler's figure, derived from the printed tokens and
  context (values below the derivation's floor need a flag the excerpt does not show);
- ``starts``: whether the server started, against the verdict (1 = starts).

A row whose model, GPU or configuration the estimator cannot take is listed with the reason;
components that need only what is known are still compared.
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from pathlib import Path

from service.application.resolve import resolve_gpu
from service.catalog.gpu_catalog import load_gpu_catalog
from service.catalog.model_catalog import load_model_catalog
from service.estimator.engines import get_engine
from service.estimator.engines import sglang_versions as sv
from service.estimator.engines.overhead import cuda_context_bytes, nccl_bytes, nvswitch_board
from service.estimator.engines.sglang import GRAPH_BYTES_PER_BATCH, SglangEngine
from service.estimator.gpu import GpuSpec
from service.estimator.inference import InferenceRequest
from service.estimator.inference.fit import fit_inference
from service.estimator.inference.request import setup_for
from service.estimator.result import FitReason

GIB = 2**30
DATA = Path(__file__).parent / "data" / "public_logs_sglang.csv"

# PyPI upload dates of the releases read (sglang's release history), to place a row that
# names no version on the line current when it was posted.
_RELEASE_DATES: tuple[tuple[date, str], ...] = (
    (date(2024, 11, 22), "0.3.6"),
    (date(2024, 12, 3), "0.4.0"),
    (date(2025, 2, 14), "0.4.3"),
    (date(2025, 4, 27), "0.4.6"),
    (date(2025, 6, 10), "0.4.7"),
    (date(2025, 6, 24), "0.4.8"),
    (date(2025, 7, 31), "0.4.10"),
    (date(2025, 9, 11), "0.5.2"),
    (date(2025, 10, 6), "0.5.3"),
    (date(2025, 12, 3), "0.5.6"),
    (date(2026, 1, 23), "0.5.8"),
    (date(2026, 4, 5), "0.5.10"),
    (date(2026, 7, 10), "0.5.15"),
    (date(2026, 8, 21), "0.5.18"),
    (date(2026, 9, 18), "0.5.20"),
    (date(2026, 10, 30), "0.5.23"),
)
_BEFORE_FIRST_DATED = "0.3.0"

# The row's model as the catalog names it, or why it cannot be taken.
_MODELS: dict[str, str] = {
    "Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B-FP8",
    "Qwen/Qwen3-30B-A3B-Instruct(-2507)": "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen/Qwen2.5-3B-Instruct": "Qwen/Qwen2.5-3B-Instruct",
    "Qwen2.5-72B GPTQ-Int4 (local)": "Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4",
    "Qwen/QwQ-32B": "Qwen/QwQ-32B",
    "Qwen3-14B (Qwen3ForCausalLM)": "Qwen/Qwen3-14B",
}
_UNRESOLVED_MODELS: dict[str, str] = {
    "deepseek-ai/DeepSeek-V4-Pro": "DeepSeek-V4-Pro is not in the model catalog",
    "DeepSeek-R1 (DeepseekV3ForCausalLM)": "DeepSeek-R1 (671B) is not in the model catalog",
    "llava-qwen 72B (LlavaQwenForCausalLM)": "LLaVA-Qwen 72B is not in the model catalog",
    "google/gemma-3-27b-it-int4-awq (local)": "a local AWQ conversion of gemma-3-27b-it",
}
# The row's GPU as the catalog names it (with what was assumed), or None when not in it.
_GPUS: dict[str, tuple[str, str]] = {
    "H100": ("h100-sxm-80gb", "H100 board not stated; SXM and PCIe print 81559 MiB"),
    "H100 80GB": ("h100-sxm-80gb", "H100 board not stated; SXM and PCIe print 81559 MiB"),
    "A800-80G": ("a800-sxm4-80gb", "A800 board not stated; both print 81920 MiB"),
    "B200": ("b200", ""),
    "L4 (not in the excerpt; as issue 26 gives it)": (
        "l4",
        "L4 as issue 26 names it; 21.63 GB free after a 0.13 GB init fits its 22.03 GiB",
    ),
    "A100 (size not stated)": (
        "a100-sxm4-80gb",
        "A100 size not stated: the printed weights and KV cache (70.95 GiB) exceed a 40 GB card",
    ),
}
# Flags a row gives in prose that the estimator does not model.
_UNMODELLED = {
    "s_7691": "DP attention (attention weights replicated per rank) is not modelled",
    "s_pr17392": "DP attention with EP-MoE is not modelled",
    "s_pr36583": "EAGLE speculative decoding is not modelled",
}


@dataclass(frozen=True)
class Comparison:
    row: str
    line: str
    component: str
    estimate: float
    measured: float
    unit: str
    note: str = ""

    @property
    def error(self) -> float:
        """Relative error; for a verdict 0 when it agrees, 1 when not."""
        if self.unit == "verdict":
            return float(self.estimate != self.measured)
        if self.measured == 0:
            return 0.0 if self.estimate == 0 else float("inf")
        return (self.estimate - self.measured) / self.measured


@dataclass(frozen=True)
class Unresolved:
    row: str
    reason: str
    compared: tuple[str, ...]


def rows() -> list[dict[str, str]]:
    with DATA.open() as f:
        return list(csv.DictReader(f))


def _number(cell: str) -> float | None:
    """The first number of a cell ("8.23 GB", "2301748 (token_capacity)", "349,377 ...")."""
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?", cell)
    return None if m is None else float(m[0].replace(",", ""))


def _posted(row: dict[str, str]) -> date | None:
    m = re.search(r"(\d{4})-(\d{2})-(\d{2})", row["comment"])
    return None if m is None else date(int(m[1]), int(m[2]), int(m[3]))


def version_of(row: dict[str, str]) -> tuple[str, str]:
    """The release a row is estimated under, and how it was placed."""
    text = row["sglang_version"]
    m = re.match(r"~?(\d+\.\d+\.\d+)", text)
    if m:
        return m[1], "as printed or stated" if "~" not in text else "as the reporter estimated"
    if text.startswith("0.1."):
        return "0.1.0", "0.1.x, older than the modelled releases"
    posted = _posted(row)
    assert posted is not None, row["row_id"]
    current = _BEFORE_FIRST_DATED
    for uploaded, v in _RELEASE_DATES:
        if uploaded <= posted:
            current = v
    return current, f"the release current on {posted.isoformat()}"


@lru_cache(maxsize=1)
def _catalogs():  # type: ignore[no-untyped-def]
    return load_model_catalog(), load_gpu_catalog()


def _gpu(row: dict[str, str]) -> tuple[GpuSpec | None, str]:
    entry = _GPUS.get(row["gpu"])
    if entry is None:
        return None, f"GPU {row['gpu'] or 'not named'!r} is not in the GPU catalog"
    return resolve_gpu(_catalogs()[1], entry[0]), entry[1]


def _flag(row: dict[str, str], column: str) -> int | float | None:
    value = _number(row[column]) if row[column] else None
    if value is None:
        return None
    return value if column == "mem_fraction_static" else int(value)


def _request(row: dict[str, str], model: str, gpu: GpuSpec | None) -> InferenceRequest:
    arch = _catalogs()[0].get(model).architecture
    options: dict[str, object] = {"version": version_of(row)[0]}
    for column in ("mem_fraction_static", "context_length", "chunked_prefill_size"):
        value = _flag(row, column)
        if value is not None:
            options[column] = value
    graph_bs = _flag(row, "cuda_graph_max_bs")
    if graph_bs is not None:
        options["cuda_graph_max_bs"] = graph_bs
    if "cuda graph disabled" in row["notes"]:
        options["disable_cuda_graph"] = True
    return InferenceRequest(
        architecture=arch,
        engine="sglang",
        sequence_length=None,
        tensor_parallel_size=int(row["tp"] or 1),
        engine_options=options,
        gpu=gpu,
        gpu_memory_bytes=None if gpu is None else gpu.total_bytes,
    )


def _engine() -> SglangEngine:
    engine = get_engine("sglang")
    assert isinstance(engine, SglangEngine)
    return engine


_NO_START = (
    FitReason.INVALID_LAYOUT,
    FitReason.DTYPE_UNSUPPORTED,
    FitReason.WEIGHTS_EXCEED_MEMORY,
    FitReason.ENGINE_BUDGET_EXHAUSTED,
    FitReason.OUTSIDE_BUDGET_EXCEEDED,
)


def compare(row: dict[str, str]) -> tuple[list[Comparison], Unresolved | None]:
    """The row's comparisons, and why part of it could not be compared (None: all of it)."""
    rid = row["row_id"]
    v, _ = version_of(row)
    line = sv.release(v).line.name
    gpu, gpu_note = _gpu(row)
    reasons: list[str] = []
    out: list[Comparison] = []

    def add(component: str, estimate: float, measured: float, unit: str, note: str = "") -> None:
        out.append(Comparison(rid, line, component, estimate, measured, unit, note))

    if rid in _UNMODELLED:
        reasons.append(_UNMODELLED[rid])
    model = _MODELS.get(row["model"])
    if model is None:
        reasons.append(_UNRESOLVED_MODELS.get(row["model"], "model not named"))
    if gpu is None:
        reasons.append(f"GPU {row['gpu'] or 'not named'!r} not in the GPU catalog")
    if "ROCm" in row["platform"]:
        reasons.append("ROCm")
    if "PR branch" in row["sglang_version"]:
        reasons.append("a PR branch that changes the KV budget: its pool is not compared")
    if row["version_basis"].startswith("printed (server_info)") and "prefill" in row["notes"]:
        reasons.append("a PD-disaggregated prefill server captures no decode graphs")

    # Components that need only the GPU.
    before = row["avail_mem_before_weights_printed"]
    if gpu is not None and "Init torch begin" in before:
        free = (gpu.total_bytes - cuda_context_bytes()) / GIB
        add("free_before_init", free, _number(before) or 0.0, "GiB", gpu_note)
    init_usage = _number(row.get("init_dist_mem_usage_printed") or "")
    if init_usage:
        tp = int(row["tp"] or 1)
        est = nccl_bytes(tp, 1, nvswitch=nvswitch_board(gpu)) / GIB
        board = "unknown GPU: the NVSwitch figure" if gpu is None else gpu_note
        add("init_mem_usage", est, init_usage, "GiB", f"TP {tp}; {board}")
    graph = _number(row["cuda_graph_mem_usage_printed"] or "")
    graph_bs = _flag(row, "cuda_graph_max_bs")
    if graph is not None and graph_bs and graph > 0:
        est = GRAPH_BYTES_PER_BATCH * int(graph_bs) / GIB
        add("cuda_graph", est, graph, "GiB", f"decode batch sizes up to {graph_bs}")
    # max_running_requests from the printed tokens and context (no model needed).
    tokens_printed = _number(row["kv_tokens_printed"] or row["max_total_num_tokens_printed"])
    printed_running = _flag(row, "max_running_requests")
    context = _flag(row, "context_length")
    if tokens_printed and printed_running and context and int(tokens_printed) >= 2:
        rel = sv.release(v)
        reqs = sv.max_num_reqs(rel, int(tokens_printed), int(context), None)
        floor = min(2048, int(tokens_printed) // 2)
        if printed_running < floor:
            reasons.append(
                f"max_running_requests {printed_running} is below the derivation's floor "
                f"({floor}): a flag the excerpt does not show"
            )
        else:
            derived = sv.running_requests(int(tokens_printed), None, reqs)
            add("max_running_requests", derived, printed_running, "requests")

    if model is not None and rid not in _UNMODELLED:
        req = _request(row, model, gpu if "ROCm" not in row["platform"] else None)
        setup = setup_for(req)
        stage = setup.stages[-1]
        if gpu is not None and "Load weight begin" in before:
            free = _engine().free_at_start(setup, gpu.total_bytes) / GIB
            add("free_at_weights", free, _number(before) or 0.0, "GiB", gpu_note)
        weights = _number(row["weights_mem_usage_printed"])
        if weights is not None:
            add("weights", max(s.weights for s in setup.stages) / GIB, weights, "GiB")
        page = int(setup.settings["page_size"])
        layer_kv = stage.kv.layer_token_bytes
        k_size = _number(row["k_size_printed"])
        if k_size is not None and tokens_printed:
            k = (int(tokens_printed) + page) * layer_kv // 2 * stage.kv.layers
            add("k_size", k / GIB, k_size, "GiB", "at the printed token count")
        kv_total = _number(row["kv_total_printed"])
        if kv_total is not None and tokens_printed:
            kv = (int(tokens_printed) + page) * layer_kv * stage.kv.layers
            add("kv_total", kv / GIB, kv_total, "GiB", "at the printed token count")
        pooled = gpu is not None and not any("PR branch" in r or r == "ROCm" for r in reasons)
        if pooled and tokens_printed and gpu is not None:
            pool = _engine().pool(setup, gpu.total_bytes)
            fraction = setup.settings["mem_fraction_static"]
            add("kv_tokens", pool.tokens, tokens_printed, "tokens", f"fraction {fraction:g}")
        known = row["outcome"] == "started" or row["outcome"].startswith("refused")
        if pooled and known and gpu is not None:
            verdict = fit_inference(req, gpu.ref, setup.tp * setup.pp)
            starts = verdict.reason not in _NO_START
            add("starts", float(starts), float(row["outcome"] == "started"), "verdict")
    if not reasons:
        return out, None
    return out, Unresolved(rid, "; ".join(reasons), tuple(c.component for c in out))


def results() -> tuple[list[Comparison], list[Unresolved]]:
    comparisons: list[Comparison] = []
    unresolved: list[Unresolved] = []
    for row in rows():
        c, u = compare(row)
        comparisons += c
        if u is not None:
            unresolved.append(u)
    return comparisons, unresolved


def _stats(cs: list[Comparison], agg: Callable[[list[float]], float]) -> str:
    return f"{agg([abs(c.error) for c in cs]) * 100:.2f}%"


def summary(comparisons: list[Comparison]) -> list[str]:
    """Per release line and component: rows, mean |error|, worst."""
    out = [
        "| line | component | rows | mean abs error | median abs error | worst (row) |",
        "|---|---|---:|---:|---:|---|",
    ]
    groups: dict[tuple[str, str], list[Comparison]] = {}
    for c in comparisons:
        groups.setdefault((c.line, c.component), []).append(c)
    for (line, component), cs in sorted(groups.items()):
        worst = max(cs, key=lambda c: abs(c.error))
        out.append(
            f"| {line} | {component} | {len(cs)} | {_stats(cs, statistics.fmean)} | "
            f"{_stats(cs, statistics.median)} | {worst.error * 100:+.2f}% ({worst.row}) |"
        )
    return out


def report() -> str:
    comparisons, unresolved = results()
    lines = [
        "## Held-out: public SGLang logs",
        "",
        "Start-up figures SGLang printed in public issues, pull requests and committed "
        "benchmark output (bench/validate/data/public_logs_sglang.csv, one row per start-up, "
        "each with its source URL), estimated under the row's release line, GPU and flags. "
        "No figure of these rows was used to write or fit the SGLang engine. Release lines: "
        + ", ".join(f"{ln.name} {ln.span}" for ln in sv.LINES)
        + ". Error = (estimate − printed) / printed.",
        "",
        "### Per line and component",
        "",
        "Rows compared per line: "
        + ", ".join(
            f"{name} {len({c.row for c in comparisons if c.line == name})}"
            for name in sorted({c.line for c in comparisons})
        )
        + ".",
        "",
        *summary(comparisons),
        "",
        *_token_summary(comparisons),
        "",
        "### Rows",
        "",
        "| row | line | component | estimate | printed | unit | error | note |",
        "|---|---|---|---:|---:|---|---:|---|",
    ]
    for c in comparisons:
        lines.append(
            f"| {c.row} | {c.line} | {c.component} | {_fmt(c.estimate)} | {_fmt(c.measured)} | "
            f"{c.unit} | {c.error * 100:+.2f}% | {c.note} |"
        )
    lines += ["", "### Rows not compared in full", ""]
    lines += ["| row | why | compared anyway |", "|---|---|---|"]
    for u in unresolved:
        lines.append(f"| {u.row} | {u.reason} | {', '.join(u.compared) or '—'} |")
    return "\n".join(lines) + "\n"


def _token_summary(comparisons: list[Comparison]) -> list[str]:
    """The pool's token count over every line: the figure a capacity answer rests on."""
    tokens = [c for c in comparisons if c.component == "kv_tokens"]
    if not tokens:
        return []
    rows = ", ".join(f"{c.row} {c.error * 100:+.2f}%" for c in tokens)
    return [
        f"KV pool tokens (`max_total_num_tokens`), all lines: median |error| "
        f"{_stats(tokens, statistics.median)} over {len(tokens)} rows ({rows}). No constant "
        "of the SGLang engine is fitted to these rows: its rules are read from SGLang's "
        "source; the one fitted term it uses, the NCCL buffers of a TP group on NVSwitch "
        "boards (`nccl.tp_group_bytes`, `nccl.tp_peer_bytes`), is fitted on vLLM H100 rows "
        "(docs/accuracy.md, calibration register), so every row here is held out.",
    ]


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3f}"
