"""The one-line summary a person reads: decimal GB (10^9 bytes), as the line itself says."""

from __future__ import annotations

from service.estimator.result import Estimate, Fit

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
    if fit.fits:
        verdict = f"fits {fit.gpu_count} x {label}, {gb(fit.headroom_bytes)} GB free"
    else:
        verdict = (
            f"does not fit {fit.gpu_count} x {label} (needs {gb(fit.required_bytes)} GB of "
            f"{gb(fit.usable_bytes)} GB usable per GPU)"
        )
        if fit.min_gpu_count is not None:
            verdict += f"; fits on {fit.min_gpu_count}"
        else:
            verdict += "; no GPU count fits"
    return f"{head}; {verdict}"
