"""The GPU ground-truth case file, time plan and CSV reader (no torch needed)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu_truth.cases import (
    CaseError,
    estimate_seconds,
    load_cases,
    resolve,
    select,
    shrink,
)
from bench.gpu_truth.results_schema import (
    COLUMN_NAMES,
    ResultsSchemaError,
    format_row,
    read_results,
)

REPO = Path(__file__).resolve().parents[2]
GiB = 2**30


def test_case_file_loads_and_every_list_is_populated():
    cases = load_cases()
    for name in ("default", "extra", "dry"):
        assert select(cases, [name]), name
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))


def test_default_list_fits_eight_minutes_on_an_h200():
    default = select(load_cases(), ["default"])
    assert 15 <= len(default) <= 30
    assert sum(estimate_seconds(c) for c in default) < 8 * 60


def test_default_list_covers_the_issue_sweeps():
    default = select(load_cases(), ["default"])
    kinds = {c.kind for c in default}
    assert kinds == {"inference-generate", "inference-prefill", "train"}
    train = [c for c in default if c.kind == "train"]
    assert {c.method for c in train} == {"full", "lora"}
    assert {c.precision for c in train} == {"bf16", "bf16-mixed"}
    assert {c.optimizer for c in train} == {"adamw-foreach", "adamw-fused"}
    assert {c.gradient_checkpointing for c in train} == {True, False}
    assert len({c.batch for c in train}) > 1 and len({c.seq_len for c in train}) > 1


def test_layer_cut_keeps_the_full_depth_on_record():
    case = next(c for c in load_cases() if c.id.startswith("gemma3-27b-12of62L"))
    assert case.num_hidden_layers == 12 and case.full_num_hidden_layers == 62


def test_shrink_keeps_the_architecture_and_drops_expected_oom():
    oom = next(c for c in load_cases() if c.expect == "oom" and not c.force_fail)
    small = shrink(oom)
    assert small.model_type == oom.model_type and small.method == oom.method
    assert small.config["hidden_size"] == 64 and small.num_hidden_layers == 2
    assert small.expect == "ok" and small.shrunk


def test_unknown_case_field_is_an_error():
    data = {
        "models": {"m": {"source": "x", "config": {"model_type": "llama", "num_hidden_layers": 2}}},
        "cases": [{"id": "a", "kind": "train", "model": "m", "batch_size": 2}],
    }
    with pytest.raises(CaseError, match="batch_size"):
        resolve(data)


def test_inline_config_needs_a_source():
    data = {
        "models": {"m": {"config": {"model_type": "llama", "num_hidden_layers": 2}}},
        "cases": [{"id": "a", "kind": "inference-prefill", "model": "m"}],
    }
    with pytest.raises(CaseError, match="source"):
        resolve(data)


def test_plan_prints_the_estimate():
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gpu_truth.run", "--list", "default", "--plan"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "total for" in proc.stdout.splitlines()[-1]


def _ok_cuda_row(**over):
    row = dict(
        schema_version=1,
        run_id="h200-x",
        case_id="c",
        kind="train",
        status="ok",
        expected_status="ok",
        measured_on="cuda",
        method="full",
        weights_allocated_bytes=2 * GiB,
        peak_allocated_bytes=9 * GiB,
        peak_reserved_bytes=10 * GiB,
        config_json={"model_type": "llama"},
        gradient_checkpointing=True,
        phase_peaks={"step1.forward": [1, 2]},
        wall_s=12.5,
    )
    row.update(over)
    return row


def _write(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMN_NAMES)
        for r in rows:
            w.writerow(format_row(r))
    return path


def test_reader_round_trips_types(tmp_path):
    rows = read_results(_write(tmp_path / "r.csv", [_ok_cuda_row()]))
    r = rows[0]
    assert r["peak_allocated_bytes"] == 9 * GiB and isinstance(r["peak_allocated_bytes"], int)
    assert r["gradient_checkpointing"] is True and r["wall_s"] == 12.5
    assert r["config_json"] == {"model_type": "llama"} and r["lora_r"] is None


@pytest.mark.parametrize(
    "over, message",
    [
        ({"status": "finished"}, "status"),
        ({"kind": "decode"}, "kind"),
        ({"peak_allocated_bytes": None}, "peak_allocated_bytes"),
        ({"peak_reserved_bytes": 1 * GiB}, "reserved"),
        ({"params": -1}, "negative"),
    ],
)
def test_reader_rejects_bad_rows(tmp_path, over, message):
    path = _write(tmp_path / "r.csv", [_ok_cuda_row(), _ok_cuda_row(**over)])
    with pytest.raises(ResultsSchemaError, match=message) as e:
        read_results(path)
    assert e.value.line == 3


def test_reader_rejects_a_missing_column(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("schema_version,run_id\n1,x\n")
    with pytest.raises(ResultsSchemaError, match="missing columns"):
        read_results(path)


def test_oom_row_without_figures_is_valid(tmp_path):
    row = _ok_cuda_row(
        status="oom",
        expected_status="oom",
        peak_allocated_bytes=None,
        peak_reserved_bytes=None,
        error="OutOfMemoryError: ...",
    )
    assert read_results(_write(tmp_path / "r.csv", [row]))[0]["status"] == "oom"


def test_committed_results_follow_the_schema():
    paths = sorted((REPO / "bench" / "gpu_truth" / "results").glob("*.csv"))
    if not paths:
        pytest.skip("no GPU measurements committed yet (make measure-gpu on a CUDA machine)")
    for path in paths:
        read_results(path)
