"""The `simple` estimator: the rules of the Alibaba Cloud PAI guide "Estimate GPU memory for
LLMs", reproduced exactly.

- weights = parameters × bytes per parameter of the weight format;
- activations = 10% of the 16-bit model size (parameters × 2 bytes) at batch 1 and 2048
  tokens, in proportion to batch × tokens; MoE models use the active parameter count;
- KV cache = the same 10% rule, also in proportion to concurrency (inference only);
- fine-tuning: gradients = trainable parameters × 2 bytes, optimizer states = trainable
  parameters × states × 4 bytes (SGD 0, SGD with momentum 1, RMSprop 1, Adam/AdamW 2);
- 1–2 GB for the CUDA context and framework: the upper end, 2 GB, so a fit is never optimistic.

The guide's worked example (7B, FP16, batch 1, 2048 tokens) gives weights 14 GB, activations
1.4 GB and KV cache 1.4 GB; fine-tuning with Adam adds gradients 14 GB and states 56 GB.
Nothing here knows about architectures: these rules work from a parameter count alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from service.estimator.errors import InvalidRequest
from service.estimator.formats import get_format
from service.estimator.gpu import GpuSpec
from service.estimator.parallel import Layout, operator_layout, operator_tensor_sizes
from service.estimator.result import Estimate, Fit, FitReason
from service.estimator.search import largest_true
from service.estimator.units import cdiv

# The guide's reference point: activations and KV cache are each this fraction of the 16-bit
# model size at batch 1 and this many tokens.
RULE_FRACTION_NUM, RULE_FRACTION_DEN = 1, 10
RULE_TOKENS = 2048
RULE_ACTIVATION_BYTES = 2  # the guide's param_bytes: the 16-bit activation precision
GRADIENT_BYTES = 2
STATE_BYTES = 4
OVERHEAD_BYTES = 2 * 10**9  # upper end of the guide's "1-2 GB"
# Trainable fraction the guide's rules leave to the reader for adapter methods.
ADAPTER_TRAINABLE_FRACTION = (1, 100)
FREEZE_TRAINABLE_FRACTION = (1, 10)

# Optimizer states per trainable parameter, as the guide counts them (4 bytes each); the
# 8-bit variants keep one byte per state.
OPTIMIZER_STATES: dict[str, tuple[int, int]] = {
    "sgd": (0, 4),
    "sgd-momentum": (1, 4),
    "rmsprop": (1, 4),
    "lion": (1, 4),
    "adafactor": (1, 4),
    "adam": (2, 4),
    "adamw": (2, 4),
    "adamw-8bit": (2, 1),
    "paged-adamw-8bit": (2, 1),
}
GUIDE_OPTIMIZERS = ("sgd", "sgd-momentum", "rmsprop", "adam", "adamw")


@dataclass(frozen=True, slots=True)
class SimpleModel:
    parameter_count: int
    active_parameter_count: int
    dtype: str  # format of the weights when the request names none


def _rule_bytes(parameters: int, tokens: int) -> int:
    """10% of the 16-bit size of `parameters`, scaled from 2048 tokens to `tokens`."""
    return cdiv(
        parameters * RULE_ACTIVATION_BYTES * tokens * RULE_FRACTION_NUM,
        RULE_FRACTION_DEN * RULE_TOKENS,
    )


def _weight_bytes(parameters: int, weight_format: str) -> int:
    bits = get_format(weight_format).bits
    return cdiv(parameters * bits, 8)


def estimate_inference_simple(
    model: SimpleModel,
    *,
    weight_format: str | None,
    batch_size: int,
    sequence_length: int,
    concurrency: int,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
) -> Estimate:
    fmt = weight_format or model.dtype
    gpus = tensor_parallel_size * pipeline_parallel_size
    tokens = batch_size * sequence_length
    total = {
        "weights": _weight_bytes(model.parameter_count, fmt),
        "kv_cache": _rule_bytes(model.parameter_count, tokens * concurrency),
        "activations": _rule_bytes(model.active_parameter_count, tokens * concurrency),
        "overhead": OVERHEAD_BYTES * gpus,
    }
    assumptions = [
        f"simple rules (PAI guide): weights = parameters × {get_format(fmt).bits / 8:g} bytes "
        f"({fmt})",
        "activations and KV cache: each 10% of the 16-bit model size at batch 1 × 2048 tokens, "
        f"scaled to {tokens * concurrency:,} tokens",
        "overhead: 2 GB per GPU, the upper end of the guide's 1–2 GB for CUDA and the framework",
    ]
    if model.active_parameter_count != model.parameter_count:
        assumptions.append("MoE: activations from the active parameter count")
    return _split(total, gpus, "inference", assumptions)


def estimate_finetune_simple(
    model: SimpleModel,
    *,
    method: str,
    weight_format: str | None,
    precision: str,
    optimizer: str,
    batch_size: int,
    sequence_length: int,
) -> Estimate:
    assumptions: list[str] = []
    fmt = weight_format or ("nf4" if method == "qlora" else _precision_format(precision, model))
    p = model.parameter_count
    if method == "full":
        trainable = p
    else:
        num, den = FREEZE_TRAINABLE_FRACTION if method == "freeze" else ADAPTER_TRAINABLE_FRACTION
        trainable = cdiv(p * num, den)
        assumptions.append(
            f"{method}: {100 * num / den:g}% of the parameters assumed trainable "
            "(the simple rules know no architecture)"
        )
    states, state_bytes = OPTIMIZER_STATES[optimizer]
    total = {
        "weights": _weight_bytes(p, fmt),
        "gradients": trainable * GRADIENT_BYTES,
        "optimizer_states": trainable * states * state_bytes,
        "activations": _rule_bytes(model.active_parameter_count, batch_size * sequence_length),
        "overhead": OVERHEAD_BYTES,
    }
    assumptions[:0] = [
        f"simple rules (PAI guide): weights = parameters × {get_format(fmt).bits / 8:g} bytes "
        f"({fmt}); gradients = trainable × 2 bytes",
        f"optimizer {optimizer}: {states} state(s) × {state_bytes} bytes per trainable parameter",
        "activations: 10% of the 16-bit model size at batch 1 × 2048 tokens, scaled to "
        f"{batch_size * sequence_length:,} tokens",
        "overhead: 2 GB, the upper end of the guide's 1–2 GB for CUDA and the framework",
    ]
    if optimizer not in GUIDE_OPTIMIZERS:
        assumptions.append(f"{optimizer} is not in the guide's table; its state count is ours")
    return _split(total, 1, "finetune", assumptions, details={"trainable_parameters": trainable})


def _precision_format(precision: str, model: SimpleModel) -> str:
    if precision == "fp32":
        return "fp32"
    if precision.startswith("fp16"):
        return "fp16"
    if precision.startswith("bf16"):
        return "bf16"
    return model.dtype


def _split(
    total: dict[str, int],
    gpus: int,
    kind: str,
    assumptions: list[str],
    details: dict[str, int] | None = None,
) -> Estimate:
    """Even split over `gpus` (the simple rules know no placement); overhead is per GPU."""
    per_gpu = {
        name: (value // gpus if name == "overhead" else cdiv(value, gpus))
        for name, value in total.items()
    }
    if gpus > 1:
        assumptions.append(f"split evenly over {gpus} GPUs")
    return Estimate(
        kind=kind,
        estimator="simple",
        total=total,
        per_gpu=per_gpu,
        gpu_count=gpus,
        assumptions=tuple(assumptions),
        details=details or {},
    )


def simple_fit(
    estimate_for: Callable[[int, int, int], Estimate],
    *,
    gpu: GpuSpec,
    gpu_count: int,
    batch_size: int,
    sequence_length: int,
    max_sequence_length: int,
    gpu_counts: list[int],
) -> Fit:
    """Fit of a simple estimate: `estimate_for(gpus, batch, seq)` re-estimates at other sizes.
    The rules split the model evenly over the GPUs (a tensor-parallel layout); on a MIG slice
    a process holds one slice, so only one GPU is a layout."""
    usable = gpu.total_bytes
    if usable <= 0:
        raise InvalidRequest("the GPU reports no memory", field="gpu")

    def fits(gpus: int, batch: int, seq: int) -> bool:
        return estimate_for(gpus, batch, seq).per_gpu_bytes <= usable

    est = estimate_for(gpu_count, batch_size, sequence_length)
    required = est.per_gpu_bytes
    counts = [1] if gpu.is_mig else gpu_counts
    min_count = next((g for g in counts if fits(g, batch_size, sequence_length)), None)
    if gpu.is_mig and gpu_count > 1:
        reason = FitReason.MIG_CANNOT_SPAN
    elif required > usable:
        reason = FitReason.WORKLOAD_EXCEEDS_MEMORY
    else:
        reason = FitReason.FITS
    return Fit(
        gpu=gpu.ref,
        gpu_count=gpu_count,
        usable_bytes=usable,
        required_bytes=required,
        fits=reason is FitReason.FITS,
        headroom_bytes=usable - required,
        min_gpu_count=min_count,
        max_batch_size=largest_true(lambda b: fits(gpu_count, b, sequence_length), 1, 1 << 20),
        max_sequence_length=largest_true(
            lambda s: fits(gpu_count, batch_size, s), 1, max_sequence_length
        ),
        assumptions=("usable memory: the CUDA total (the simple rules reserve nothing)",),
        reason=reason,
        layout=Layout(gpu_count),
        min_gpu_layout=None if min_count is None else _operator_form(min_count, gpu),
        min_gpu_layout_reason=None
        if min_count is None
        else (
            f"simple rules: the memory split evenly over {min_count} GPU(s), the fewest of "
            f"{', '.join(map(str, counts))} that fit; shown as the layout operators run (TP "
            f"inside a node of {gpu.gpus_per_node} GPUs, PP across nodes); the heads are not "
            "checked"
        ),
    )


def _operator_form(count: int, gpu: GpuSpec) -> Layout:
    """``count`` GPUs as operators lay them out: TP up to a node, PP across nodes (the simple
    rules split evenly, so any layout of ``count`` GPUs holds the same bytes)."""
    node = gpu.gpus_per_node
    sizes = operator_tensor_sizes(range(1, node + 1), node)
    return operator_layout(count, sizes, count) or Layout(count)
