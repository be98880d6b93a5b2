"""Runner: measure a list of cases, one worker process each, and write the results CSV.

Each case runs in its own `python -m bench.gpu_truth.measure_case` process (its own CUDA
context, nothing left over from the case before), with the case's timeout; its result line
becomes one CSV row. A worker that runs out of memory reports status oom; one that times out,
crashes or prints no result gets a row with status timeout or error and the tail of its stderr.
Rows are written as they come, so a run cut short keeps what it measured.

Beside the CSV: `<csv>.meta.json` (run id, versions, GPU, counts, wall time) and `<csv>.log`
(every worker's stderr). This process never imports torch or touches the GPU.

    python -m bench.gpu_truth.run --list default --device cuda --out results/h200-DATE.csv
    python -m bench.gpu_truth.run --list default --plan      # the H200 time estimate, no run
    python -m bench.gpu_truth.run --list dry --device cpu --out /tmp/dry.csv --strict
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.gpu_truth.cases import (
    DEFAULT_CASES,
    REPO_ROOT,
    Case,
    estimate_seconds,
    load_cases,
    select,
    shrink,
)
from bench.gpu_truth.measure_case import RESULT_MARKER, package_version
from bench.gpu_truth.results_schema import COLUMN_NAMES, SCHEMA_VERSION, format_row

GiB = 2**30


def _gpu_probe() -> dict[str, Any]:
    """GPU name, memory and driver from nvidia-smi (no CUDA context), empty if none."""
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,memory.total,driver_version",
                "--format=csv,noheader,nounits",
                "-i",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    name, total, driver = (x.strip() for x in out.stdout.strip().splitlines()[0].split(","))
    return {
        "gpu_name": name,
        "gpu_total_bytes": int(float(total)) * 2**20,
        "driver_version": driver,
    }


def _env_fields(gpu: dict[str, Any]) -> dict[str, Any]:
    versions = {f"{d}_version": package_version(d) for d in ("torch", "transformers", "peft")}
    return {**versions, "python_version": platform.python_version(), **gpu}


def _base_row(case: Case, run_id: str, measured_on: str, env: dict[str, Any]) -> dict[str, Any]:
    """The row of a case that produced no result of its own."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "case_id": case.id,
        "kind": case.kind,
        "expected_status": case.expect,
        "measured_on": measured_on,
        "model": case.model,
        "model_source": case.model_source,
        "model_type": case.model_type,
        "num_hidden_layers": case.num_hidden_layers,
        "full_num_hidden_layers": case.full_num_hidden_layers,
        "config_json": case.config,
        "dtype": case.dtype,
        "precision": case.precision,
        "method": case.method or None,
        "optimizer": case.optimizer or None,
        "gradient_checkpointing": case.gradient_checkpointing,
        "attn_impl": case.attn,
        "batch": case.batch,
        "seq_len": case.seq_len,
        "new_tokens": case.new_tokens,
        "logits_to_keep": case.logits_to_keep,
        **env,
    }


_current: subprocess.Popen[str] | None = None


def _on_term(signum: int, frame: Any) -> None:
    """SIGTERM/SIGINT (an outer `timeout`): kill the running worker's group, then stop.
    The rows written so far stay in the CSV."""
    if _current is not None and _current.poll() is None:
        os.killpg(_current.pid, signal.SIGKILL)
    raise SystemExit(128 + signum)


def run_case(case: Case, device: str, log: Any) -> tuple[dict[str, Any] | None, str, float]:
    """Runs one worker; returns (its row or None, a status/error note, wall seconds)."""
    global _current
    env = {**os.environ, **case.env, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "bench.gpu_truth.measure_case", "--device", device]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _current = proc
    try:
        out, err = proc.communicate(case.to_json(), timeout=case.timeout_s)
        note = ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own process group only
        out, err = proc.communicate()
        note = f"timeout after {case.timeout_s:.0f} s"
    wall = time.perf_counter() - t0
    log.write(f"===== {case.id} (rc={proc.returncode}, {wall:.1f} s)\n{err}\n")
    log.flush()
    row = None
    for line in (out or "").splitlines():
        if line.startswith(RESULT_MARKER):
            row = json.loads(line[len(RESULT_MARKER) :])
    if row is None and not note:
        tail = " | ".join((err or "").strip().splitlines()[-3:])[-300:]
        note = f"worker exited with code {proc.returncode} and no result: {tail}"
    return row, note, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Measure GPU memory of the listed cases.")
    ap.add_argument("--cases", default=str(DEFAULT_CASES))
    ap.add_argument("--list", default="default", help="comma-separated case lists")
    ap.add_argument("--only", default="", help="comma-separated case ids (any list)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--shrink", action="store_true", help="tiny dimensions, same structure")
    ap.add_argument("--out", help="CSV to write (required unless --plan)")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no case whose estimate would end past this many seconds "
        "from the start (0 = no limit); skipped cases get status skipped",
    )
    ap.add_argument("--run-id", default="")
    ap.add_argument("--plan", action="store_true", help="print the cases and H200 estimate")
    ap.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if any case's status differs from the one it expects",
    )
    a = ap.parse_args(argv)

    cases = select(
        load_cases(a.cases), a.list.split(","), [x for x in a.only.split(",") if x] or None
    )
    if a.shrink:
        cases = [shrink(c) for c in cases]
    if not cases:
        ap.error("no cases selected")
    estimates = {c.id: estimate_seconds(c) for c in cases}
    if a.plan:
        for c in cases:
            print(f"{estimates[c.id]:6.1f} s  {c.id}")
        total = sum(estimates.values())
        print(f"{total:6.1f} s  total for {len(cases)} cases ({total / 60:.1f} min, H200 guess)")
        return 0
    if not a.out:
        ap.error("--out is required")

    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    measured_on = "cuda" if a.device == "cuda" else "cpu-dry"
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    gpu = _gpu_probe() if a.device == "cuda" else {}
    tag = gpu.get("gpu_name", a.device).lower().removeprefix("nvidia ").split()[0]
    run_id = a.run_id or f"{tag}-{stamp}"  # "NVIDIA H200" -> h200-...
    env = _env_fields(gpu)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    surprises: list[str] = []
    t_start = time.perf_counter()
    print(
        f"gpu_truth: {len(cases)} cases on {a.device} ({gpu.get('gpu_name', 'no GPU')}), "
        f"estimate {sum(estimates.values()):.0f} s on an H200 -> {out}",
        file=sys.stderr,
    )
    with (
        open(out, "w", newline="", encoding="utf-8") as f,
        open(str(out) + ".log", "w", encoding="utf-8") as log,
    ):
        writer = csv.writer(f)
        writer.writerow(COLUMN_NAMES)
        f.flush()
        for i, case in enumerate(cases, 1):
            row = _base_row(case, run_id, measured_on, env)
            missing = [m for m in case.requires if importlib.util.find_spec(m) is None]
            elapsed = time.perf_counter() - t_start
            wall = 0.0
            if missing:
                row.update(status="skipped", error=f"not installed: {', '.join(missing)}")
            elif a.budget_s and elapsed + estimates[case.id] > a.budget_s:
                row.update(
                    status="skipped",
                    error=f"time budget: {elapsed:.0f} s gone of {a.budget_s:.0f} s",
                )
            else:
                result, note, wall = run_case(case, a.device, log)
                if result is not None:
                    row.update({k: v for k, v in result.items() if v is not None})
                else:
                    row.update(status="timeout" if note.startswith("timeout") else "error")
                if note:
                    row["error"] = note
                row["wall_s"] = wall
            row.update(schema_version=SCHEMA_VERSION, run_id=run_id, measured_on=measured_on)
            writer.writerow(format_row(row))
            f.flush()
            counts[row["status"]] = counts.get(row["status"], 0) + 1
            if row["status"] != case.expect and not missing:  # a missing extra is no surprise
                surprises.append(f"{case.id}: {row['status']} (expected {case.expect})")
            peak = row.get("peak_allocated_bytes")
            figure = f"peak {peak / GiB:.2f} GiB" if peak else ""
            print(
                f"[{i}/{len(cases)}] {row['status']:7s} {case.id} {figure} "
                f"{wall:.1f} s (est {estimates[case.id]:.0f}) {row.get('error') or ''}",
                file=sys.stderr,
            )
    total = time.perf_counter() - t_start
    digest = hashlib.sha256(Path(a.cases).read_bytes()).hexdigest()
    meta = {
        "run_id": run_id,
        "schema_version": SCHEMA_VERSION,
        "lists": a.list,
        "only": a.only,
        "shrink": a.shrink,
        "device": a.device,
        "cases_file": str(a.cases),
        "cases_sha256": digest,
        "started_utc": stamp,
        "wall_s": round(total, 1),
        "estimate_s": round(sum(estimates.values()), 1),
        "counts": counts,
        "surprises": surprises,
        **env,
    }
    Path(str(out) + ".meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(
        f"gpu_truth: done in {total:.0f} s: {counts}; {len(surprises)} surprises", file=sys.stderr
    )
    for s in surprises:
        print(f"  surprise: {s}", file=sys.stderr)
    return 1 if a.strict and surprises else 0


if __name__ == "__main__":
    sys.exit(main())
