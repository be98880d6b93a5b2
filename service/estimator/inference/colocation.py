"""Several engines on one GPU: what each holds, and whether they fit together.

A GPU shared without memory isolation (several processes, Kubernetes time-slicing) holds the
sum of what each process holds; a process only learns of the others through the memory they
leave free. So each engine is judged on the memory it sees when it starts, and what it then
holds is charged against the GPU:

- an engine whose budget is a share of the device's total (vLLM's
  ``gpu_memory_utilization``: ``requested_memory = total × utilization``, and its start-up
  check refuses when less than that is free, ``gpu_worker.init_device``) holds its whole
  budget, whatever its workload (the KV pool fills it), plus what lives beside the budget
  (the CUDA context, the graph pool);
- an engine whose budget is a share of the memory free when it starts (SGLang's
  ``mem_fraction_static`` of the free memory) sees what the others left: it is judged on that
  remainder, after them;
- an engine without a budget holds what its workload needs.

Under MPS with a pinned device-memory limit per client (the NVIDIA device plugin's MPS
sharing sets ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` to the GPU's memory over its replicas) each
engine sees its limit as the device's memory and cannot hold more: each is judged on its
limit, and the limits must add up to at most the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.estimator.result import Estimate, Fit
from service.estimator.units import GIB

__all__ = ["SHARING", "Colocation", "footprint", "judge_colocation", "starts_beside"]

#: How the GPU is shared: ``time-slicing`` (no isolation: processes hold what they allocate),
#: ``mps`` (each client capped at its pinned device-memory limit).
SHARING = ("time-slicing", "mps")


def footprint(estimate: Estimate, fit: Fit, has_budget: bool) -> int:
    """What one engine holds on the GPU: its whole budget and what lives beside it, or, for
    an engine without a budget, what its workload needs."""
    if not has_budget:
        return fit.required_bytes
    outside = estimate.details.get("outside_budget_bytes") or 0
    return fit.usable_bytes + int(outside)


def starts_beside(held_by_others: int, budget: int, context: int, total: int) -> bool:
    """vLLM's start-up check on a shared GPU: once its own CUDA context exists, the memory
    still free must hold its requested budget (``total × gpu_memory_utilization``)."""
    return total - held_by_others - context >= budget


@dataclass(frozen=True, slots=True)
class Colocation:
    """The verdict on the engines together: whether each fits what it sees and the sum fits
    the GPU, with the figures."""

    fits: bool
    held_bytes: int
    gpu_bytes: int
    detail: str


def judge_colocation(gpu_bytes: int, held: list[int], each_fits: list[bool]) -> Colocation:
    """The engines together on ``gpu_bytes``: every one fits what it sees and what they hold
    adds up to at most the GPU."""
    total = sum(held)
    failing = [i for i, ok in enumerate(each_fits) if not ok]
    if failing:
        names = ", ".join(f"#{i}" for i in failing)
        return Colocation(False, total, gpu_bytes, f"workload {names} does not fit what it sees")
    if total > gpu_bytes:
        return Colocation(
            False,
            total,
            gpu_bytes,
            f"together they hold {total / GIB:.2f} GiB of the GPU's {gpu_bytes / GIB:.2f} GiB",
        )
    return Colocation(True, total, gpu_bytes, "")
