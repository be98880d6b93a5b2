"""Regenerate `data/infer_tracer.jsonl`: reference-tracer prefill peaks over a fixed grid.

Each run executes `reference_tracer/infer_peak.py` (real transformers model code
under FakeTensorMode + MemTracker: the bytes the caching allocator is asked for, the figure
`torch.cuda.max_memory_allocated` reports for the same code path) with the project venv's
python on a catalog model's config, and appends one JSON line: the grid point, the catalog id
and the tracer's answer. CI never runs this (it takes minutes); `make validate` and
`tests/validation/` check the estimator against the committed lines.

Run: ``make tracer-data-inference`` (or ``python -m bench.validate.tracer [--only MODEL]``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.validate.paths import TRACER_DIR

ROOT = Path(__file__).resolve().parents[2]
TRACER = TRACER_DIR / "infer_peak.py"
OUT = Path(__file__).parent / "data" / "infer_tracer.jsonl"

# (catalog id, sequence length, batch, logits_to_keep, attention, layers override or None).
# Layer overrides keep very large models quick; the estimator is run on the same layer count.
GRID: tuple[tuple[str, int, int, int, str, int | None], ...] = (
    ("meta-llama/Llama-3.2-1B", 2048, 1, 1, "sdpa", None),
    ("meta-llama/Llama-3.2-1B", 2048, 1, 0, "sdpa", None),
    ("meta-llama/Llama-3.2-1B", 8192, 2, 1, "sdpa", None),
    ("meta-llama/Llama-3.2-1B", 2048, 1, 1, "eager", None),
    ("meta-llama/Llama-3.1-8B", 4096, 1, 1, "sdpa", None),
    ("meta-llama/Llama-3.1-8B", 4096, 1, 0, "sdpa", None),
    ("Qwen/Qwen2.5-7B-Instruct", 8192, 1, 1, "sdpa", None),
    ("Qwen/Qwen2.5-0.5B", 16384, 1, 1, "sdpa", None),
    ("Qwen/Qwen2.5-0.5B", 4096, 4, 0, "sdpa", None),
    ("Qwen/Qwen3-8B", 4096, 1, 1, "sdpa", None),
    ("Qwen/Qwen3-0.6B", 8192, 1, 0, "sdpa", None),
    ("mistralai/Mistral-7B-v0.3", 4096, 1, 1, "sdpa", None),
    ("microsoft/phi-4", 4096, 1, 1, "sdpa", None),
    ("mistralai/Mixtral-8x7B-v0.1", 2048, 1, 1, "sdpa", 4),
    ("Qwen/Qwen3-30B-A3B", 2048, 1, 1, "sdpa", 8),
    ("deepseek-ai/DeepSeek-V2-Lite", 2048, 1, 1, "sdpa", None),
    ("google/gemma-2-9b", 4096, 1, 1, "eager", None),
    ("openai/gpt-oss-20b", 4096, 1, 1, "eager", 4),
)


def _config(model_id: str, layers: int | None) -> dict[str, object]:
    sys.path.insert(0, str(ROOT))
    from service.catalog.model_catalog import load_model_catalog

    cfg = dict(load_model_catalog().get(model_id).config)
    cfg.pop("quantization_config", None)  # the tracer builds plain bf16 modules
    return cfg


def run(only: str | None = None) -> int:
    if not TRACER.exists():
        print(f"reference tracer not found at {TRACER}", file=sys.stderr)
        return 2
    python = ROOT / ".venv" / "bin" / "python"
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for model_id, seq, batch, keep, attn, layers in GRID:
            if only and only != model_id:
                continue
            path = Path(tmp) / (model_id.replace("/", "__") + ".json")
            path.write_text(json.dumps(_config(model_id, layers)))
            cmd = [
                str(python),
                str(TRACER),
                "--config",
                str(path),
                "--seq",
                str(seq),
                "--batch",
                str(batch),
                "--logits-to-keep",
                str(keep),
                "--attn",
                attn,
            ]
            if layers:
                cmd += ["--layers", str(layers)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(f"{model_id}: tracer failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            record = {
                "model": model_id,
                "seq": seq,
                "batch": batch,
                "logits_to_keep": keep,
                "attn": attn,
                "layers": layers,
                "peak_bytes": result["peak"]["Total"],
                "kv_cache_bytes": result["kv_cache_bytes"],
                "kv_storage_bytes": result["kv_storage_bytes"],
                "weights_bytes": result["weights_bytes"],
                "logits_bytes": result["logits_bytes"],
                "attn_impl": result["attn_impl"],
                "versions": "torch 2.13.0, transformers 5.24.0",
            }
            print(json.dumps(record), flush=True)
            lines.append(json.dumps(record))
    if only:
        kept = [ln for ln in OUT.read_text().splitlines() if json.loads(ln)["model"] != only]
        lines = kept + lines
    OUT.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="rerun one catalog id and keep the other lines")
    raise SystemExit(run(ap.parse_args().only))
