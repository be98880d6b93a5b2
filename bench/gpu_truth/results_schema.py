"""The CSV schema of GPU ground-truth runs, and a reader that checks rows against it.

One row per measured case, written by `bench/gpu_truth/run.py`; the columns are documented in
`bench/gpu_truth/README.md` and, authoritatively, in `COLUMNS` below. Byte figures are ints
(bytes, not GB or GiB); an empty cell means "not measured" and reads back as None.

Plain Python: no torch, so the validation code can import it anywhere.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

KINDS = ("inference-generate", "inference-prefill", "train")
STATUSES = ("ok", "oom", "timeout", "error", "skipped")
MEASURED_ON = ("cuda", "cpu-dry")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # "str" | "int" | "float" | "bool" | "json"
    doc: str


COLUMNS: tuple[Column, ...] = (
    # identity of the run and the case
    Column("schema_version", "int", "version of this schema (1)"),
    Column("run_id", "str", "one id per run of run.py, e.g. h200-20261120T101500Z"),
    Column("case_id", "str", "the case's id in cases.toml"),
    Column("kind", "str", "inference-generate | inference-prefill | train"),
    Column("status", "str", "ok | oom | timeout | error | skipped"),
    Column(
        "expected_status",
        "str",
        "what the case file expects (ok, or oom for a case "
        "meant not to fit); a row whose status differs is a surprise, not a measurement",
    ),
    Column("error", "str", "first line of the error for oom/error/skipped/timeout, else empty"),
    Column(
        "measured_on",
        "str",
        "cuda (real figures) | cpu-dry (pipeline check only: the device figures are empty)",
    ),
    # the model as built
    Column("model", "str", "key of the model in cases.toml"),
    Column("model_source", "str", "where the config's fields come from"),
    Column("model_type", "str", "Hugging Face model_type"),
    Column("num_hidden_layers", "int", "decoder layers built (may be fewer than the model has)"),
    Column("full_num_hidden_layers", "int", "decoder layers of the real model"),
    Column("config_json", "json", "the Hugging Face config fields the model was built from"),
    Column("params", "int", "parameters as built (adapters included)"),
    Column("trainable_params", "int", "parameters with requires_grad (0 for inference)"),
    Column("param_bytes", "int", "bytes of all parameters as built (adapters included)"),
    # the workload
    Column("dtype", "str", "dtype the weights were built in: bf16 | fp16 | fp32"),
    Column(
        "precision",
        "str",
        "train: bf16 (pure) | bf16-mixed (fp32 weights, bf16 "
        "autocast) | fp32; inference: same as dtype",
    ),
    Column("method", "str", "train: full | lora; inference: empty"),
    Column("lora_r", "int", "LoRA rank (lora only)"),
    Column("lora_alpha", "int", "LoRA alpha (lora only)"),
    Column("lora_targets", "str", "';'-joined module names LoRA wraps (lora only)"),
    Column("optimizer", "str", "adamw-foreach | adamw-fused | adamw-forloop (train only)"),
    Column("gradient_checkpointing", "bool", "1 if non-reentrant gradient checkpointing is on"),
    Column("attn_impl", "str", "attention implementation asked for (sdpa, eager, ...)"),
    Column("attn_impl_used", "str", "attention implementation transformers resolved to"),
    Column("batch", "int", "sequences per batch"),
    Column("seq_len", "int", "train: tokens per sequence; inference: prompt tokens"),
    Column("new_tokens", "int", "generate: tokens asked for (min = max); else 0"),
    Column("generated_tokens", "int", "generate: tokens actually generated per sequence"),
    Column("logits_to_keep", "int", "prefill: 0 = logits for every position, 1 = last only"),
    Column("steps", "int", "train: optimizer steps run inside the measurement"),
    Column("alloc_conf", "str", "PYTORCH_CUDA_ALLOC_CONF of the worker (empty = default)"),
    # the figures (bytes)
    Column(
        "weights_allocated_bytes",
        "int",
        "torch.cuda.memory_allocated after building the "
        "model (and adapters, optimizer object, inputs), before the measured work",
    ),
    Column(
        "peak_allocated_bytes",
        "int",
        "torch.cuda.max_memory_allocated over the measured work (absolute, weights included)",
    ),
    Column("peak_reserved_bytes", "int", "torch.cuda.max_memory_reserved over the measured work"),
    Column(
        "peak_phase",
        "str",
        "phase holding the allocated peak: prefill | generate | "
        "stepN.forward | stepN.backward | stepN.optimizer",
    ),
    Column(
        "after_allocated_bytes",
        "int",
        "memory_allocated after the work (train: weights + "
        "optimizer state; prefill: weights + KV cache + logits still held)",
    ),
    Column("kv_cache_bytes", "int", "prefill: bytes of the returned cache's key/value tensors"),
    Column("phase_peaks", "json", "{phase: [max_allocated, max_reserved]} per phase"),
    Column("nvml_source", "str", "nvml | nvidia-smi | empty (no device reading)"),
    Column("nvml_idle_used_bytes", "int", "device memory used before the worker touched CUDA"),
    Column("nvml_init_used_bytes", "int", "device memory used after CUDA init and one tiny tensor"),
    Column(
        "nvml_peak_used_bytes",
        "int",
        "highest device memory used, sampled every ~10 ms during build and work, and at the end",
    ),
    Column(
        "process_peak_bytes",
        "int",
        "nvml_peak_used - nvml_idle_used: the whole process "
        "footprint (CUDA context, allocator cache, workspaces)",
    ),
    Column(
        "cuda_context_bytes",
        "int",
        "nvml_init_used - nvml_idle_used - memory_reserved at "
        "init: the context before any cuBLAS handle",
    ),
    # environment
    Column("gpu_name", "str", "torch.cuda.get_device_name (or nvidia-smi)"),
    Column("gpu_total_bytes", "int", "total device memory as the driver reports it"),
    Column("driver_version", "str", "NVIDIA driver version"),
    Column("cuda_version", "str", "torch.version.cuda"),
    Column("torch_version", "str", "torch.__version__"),
    Column("transformers_version", "str", "transformers.__version__"),
    Column("peft_version", "str", "installed peft version (empty if absent)"),
    Column("python_version", "str", "worker's Python version"),
    # timings (seconds)
    Column("import_s", "float", "worker time to import torch and transformers"),
    Column("build_s", "float", "time to build the model (and adapters) on the device"),
    Column("step_s", "float", "time of the measured work"),
    Column("wall_s", "float", "the case's process wall time, as the runner saw it"),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
_TYPES: dict[str, str] = {c.name: c.type for c in COLUMNS}
# Columns that must hold a value in every row.
REQUIRED_VALUES = ("schema_version", "run_id", "case_id", "kind", "status", "measured_on")
# Figures a row must hold when it says it measured a GPU successfully.
# Derived differences of two device readings, which noise can push below zero.
SIGNED = ("cuda_context_bytes", "process_peak_bytes")
CUDA_OK_FIGURES = ("weights_allocated_bytes", "peak_allocated_bytes", "peak_reserved_bytes")


class ResultsSchemaError(ValueError):
    """A results CSV does not follow the schema; names the file and line."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


def format_value(name: str, value: Any) -> str:
    """Turns one value into its CSV cell (None -> empty)."""
    if value is None:
        return ""
    kind = _TYPES.get(name, "str")
    if kind == "bool":
        return "1" if value else "0"
    if kind == "json":
        return (
            value
            if isinstance(value, str)
            else json.dumps(value, sort_keys=True, separators=(",", ":"))
        )
    if kind == "float":
        return f"{float(value):.3f}"
    if kind == "int":
        return str(int(value))
    return str(value).replace("\n", " ").replace("\r", " ")


def format_row(row: Mapping[str, Any]) -> list[str]:
    """Orders and formats a row dict as the list of cells `COLUMN_NAMES` describes."""
    unknown = set(row) - set(COLUMN_NAMES)
    if unknown:
        raise ValueError(f"not in the schema: {sorted(unknown)}")
    return [format_value(name, row.get(name)) for name in COLUMN_NAMES]


def write_results(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Writes a whole results CSV (header + rows)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMN_NAMES)
        for row in rows:
            w.writerow(format_row(row))


def _parse(name: str, cell: str) -> Any:
    if cell == "":
        return None
    kind = _TYPES.get(name, "str")
    if kind == "int":
        return int(cell)
    if kind == "float":
        v = float(cell)
        if not math.isfinite(v):
            raise ValueError(f"not a finite number: {cell!r}")
        return v
    if kind == "bool":
        if cell.lower() in ("1", "true"):
            return True
        if cell.lower() in ("0", "false"):
            return False
        raise ValueError(f"not a bool: {cell!r}")
    if kind == "json":
        return json.loads(cell)
    return cell


def _check_row(row: dict[str, Any]) -> None:
    for name in REQUIRED_VALUES:
        if row.get(name) is None:
            raise ValueError(f"{name} is empty")
    if row["schema_version"] > SCHEMA_VERSION:
        raise ValueError(f"schema_version {row['schema_version']} is newer than {SCHEMA_VERSION}")
    if row["kind"] not in KINDS:
        raise ValueError(f"kind {row['kind']!r} not in {KINDS}")
    if row["status"] not in STATUSES:
        raise ValueError(f"status {row['status']!r} not in {STATUSES}")
    if row.get("expected_status") not in (None, *STATUSES):
        raise ValueError(f"expected_status {row['expected_status']!r} not in {STATUSES}")
    if row["measured_on"] not in MEASURED_ON:
        raise ValueError(f"measured_on {row['measured_on']!r} not in {MEASURED_ON}")
    for col in COLUMNS:
        v = row.get(col.name)
        if col.type == "int" and v is not None and v < 0 and col.name not in SIGNED:
            raise ValueError(f"{col.name} is negative ({v})")
    if row["status"] == "ok" and row["measured_on"] == "cuda":
        for name in CUDA_OK_FIGURES:
            if row.get(name) is None:
                raise ValueError(f"status ok on cuda but {name} is empty")
        if row["peak_reserved_bytes"] < row["peak_allocated_bytes"]:
            raise ValueError("peak_reserved_bytes < peak_allocated_bytes")
        if row["peak_allocated_bytes"] < row["weights_allocated_bytes"]:
            raise ValueError("peak_allocated_bytes < weights_allocated_bytes")
    if (
        row["status"] == "ok"
        and row["kind"] == "train"
        and row.get("method") not in ("full", "lora")
    ):
        raise ValueError(f"train row with method {row.get('method')!r}")


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Reads a results CSV, converts every cell to its column's type and checks each row.

    Returns one dict per row, keyed by column name, with None for empty cells. Columns this
    schema does not know are kept as strings (a newer writer may add some). Raises
    `ResultsSchemaError` naming the line on the first problem: a missing column, a cell of the
    wrong type, an unknown kind or status, a successful CUDA row without its figures.
    """
    path = Path(path)
    rows: list[dict[str, Any]] = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [n for n in COLUMN_NAMES if n not in header]
        if missing:
            raise ResultsSchemaError(path, 1, f"missing columns: {missing}")
        for raw in reader:
            line = reader.line_num
            if None in raw:
                raise ResultsSchemaError(path, line, "more cells than header columns")
            try:
                row = {k: _parse(k, v if v is not None else "") for k, v in raw.items()}
                _check_row(row)
            except (ValueError, json.JSONDecodeError) as e:
                raise ResultsSchemaError(path, line, str(e)) from None
            rows.append(row)
    return rows
