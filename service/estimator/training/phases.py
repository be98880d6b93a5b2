"""A training step's peak at a (batch, sequence) point: the largest of its phases.

A step goes through three phases, and the peak is the largest of them, not their sum (the
reference tracer shows each):

- forward end: weights + optimizer states + everything kept for backward + the loss path's
  fp32 upcast;
- backward: at its start the loss path allocates two fp32 tensors of batch × sequence ×
  vocabulary on top of everything kept; with checkpointing one layer is recomputed; at its
  end all gradients exist (plus, for tied embeddings, the second embedding gradient before
  the two are summed);
- optimizer step: weights + gradients + states + the update's temporary (foreach);
- FSDP2 only, late in backward: the second decoder layer's backward, when most sharded
  gradients, unsharded root gradients, the gathered root and two layers' parameters, a
  reduce-scatter buffer and the recomputed layer are alive at once (:mod:`.sharding`).

Gradients from the previous step are gone (``zero_grad(set_to_none=True)``, the default), so
forward and the start of backward hold no gradients. Every phase is a line
``K + L·(b·s) + Q·(b·s²)`` (:attr:`StaticState.phase_lines`), so the largest batch or sequence
that fits is solved per line and checked exactly (:func:`solve_max`). On top of the allocated
peak each GPU holds the overhead (context, workspaces, NCCL) and the allocator's fragmentation
(the calibration register's ``training.fragmentation_fraction``).
"""

from __future__ import annotations

from service.estimator.calibration import value
from service.estimator.training.state import StageState, StaticState

__all__ = ["allocated", "evaluate", "per_gpu_bytes", "solve_max"]


def _fragmentation() -> float:
    return value("training.fragmentation_fraction")


def _stage_phases(stg: StageState, b: int, s: int) -> tuple[str, int, dict[str, int]]:
    """(phase, allocated peak, breakdown without overhead) for one stage."""
    bs = b * s
    bss = bs * s
    kept = stg.lin * bs + stg.quad * bss + stg.head * bs + stg.weight_copies
    base = stg.weights + stg.buffers
    fw = kept + stg.fw_transient * bs + stg.loss_fw_fixed
    bw = kept + stg.bw_transient * bs + stg.loss_bw_fixed
    recompute = kept - stg.head * bs + stg.recompute_lin * bs + stg.recompute_quad * bss
    act_fb = max(fw, bw, recompute)
    fb_total = base + stg.states + act_fb
    bw_end = base + stg.states + stg.gradients + stg.tied_transient
    step = base + stg.states_step + stg.gradients + stg.update_temp
    late = stg.late_backward
    late_total = stg.late_fixed + stg.late_lin * bs + stg.late_quad * bss if late else 0
    if late is not None and late_total > max(fb_total, bw_end, step):
        return (
            "backward",
            int(late_total),
            {
                "weights": stg.weights + late.gathered,
                "gradients": late.gradients,
                "optimizer_states": stg.states,
                "activations": int(stg.late_lin * bs + stg.late_quad * bss),
            },
        )
    if fb_total >= bw_end and fb_total >= step:
        phase = "forward" if fw >= bw and fw >= recompute else "backward"
        parts = {
            "weights": stg.weights + stg.buffers,
            "gradients": 0,
            "optimizer_states": stg.states,
            "activations": int(act_fb),
        }
        return phase, int(fb_total), parts
    if bw_end >= step:
        return (
            "backward_end",
            int(bw_end),
            {
                "weights": stg.weights + stg.buffers,
                "gradients": stg.gradients + stg.tied_transient,
                "optimizer_states": stg.states,
                "activations": 0,
            },
        )
    return (
        "optimizer_step",
        int(step),
        {
            "weights": stg.weights + stg.buffers,
            "gradients": stg.gradients,
            "optimizer_states": stg.states_step + stg.update_temp,
            "activations": 0,
        },
    )


def evaluate(st: StaticState, b: int, s: int) -> tuple[str, int, dict[str, int]]:
    """Most loaded GPU: (phase, allocated peak, breakdown with overhead)."""
    best: tuple[str, int, dict[str, int]] | None = None
    for stg in st.stages:
        phase, alloc, parts = _stage_phases(stg, b, s)
        if best is None or alloc > best[1]:
            best = (phase, alloc, parts)
    assert best is not None
    phase, _, parts = best
    alloc = allocated(st, b, s)
    parts = dict(parts)
    # integer rounding of the phase sum is absorbed by the activations
    parts["activations"] += alloc - sum(parts.values())
    parts["overhead"] = st.stages[0].overhead_fixed + int(alloc * _fragmentation())
    return phase, alloc, parts


def allocated(st: StaticState, b: int, s: int) -> int:
    """Allocated peak of the most loaded GPU: the largest phase line at (b, s)."""
    bs = b * s
    bss = bs * s
    return int(max(k + lin * bs + quad * bss for k, lin, quad in st.phase_lines))


def per_gpu_bytes(st: StaticState, b: int, s: int) -> int:
    alloc = allocated(st, b, s)
    return alloc + st.stages[0].overhead_fixed + int(alloc * _fragmentation())


def _alloc_budget(st: StaticState, usable: int) -> float:
    """The allocated peak that still fits ``usable`` once overhead is added."""
    return (usable - st.stages[0].overhead_fixed) / (1 + _fragmentation())


def solve_max(st: StaticState, usable: int, b: int | None, s: int | None, cap: int) -> int | None:
    """Largest batch (s given) or sequence (b given) that fits: solved per phase line, then
    checked against the exact evaluation (integer rounding) and stepped down if needed."""
    budget = _alloc_budget(st, usable)
    best = float(cap)
    for k, lin, quad in st.phase_lines:
        room = budget - k
        if room < 0:
            return None
        if s is not None:  # unknowns: batch
            slope = lin * s + quad * s * s
            if slope > 0:
                best = min(best, room / slope)
        else:
            assert b is not None
            a2, a1 = quad * b, lin * b
            if a2 > 0:
                x = (-a1 + (a1 * a1 + 4 * a2 * room) ** 0.5) / (2 * a2)
            elif a1 > 0:
                x = room / a1
            else:
                continue
            best = min(best, x)
    n = min(int(best), cap)

    def fits(x: int) -> bool:
        return (
            per_gpu_bytes(st, x, s) if s is not None else per_gpu_bytes(st, b or 1, x)
        ) <= usable

    while n >= 1 and not fits(n):
        n -= 1 if n < 64 else max(1, n // 1000)
    if n < 1:
        return None
    while n < cap and fits(n + 1):
        n += 1
    return n
