"""min_gpu_count skips counts that cannot hold the weights and builds setups lazily; it must
give the same answer as trying every candidate count in order with every split."""

from __future__ import annotations

import pytest

from service.catalog.gpu_catalog import load_gpu_catalog
from service.catalog.model_catalog import load_model_catalog
from service.estimator.inference import InferenceRequest, fit_inference
from service.estimator.inference.evaluate import fits
from service.estimator.inference.fit import candidate_counts
from service.estimator.inference.request import setup_for
from service.estimator.parallel import splits
from service.estimator.search import MAX_SEARCH_STEPS

CASES = [
    # (model, GPU or MIG slice, engine, sequence_length, batch_size)
    ("meta-llama/Llama-3.1-8B-Instruct", "a100-sxm4-40gb/1g.5gb", "vllm", 8192, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "l4", "transformers", 32768, 8),
    ("Qwen/Qwen2.5-7B-Instruct", "a100-sxm4-40gb/1g.5gb", "sglang", 4096, 4),
    ("google/gemma-3-12b-it", "l4", "vllm", 8192, 1),
    ("mistralai/Mixtral-8x7B-v0.1", "l4", "generic", 4096, 16),
    ("deepseek-ai/DeepSeek-V2-Lite", "a100-sxm4-40gb/1g.5gb", "vllm", 4096, 1),
    ("meta-llama/Meta-Llama-3-70B", "h100-sxm-80gb", "vllm", 8192, 1),
    ("Qwen/Qwen3-30B-A3B", "l4", "transformers", 2048, 64),
]


def _every_count_in_order(req: InferenceRequest) -> int | None:
    """The definition: the first candidate count with a split that fits, trying every count
    from 1 (so the weights floor the service skips below is checked too) up to the top of the
    service's window."""
    assert req.gpu_memory_bytes is not None
    arch = req.arch
    whole = setup_for(req, 1, 1).stages[0].weights
    floor_count = -(-whole // req.gpu_memory_bytes)
    candidates = candidate_counts(arch)
    above = [c for c in candidates if c >= floor_count]
    top = above[:MAX_SEARCH_STEPS][-1]
    for n in [c for c in candidates if c <= top]:
        for t, p in splits(arch, n):
            setup = setup_for(req, t, p)
            usable = setup.usable(req.gpu_memory_bytes)
            if fits(setup, usable, req.sequences, req.sequence_length, req.prompt):
                return n
    return None


@pytest.mark.parametrize(("model", "gpu", "engine", "seq", "batch"), CASES)
def test_lazy_scan_equals_trying_every_count(
    model: str, gpu: str, engine: str, seq: int, batch: int
) -> None:
    arch = load_model_catalog().get(model).architecture
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
    assert fit.min_gpu_count == _every_count_in_order(req)


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
    assert any("no valid TP × PP split" in a for a in fit.assumptions)
