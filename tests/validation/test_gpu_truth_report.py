"""The GPU-measurement section of `make validate`: reads the harness's CSV schema and compares
each measured row with the estimator on the same config and workload."""

from __future__ import annotations

import json
from pathlib import Path

from bench.gpu_truth.results_schema import COLUMNS, write_results
from bench.validate import gpu_truth
from service.catalog.model_catalog import load_model_catalog


def _row(**values: object) -> dict[str, object]:
    row: dict[str, object] = {c.name: None for c in COLUMNS}
    row.update(values)
    return row


def test_no_results_says_so(tmp_path: Path) -> None:
    assert "No GPU measurements are committed yet" in gpu_truth.report(tmp_path)


def test_measured_rows_are_compared_on_allocator_peak(tmp_path: Path) -> None:
    config = dict(load_model_catalog().get("Qwen/Qwen2.5-0.5B").config)
    config["num_hidden_layers"] = 2
    measured = 3 * 2**30
    common = dict(
        schema_version=1,
        run_id="t",
        status="ok",
        expected_status="ok",
        measured_on="cuda",
        model="qwen",
        model_type="qwen2",
        config_json=config,
        dtype="bf16",
        batch=1,
        seq_len=1024,
        gpu_name="NVIDIA H200",
        peak_allocated_bytes=measured,
        peak_reserved_bytes=measured,
        weights_allocated_bytes=2**30,
    )
    rows = [
        _row(
            case_id="prefill",
            kind="inference-prefill",
            logits_to_keep=0,
            new_tokens=0,
            precision="bf16",
            cuda_context_bytes=500 * 2**20,
            **common,
        ),
        _row(
            case_id="train",
            kind="train",
            method="full",
            precision="bf16",
            optimizer="adamw-fused",
            gradient_checkpointing=False,
            steps=2,
            **common,
        ),
        _row(case_id="oom", kind="train", **{**common, "status": "oom"}),
    ]
    path = tmp_path / "h200-test.csv"
    write_results(path, rows)
    found, skipped = gpu_truth.comparisons(tmp_path)
    assert [(c.case_id, c.kind) for c in found] == [
        ("prefill", "inference-prefill"),
        ("prefill", "cuda-context"),
        ("train", "train"),
    ]
    assert all(c.measured in (measured, 500 * 2**20) for c in found)
    assert any("oom" in s for s in skipped)
    text = gpu_truth.report(tmp_path)
    assert "| h200-test.csv | train | train |" in text
    assert json.dumps(config)  # the config column round-trips as JSON
