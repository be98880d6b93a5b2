"""A replica under a closed loop of clients: latency and throughput at a concurrency.

``concurrency`` clients each keep one request of ``input_tokens`` prompt tokens and
``output_tokens`` generated tokens in flight (what ``vllm bench serve --max-concurrency``
measures). The engine runs at most ``running`` of them at once: the smaller of its own limit
(vLLM's ``max_num_seqs``) and the sequences its KV pool holds at that length, as the memory
model sizes the pool. In the steady state (continuous batching with chunked prefill):

- every step decodes each running sequence once and carries the prompts of the others that
  started meanwhile: ``B × I / (O − 1) × (B − 1) / B`` prefill tokens per step for ``B``
  running sequences, at most the engine's token budget per step;
- when the budget binds, the steps hold ``d`` decodes and ``budget − d`` prompt tokens (the
  prompt flow that keeps ``d`` sequences decoding). How the engine shares such a step is its
  own: vLLM V1 schedules its running requests before any waiting one
  (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``: "First, schedule the RUNNING
  requests"), so ``d`` sequences decode in every step and the other ``B − d`` wait for their
  prompt, in their TTFT (``decode_first``); an engine that runs new prompts first spreads the
  ``B`` sequences over the ``d`` decode slots, each decoding in ``d / B`` of the steps;
- ITL is that step's time (:func:`.timing.step_time`), over the share where the sequences share
  the slots;
- TTFT is the request overhead plus the steps that carry the request's own prompt, beside the
  others' decodes, or, where ``d`` sequences decode first, what Little's law leaves of a
  request's time in the replica (``B / rate − (O − 1) × ITL``) when that is longer;
- a request lasts TTFT + (O − 1) × ITL, so the replica completes ``B`` requests in that time
  (Little's law): requests/s = B / latency, output tokens/s = requests/s × O.

Past ``running``, the extra clients wait in the engine's queue: the replica's throughput is
that of ``running`` sequences and each request waits ``concurrency / throughput − latency``
before it is scheduled, which the time to first token includes (``saturated``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from service.estimator.gpu import GpuPerformance
from service.estimator.performance.timing import Bound, Efficiencies, step_time
from service.estimator.performance.work import StageWork

__all__ = ["Operating", "operate"]


@dataclass(frozen=True, slots=True)
class Operating:
    """Means over the requests of the steady state, seconds and per second."""

    ttft_s: float
    itl_s: float
    latency_s: float  # one request end to end, queue included
    requests_per_s: float
    output_tokens_per_s: float
    running: int
    queue_wait_s: float
    bound: Bound  # what limits the decode step (the prefill step when there is no decode)


@dataclass(frozen=True, slots=True)
class _Shape:
    work: tuple[StageWork, ...]
    gpu: GpuPerformance
    eff: Efficiencies
    tp: int
    input_tokens: int
    output_tokens: int
    chunk: int | None  # tokens per step (None: no limit)
    decode_first: bool  # a budget-bound step decodes its running sequences before new prompts


def _running_state(s: _Shape, running: int) -> tuple[float, float, float, Bound]:
    """(TTFT, ITL, latency) in seconds with ``running`` sequences, and the step's bound."""
    i, n = s.input_tokens, s.output_tokens - 1
    b = float(running)
    others = b - 1.0
    if n <= 0:
        # Prompts only: the running requests' prefills share the steps.
        own = step_time(
            s.work,
            s.gpu,
            s.eff,
            s.tp,
            decode=0,
            prefill=b * i,
            context=0,
            prompt_context=i / 2,
            prompts=b,
        )
        ttft = s.eff.request_overhead_s + own.seconds
        return ttft, 0.0, ttft, own.bound
    context = i + n / 2
    decode, prefill = b, b * i / n * others / b
    bound_by_budget = False
    if s.chunk is not None and decode + prefill > s.chunk:
        bound_by_budget = True
        decode = s.chunk / (1.0 + i * others / (n * b))
        prefill = s.chunk - decode
    step = step_time(
        s.work,
        s.gpu,
        s.eff,
        s.tp,
        decode=decode,
        prefill=prefill,
        context=context,
        prompt_context=i / 2,
        prompts=prefill / i,
    )
    itl = step.seconds if s.decode_first else step.seconds * b / decode
    # The request's own prompt, in chunks beside the others' decodes.
    beside = others * decode / b
    room = float(i) if s.chunk is None else max(1.0, s.chunk - beside)
    chunks = max(1, math.ceil(i / room))
    own = step_time(
        s.work,
        s.gpu,
        s.eff,
        s.tp,
        decode=beside,
        prefill=i / chunks,
        context=context,
        prompt_context=i / 2,
        prompts=1.0 / chunks,
    )
    ttft = s.eff.request_overhead_s + chunks * own.seconds
    if bound_by_budget and s.decode_first:
        # ``decode`` sequences finish every n steps; the rest of the B wait for prompt room.
        in_replica = b / (decode / (n * itl))
        ttft = max(ttft, in_replica - n * itl)
    return ttft, itl, ttft + n * itl, step.bound


def operate(
    work: tuple[StageWork, ...],
    gpu: GpuPerformance,
    eff: Efficiencies,
    tp: int,
    *,
    input_tokens: int,
    output_tokens: int,
    concurrency: int,
    running_limit: int,
    chunk: int | None,
    decode_first: bool = False,
) -> Operating:
    """The steady state of ``concurrency`` closed-loop clients (module docstring)."""
    shape = _Shape(work, gpu, eff, tp, input_tokens, output_tokens, chunk, decode_first)
    running = max(1, min(concurrency, running_limit))
    ttft, itl, latency, bound = _running_state(shape, running)
    rps = running / latency
    wait = 0.0
    if concurrency > running:
        wait = concurrency / rps - latency
    return Operating(
        ttft_s=ttft + wait,
        itl_s=itl,
        latency_s=latency + wait,
        requests_per_s=rps,
        output_tokens_per_s=rps * output_tokens,
        running=running,
        queue_wait_s=wait,
        bound=bound,
    )
