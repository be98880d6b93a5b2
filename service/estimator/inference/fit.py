"""The fit of an inference request on a GPU type and count, and the inverse answers.

``fits`` holds when the most loaded GPU's bytes are within the engine's usable memory, the
memory outside the engine's budget holds its context and graphs, and the engine would start
(vLLM: its pool holds one request of ``max_model_len``). ``max_batch_size`` is solved directly
(every workload term is proportional to the number of sequences); ``max_sequence_length`` is a
bounded bisection; ``min_gpu_count`` the smallest TP × PP product with a split that holds the
workload (docs/inference.md says how the search is bounded).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from service.estimator.errors import InvalidRequest
from service.estimator.inference.evaluate import (
    check_length,
    fits,
    max_sequences,
    required,
    stage_components,
)
from service.estimator.inference.request import (
    MAX_TOKENS,
    InferenceRequest,
    positive_int,
    setup_for,
    validate_workload,
)
from service.estimator.memo import memoized
from service.estimator.model import Architecture
from service.estimator.parallel import MAX_GPU_COUNT, splits
from service.estimator.result import Fit
from service.estimator.search import MAX_SEARCH_STEPS
from service.estimator.units import GIB

__all__ = ["MAX_SCAN_SETUPS", "fit_inference", "min_gpu_count"]

# A min_gpu_count scan builds at most this many setups before it bisects (one setup of an
# 80-layer model takes about 1 ms to build).
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


@memoized
def candidate_counts(arch: Architecture) -> tuple[int, ...]:
    """Every valid TP × PP product, ascending."""
    counts = {
        tp * pp
        for tp in arch.valid_tensor_parallel_sizes
        for pp in range(1, min(arch.num_layers, 64) + 1)
    }
    return tuple(sorted(c for c in counts if c <= MAX_MODEL_GPUS))


def min_gpu_count(req: InferenceRequest) -> tuple[int | None, str | None]:
    """The fewest GPUs (any valid TP × PP split) that hold the workload, with a note when the
    answer needed the bisection fallback or none was found.

    Setups are built lazily and only for counts that can hold the weights: every weight sits
    on at least one GPU, so the most loaded of n GPUs holds at least 1/n of the single-GPU
    weights. The lowest such count is tried first; then the largest count in the window (if
    even that fails, nothing smaller fits: fewer GPUs only hold more), and counts are scanned
    upward until one fits. The scan builds at most MAX_SCAN_SETUPS setups; past that it
    bisects the rest of the window, which assumes a fit stays a fit with more GPUs (true of
    every split family here, but only checked at the counts it visits), and says so.
    """
    mem = req.gpu_memory_bytes
    assert mem is not None
    arch = req.arch
    seqs, seq_len, prompt = req.sequences, req.sequence_length, req.prompt
    whole = setup_for(req, 1, 1).stages[0].weights
    floor_count = -(-whole // mem)
    candidates = candidate_counts(arch)
    start = bisect.bisect_left(candidates, floor_count)
    counts = candidates[start : start + MAX_SEARCH_STEPS]
    built = 0

    def any_split_fits(n: int) -> bool:
        nonlocal built
        for t, p in splits(arch, n):
            built += 1
            setup = setup_for(req, t, p)
            if fits(setup, setup.usable(mem), seqs, seq_len, prompt):
                return True
        return False

    if not counts:
        return None, f"min_gpu_count: no valid TP × PP split of {floor_count} or more GPUs"
    # The floor itself first: most requests fit there, and then no other setup is needed.
    if any_split_fits(counts[0]):
        return counts[0], None
    if not any_split_fits(counts[-1]):
        return None, f"min_gpu_count: no valid TP × PP split of up to {counts[-1]} GPUs fits"
    last = len(counts) - 1
    for i, n in enumerate(counts[:last]):
        if i == 0:
            continue  # checked above
        if built >= MAX_SCAN_SETUPS:
            bad, good = i - 1, last  # bisect counts[i..last]; counts[last] is known to fit
            while good - bad > 1:
                mid = (bad + good) // 2
                if any_split_fits(counts[mid]):
                    good = mid
                else:
                    bad = mid
            return counts[good], (
                f"min_gpu_count: counts from {n} GPUs on bisected (assumes a fit stays a fit "
                "with more GPUs)"
            )
        if any_split_fits(n):
            return n, None
    return counts[last], None


def _layout_for_count(req: InferenceRequest, gpu_count: int | None) -> tuple[int, int, int, str]:
    """(tp, pp, replicas, note) for the GPUs the caller gave."""
    arch = req.arch
    tp, pp = req.tensor_parallel_size, req.pipeline_parallel_size
    if gpu_count is None or gpu_count == tp * pp:
        return tp, pp, 1, ""
    positive_int(gpu_count, "gpu_count", MAX_GPU_COUNT)
    if tp * pp == 1:
        options = splits(arch, gpu_count)
        if not options:
            raise InvalidRequest(
                f"{gpu_count} GPUs cannot split this model (TP must divide "
                f"{arch.num_attention_heads} heads, PP at most {arch.num_layers})",
                field="gpu_count",
            )
        seqs, seq_len, prompt = req.sequences, req.sequence_length, req.prompt
        tp, pp = min(
            options, key=lambda o: required(setup_for(req, o[0], o[1]), seqs, seq_len, prompt)
        )
        return tp, pp, 1, f"{gpu_count} GPUs used as TP {tp} × PP {pp}"
    if gpu_count % (tp * pp) == 0:
        replicas = gpu_count // (tp * pp)
        return tp, pp, replicas, f"{replicas} data-parallel replicas of TP {tp} × PP {pp}"
    raise InvalidRequest(
        f"gpu_count {gpu_count} is not a multiple of TP × PP = {tp * pp}", field="gpu_count"
    )


def fit_inference(req: InferenceRequest, gpu_label: str, gpu_count: int | None) -> Fit:
    """Whether `req` fits `gpu_count` GPUs of `req.gpu_memory_bytes`, and the inverse answers."""
    validate_workload(req)
    if req.gpu_memory_bytes is None:
        raise InvalidRequest("a GPU is needed to check the fit", field="gpu")
    mem = req.gpu_memory_bytes
    arch = req.arch
    seqs, seq_len, prompt = req.sequences, req.sequence_length, req.prompt
    tp, pp, replicas, layout_note = _layout_for_count(req, gpu_count)
    notes = [layout_note] if layout_note else []
    setup = setup_for(req, tp, pp)
    check_length(setup, seq_len)
    usable = setup.usable(mem)
    need = required(setup, seqs, seq_len, prompt)
    ok = need <= usable
    option = setup.engine.budget_option
    margin = mem - usable
    outside_fits = setup.outside_budget.total <= margin
    if option is not None:
        notes.append(
            f"usable = driver total {mem / GIB:.2f} GiB × {setup.budget_fraction:g} ({option})"
        )
        if not outside_fits:
            ok = False
            notes.append(
                f"the {margin / GIB:.2f} GiB left outside the budget cannot hold the CUDA context "
                f"and graphs ({setup.outside_budget.total / GIB:.2f} GiB)"
            )
    else:
        notes.append(f"usable = driver total {mem / GIB:.2f} GiB")
    kv_last = stage_components(setup, setup.stages[-1], seqs, seq_len, prompt)[1]
    if setup.engine.refuses(setup, usable, need, kv_last, seq_len):
        ok = False

    def fits_at(b: int, s: int) -> bool:
        p = min(prompt, s) if req.prompt_tokens is not None else s
        return fits(setup, usable, b * req.concurrency, s, p)

    max_b_hi = max(1, MAX_TOKENS // (seq_len * req.concurrency))
    seqs_max = max_sequences(setup, usable, seq_len, prompt, MAX_TOKENS)
    max_batch: int | None = min(max_b_hi, seqs_max // req.concurrency)
    if not max_batch or not outside_fits:
        max_batch = None
    limit = setup.max_model_len or arch.max_position_embeddings or MAX_TOKENS
    s_hi = max(1, min(limit, MAX_TOKENS // (req.batch_size * req.concurrency)))
    # Every sequence holds at least its full-attention layers' KV cache for all its tokens, on
    # every stage: an upper bound on the length that shortens the search.
    room = usable - max(st.base for st in setup.stages)
    rate = max(st.kv.layer_token_bytes * st.kv.full_layers for st in setup.stages)
    per_token = rate * req.batch_size * req.concurrency
    if per_token and room >= 0:
        s_hi = max(1, min(s_hi, room // per_token + 1))
    max_seq = None
    if max_batch is not None:
        max_seq = largest_fitting(lambda s: fits_at(req.batch_size, s), s_hi)
    min_count, note = min_gpu_count(req)
    if note:
        notes.append(note)
    return Fit(
        gpu=gpu_label,
        gpu_count=tp * pp * replicas,
        usable_bytes=usable,
        required_bytes=need,
        fits=ok,
        headroom_bytes=usable - need,
        min_gpu_count=min_count,
        max_batch_size=max_batch,
        max_sequence_length=max_seq,
        assumptions=tuple(dict.fromkeys(notes)),
    )
