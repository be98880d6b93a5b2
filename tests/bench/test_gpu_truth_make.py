"""`make measure-gpu-dry` installs what its harness imports (issue 28 §5).

On a checkout where only `make serve` has run, `.venv` holds the runtime alone, without torch:
the target must install the `reference` extras (torch CPU, transformers, peft) before it runs
the harness. `make -n --always-make` against an empty virtual-environment path prints every
command the target would run from scratch, in order, without running any.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_measure_gpu_dry_installs_the_reference_extras_before_running(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    out = subprocess.run(
        ["make", "-n", "--always-make", "measure-gpu-dry", f"VENV={venv}", f"PY={venv}/bin/python"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    installs = [i for i, line in enumerate(out) if "pip install" in line and "[reference]" in line]
    runs = [i for i, line in enumerate(out) if "bench.gpu_truth.run" in line]
    assert installs, "\n".join(out)
    assert runs, "\n".join(out)
    assert installs[0] < runs[0]
