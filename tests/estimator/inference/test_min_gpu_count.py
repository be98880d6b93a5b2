"""min_gpu_count: the fewest GPUs in a layout operators run, found by a short search; it must
give the same answer as trying every GPU count in order with every layout the rule allows.

The rule, written here from its statement (docs/inference.md, "Minimum layout") and not from
the service's helpers: tensor parallelism inside one node, in a power-of-two size the engine
accepts for the model; pipeline stages only at the largest such size (it fills the node, or
the model splits no further by TP); one GPU on a MIG slice.
"""

from __future__ import annotations

import dataclasses

import pytest

from service.catalog.gpu_catalog import load_gpu_catalog
from service.catalog.model_catalog import load_model_catalog
from service.estimator.engines import get_engine
from service.estimator.gpu import DEFAULT_GPUS_PER_NODE, GpuSpec
from service.estimator.inference import InferenceRequest, fit_inference
from service.estimator.inference.request import resolved, setup_for
from service.estimator.inference.verdict import judge

CASES = [
    # (model, GPU or MIG slice, engine, sequence_length, batch_size)
    # 0.34's whole-GPU budget on 5 GB: larger TPs add NCCL buffers a small GPU may not hold.
    ("meta-llama/Llama-3.1-8B-Instruct", None, "vllm", 8192, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "a100-sxm4-40gb/1g.5gb", "vllm", 8192, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "l4", "transformers", 32768, 8),
    ("Qwen/Qwen2.5-7B-Instruct", "a100-sxm4-40gb/1g.5gb", "sglang", 4096, 4),
    ("google/gemma-3-12b-it", "l4", "vllm", 8192, 1),
    ("mistralai/Mixtral-8x7B-v0.1", "l4", "generic", 4096, 16),
    ("deepseek-ai/DeepSeek-V2-Lite", "a100-sxm4-40gb/1g.5gb", "vllm", 4096, 1),
    ("meta-llama/Meta-Llama-3-70B", "h100-sxm-80gb", "vllm", 8192, 1),
    ("meta-llama/Llama-3.1-70B-Instruct", "l4", "vllm", 8192, 1),
    ("Qwen/Qwen3-30B-A3B", "l4", "transformers", 2048, 64),
    # Qwen2.5-7B's 28 heads over 4 KV heads: TP 4 is its largest power-of-two split, so on
    # 5 GB GPUs the stages start at TP 4 inside a node of 8 GPUs (TP 4 × PP 3).
    ("Qwen/Qwen2.5-7B-Instruct", None, "generic", 4096, 1),
    # TP 8 fills the node and does not hold an 8B on 5 GB GPUs: a second node as a stage.
    ("meta-llama/Llama-3.1-8B-Instruct", None, "generic", 8192, 1),
    ("Qwen/Qwen2-57B-A14B-Instruct", "l4", "vllm", 4096, 1),
    # SGLang reserves more per GPU as TP × PP grows: fitting is not monotone in the stages.
    ("alpindale/c4ai-command-r-plus-GPTQ", "l4", "sglang", 4096, 2),
    # llama.cpp splits whole layers: TP 1 with pipeline stages.
    ("meta-llama/Llama-3.1-70B-Instruct", "l4", "llama.cpp", 8192, 1),
]


def _gpu(ref: str | None) -> tuple[int, GpuSpec | None]:
    if ref is None:
        return 5 * 10**9, None
    base, mig = load_gpu_catalog().resolve(ref)
    record = mig or base
    spec = GpuSpec(
        ref=ref,
        name=ref,
        total_bytes=record.memory_bytes,
        mig_profile=ref.split("/")[1] if mig is not None else None,
        gpus_per_node=base.gpus_per_node or DEFAULT_GPUS_PER_NODE,
    )
    return record.memory_bytes, spec


def _allowed(req: InferenceRequest, tp: int, pp: int) -> bool:
    """Whether TP × PP is a layout operators run, read off the rule's statement."""
    if req.gpu is not None and req.gpu.is_mig:
        return tp == 1 and pp == 1
    node = req.gpu.gpus_per_node if req.gpu is not None else DEFAULT_GPUS_PER_NODE
    accepted = get_engine(req.engine).valid_tensor_parallel_sizes(req.arch)
    sizes = [t for t in accepted if t <= node and bin(t).count("1") == 1]
    if tp not in sizes or pp > req.arch.num_layers:
        return False
    return pp == 1 or tp == max(sizes)


def _every_count_in_order(req: InferenceRequest) -> tuple[int, int, int] | None:
    """The definition: the first GPU count, from 1 up, with an allowed layout whose verdict is
    that it fits (a count has at most one allowed layout)."""
    assert req.gpu_memory_bytes is not None
    req = resolved(req)
    for n in range(1, 1025):
        for t in range(1, n + 1):
            if n % t or not _allowed(req, t, n // t):
                continue
            if judge(req, setup_for(req, t, n // t), req.gpu_memory_bytes).fits:
                return n, t, n // t
    return None


def _request(model: str, gpu: str | None, engine: str, seq: int, batch: int) -> InferenceRequest:
    memory, spec = _gpu(gpu)
    return InferenceRequest(
        architecture=load_model_catalog().get(model).architecture,
        engine=engine,
        sequence_length=seq,
        batch_size=batch,
        gpu_memory_bytes=memory,
        gpu=spec,
    )


@pytest.mark.parametrize(("model", "gpu", "engine", "seq", "batch"), CASES)
def test_search_equals_trying_every_count(
    model: str, gpu: str | None, engine: str, seq: int, batch: int
) -> None:
    req = _request(model, gpu, engine, seq, batch)
    fit = fit_inference(req, gpu or "5 GB", None)
    layout = fit.min_gpu_layout
    found = None if layout is None else (fit.min_gpu_count, layout.tensor, layout.pipeline)
    assert found == _every_count_in_order(req)
    assert (fit.min_gpu_layout_reason is None) == (found is None)


def test_a_70b_on_h100_is_tp_2_not_pipeline_stages() -> None:
    """The issue's case: a 70B in bf16 (141 GB of weights) cannot sit on one 80 GB H100, and
    at an 8192-token context two H100s hold it as TP 2, not as TP 1 × PP 3."""
    req = _request("meta-llama/Llama-3.1-70B-Instruct", "h100-sxm-80gb", "vllm", 8192, 1)
    req = dataclasses.replace(req, engine_options={"max_model_len": 8192})
    fit = fit_inference(req, "h100-sxm-80gb", None)
    assert fit.min_gpu_layout is not None
    assert (fit.min_gpu_layout.tensor, fit.min_gpu_layout.pipeline) == (2, 1)
    assert fit.min_gpu_layout_reason is not None
    assert fit.min_gpu_layout_reason.startswith("TP 2 inside one node")
    assert "TP 1 cannot hold the weights" in fit.min_gpu_layout_reason
    # The flags that fix it are the same layout.
    assert fit.engine_args is not None
    args = fit.engine_args
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert args[args.index("--pipeline-parallel-size") + 1] == "1"


def test_pipeline_stages_only_once_tp_fills_the_node() -> None:
    """A 70B on L4 (24 GB) at vLLM's full 131072-token context: TP 8 fills the 8-GPU node and
    does not hold it alone, so whole nodes are added as stages, never TP 4 × PP 2."""
    req = _request("meta-llama/Llama-3.1-70B-Instruct", "l4", "vllm", 8192, 1)
    fit = fit_inference(req, "l4", None)
    layout = fit.min_gpu_layout
    assert layout is not None and layout.pipeline > 1
    assert layout.tensor == 8
    assert fit.min_gpu_layout_reason is not None
    assert "fills a node of 8 GPUs" in fit.min_gpu_layout_reason
    args = fit.engine_args
    assert args is not None
    assert args[args.index("--tensor-parallel-size") + 1] == "8"


def test_a_gpu_count_without_a_layout_is_planned_in_the_same_form() -> None:
    """Six H100s for a 70B at 8192 tokens: three copies of TP 2 (the minimum layout), not a
    TP 2 × PP 3 or TP 1 × PP 6 copy."""
    req = _request("meta-llama/Llama-3.1-70B-Instruct", "h100-sxm-80gb", "vllm", 8192, 1)
    req = dataclasses.replace(req, engine_options={"max_model_len": 8192})
    fit = fit_inference(req, "h100-sxm-80gb", 6)
    assert fit.layout is not None
    assert (fit.layout.tensor, fit.layout.pipeline, fit.layout.data) == (2, 1, 3)
    assert fit.fits


def test_no_fit_is_null_and_says_how_far_it_looked() -> None:
    arch = load_model_catalog().get("meta-llama/Llama-3.1-8B-Instruct").architecture
    # Far more KV cache than any number of 5 GB slices holds under the 1024-GPU window.
    req = InferenceRequest(
        architecture=arch,
        engine="generic",
        sequence_length=131072,
        batch_size=4096,
        gpu_memory_bytes=5 * 10**9,
    )
    fit = fit_inference(req, "small", None)
    assert fit.min_gpu_count is None
    assert fit.min_gpu_layout_reason is None
    assert any("no layout operators run fits" in a for a in fit.assumptions)


@pytest.mark.parametrize(("model", "gpu", "engine", "seq", "batch"), CASES)
def test_a_request_that_fits_one_gpu_is_answered_as_the_search_answers(
    model: str, gpu: str | None, engine: str, seq: int, batch: int
) -> None:
    """fit_inference does not search when the request's own layout is one GPU and fits: its
    answer, layout and reason are the search's, whichever way it went."""
    from service.estimator.inference.fit import search_min_gpu_count

    req = _request(model, gpu, engine, seq, batch)
    fit = fit_inference(req, gpu or "5 GB", None)
    searched = search_min_gpu_count(resolved(req))
    assert fit.min_gpu_count == searched.count
    assert fit.min_gpu_layout == searched.layout
    assert fit.min_gpu_layout_reason == searched.reason
