"""min_gpu_count skips counts that cannot hold the weights and builds setups lazily; it must
give the same answer as trying every candidate count in order with every split."""

from __future__ import annotations

import pytest

from service.catalog.gpu_catalog import load_gpu_catalog
from service.catalog.model_catalog import load_model_catalog
from service.estimator.inference import InferenceRequest, fit_inference
from service.estimator.inference.fit import runnable_splits
from service.estimator.inference.request import resolved, setup_for
from service.estimator.inference.verdict import judge

CASES = [
    # 0.34's whole-GPU budget: on 5 GB PP-only splits fit while larger TPs do not (NCCL).
    ("meta-llama/Llama-3.1-8B-Instruct", None, "vllm", 8192, 1),
    # (model, GPU or MIG slice, engine, sequence_length, batch_size)
    ("meta-llama/Llama-3.1-8B-Instruct", "a100-sxm4-40gb/1g.5gb", "vllm", 8192, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "l4", "transformers", 32768, 8),
    ("Qwen/Qwen2.5-7B-Instruct", "a100-sxm4-40gb/1g.5gb", "sglang", 4096, 4),
    ("google/gemma-3-12b-it", "l4", "vllm", 8192, 1),
    ("mistralai/Mixtral-8x7B-v0.1", "l4", "generic", 4096, 16),
    ("deepseek-ai/DeepSeek-V2-Lite", "a100-sxm4-40gb/1g.5gb", "vllm", 4096, 1),
    ("meta-llama/Meta-Llama-3-70B", "h100-sxm-80gb", "vllm", 8192, 1),
    ("Qwen/Qwen3-30B-A3B", "l4", "transformers", 2048, 64),
    # SGLang reserves more per GPU as TP × PP grows: TP 2 fits at PP 3 but not at PP 64, so
    # a search that only checks the most stages misses it (and answers TP 1 × PP 6).
    ("alpindale/c4ai-command-r-plus-GPTQ", "l4", "sglang", 4096, 2),
]


def _every_count_in_order(req: InferenceRequest) -> tuple[int, int, int] | None:
    """The definition: the first GPU count, from 1 up, with a runnable split (TP the engine
    can run within one node, PP at most the layers) whose verdict is that it fits, the larger
    TP first at that count. The service skips counts below the weights floor and searches
    stage counts; it must agree on the count and the split."""
    assert req.gpu_memory_bytes is not None
    req = resolved(req)
    for n in range(1, 1025):
        for t, p in runnable_splits(req, n):
            if judge(req, setup_for(req, t, p), req.gpu_memory_bytes).fits:
                return n, t, p
    return None


@pytest.mark.parametrize(("model", "gpu", "engine", "seq", "batch"), CASES)
def test_lazy_scan_equals_trying_every_count(
    model: str, gpu: str, engine: str, seq: int, batch: int
) -> None:
    arch = load_model_catalog().get(model).architecture
    if gpu is None:
        memory, gpu = 5 * 10**9, "5 GB"
    else:
        base, mig = load_gpu_catalog().resolve(gpu)
        memory = (mig or base).memory_bytes
    req = InferenceRequest(
        architecture=arch,
        engine=engine,
        sequence_length=seq,
        batch_size=batch,
        gpu_memory_bytes=memory,
    )
    fit = fit_inference(req, gpu, None)
    layout = fit.min_gpu_layout
    found = None if layout is None else (fit.min_gpu_count, layout.tensor, layout.pipeline)
    assert found == _every_count_in_order(req)


def test_no_fit_is_null_and_says_how_far_it_looked() -> None:
    arch = load_model_catalog().get("meta-llama/Llama-3.1-8B-Instruct").architecture
    # Far more KV cache than any number of 5 GB slices holds under the 64-count window.
    req = InferenceRequest(
        architecture=arch,
        engine="generic",
        sequence_length=131072,
        batch_size=4096,
        gpu_memory_bytes=5 * 10**9,
    )
    fit = fit_inference(req, "small", None)
    assert fit.min_gpu_count is None
    assert any("no runnable TP × PP split" in a for a in fit.assumptions)
