"""The estimator against our own GPU measurements (bench/gpu_truth/results/*.csv).

Each measured row is re-estimated from the config it was built from, with the same workload,
and compared on what the row measured: the allocator peak (`torch.cuda.max_memory_allocated`)
against the estimate's allocated figure, and the CUDA context the device showed against the
overhead model's context term. `make validate` adds this section to docs/accuracy.md; with no
committed measurements the section says so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu_truth.results_schema import read_results
from service.estimator.engines.overhead import cuda_context_bytes
from service.estimator.errors import EstimatorError
from service.estimator.inference import InferenceRequest, estimate_inference
from service.estimator.model import Architecture, read_config
from service.estimator.training import FinetuneRequest, estimate_finetune

RESULTS = Path(__file__).resolve().parents[1] / "gpu_truth" / "results"
GIB = 2**30


@dataclass(frozen=True)
class Comparison:
    source: str
    case_id: str
    kind: str
    measured: int
    estimated: int

    @property
    def error(self) -> float:
        return (self.estimated - self.measured) / self.measured


def _inference_allocated(row: dict[str, Any], arch: Architecture) -> int:
    prompt = int(row["seq_len"])
    new = int(row["new_tokens"] or 0) if row["kind"] == "inference-generate" else 0
    options: dict[str, Any] = {}
    if row["kind"] == "inference-prefill":
        options["logits_all_positions"] = row.get("logits_to_keep") == 0
    request = InferenceRequest(
        architecture=arch,
        batch_size=int(row["batch"]),
        sequence_length=prompt + max(new, 0) if new else prompt,
        prompt_tokens=prompt,
        engine="transformers",
        engine_options=options,
        attention="eager" if row.get("attn_impl_used") == "eager" else "sdpa",
    )
    estimate = estimate_inference(request)
    # transformers' figure is the allocator peak: everything but the context and workspaces.
    return sum(v for k, v in estimate.per_gpu.items() if k != "overhead")


def _train_allocated(row: dict[str, Any], arch: Architecture) -> int:
    optimizer = str(row.get("optimizer") or "adamw-foreach")
    request = FinetuneRequest(
        architecture=arch,
        method=str(row["method"] or "full"),
        precision=str(row["precision"]),
        optimizer="adamw",
        optimizer_foreach=optimizer != "adamw-fused",
        batch_size=int(row["batch"]),
        sequence_length=int(row["seq_len"]),
        gradient_checkpointing="full" if row.get("gradient_checkpointing") else "none",
        attention="eager" if row.get("attn_impl_used") == "eager" else "sdpa",
    )
    estimate = estimate_finetune(request)
    allocated = estimate.details.get("allocated_peak_bytes")
    return int(allocated) if isinstance(allocated, int) else estimate.per_gpu_bytes


def comparisons(results_dir: Path = RESULTS) -> tuple[list[Comparison], list[str]]:
    """Allocator-peak and CUDA-context comparisons of every measured row, and skipped rows."""
    found: list[Comparison] = []
    skipped: list[str] = []
    for path in sorted(results_dir.glob("*.csv")):
        for row in read_results(path):
            label = f"{path.name}:{row['case_id']}"
            if row["status"] != "ok" or row["measured_on"] != "cuda":
                skipped.append(f"{label}: {row['status']} on {row['measured_on']}")
                continue
            try:
                arch = read_config(row["config_json"])
                if row["kind"] == "train":
                    estimated = _train_allocated(row, arch)
                else:
                    estimated = _inference_allocated(row, arch)
            except EstimatorError as exc:
                skipped.append(f"{label}: not estimable ({exc.detail})")
                continue
            found.append(
                Comparison(
                    path.name,
                    row["case_id"],
                    row["kind"],
                    int(row["peak_allocated_bytes"]),
                    estimated,
                )
            )
            context = row.get("cuda_context_bytes")
            if isinstance(context, int) and context > 0:
                found.append(
                    Comparison(
                        path.name, row["case_id"], "cuda-context", context, cuda_context_bytes()
                    )
                )
    return found, skipped


def report(results_dir: Path = RESULTS) -> str:
    rows, skipped = comparisons(results_dir)
    lines = ["## Our own GPU measurements (bench/gpu_truth/results/)", ""]
    if not rows:
        lines += [
            "No GPU measurements are committed yet: the harness (`make measure-gpu`, "
            "bench/gpu_truth/README.md) runs in a session that is lent a GPU. Until then the "
            "overhead terms (CUDA context, workspaces, fragmentation) rest on the published "
            "measurements above, as docs/inference.md and docs/finetune.md say.",
            "",
        ]
    else:
        lines += [
            "| file | case | compared | measured GiB | estimated GiB | error |",
            "|---|---|---|---:|---:|---:|",
        ]
        for c in rows:
            lines.append(
                f"| {c.source} | {c.case_id} | {c.kind} | {c.measured / GIB:.3f} | "
                f"{c.estimated / GIB:.3f} | {c.error:+.1%} |"
            )
        by_kind: dict[str, list[float]] = {}
        for c in rows:
            by_kind.setdefault(c.kind, []).append(abs(c.error))
        lines.append("")
        for kind, errors in sorted(by_kind.items()):
            lines.append(
                f"- {kind}: {len(errors)} rows, median |error| "
                f"{statistics.median(errors):.1%}, worst {max(errors):.1%}"
            )
        lines.append("")
    if skipped:
        lines += ["Rows not compared:", "", *[f"- {s}" for s in skipped], ""]
    return "\n".join(lines)
