"""Regenerate `data/fsdp_tracer.jsonl`: FSDP2 per-rank peaks from the reference tracer.

Each run executes `reference_tracer/fsdp_peak.py` (transformers model code,
``fully_shard`` on every decoder layer and on the root, a fake process group of ``--world``
ranks, FakeTensorMode, torch's ``FSDPMemTracker``) with the project venv's python and appends
one JSON line: the grid point, the exact command (config path aside), the library versions
and the tracer's answer. Pure bf16 parameters (no ``MixedPrecisionPolicy``), AdamW with
``foreach=False`` (the tracer's README: foreach/fused temporaries are not trustworthy under
fake tensors on sharded parameters). CI never runs this; `bench/validate/finetune.py`
compares the committed lines with the estimator's ``zero_stage`` 3 figures.

Usage: `python -m bench.validate.fsdp_tracer [--only SUBSTR] [--fresh]` (resumes by default).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.validate.paths import TRACER_DIR
from bench.validate.train_tracer import CONFIGS

TRACER = TRACER_DIR / "fsdp_peak.py"
OUT = Path(__file__).resolve().parent / "data" / "fsdp_tracer.jsonl"

# (model, seq, batch, world, flags); models at full depth.
GRID: list[tuple[str, int, int, int, tuple[str, ...]]] = [
    (model, seq, 1, world, flags)
    for model, seq in (("meta-llama/Llama-3.2-1B", 4096), ("Qwen/Qwen2.5-7B", 2048))
    for world in (2, 4, 8)
    for flags in ((), ("gc",))
]


def run_id(model: str, seq: int, batch: int, world: int, flags: tuple[str, ...]) -> str:
    return f"{model}|w{world}|s{seq}|b{batch}|{'+'.join(sorted(flags)) or 'base'}"


def versions() -> dict[str, str]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def run_one(
    model: str, seq: int, batch: int, world: int, flags: tuple[str, ...]
) -> dict[str, object]:
    cfg = CONFIGS[model]
    args = ["--world", str(world), "--seq", str(seq), "--batch", str(batch), "--optim", "forloop"]
    args += ["--gc"] if "gc" in flags else []
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "config.json"
        cfg_path.write_text(json.dumps(cfg))
        cmd = [sys.executable, str(TRACER), "--config", str(cfg_path), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("{"))
    res = json.loads(line)
    res["args"].pop("config", None)
    return {
        "id": run_id(model, seq, batch, world, flags),
        "model": model,
        "seq": seq,
        "batch": batch,
        "world": world,
        "flags": sorted(flags),
        "command": "python fsdp_peak.py --config CONFIG.json " + " ".join(args),
        "versions": versions(),
        "config": cfg,
        "tracer": res,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="")
    ap.add_argument("--fresh", action="store_true")
    a = ap.parse_args()
    if a.fresh and OUT.exists():
        OUT.unlink()
    done = set()
    if OUT.exists():
        done = {json.loads(ln)["id"] for ln in OUT.read_text().splitlines() if ln.strip()}
    for point in GRID:
        rid = run_id(*point)
        if rid in done or a.only not in rid:
            continue
        t0 = time.perf_counter()
        try:
            rec = run_one(*point)
        except subprocess.CalledProcessError as exc:
            print(f"{rid}: FAILED\n{exc.stderr[-2000:]}", flush=True)
            continue
        with OUT.open("a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        print(
            f"{rid}: {rec['tracer']['peak_GiB']} GiB ({time.perf_counter() - t0:.0f} s)", flush=True
        )  # type: ignore[index]


if __name__ == "__main__":
    main()
