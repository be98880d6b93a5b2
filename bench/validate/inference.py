"""Inference accuracy: the detailed estimator against measured and traced memory.

Three sources, read at validation time only (nothing measured is copied into the estimator):

- ``data/measured/vllm_v0.19_h100.csv``: vLLM v0.19 start-up figures on one H100 (KV bytes
  per token, weights, profiled activations, non-torch memory, KV pool, tokens, concurrency);
- ``data/measured/qwen_transformers_inference.csv``: peak ``max_memory_allocated`` of
  transformers ``generate`` (Qwen speed benchmarks), summed over GPUs;
- ``data/infer_tracer.jsonl``: the reference tracer's prefill peaks (regenerate with
  ``make tracer-data-inference``).

`cases()` returns one `Case` per compared figure; `report()` renders the markdown section of
docs/accuracy.md; tests/validation/ asserts the bounds on the same cases.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from bench.validate.paths import MEASURED
from service.catalog.model_catalog import load_model_catalog
from service.estimator.inference import (
    InferenceRequest,
    estimate_inference,
    stage_figures,
)
from service.estimator.model import Architecture, read_config

GIB = 2**30
MIB = 2**20
VALIDATION = MEASURED
TRACER_DATA = Path(__file__).parent / "data" / "infer_tracer.jsonl"

# vLLM's `quant` column -> the weight format it ran (None: the checkpoint's own config).
_VLLM_QUANT = {"None": None, "fp8(runtime)": "fp8"}
# transformers benchmark `quant` column -> weight format.
_HF_QUANT = {
    "BF16": None,
    "GPTQ-Int8": "gptq-int8",
    "GPTQ-Int4": "gptq-int4",
    "AWQ": "awq-int4",
    "AWQ-INT4": "awq-int4",
    "FP8": "fp8-block",
}


@dataclass(frozen=True)
class Case:
    """One compared figure: the estimator's value against the measured (or traced) one."""

    source: str  # vllm | transformers | tracer
    case: str
    component: str
    estimate: float
    measured: float
    unit: str = "GiB"
    note: str = ""

    @property
    def error(self) -> float:
        """Signed relative error of the estimate."""
        return (self.estimate - self.measured) / self.measured


def require_shared() -> Path:
    if not VALIDATION.is_dir():
        raise FileNotFoundError(
            "measured data not found in bench/validate/data/measured (it is part of the "
            "repository: restore it from git)"
        )
    return VALIDATION


@lru_cache(maxsize=1)
def _catalog():  # type: ignore[no-untyped-def]
    return load_model_catalog()


def _arch(model_id: str) -> Architecture:
    arch: Architecture = _catalog().get(model_id).architecture
    return arch


# ------------------------------------------------------------------------------------------
# vLLM
# ------------------------------------------------------------------------------------------


def _vllm_rows() -> list[dict[str, str]]:
    with (require_shared() / "vllm_v0.19_h100.csv").open() as f:
        return list(csv.DictReader(f))


def is_hybrid(model_id: str) -> bool:
    return "sliding_attention" in _arch(model_id).layer_types


def is_mla(model_id: str) -> bool:
    return _arch(model_id).mla is not None


def vllm_request(row: dict[str, str]) -> InferenceRequest:
    arch = _arch(row["model"])
    fmt = "fp32" if row["dtype"] == "fp32" else _VLLM_QUANT.get(row["quant"])
    return InferenceRequest(
        architecture=arch,
        weight_format=fmt,
        kv_cache_dtype=row["kv_cache_dtype"],
        sequence_length=int(row["max_model_len"]),
        engine="vllm",
        engine_options={
            "gpu_memory_utilization": float(row["gpu_mem_util"]),
            "max_model_len": int(row["max_model_len"]),
            "max_num_batched_tokens": 8192,
            "block_size": 16,
            # The line these runs were measured on (the calibration line).
            "version": "0.19",
        },
        tensor_parallel_size=int(row["tp"]),
        pipeline_parallel_size=int(row["pp"]),
        gpu_memory_bytes=round(float(row["total_gib"]) * GIB),
    )


def vllm_cases() -> list[Case]:
    out: list[Case] = []
    for row in _vllm_rows():
        req = vllm_request(row)
        est = estimate_inference(req)
        cap = est.capacity
        assert cap is not None
        first = stage_figures(req)[0]
        name = row["run"]
        kind = "mla" if is_mla(row["model"]) else "hybrid" if is_hybrid(row["model"]) else "full"
        measured_bpt = float(row["kv_cache_gib"]) * GIB / int(row["kv_cache_tokens"])
        out.append(
            Case(
                "vllm",
                name,
                "kv_bytes_per_token",
                cap.kv_cache_bytes_per_token,
                measured_bpt,
                "B",
                kind,
            )
        )
        out.append(Case("vllm", name, "weights", first.weights / GIB, float(row["weights_gib"])))
        # vLLM logs rank 0's pool; with PP its first stage (the tokens use the smallest pool).
        assert first.kv_pool_bytes is not None
        out.append(
            Case("vllm", name, "kv_pool", first.kv_pool_bytes / GIB, float(row["kv_cache_gib"]))
        )
        out.append(
            Case(
                "vllm",
                name,
                "kv_tokens",
                cap.kv_cache_tokens,
                int(row["kv_cache_tokens"]),
                "tokens",
            )
        )
        out.append(
            Case(
                "vllm",
                name,
                "max_concurrency",
                cap.max_concurrency,
                float(row["max_concurrency"]),
                "requests",
            )
        )
        if row["activation_gib"]:
            out.append(
                Case(
                    "vllm",
                    name,
                    "activations",
                    first.activations / GIB,
                    float(row["activation_gib"]),
                )
            )
            out.append(
                Case(
                    "vllm",
                    name,
                    "non_torch",
                    first.non_kv_overhead / GIB,
                    float(row["non_torch_gib"]),
                )
            )
    return out


# ------------------------------------------------------------------------------------------
# transformers (Qwen speed benchmarks)
# ------------------------------------------------------------------------------------------


def _hf_options(benchmark: str) -> dict[str, bool]:
    """Version-dependent behaviour of the benchmark's transformers release."""
    if "transformers 4.38" in benchmark:
        # < 4.40: cos/sin caches in every layer; < 4.45: prefill logits of every position.
        return {
            "logits_all_positions": True,
            "logits_fp32_upcast": True,
            "rope_cache_per_layer": True,
        }
    return {}


def transformers_rows() -> list[dict[str, str]]:
    with (require_shared() / "qwen_transformers_inference.csv").open() as f:
        rows = list(csv.DictReader(f))
    good = []
    for r in rows:
        # Skip the malformed lines of the source page (a model name in the quant column, ...).
        if r["quant"] not in _HF_QUANT or not r["model"] or not r["gpus"].isdigit():
            continue
        try:
            float(r["peak_allocated"])
        except ValueError:
            continue
        good.append(r)
    return good


def _is_qwen3_page(row: dict[str, str]) -> bool:
    return row["benchmark"].startswith("Qwen3")


def transformers_request(row: dict[str, str]) -> InferenceRequest:
    arch = _arch("Qwen/" + row["model"])
    if row["model"].startswith("Qwen2-") and row["model"].endswith("-Instruct"):
        # The catalog holds the base configs (131072 positions); the Instruct checkpoints the
        # benchmark ran ship max_position_embeddings 32768, which sizes 4.38's rotary caches.
        arch = dataclasses.replace(arch, max_position_embeddings=32768)
    if row["quant"] == "FP8" and arch.tie_word_embeddings:
        # Qwen3's fine-grained FP8 checkpoints of tied models store lm_head as its own tensor.
        arch = dataclasses.replace(arch, tie_word_embeddings=False)
    prompt = int(row["input_tokens"])
    total = prompt + int(row["output_tokens"])
    if _is_qwen3_page(row):
        # The Qwen3 page's figures grow by exactly the KV cache per prompt token and carry no
        # prefill transient: they are the memory held while decoding. Compare the decode phase.
        prompt = 1
    return InferenceRequest(
        architecture=arch,
        weight_format=_HF_QUANT[row["quant"]],
        sequence_length=total,
        prompt_tokens=prompt,
        engine="transformers",
        engine_options=_hf_options(row["benchmark"]),
        pipeline_parallel_size=int(row["gpus"]),
        attention="flash",
    )


def inconsistent_rows(rows: list[dict[str, str]]) -> set[int]:
    """Rows whose peak exceeds the same checkpoint's next longer prompt less the KV cache the
    extra prompt tokens add: no single program can have produced both, so the row is kept in
    the report but left out of the bounds."""
    bad: set[int] = set()
    by_key: dict[tuple[str, str, str, str], list[int]] = {}
    for i, r in enumerate(rows):
        by_key.setdefault((r["benchmark"], r["model"], r["quant"], r["gpus"]), []).append(i)
    for idx in by_key.values():
        idx.sort(key=lambda i: int(rows[i]["input_tokens"]))
        for a, b in itertools.pairwise(idx):
            ra, rb = rows[a], rows[b]
            arch = _arch("Qwen/" + ra["model"])
            ltb = 2 * arch.num_kv_heads * arch.head_dim * 2 * arch.num_layers
            grow = (int(rb["input_tokens"]) - int(ra["input_tokens"])) * ltb / GIB
            unit = 1 if ra["unit"] == "GiB" else 1 / 1024
            if float(ra["peak_allocated"]) * unit + grow > float(rb["peak_allocated"]) * unit:
                bad.add(a)
    return bad


def _gib(row: dict[str, str]) -> float:
    return float(row["peak_allocated"]) * (1 if row["unit"] == "GiB" else 1 / 1024)


#: Rows shown with their error and this note but outside the worst-row bound: each was examined
#: and found to hold memory no mechanism of its setting explains (docs/inference.md). A list,
#: not a rule: a new row is bounded until someone examines it and adds it here.
UNEXPLAINED_ROWS: dict[str, str] = {
    "Qwen2-72B-Instruct GPTQ-Int4 in=30720 gpus=2": (
        "grows 66.1 GiB from 1 to 30720 prompt tokens where its same-class AWQ sibling grows "
        "47.3 GiB, and reads only 16.3 GiB below the GPTQ-Int8 checkpoint whose weights are "
        "~29 GiB larger: ~13-19 GiB that neither sibling holds"
    ),
}


def transformers_cases() -> list[Case]:
    out = []
    rows = transformers_rows()
    bad = inconsistent_rows(rows)
    for i, row in enumerate(rows):
        est = estimate_inference(transformers_request(row))
        t = est.total
        allocated = t["weights"] + t["kv_cache"] + t["activations"]
        unit = 1 if row["unit"] == "GiB" else 1 / 1024
        measured = float(row["peak_allocated"]) * unit
        name = f"{row['model']} {row['quant']} in={row['input_tokens']} gpus={row['gpus']}"
        note = "quantized" if row["quant"] != "BF16" else "bf16"
        if i in bad:
            note += ", inconsistent"
        elif name in UNEXPLAINED_ROWS:
            note += ", unexplained: " + UNEXPLAINED_ROWS[name]
        out.append(
            Case("transformers", name, "peak_allocated", allocated / GIB, measured, "GiB", note)
        )
    return out


# ------------------------------------------------------------------------------------------
# Reference tracer
# ------------------------------------------------------------------------------------------


def tracer_records() -> list[dict[str, Any]]:
    if not TRACER_DATA.exists():
        return []
    return [json.loads(ln) for ln in TRACER_DATA.read_text().splitlines() if ln.strip()]


def tracer_request(rec: dict[str, Any]) -> InferenceRequest:
    arch = _arch(str(rec["model"]))
    cfg = dict(_catalog().get(str(rec["model"])).config)
    cfg.pop("quantization_config", None)
    if rec.get("layers"):
        n = int(rec["layers"])
        cfg["num_hidden_layers"] = n
        if isinstance(cfg.get("layer_types"), list):
            cfg["layer_types"] = cfg["layer_types"][:n]
    arch = read_config(cfg)
    seq = int(rec["seq"])
    return InferenceRequest(
        architecture=arch,
        weight_format="bf16",
        batch_size=int(rec["batch"]),
        sequence_length=seq,
        prompt_tokens=seq,
        engine="transformers",
        engine_options={"logits_all_positions": rec["logits_to_keep"] == 0},
        attention="eager" if rec["attn_impl"] == "eager" else "sdpa",
    )


def tracer_cases() -> list[Case]:
    out = []
    for rec in tracer_records():
        est = estimate_inference(tracer_request(rec))
        t = est.total
        name = (
            f"{rec['model']} s={rec['seq']} b={rec['batch']} keep={rec['logits_to_keep']} "
            f"{rec['attn_impl']}" + (f" L={rec['layers']}" if rec.get("layers") else "")
        )
        peak = t["weights"] + t["kv_cache"] + t["activations"]
        out.append(Case("tracer", name, "peak_allocated", peak / GIB, int(rec["peak_bytes"]) / GIB))
        out.append(
            Case(
                "tracer",
                name,
                "kv_cache",
                t["kv_cache"] / MIB,
                int(rec["kv_cache_bytes"]) / MIB,
                "MiB",
            )
        )
        out.append(
            Case("tracer", name, "weights", t["weights"] / GIB, int(rec["weights_bytes"]) / GIB)
        )
    return out


def cases() -> list[Case]:
    return vllm_cases() + transformers_cases() + tracer_cases()


# ------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------


def _fmt(v: float, unit: str) -> str:
    if unit in ("tokens", "B"):
        return f"{v:,.0f}"
    return f"{v:.3f}" if abs(v) < 100 else f"{v:.1f}"


def _table(rows: Iterable[Case]) -> list[str]:
    out = [
        "| case | component | estimate | measured | unit | error |",
        "|---|---|---:|---:|---|---:|",
    ]
    for c in rows:
        out.append(
            f"| {c.case} | {c.component} | {_fmt(c.estimate, c.unit)} | "
            f"{_fmt(c.measured, c.unit)} | {c.unit} | {c.error * 100:+.2f}% |"
        )
    return out


def summary(all_cases: list[Case]) -> list[str]:
    groups: dict[tuple[str, str], list[float]] = {}
    for c in all_cases:
        groups.setdefault((c.source, c.component), []).append(abs(c.error))
    out = [
        "| source | component | cases | mean abs error | median | worst |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (src, comp), errs in groups.items():
        out.append(
            f"| {src} | {comp} | {len(errs)} | {statistics.fmean(errs) * 100:.2f}% | "
            f"{statistics.median(errs) * 100:.2f}% | {max(errs) * 100:.2f}% |"
        )
    return out


def bounds(all_cases: list[Case]) -> list[str]:
    """The accuracy bounds of docs/inference.md with the figures reached."""

    def sel(src: str, comp: str) -> list[Case]:
        return [c for c in all_cases if c.source == src and c.component == comp]

    def worst(cs: list[Case]) -> str:
        return f"{max(abs(c.error) for c in cs) * 100:.3f}%" if cs else "n/a"

    kv = sel("vllm", "kv_bytes_per_token")
    kv_full = [c for c in kv if c.note in ("full", "mla") and "-pp" not in c.case]
    kv_hyb = [c for c in kv if c.note == "hybrid"]
    w = sel("vllm", "weights")
    pool, conc = sel("vllm", "kv_pool"), sel("vllm", "max_concurrency")
    hf_all = sel("transformers", "peak_allocated")
    hf = [c for c in hf_all if "inconsistent" not in c.note]
    bounded = [c for c in hf if "unexplained" not in c.note]
    shown = "; ".join(f"{c.case} {c.error:+.2%}" for c in hf if "unexplained" in c.note)

    def mae(cs: list[Case]) -> str:
        return f"{statistics.fmean(abs(c.error) for c in cs) * 100:.2f}%"

    def med(cs: list[Case]) -> str:
        return f"{statistics.median(abs(c.error) for c in cs) * 100:.2f}%"

    tr = sel("tracer", "peak_allocated")
    return [
        "| bound | required | reached |",
        "|---|---|---|",
        f"| KV bytes/token, full-attention and MLA rows (PP 1, {len(kv_full)}) | ≤ 0.1% | "
        f"worst {worst(kv_full)} |",
        f"| KV bytes/token, hybrid rows ({len(kv_hyb)}) | ≤ 1% | worst {worst(kv_hyb)} |",
        f"| weights per GPU, every row ({len(w)}) | ≤ 1% | worst {worst(w)} |",
        f"| vLLM KV pool ({len(pool)}) | MAE ≤ 2%, worst ≤ 5% | MAE {mae(pool)}, "
        f"worst {worst(pool)} |",
        f"| vLLM max_concurrency ({len(conc)}) | MAE ≤ 2%, worst ≤ 5% | MAE {mae(conc)}, "
        f"worst {worst(conc)} |",
        f"| transformers peak, BF16 ({sum(c.note == 'bf16' for c in hf)}) | median ≤ 5% | "
        f"median {med([c for c in hf if c.note == 'bf16'])} |",
        f"| transformers peak, quantized ({sum(c.note == 'quantized' for c in hf)}) | "
        f"median ≤ 5% | median {med([c for c in hf if c.note == 'quantized'])} |",
        f"| transformers peak, every consistent row but the listed unexplained ones "
        f"({len(bounded)}) | ≤ 12% | worst {worst(bounded)} (listed, shown with their note: "
        f"{shown or 'none'}) |",
        f"| reference tracer peak ({len(tr)}) | median ≤ 1%, worst ≤ 5% | median {med(tr)}, "
        f"worst {worst(tr)} |",
    ]


def report() -> str:
    all_cases = cases()
    lines = ["## Inference", "", "### Bounds (asserted by tests/validation)", ""]
    lines += bounds(all_cases)
    lines += ["", "### Summary per source and component", ""]
    lines += summary(all_cases)
    for src, title in (
        ("vllm", "vLLM v0.19 start-up on H100 (vllm_v0.19_h100.csv)"),
        ("transformers", "transformers generate, Qwen speed benchmarks (peak allocated)"),
        ("tracer", "Reference tracer, transformers 5.24 prefill (data/infer_tracer.jsonl)"),
    ):
        lines += ["", f"### {title}", ""]
        lines += _table(c for c in all_cases if c.source == src)
    return "\n".join(lines) + "\n"
