"""The step roofline and the closed-loop steady state, on a synthetic one-stage model whose
figures are worked by hand."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from service.estimator.gpu import GpuPerformance
from service.estimator.performance.serving import operate
from service.estimator.performance.timing import Efficiencies, step_time
from service.estimator.performance.work import StageWork

# A GPU of 1 TB/s and 100 TFLOPS, and a model streaming 10 GB per step, 20 GFLOPs per token,
# 1 MB of KV per context token: numbers that make the arithmetic readable.
GPU = GpuPerformance(memory_bytes_per_s=1e12, tensor_flops_per_s=100e12, architecture="test")
WORK = (
    StageWork(
        layers=10,
        dense_read_bytes=10e9,
        expert_bytes_per_expert_layer=0.0,
        moe_layers=0,
        num_experts=0,
        experts_per_token=0,
        flops_per_token=20e9,
        head_flops_per_token=0.0,
        attention_flops_per_pair=0.0,
        kv_token_bytes=1e6,
        kv_window_bytes=0.0,
        window=None,
        state_bytes=0.0,
        allreduce_bytes_per_token=0.0,
    ),
)
EFF = Efficiencies(memory=0.5, compute=0.5, step_overhead_s=0.001, request_overhead_s=0.01)


def run(
    concurrency: int,
    limit: int = 1000,
    i: int = 1000,
    o: int = 101,
    chunk: int | None = None,
    decode_first: bool = False,
):
    return operate(
        WORK,
        GPU,
        EFF,
        1,
        input_tokens=i,
        output_tokens=o,
        concurrency=concurrency,
        running_limit=limit,
        chunk=chunk,
        decode_first=decode_first,
    )


def test_decode_step_is_memory_bound_by_hand() -> None:
    # 10 GB of weights + 1 sequence × 1500 tokens × 1 MB at 0.5 TB/s, + 1 ms.
    t = step_time(WORK, GPU, EFF, 1, decode=1, prefill=0, context=1500)
    assert t.bound == "memory"
    assert math.isclose(t.seconds, (10e9 + 1500e6) / 0.5e12 + 0.001)


def test_prefill_step_is_compute_bound_by_hand() -> None:
    # 1000 tokens × 20 GFLOPs at 50 TFLOPS = 0.4 s, above the 20 ms of weights.
    t = step_time(WORK, GPU, EFF, 1, decode=0, prefill=1000, context=0)
    assert t.bound == "compute"
    assert math.isclose(t.seconds, 1000 * 20e9 / 50e12 + 0.001)


def test_zero_load_ttft_itl_and_rate() -> None:
    op = run(1)
    itl = (10e9 + 1e6 * (1000 + 50)) / 0.5e12 + 0.001  # context: prompt + half the output
    ttft = 0.01 + 1000 * 20e9 / 50e12 + 0.001
    assert math.isclose(op.itl_s, itl)
    assert math.isclose(op.ttft_s, ttft)
    assert math.isclose(op.requests_per_s, 1 / (ttft + 100 * itl))
    assert math.isclose(op.output_tokens_per_s, 101 / (ttft + 100 * itl))
    assert op.queue_wait_s == 0


def test_past_the_limit_requests_queue() -> None:
    at_limit, past = run(8, limit=8), run(32, limit=8)
    assert past.running == 8
    assert past.requests_per_s == at_limit.requests_per_s
    assert past.itl_s == at_limit.itl_s
    # Little's law: 32 in flight at the limit's rate; the 24 extra wait before their prefill.
    latency = 32 / at_limit.requests_per_s
    assert math.isclose(past.latency_s, latency)
    assert math.isclose(past.ttft_s, at_limit.ttft_s + latency - at_limit.latency_s)


def test_others_prefills_share_the_decode_steps() -> None:
    # Two running: per step one decode each and the other's prompt spread over its 100 steps.
    op = run(2)
    step = step_time(
        WORK,
        GPU,
        EFF,
        1,
        decode=2,
        prefill=1000 / 100,
        context=1050,
        prompt_context=500,
        prompts=0.01,
    )
    assert math.isclose(op.itl_s, step.seconds)


def _budget_step(decode: float):
    return step_time(
        WORK,
        GPU,
        EFF,
        1,
        decode=decode,
        prefill=512 - decode,
        context=1050,
        prompt_context=500,
        prompts=(512 - decode) / 1000,
    )


def test_token_budget_slows_each_sequence_when_prompts_go_first() -> None:
    # 256 sequences want 256 decodes + 2550 prompt tokens a step; a 512-token budget fits
    # 512 / (1 + 1000 × 255 / (100 × 256)) decodes, so each sequence decodes in that share.
    op = run(256, chunk=512)
    decode = 512 / (1 + 1000 * 255 / (100 * 256))
    step = step_time(
        WORK,
        GPU,
        EFF,
        1,
        decode=decode,
        prefill=512 - decode,
        context=1050,
        prompt_context=500,
        prompts=(512 - decode) / 1000,
    )
    assert math.isclose(op.itl_s, step.seconds * 256 / decode)


def test_token_budget_keeps_the_decoding_sequences_going_when_decodes_go_first() -> None:
    # vLLM V1 schedules running requests first: the same d decodes run in every step (ITL is
    # one step), 100 steps finish each, so d / (100 × step) requests complete per second, and
    # the other 256 − d wait for prompt room: Little's law puts 256 / rate − 100 × step of each
    # request's time before its first token.
    op = run(256, chunk=512, decode_first=True)
    decode = 512 / (1 + 1000 * 255 / (100 * 256))
    step = _budget_step(decode).seconds
    rate = decode / (100 * step)
    assert math.isclose(op.itl_s, step)
    assert math.isclose(op.requests_per_s, rate)
    assert math.isclose(op.ttft_s, 256 / rate - 100 * step)
    # The budget moves the same tokens either way: only the split of a request's time between
    # TTFT and ITL differs (the prompt-first rate is lower by its own prompt's 0.47 s of 113 s).
    assert math.isclose(op.requests_per_s, run(256, chunk=512).requests_per_s, rel_tol=0.005)


def test_decodes_first_changes_nothing_below_the_budget() -> None:
    assert run(4, chunk=8192, decode_first=True) == run(4, chunk=8192)


@settings(max_examples=60, deadline=None)
@given(
    a=st.integers(1, 400),
    b=st.integers(1, 400),
    chunk=st.sampled_from([None, 2048, 8192]),
    first=st.booleans(),
)
def test_more_clients_never_faster_per_token_nor_lower_rate(
    a: int, b: int, chunk: int | None, first: bool
) -> None:
    lo, hi = sorted((a, b))
    x = run(lo, limit=256, chunk=chunk, decode_first=first)
    y = run(hi, limit=256, chunk=chunk, decode_first=first)
    assert y.itl_s >= x.itl_s * (1 - 1e-12)
    assert y.ttft_s >= x.ttft_s * (1 - 1e-12)
    # Once the steps are full the rate plateaus (within the chunks' rounding, 0.1 %).
    assert y.requests_per_s >= x.requests_per_s * (1 - 1e-3)
