"""The one-line summary a person reads: decimal GB (10^9 bytes), as the line itself says."""

from __future__ import annotations

from service.estimator.parallel import Layout
from service.estimator.result import REASON_TEXT, Estimate, Fit, FitReason

COMPONENT_LABELS = {
    "weights": "weights",
    "kv_cache": "KV cache",
    "activations": "activations",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "overhead": "overhead",
}

GB = 10**9
GIB = 2**30


def gb(n_bytes: int) -> str:
    """Bytes as decimal gigabytes with one decimal (the unit is GB = 10^9 bytes)."""
    return f"{n_bytes / GB:.1f}"


def summarize(model_name: str, estimate: Estimate, fit: Fit | None, gpu_name: str | None) -> str:
    parts = ", ".join(
        f"{COMPONENT_LABELS.get(name, name)} {gb(value)}"
        for name, value in estimate.per_gpu.items()
    )
    if estimate.gpu_count > 1:
        head = (
            f"{model_name}, {estimate.kind}: {gb(estimate.per_gpu_bytes)} GB per GPU on "
            f"{estimate.gpu_count} GPUs ({parts}), {gb(estimate.total_bytes)} GB in total"
        )
    else:
        head = f"{model_name}, {estimate.kind}: {gb(estimate.total_bytes)} GB ({parts})"
    if fit is None:
        return head
    label = gpu_name or fit.gpu
    on = f"{fit.gpu_count} x {label}{_as(fit.layout)}"
    if fit.fits:
        return f"{head}; fits {on}, {gb(fit.headroom_bytes)} GB free"
    verdict = f"does not fit {on}: {REASON_TEXT[fit.reason]}"
    if fit.reason is FitReason.HOST_MEMORY_EXCEEDED:
        return f"{head}; {verdict}"
    if fit.min_gpu_count is not None:
        verdict += f"; fits on {fit.min_gpu_count}{_as(fit.min_gpu_layout)}"
    else:
        verdict += "; no GPU count fits"
    return f"{head}; {verdict}"


def _as(layout: Layout | None) -> str:
    """ " as TP 2 × PP 2" (and replicas) for a layout that splits the model, else empty."""
    if layout is None or layout.gpus == 1:
        return ""
    parts = []
    if layout.tensor > 1:
        parts.append(f"TP {layout.tensor}")
    if layout.pipeline > 1:
        parts.append(f"PP {layout.pipeline}")
    text = " × ".join(parts) or "TP 1"
    if layout.expert > 1:
        # DP ranks whose MoE layers form one expert-parallel group: not independent copies.
        if layout.data > 1:
            text += f" × DP {layout.data}"
        text += f", experts over EP {layout.expert}"
    elif layout.data > 1:
        text += f", {layout.data} replicas"
    return f" as {text}"
