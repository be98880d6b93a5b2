"""The fit of an inference request on a GPU type and count, and the inverse answers.

``fits`` is the verdict of :mod:`.verdict` on the layout judged: the request's own, or for a
``gpu_count`` without one the smallest runnable layout that fits, replicated over the rest.
``max_batch_size`` is solved directly (every workload term is proportional to the number of
sequences); ``max_sequence_length`` is a bounded bisection; ``min_gpu_count`` the fewest GPUs of
a layout the engine can run (TP dividing what its layers split, within one node; PP at most
the layers; one slice on MIG) on which it fits, with that layout; ``engine_args`` the engine's
flags for a setup that fits. docs/inference.md says how the searches are bounded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from service.estimator.engines import get_engine
from service.estimator.errors import InvalidRequest
from service.estimator.inference.evaluate import check_length, fits, max_sequences
from service.estimator.inference.request import (
    MAX_TOKENS,
    InferenceRequest,
    positive_int,
    resolved,
    setup_for,
    validate_workload,
)
from service.estimator.inference.setup import ServingSetup
from service.estimator.inference.verdict import Verdict, judge, runnable_tensor_parallel_sizes
from service.estimator.memo import cached
from service.estimator.parallel import MAX_GPU_COUNT, Layout
from service.estimator.result import Fit, FitReason
from service.estimator.search import MAX_SEARCH_STEPS, smallest_true

__all__ = ["MAX_SCAN_SETUPS", "fit_inference", "min_gpu_count", "runnable_splits"]

# How many layouts a gpu_count without a layout tries, smallest first, before it stops (one
# setup of an 80-layer model takes about 1 ms to build).
MAX_SCAN_SETUPS = 24
# The largest TP × PP product min_gpu_count considers for one model copy.
MAX_MODEL_GPUS = 1024


def largest_fitting(fits_at: Callable[[int], bool], hi: int) -> int | None:
    """The largest length in [1, hi] that fits, `hi` being an upper bound already: one check
    at `hi`, then a bisection (≤ log2(hi) + 2 evaluations, capped like `search.py`)."""
    if fits_at(hi):
        return hi
    if hi == 1 or not fits_at(1):
        return None
    good, bad = 1, hi
    for _ in range(MAX_SEARCH_STEPS):
        if bad - good <= 1:
            break
        mid = (good + bad) // 2
        if fits_at(mid):
            good = mid
        else:
            bad = mid
    return good


def runnable_splits(req: InferenceRequest, count: int) -> tuple[tuple[int, int], ...]:
    """(tp, pp) with tp × pp = count the engine can run on this GPU, larger TP first."""
    layers = req.arch.num_layers
    return tuple(
        (tp, count // tp)
        for tp in reversed(runnable_tensor_parallel_sizes(req))
        if count % tp == 0 and count // tp <= layers
    )


def _fits_at(req: InferenceRequest, tp: int, pp: int, mem: int) -> bool:
    return judge(req, setup_for(req, tp, pp), mem).fits


def _fewest_stages(req: InferenceRequest, tp: int, lo: int, hi: int, mem: int) -> int | None:
    """The fewest pipeline stages in [lo, hi] at which ``tp`` fits. More stages take layers
    off each GPU, so for most engines fitting is monotone in the stage count; an engine whose
    per-GPU reserve grows with TP × PP (SGLang) can stop fitting at the most stages where
    fewer fit (:func:`~service.estimator.search.smallest_true` then doubles from ``lo``)."""
    monotone = not get_engine(req.engine).reserve_grows_with_gpus
    return smallest_true(lambda pp: _fits_at(req, tp, pp, mem), lo, hi, monotone=monotone)


def min_gpu_count(req: InferenceRequest) -> tuple[int | None, Layout | None, str | None]:
    """:func:`search_min_gpu_count`, kept in the memo: it depends on the request's setups and
    its workload, not on its own layout."""
    setups = req.setups_key()
    if setups is None:
        return search_min_gpu_count(req)
    key = (setups, req.sequences, req.seq_len, req.prompt)
    return cached("min_gpu_count", key, lambda: search_min_gpu_count(req))


def _with_data_parallel(
    req: InferenceRequest, found: tuple[int | None, Layout | None, str | None]
) -> tuple[int | None, Layout | None, str | None]:
    """A TP × PP search result at the request's data-parallel size: every DP rank holds such
    a group (the routed experts divided over all of them with expert parallelism)."""
    count, layout, note = found
    dp = req.data_parallel_size
    if dp == 1 or count is None or layout is None:
        return found
    ep = layout.tensor * dp if req.expert_parallel else 1
    return count * dp, Layout(layout.tensor, layout.pipeline, dp, ep), note


def search_min_gpu_count(req: InferenceRequest) -> tuple[int | None, Layout | None, str | None]:
    """The fewest GPUs (a runnable TP × PP split) on which the request fits, its layout, and a
    note when none was found.

    No split of fewer GPUs than the weights floor can fit (every weight sits on one GPU, so
    the most loaded of n GPUs holds at least 1/n of the single-GPU weights). Most requests fit
    at the floor: one check of TP 1 there, then the largest TP that also fits at that count
    (the engine prefers TP). Otherwise the search runs per tensor-parallel size, largest
    first, each looking for the fewest stages (:func:`_fewest_stages`) below the best count
    found so far, so an equal count keeps the larger TP found first; a large TP found early
    also keeps the smaller ones to few stages, the cheap setups. Across TP sizes nothing is
    assumed: a larger TP adds communicators a small GPU may not hold, so each size is
    searched. At most ``2 · log2(layers) + 1`` setups per TP size. A MIG slice cannot span
    GPUs: one stage only.
    """
    mem = req.gpu_memory_bytes
    assert mem is not None
    whole = setup_for(req, 1, 1).stages[0].weights
    floor_count = -(-whole // mem)
    max_pp = 1 if req.gpu is not None and req.gpu.is_mig else req.arch.num_layers
    if floor_count <= min(max_pp, MAX_MODEL_GPUS) and _fits_at(req, 1, floor_count, mem):
        # TP 1 fits at the floor: the largest TP that fits at that count (TP 1 at the least).
        for tp, stages in runnable_splits(req, floor_count):
            if tp == 1 or _fits_at(req, tp, stages, mem):
                return floor_count, Layout(tp, stages), None
    best: tuple[int, Layout] | None = None
    for tp in sorted(runnable_tensor_parallel_sizes(req), reverse=True):
        lo = max(1, -(-floor_count // tp))
        hi = min(max_pp, MAX_MODEL_GPUS // tp)
        if best is not None:
            hi = min(hi, (best[0] - 1) // tp)  # an equal count keeps the larger TP found first
        pp = _fewest_stages(req, tp, lo, hi, mem)
        if pp is not None:
            best = (tp * pp, Layout(tp, pp))
    if best is None:
        return (
            None,
            None,
            f"min_gpu_count: no runnable TP × PP split of up to {MAX_MODEL_GPUS} GPUs fits",
        )
    return best[0], best[1], None


def _layout_for_count(req: InferenceRequest, gpu_count: int | None) -> tuple[Layout, str]:
    """The layout judged for the GPUs the caller gave, and a note when it was chosen here."""
    tp, pp, dp = req.tensor_parallel_size, req.pipeline_parallel_size, req.data_parallel_size
    ep = tp * dp if req.expert_parallel else 1
    if gpu_count is None or gpu_count == tp * pp * dp:
        return Layout(tp, pp, dp, ep), ""
    positive_int(gpu_count, "gpu_count", MAX_GPU_COUNT)
    if tp * pp * dp > 1:
        if gpu_count % (tp * pp * dp):
            raise InvalidRequest(
                f"gpu_count {gpu_count} is not a multiple of TP × PP × DP = {tp * pp * dp}",
                field="gpu_count",
            )
        if dp > 1 or req.expert_parallel:
            raise InvalidRequest(
                f"gpu_count {gpu_count} differs from the layout's TP {tp} × PP {pp} × DP {dp} "
                f"= {tp * pp * dp} GPUs; with data or expert parallelism give the GPUs as "
                "data_parallel_size",
                field="gpu_count",
            )
        replicas = gpu_count // (tp * pp)
        return Layout(tp, pp, replicas), f"{replicas} data-parallel replicas of TP {tp} × PP {pp}"
    # No layout given: the smallest runnable one that fits, replicated over the GPUs given;
    # when none fits, the largest (all the GPUs in one copy), judged as it is.
    assert req.gpu_memory_bytes is not None
    options = [
        (d, split)
        for d in range(1, gpu_count + 1)
        if gpu_count % d == 0
        for split in runnable_splits(req, d)
    ]
    if not options:
        raise InvalidRequest(
            f"{gpu_count} GPUs cannot run this model with {req.engine} (no runnable TP × PP "
            f"split of any divisor of {gpu_count})",
            field="gpu_count",
        )
    for d, (t, p) in options[:MAX_SCAN_SETUPS]:
        if _fits_at(req, t, p, req.gpu_memory_bytes):
            layout = Layout(t, p, gpu_count // d)
            break
    else:
        # Nothing fits: judge all the GPUs as one copy, with the largest TP they allow.
        t, p = (
            runnable_splits(req, gpu_count)[0]
            if runnable_splits(req, gpu_count)
            else options[-1][1]
        )
        layout = Layout(t, p, gpu_count // (t * p))
    note = f"{gpu_count} GPUs planned as TP {layout.tensor} × PP {layout.pipeline}"
    if layout.data > 1:
        note += f", {layout.data} data-parallel replicas"
    return layout, note


def _startable_length(req: InferenceRequest, setup: ServingSetup, usable: int) -> int | None:
    """The longest sequence one replica holds (what max_model_len may be for vLLM to start)."""
    limit = setup.max_model_len or req.seq_len
    return largest_fitting(lambda s: fits(setup, usable, 1, s, s), limit)


def _args_if_fits(req: InferenceRequest, setup: ServingSetup, mem: int) -> tuple[str, ...] | None:
    if not judge(req, setup, mem).fits:
        return None
    return tuple(setup.engine.command_args(setup.settings, setup.tp, setup.pp, req.kv_cache_dtype))


def _engine_args(
    req: InferenceRequest,
    setup: ServingSetup,
    verdict: Verdict,
    min_layout: Layout | None,
    mem: int,
) -> tuple[str, ...] | None:
    """The engine's flags for a setup that fits, trying in order: the judged setup; on the
    same GPUs a budget that leaves the CUDA context and graphs their room; on the same GPUs a
    context no longer than the requested sequence length when the caller did not set one; the
    minimal layout at the requested length; the judged layout at the longest length it starts
    with."""
    engine, kv = setup.engine, req.kv_cache_dtype
    if not engine.command_args(setup.settings, setup.tp, setup.pp, kv):
        return None
    if verdict.fits:
        return tuple(engine.command_args(setup.settings, setup.tp, setup.pp, kv))
    option = engine.budget_option
    if verdict.reason is FitReason.OUTSIDE_BUDGET_EXCEEDED and option is not None:
        # The largest budget (in hundredths) that leaves the outside terms their room.
        fraction = int((mem - setup.outside_budget.total) / mem * 100) / 100
        if fraction > 0:
            lower = _with_settings(req, setup, **{option: fraction})
            args = _args_if_fits(req, lower, mem)
            if args is not None:
                return args
    context = engine.context_option
    pinned = context is not None and any(
        name in req.engine_options
        for name in engine.option_table()
        if engine.option_table()[name].name == context
    )
    if context and not pinned and setup.max_model_len and req.seq_len < setup.max_model_len:
        shorter = _with_settings(req, setup, **{context: req.seq_len})
        args = _args_if_fits(req, shorter, mem)
        if args is not None:
            return args
    if min_layout is not None:
        smallest = setup_for(req, min_layout.tensor, min_layout.pipeline)
        return tuple(
            engine.command_args(smallest.settings, min_layout.tensor, min_layout.pipeline, kv)
        )
    if verdict.reason is FitReason.KV_POOL_BELOW_ONE_SEQUENCE and context and setup.max_model_len:
        length = _startable_length(req, setup, verdict.usable)
        if length:
            shorter = _with_settings(req, setup, **{context: length})
            return _args_if_fits(dataclasses.replace(req, sequence_length=length), shorter, mem)
    return None


def _with_settings(
    req: InferenceRequest, setup: ServingSetup, **changes: float | int
) -> ServingSetup:
    """The setup of ``req`` at ``setup``'s layout with some engine options changed."""
    options = {**req.engine_options, **changes}
    changed = dataclasses.replace(req, engine_options=options)
    return setup_for(changed, setup.tp, setup.pp)


def fit_inference(req: InferenceRequest, gpu_label: str, gpu_count: int | None) -> Fit:
    """Whether `req` fits `gpu_count` GPUs of `req.gpu_memory_bytes`, and the inverse answers."""
    req = resolved(req)
    validate_workload(req)
    if req.gpu_memory_bytes is None:
        raise InvalidRequest("a GPU is needed to check the fit", field="gpu")
    mem = req.gpu_memory_bytes
    arch = req.arch
    seq_len, prompt = req.seq_len, req.prompt
    layout, layout_note = _layout_for_count(req, gpu_count)
    notes = [layout_note] if layout_note else []
    setup = setup_for(req, layout.tensor, layout.pipeline)
    check_length(setup, seq_len)
    verdict = judge(req, setup, mem)
    usable = verdict.usable
    notes.append(setup.engine.budget_note(setup, mem))
    if req.gpu is not None and req.gpu.shared:
        notes.append(
            "time-sliced GPU: replicas share its memory with no isolation; the verdict "
            "assumes the whole GPU is free"
        )

    def fits_at(b: int, s: int) -> bool:
        p = min(prompt, s) if req.prompt_tokens is not None else s
        return fits(setup, usable, b * req.concurrency, s, p)

    runs = verdict.reason not in (
        FitReason.INVALID_LAYOUT,
        FitReason.MIG_CANNOT_SPAN,
        FitReason.DTYPE_UNSUPPORTED,
        FitReason.OUTSIDE_BUDGET_EXCEEDED,
    )
    max_b_hi = max(1, MAX_TOKENS // (seq_len * req.concurrency))
    seqs_max = max_sequences(setup, usable, seq_len, prompt, MAX_TOKENS)
    max_batch: int | None = min(max_b_hi, seqs_max // req.concurrency)
    if not max_batch or not runs:
        max_batch = None
    limit = setup.max_model_len or arch.max_position_embeddings or MAX_TOKENS
    s_hi = max(1, min(limit, MAX_TOKENS // (req.batch_size * req.concurrency)))
    # Every sequence holds at least its full-attention layers' KV cache for all its tokens, on
    # every stage: an upper bound on the length that shortens the search.
    room = usable - max(st.base for st in setup.stages)
    pools = [st.kv_pool - st.fixed_kv for st in setup.stages if st.kv_pool is not None]
    if pools:
        room = min(pools)
    rate = max(st.kv.layer_token_bytes * st.kv.full_layers for st in setup.stages)
    per_token = rate * req.batch_size * req.concurrency
    if per_token and room >= 0:
        s_hi = max(1, min(s_hi, room // per_token + 1))
    max_seq = None
    if max_batch is not None:
        max_seq = largest_fitting(lambda s: fits_at(req.batch_size, s), s_hi)
    min_count, min_layout, note = _with_data_parallel(req, min_gpu_count(req))
    if note:
        notes.append(note)
    if verdict.detail:
        notes.append(f"{verdict.reason.value}: {verdict.detail}")
    return Fit(
        gpu=gpu_label,
        gpu_count=layout.gpus,
        usable_bytes=usable,
        required_bytes=verdict.required,
        fits=verdict.fits,
        headroom_bytes=usable - verdict.required,
        min_gpu_count=min_count,
        max_batch_size=max_batch,
        max_sequence_length=max_seq,
        assumptions=tuple(dict.fromkeys(notes)),
        reason=verdict.reason,
        reason_detail=verdict.detail,
        layout=layout,
        min_gpu_layout=min_layout,
        engine_args=_engine_args(req, setup, verdict, min_layout, mem),
    )
