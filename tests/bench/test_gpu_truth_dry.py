"""The GPU ground-truth harness run end to end on the CPU (bench/gpu_truth, dry cases).

Runs the runner in a subprocess, as `make measure-gpu-dry` does, on two tiny cases that work
(a LoRA training step with gradient checkpointing, and one forced to raise an out-of-memory
error inside its step) and two whose worker dies (a crash, a hang past its timeout), then
reads the CSV back through the schema reader. Expected parameter counts are worked out by hand
below from the tiny-llama config in cases.toml.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu_truth.results_schema import COLUMN_NAMES, read_results

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

REPO = Path(__file__).resolve().parents[2]
CASES = ["dry-train-lora-gc", "dry-forced-oom", "dry-forced-crash", "dry-forced-hang"]

pytestmark = [pytest.mark.reference, pytest.mark.slow]

# tiny-llama: hidden 64, intermediate 128, 4 heads x 16, 2 KV heads, vocab 512, 2 layers, tied.
_H, _I, _KV, _V, _L = 64, 128, 2 * 16, 512, 2
_PER_LAYER = (
    _H * _H
    + 2 * _H * _KV
    + _H * _H  # q, k, v, o (no bias)
    + 3 * _H * _I  # gate, up, down
    + 2 * _H
)  # two RMSNorm weights
BASE_PARAMS = _V * _H + _L * _PER_LAYER + _H  # tied embedding, layers, final norm
# LoRA r=16 on the seven projections adds r * (in + out) per projection.
_R = 16
LORA_PARAMS = _L * _R * ((_H + _H) + 2 * (_H + _KV) + (_H + _H) + 2 * (_H + _I) + (_I + _H))


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("gpu_truth") / "dry.csv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gpu_truth.run",
            "--device",
            "cpu",
            "--strict",
            "--only",
            ",".join(CASES),
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return out, proc


def test_runner_finishes_with_every_case_as_expected(dry_run):
    out, proc = dry_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.is_file()


def test_one_row_per_case_with_every_column(dry_run):
    out, _ = dry_run
    header = out.read_text().splitlines()[0].split(",")
    assert header == list(COLUMN_NAMES)
    rows = read_results(out)
    assert [r["case_id"] for r in rows] == CASES
    assert all(r["measured_on"] == "cpu-dry" for r in rows)
    assert len({r["run_id"] for r in rows}) == 1


def test_statuses_record_oom_crash_and_timeout(dry_run):
    rows = {r["case_id"]: r for r in read_results(dry_run[0])}
    assert rows["dry-train-lora-gc"]["status"] == "ok"
    oom = rows["dry-forced-oom"]
    assert oom["status"] == "oom" and "out of memory" in oom["error"]
    assert oom["expected_status"] == "oom"
    assert rows["dry-forced-crash"]["status"] == "error"
    assert "code 3" in rows["dry-forced-crash"]["error"]
    assert rows["dry-forced-hang"]["status"] == "timeout"
    assert rows["dry-forced-hang"]["wall_s"] < 30


def test_lora_row_describes_the_model_built(dry_run):
    row = next(r for r in read_results(dry_run[0]) if r["case_id"] == "dry-train-lora-gc")
    assert row["trainable_params"] == LORA_PARAMS
    assert row["params"] == BASE_PARAMS + LORA_PARAMS
    # bf16 base weights (2 bytes), fp32 adapters (4 bytes, peft's default on a bf16 base)
    assert row["param_bytes"] == 2 * BASE_PARAMS + 4 * LORA_PARAMS
    assert row["method"] == "lora" and row["gradient_checkpointing"] is True
    assert row["optimizer"] == "adamw-fused" and row["steps"] == 2
    assert row["config_json"]["num_hidden_layers"] == _L
    assert row["torch_version"] and row["transformers_version"] and row["peft_version"]
    # on the CPU the device figures stay empty rather than holding a CPU stand-in
    for col in ("peak_allocated_bytes", "peak_reserved_bytes", "nvml_peak_used_bytes"):
        assert row[col] is None


def test_sidecar_meta_counts_the_statuses(dry_run):
    meta = json.loads(Path(str(dry_run[0]) + ".meta.json").read_text())
    assert meta["counts"] == {"ok": 1, "oom": 1, "error": 1, "timeout": 1}
    assert meta["surprises"] == []
