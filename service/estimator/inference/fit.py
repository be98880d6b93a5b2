"""The fit of an inference request on a GPU type and count, and the inverse answers.

``fits`` is the verdict of :mod:`.verdict` on the layout judged: the request's own, or for a
``gpu_count`` without one the smallest runnable layout that fits, replicated over the rest.
``max_batch_size`` is solved directly (every workload term is proportional to the number of
sequences); ``max_sequence_length`` is a bounded bisection; ``min_gpu_count`` the fewest GPUs of
a layout in the form operators run (:func:`~service.estimator.parallel.operator_layout`: TP
inside one node in a power-of-two size the engine accepts, pipeline stages only past the
largest such TP; one slice on MIG) on which it fits, with that layout and the reason for it;
``engine_args`` the engine's flags for a setup that fits. docs/inference.md says how the
searches are bounded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from service.estimator.engines import get_engine
from service.estimator.engines.serving import ServingSetup
from service.estimator.errors import InvalidRequest
from service.estimator.gpu import DEFAULT_GPUS_PER_NODE
from service.estimator.inference.evaluate import check_length, fits, max_sequences
from service.estimator.inference.request import (
    MAX_TOKENS,
    InferenceRequest,
    positive_int,
    resolved,
    setup_for,
    validate_workload,
)
from service.estimator.inference.verdict import Verdict, judge, runnable_tensor_parallel_sizes
from service.estimator.memo import cached
from service.estimator.parallel import (
    MAX_GPU_COUNT,
    Layout,
    operator_layout,
    operator_tensor_sizes,
)
from service.estimator.result import Fit, FitReason
from service.estimator.search import MAX_SEARCH_STEPS, smallest_true
from service.estimator.units import GIB

__all__ = [
    "MAX_MODEL_GPUS",
    "MAX_SCAN_SETUPS",
    "Judged",
    "MinLayout",
    "OperatorLayouts",
    "fit_inference",
    "judge_request",
    "min_gpu_count",
    "operator_layouts",
]

# The largest TP × PP product min_gpu_count considers for one model copy.
MAX_MODEL_GPUS = 1024
# How many layouts a gpu_count without a layout tries, smallest first, when the minimum layout
# needs more GPUs than it gives (one setup of an 80-layer model takes about 1 ms to build).
MAX_SCAN_SETUPS = 24


@dataclass(frozen=True, slots=True)
class OperatorLayouts:
    """The layouts operators run for one request: TP ``sizes`` (smallest first) within a node
    of ``node`` GPUs, then the largest of them with up to ``max_pp`` pipeline stages."""

    sizes: tuple[int, ...]
    node: int
    max_pp: int
    mig: bool

    @property
    def top(self) -> int:
        return self.sizes[-1]

    def layout(self, count: int) -> Layout | None:
        """The one layout of ``count`` GPUs in this form (None: there is none)."""
        return operator_layout(count, self.sizes, self.max_pp)

    def largest_within(self, count: int) -> Layout:
        """The layout of the most GPUs, up to ``count``, in this form."""
        if count >= self.top and self.max_pp > 1:
            return Layout(self.top, min(self.max_pp, count // self.top))
        return Layout(max(t for t in self.sizes if t <= count))


def operator_layouts(req: InferenceRequest) -> OperatorLayouts:
    """The layouts operators run ``req`` at on its GPU: the engine's TP sizes for the model
    that are powers of two within one node (one GPU on a MIG slice), PP at most the layers."""
    gpu = req.gpu
    mig = gpu is not None and gpu.is_mig
    node = gpu.gpus_per_node if gpu is not None else DEFAULT_GPUS_PER_NODE
    sizes = operator_tensor_sizes(runnable_tensor_parallel_sizes(req), node)
    max_pp = 1 if mig else min(req.arch.num_layers, MAX_MODEL_GPUS // sizes[-1])
    return OperatorLayouts(sizes, node, max_pp, mig)


@dataclass(frozen=True, slots=True)
class MinLayout:
    """The answer of :func:`min_gpu_count`: the fewest GPUs, their layout and why that layout
    (None when nothing fits), or a note saying how far the search looked."""

    count: int | None
    layout: Layout | None
    reason: str | None
    note: str | None = None


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


def _verdict_at(req: InferenceRequest, tp: int, pp: int, mem: int) -> Verdict:
    """The verdict at a layout the searches try. A layout the request's own engine options
    rule out (SGLang's ``--ep-size 8`` divides no TP below 8) is one the engine cannot run,
    not an error of the request: its own layout was judged first and raised there."""
    try:
        setup = setup_for(req, tp, pp)
    except InvalidRequest as exc:
        return Verdict(FitReason.INVALID_LAYOUT, f"TP {tp} × PP {pp}: {exc.detail}", 0, 0)
    return judge(req, setup, mem)


def _single_gpu_weights(req: InferenceRequest) -> int | None:
    """The weights on one GPU holding the whole model (None: the request's options rule out
    one GPU, as SGLang's ``--ep-size`` above 1 does)."""
    try:
        return setup_for(req, 1, 1).stages[0].weights
    except InvalidRequest:
        return None


def _fits_at(req: InferenceRequest, tp: int, pp: int, mem: int) -> bool:
    return _verdict_at(req, tp, pp, mem).fits


def _fewest_stages(req: InferenceRequest, tp: int, lo: int, hi: int, mem: int) -> int | None:
    """The fewest pipeline stages in [lo, hi] at which ``tp`` fits. More stages take layers
    off each GPU, so for most engines fitting is monotone in the stage count; an engine whose
    per-GPU reserve grows with TP × PP (SGLang) can stop fitting at the most stages where
    fewer fit (:func:`~service.estimator.search.smallest_true` then doubles from ``lo``)."""
    monotone = not get_engine(req.engine).reserve_grows_with_gpus
    return smallest_true(lambda pp: _fits_at(req, tp, pp, mem), lo, hi, monotone=monotone)


def min_gpu_count(req: InferenceRequest, judged: Judged | None = None) -> MinLayout:
    """:func:`search_min_gpu_count`, kept in the memo: it depends on the request's setups and
    its workload, not on its own layout.

    ``judged``: the request's own layout, already judged. When that is one GPU (per
    data-parallel rank) and fits, it is the search's first try and its answer: no search and
    no memo (whose key measure and the search's set-up cost a one-GPU pre-flight a third of
    its estimate, for the most common answer there is)."""
    if (
        judged is not None
        and (judged.layout.tensor, judged.layout.pipeline) == (1, 1)
        and judged.verdict.fits
    ):
        return MinLayout(1, Layout(1), ONE_GPU_REASON)
    setups = req.setups_key()
    if setups is None:
        return search_min_gpu_count(req)
    key = (setups, req.sequences, req.seq_len, req.prompt)
    return cached("min_gpu_count", key, lambda: search_min_gpu_count(req))


def expert_parallel_size(req: InferenceRequest, tp: int, pp: int) -> int:
    """The ranks the routed experts are divided among, as the engine lays them out (vLLM: TP ×
    DP under --enable-expert-parallel; SGLang: its ep_size); 1 without expert parallelism."""
    if req.arch.moe is None:
        return 1
    plan = get_engine(req.engine).data_parallel(
        req.arch, req.settings(tp, pp), tp, req.data_parallel_size, req.expert_parallel, req.gpu
    )
    return plan.experts.expert if plan.experts is not None else 1


def _with_data_parallel(req: InferenceRequest, found: MinLayout) -> MinLayout:
    """A TP × PP search result at the request's data-parallel size: every DP rank holds such
    a group (the routed experts divided over all of them with expert parallelism)."""
    dp = req.data_parallel_size
    if dp == 1 or found.count is None or found.layout is None:
        return found
    ep = expert_parallel_size(req, found.layout.tensor, found.layout.pipeline)
    layout = Layout(found.layout.tensor, found.layout.pipeline, dp, ep)
    return dataclasses.replace(found, count=found.count * dp, layout=layout)


def _sizes_text(form: OperatorLayouts) -> str:
    return ", ".join(map(str, form.sizes))


def _why_not(verdict: Verdict) -> str:
    return f"{verdict.reason.value}" + (f": {verdict.detail}" if verdict.detail else "")


def search_min_gpu_count(req: InferenceRequest) -> MinLayout:
    """The fewest GPUs on which the request fits in a layout operators run
    (:func:`operator_layouts`), that layout, and the reason for it.

    A GPU count has at most one such layout, so the search is short: TP alone at each size,
    smallest first (the first that fits is the answer: TP alone never uses more GPUs than the
    largest size); then the largest size with the fewest pipeline stages that fit
    (:func:`_fewest_stages`, at most ``2 · log2(layers) + 1`` setups). No layout of fewer GPUs
    than the weights floor can fit (the most loaded of n GPUs holds at least 1/n of the
    single-GPU weights), so those are skipped without a setup.
    """
    mem = req.gpu_memory_bytes
    assert mem is not None
    form = operator_layouts(req)
    engine = req.engine
    whole = _single_gpu_weights(req)
    floor_count = 1 if whole is None else -(-whole // mem)
    last = ""  # the largest TP judged so far and why it does not fit
    for tp in form.sizes:
        if whole is not None and tp < floor_count:
            last = (
                f"TP {tp} cannot hold the weights: {whole / GIB:.2f} GiB exceed {tp} × "
                f"{mem / GIB:.2f} GiB"
            )
            continue
        verdict = _verdict_at(req, tp, 1, mem)
        if verdict.fits:
            return MinLayout(tp, Layout(tp), _tp_reason(form, tp, engine, last))
        last = f"TP {tp}: {_why_not(verdict)}"
    top = form.top
    lo = max(2, -(-floor_count // top))
    pp = _fewest_stages(req, top, lo, form.max_pp, mem) if lo <= form.max_pp else None
    if pp is None:
        searched = (
            f"TP {_sizes_text(form)} on one GPU"
            if form.mig
            else (
                f"TP {_sizes_text(form)} within a node of {form.node} GPUs, then TP {top} with up "
                f"to {form.max_pp} pipeline stages"
            )
        )
        return MinLayout(
            None,
            None,
            None,
            f"min_gpu_count: no layout operators run fits ({searched}; at most "
            f"{MAX_MODEL_GPUS} GPUs)",
        )
    return MinLayout(top * pp, Layout(top, pp), _pp_reason(form, top, pp, engine, last))


ONE_GPU_REASON = "TP 1: one GPU holds the model and the workload"


def _tp_reason(form: OperatorLayouts, tp: int, engine: str, smaller: str) -> str:
    if tp == 1:
        return ONE_GPU_REASON
    return (
        f"TP {tp} inside one node: the smallest tensor-parallel size that fits, of those "
        f"{engine} runs this model at within a node of {form.node} GPUs "
        f"({_sizes_text(form)}); {smaller}"
    )


def _pp_reason(form: OperatorLayouts, top: int, pp: int, engine: str, alone: str) -> str:
    if top == form.node:
        where = (
            f"TP {top} fills a node of {form.node} GPUs and does not fit alone ({alone}); "
            f"PP {pp} adds one pipeline stage per node, the fewest stages that fit"
        )
    else:
        where = (
            f"TP {top} is the largest split {engine} runs this model at within a node of "
            f"{form.node} GPUs ({_sizes_text(form)}: the heads and the parallel layers' widths "
            f"must divide evenly), and it does not fit alone ({alone}); PP {pp} adds the "
            "fewest pipeline stages that fit"
        )
    return f"TP {top} × PP {pp}: {where}"


def _layout_for_count(req: InferenceRequest, gpu_count: int | None) -> tuple[Layout, str]:
    """The layout judged for the GPUs the caller gave, and a note when it was chosen here.
    Fewer GPUs than the request's own layout uses: that layout, which `judge_request` finds
    cannot start."""
    tp, pp, dp = req.tensor_parallel_size, req.pipeline_parallel_size, req.data_parallel_size
    ep = expert_parallel_size(req, tp, pp)
    if gpu_count is None or gpu_count == tp * pp * dp:
        return Layout(tp, pp, dp, ep), ""
    positive_int(gpu_count, "gpu_count", MAX_GPU_COUNT)
    if gpu_count < tp * pp * dp:
        return Layout(tp, pp, dp, ep), ""
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
    # No layout given: the minimum layout (the fewest GPUs in the form operators run on
    # nodes of the GPU's size) when the GPUs given hold it, as many copies as they hold.
    found = min_gpu_count(req)
    form = operator_layouts(req)
    if found.count is not None and found.layout is not None and found.count <= gpu_count:
        layout = Layout(found.layout.tensor, found.layout.pipeline, gpu_count // found.count)
        note = f"{gpu_count} GPUs planned as TP {layout.tensor} × PP {layout.pipeline}"
    else:
        # Else nodes may hold fewer GPUs than the largest server (4 T4s on a cloud VM): TP
        # filling such a node, PP across them, over a divisor of the GPUs given, the fewest
        # first and the larger TP first; when none fits, the largest layout of the node form
        # within them, judged as one copy.
        layout, note = _smaller_nodes_layout(req, form, gpu_count)
    if layout.data > 1:
        note += f", {layout.data} data-parallel replicas"
    idle = gpu_count - layout.gpus
    if idle:
        note += f"; {idle} GPU(s) left idle (no layout operators run uses them)"
    return layout, note


def _smaller_nodes_layout(
    req: InferenceRequest, form: OperatorLayouts, gpu_count: int
) -> tuple[Layout, str]:
    assert req.gpu_memory_bytes is not None
    options = [
        (d, tp)
        for d in range(1, min(gpu_count, MAX_MODEL_GPUS) + 1)
        if gpu_count % d == 0
        for tp in reversed(form.sizes)
        if d % tp == 0 and d // tp <= form.max_pp
    ]
    for d, tp in options[:MAX_SCAN_SETUPS]:
        if _fits_at(req, tp, d // tp, req.gpu_memory_bytes):
            layout = Layout(tp, d // tp, gpu_count // d)
            note = f"{gpu_count} GPUs planned as TP {tp} × PP {d // tp}"
            if d // tp > 1 and tp < form.top:
                note += f" (TP {tp} filling nodes of {tp} GPUs, one stage per node)"
            return layout, note
    largest = form.largest_within(gpu_count)
    return largest, f"{gpu_count} GPUs planned as TP {largest.tensor} × PP {largest.pipeline}"


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


@dataclass(frozen=True, slots=True)
class Judged:
    """The one verdict on a request with the GPUs it is given: the layout judged (and a note
    when it was chosen here), its setup, the verdict."""

    layout: Layout
    note: str
    setup: ServingSetup
    verdict: Verdict
    gpus: int
    """The GPUs given (the layout's own when the request gave no count)."""


def judge_request(req: InferenceRequest, gpu_count: int | None) -> Judged:
    """Whether ``req`` (resolved and validated) starts and serves its workload on
    ``gpu_count`` GPUs of ``req.gpu_memory_bytes``: `fit_inference`'s ``fits`` and every
    scheduler verdict (pre-flight, admission, the extender's nodes) are this one judgement.

    Fewer GPUs than the layout's TP × PP × DP: the engine does not start (``too_few_gpus``,
    judged before memory: vLLM and SGLang fail creating their process groups)."""
    mem = req.gpu_memory_bytes
    if mem is None:
        raise InvalidRequest("a GPU is needed to check the fit", field="gpu")
    layout, note = _layout_for_count(req, gpu_count)
    setup = setup_for(req, layout.tensor, layout.pipeline)
    check_length(setup, req.seq_len)
    verdict = judge(req, setup, mem)
    gpus = layout.gpus if gpu_count is None else min(gpu_count, layout.gpus)
    if gpus < layout.gpus:
        verdict = Verdict(
            FitReason.TOO_FEW_GPUS,
            f"TP {layout.tensor} × PP {layout.pipeline} × DP {layout.data} uses "
            f"{layout.gpus} GPUs, {gpus} given",
            verdict.usable,
            verdict.required,
        )
    return Judged(layout, note, setup, verdict, gpus)


def fit_inference(req: InferenceRequest, gpu_label: str, gpu_count: int | None) -> Fit:
    """Whether `req` fits `gpu_count` GPUs of `req.gpu_memory_bytes`, and the inverse answers."""
    req = resolved(req)
    validate_workload(req)
    judged = judge_request(req, gpu_count)
    assert req.gpu_memory_bytes is not None
    mem = req.gpu_memory_bytes
    arch = req.arch
    seq_len, prompt = req.seq_len, req.prompt
    layout, setup, verdict = judged.layout, judged.setup, judged.verdict
    notes = [judged.note] if judged.note else []
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
        FitReason.TOO_FEW_GPUS,
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
    minimum = _with_data_parallel(req, min_gpu_count(req, judged))
    min_layout = minimum.layout
    if minimum.note:
        notes.append(minimum.note)
    if verdict.detail:
        notes.append(f"{verdict.reason.value}: {verdict.detail}")
    return Fit(
        gpu=gpu_label,
        gpu_count=judged.gpus,
        usable_bytes=usable,
        required_bytes=verdict.required,
        fits=verdict.fits,
        headroom_bytes=usable - verdict.required,
        min_gpu_count=minimum.count,
        max_batch_size=max_batch,
        max_sequence_length=max_seq,
        assumptions=tuple(dict.fromkeys(notes)),
        reason=verdict.reason,
        reason_detail=verdict.detail,
        layout=layout,
        min_gpu_layout=min_layout,
        engine_args=_engine_args(req, setup, verdict, min_layout, mem),
        min_gpu_layout_reason=minimum.reason,
    )
