"""The detailed inference estimator: breakdown, engines, capacity, fit and input errors.

Expected numbers are written out by hand from the architecture (Llama-3.1-8B shape) and
vLLM's documented budgeting rule; the invariants are property tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.estimator.errors import InvalidRequest
from service.estimator.inference import InferenceRequest, estimate_inference, fit_inference
from service.estimator.model import read_config
from tests.estimator.conftest import LLAMA_8B, catalog_architecture, catalog_config

GIB = 2**30
H100 = 81559 * 2**20
ARCH = catalog_architecture(LLAMA_8B)
PARAMS = 8_030_261_248
KV_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # 131072 bytes


def req(**kw: object) -> InferenceRequest:
    return InferenceRequest(architecture=ARCH, **kw)  # type: ignore[arg-type]


def test_breakdown_keys_and_generic_numbers() -> None:
    e = estimate_inference(req(sequence_length=4096))
    assert set(e.per_gpu) == {"weights", "kv_cache", "activations", "overhead"}
    assert e.kind == "inference" and e.estimator == "detailed"
    assert e.per_gpu["weights"] == 2 * PARAMS
    assert e.per_gpu["kv_cache"] == 4096 * KV_PER_TOKEN
    # prefill MLP peak: 4096 tokens × (3 × 14336 + 4 × 4096) elements × 2 bytes
    assert e.per_gpu["activations"] >= 4096 * (3 * 14336 + 4 * 4096) * 2
    assert e.total_bytes == e.per_gpu_bytes  # one GPU


def test_tp_total_is_summed_and_per_gpu_split() -> None:
    e = estimate_inference(req(tensor_parallel_size=2))
    assert e.gpu_count == 2
    assert e.per_gpu["kv_cache"] == 2048 * KV_PER_TOKEN // 2
    assert e.total["kv_cache"] == 2048 * KV_PER_TOKEN
    assert any("NCCL" in a for a in e.assumptions)


def test_vllm_capacity_follows_budget_rule() -> None:
    e = estimate_inference(
        req(
            engine="vllm",
            sequence_length=8192,
            gpu_memory_bytes=H100,
            engine_options={"gpu_memory_utilization": 0.9, "version": "0.19"},
        )
    )
    cap = e.capacity
    assert cap is not None
    budget = int(H100 * 0.9)
    sub = cap.subtracted
    assert cap.budget_bytes == budget
    assert (
        cap.kv_cache_pool_bytes == budget - sub["weights"] - sub["activations"] - sub["non_torch"]
    )
    blocks = cap.kv_cache_pool_bytes // (16 * KV_PER_TOKEN)  # 16-token blocks over 32 layers
    assert cap.kv_cache_tokens == blocks * 16
    assert cap.max_concurrency == round(blocks / 512, 2)  # 8192 tokens = 512 blocks
    assert cap.kv_cache_bytes_per_token == KV_PER_TOKEN


def test_vllm_rounds_to_blocks_and_fp8_halves() -> None:
    v019 = {"version": "0.19"}  # 16-token blocks (64 from 0.34)
    a = estimate_inference(req(engine="vllm", sequence_length=1000, engine_options=v019))
    assert a.per_gpu["kv_cache"] == 1008 * KV_PER_TOKEN  # 63 blocks of 16
    b = estimate_inference(
        req(engine="vllm", sequence_length=1000, kv_cache_dtype="fp8", engine_options=v019)
    )
    assert b.per_gpu["kv_cache"] * 2 == a.per_gpu["kv_cache"]


def test_fit_and_inverse_answers() -> None:
    r = req(engine="vllm", sequence_length=8192, gpu_memory_bytes=H100)
    f = fit_inference(r, "h100-sxm-80gb", None)
    assert f.fits and f.min_gpu_count == 1
    assert f.headroom_bytes == f.usable_bytes - f.required_bytes
    cap = estimate_inference(r).capacity
    assert cap is not None
    # the largest batch is the engine's own concurrency at this length
    assert f.max_batch_size == int(cap.max_concurrency)
    big = read_config(
        {
            **catalog_config(LLAMA_8B),
            "hidden_size": 16384,
            "num_hidden_layers": 126,
            "num_attention_heads": 128,
            "intermediate_size": 53248,
        }
    )
    g = fit_inference(InferenceRequest(big, gpu_memory_bytes=H100), "h100", None)
    assert not g.fits and g.max_batch_size is None
    assert g.min_gpu_count is not None and g.min_gpu_count >= 10


def test_mig_sized_gpu_and_gpu_count_split() -> None:
    f = fit_inference(req(gpu_memory_bytes=10 * GIB), "a100/1g.10gb", None)
    assert not f.fits
    two = fit_inference(req(gpu_memory_bytes=10 * GIB), "a100", 2)
    assert two.gpu_count == 2


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"sequence_length": -5}, "sequence_length"),
        ({"batch_size": 100_000, "sequence_length": 100_000}, "sequence_length"),
        ({"tensor_parallel_size": 3}, "tensor_parallel_size"),
        ({"pipeline_parallel_size": 33}, "pipeline_parallel_size"),
        (
            {"engine": "vllm", "engine_options": {"gpu_memory_utilization": 1.5}},
            "engine_options.gpu_memory_utilization",
        ),
        ({"engine": "vllm", "engine_options": {"block_size": 7}}, "engine_options.block_size"),
        ({"engine": "vllm", "engine_options": {"nonsense": 1}}, "engine_options.nonsense"),
        ({"engine": "tgi"}, "engine"),
        ({"kv_cache_dtype": "int3"}, "kv_cache_dtype"),
        ({"weight_format": "q3"}, "weight_format"),
        ({"prompt_tokens": 5000}, "prompt_tokens"),
    ],
)
def test_invalid_requests_name_the_field(kw: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        estimate_inference(req(**kw))
    assert e.value.field == field


def test_invalid_tp_lists_valid_sizes() -> None:
    with pytest.raises(InvalidRequest) as e:
        estimate_inference(req(tensor_parallel_size=6))
    assert "1, 2, 4, 8, 16, 32" in e.value.detail


ENGINES = st.sampled_from(["generic", "transformers", "vllm", "sglang"])


@settings(max_examples=60, deadline=None)
@given(
    engine=ENGINES,
    b=st.integers(1, 64),
    s=st.integers(1, 32768),
    db=st.integers(0, 64),
    ds=st.integers(0, 32768),
)
def test_more_tokens_never_need_less_memory(engine: str, b: int, s: int, db: int, ds: int) -> None:
    small = estimate_inference(req(engine=engine, batch_size=b, sequence_length=s))
    large = estimate_inference(req(engine=engine, batch_size=b + db, sequence_length=s + ds))
    assert large.per_gpu_bytes >= small.per_gpu_bytes
    assert large.total_bytes >= small.total_bytes


@settings(max_examples=40, deadline=None)
@given(engine=ENGINES, s=st.integers(1, 32768), tp=st.sampled_from([1, 2, 4, 8]))
def test_tensor_parallelism_never_raises_model_memory_per_gpu(engine: str, s: int, tp: int) -> None:
    one = estimate_inference(req(engine=engine, sequence_length=s)).per_gpu
    more = estimate_inference(
        req(engine=engine, sequence_length=s, tensor_parallel_size=tp)
    ).per_gpu
    # NCCL buffers are added with TP; the model's own memory only shrinks.
    for key in ("weights", "kv_cache", "activations"):
        assert more[key] <= one[key]


def _count_calls(monkeypatch: pytest.MonkeyPatch, engine: str, *, cold: bool) -> dict[str, int]:
    """Counts setup builds (one KV layout per build, behind the cache) and workload
    evaluations (the engine's per-sequence cost), apart inside min_gpu_count."""
    from service.estimator import memo
    from service.estimator.engines import get_engine
    from service.estimator.inference import fit as fit_module
    from service.estimator.inference import setup as setup_module

    calls = {"setup": 0, "unit": 0, "min_count_unit": 0, "inside_min_count": 0}
    layouts, min_count = setup_module.stage_kv_layouts, fit_module.min_gpu_count
    engine_type = type(get_engine(engine))
    cost = engine_type.sequence_cost

    def counting_layouts(*a: Any, **k: Any) -> Any:
        calls["setup"] += 1
        return layouts(*a, **k)

    def counting_cost(self: Any, *a: Any) -> Any:
        calls["min_count_unit" if calls["inside_min_count"] else "unit"] += 1
        return cost(self, *a)

    def counting_min_count(*a: Any) -> Any:
        calls["inside_min_count"] += 1
        try:
            return min_count(*a)
        finally:
            calls["inside_min_count"] -= 1

    monkeypatch.setattr(setup_module, "stage_kv_layouts", counting_layouts)
    monkeypatch.setattr(engine_type, "sequence_cost", counting_cost)
    monkeypatch.setattr(fit_module, "min_gpu_count", counting_min_count)
    if cold:
        # Empty, at its default budget: an app made earlier in this process with caching off
        # (cache_bytes=0) must not turn the warm count into a cold one.
        memo.configure(memo.DEFAULT_BUDGET_BYTES)
    return calls


@pytest.mark.parametrize("engine", ["generic", "transformers", "vllm", "sglang"])
@pytest.mark.parametrize(
    "model_id", ["deepseek-ai/DeepSeek-V3", "meta-llama/Llama-3.1-405B", "google/gemma-3-27b-it"]
)
def test_fit_evaluations_are_bounded(
    monkeypatch: pytest.MonkeyPatch, engine: str, model_id: str
) -> None:
    """A fit with its inverse answers builds each setup once (a warm repeat builds none) and
    evaluates the workload a bounded number of times: the candidate GPU counts min_gpu_count
    visits, and a bisection of at most log2(max_position) + 2 steps for the sequence length."""
    from service.catalog.model_catalog import load_model_catalog

    arch = load_model_catalog().get(model_id).architecture
    req = InferenceRequest(
        architecture=arch, engine=engine, sequence_length=4096, gpu_memory_bytes=80 * 2**30
    )
    cold = _count_calls(monkeypatch, engine, cold=True)
    fit = fit_inference(req, "h100", None)
    # The first fit builds the request's setup, the single-GPU setup (the weights floor), the
    # floor probe (TP 1, then each TP at the floor count) and, per runnable TP size, at most
    # 2 · log2(layers) + 1 stage counts (search.smallest_true).
    from service.estimator.inference.request import resolved
    from service.estimator.inference.verdict import runnable_tensor_parallel_sizes

    per_tp = 2 * arch.num_layers.bit_length() + 1
    tp_sizes = len(runnable_tensor_parallel_sizes(resolved(req)))
    visits = tp_sizes * per_tp + tp_sizes + 1
    assert cold["setup"] <= 2 + visits, cold
    # min_gpu_count, cold: one evaluation per stage of each split it visits; none at all when
    # the request's own layout, one GPU, fits (the search's first try, already judged).
    if fit.fits and req.tensor_parallel_size * req.pipeline_parallel_size == 1:
        assert cold["min_count_unit"] == 0, cold
    else:
        assert 0 < cold["min_count_unit"] <= visits * arch.num_layers, cold
    warm = _count_calls(monkeypatch, engine, cold=False)
    fit_inference(req, "h100", None)
    assert warm["setup"] == 0, warm
    positions = arch.max_position_embeddings or 2**20
    stages = max(1, req.pipeline_parallel_size)
    # max_batch (1 per stage) + required (1) + the verdict's fit check (1 per stage) + the
    # length bisection + the engine flags' own verdict (2) ...
    assert warm["unit"] <= stages * (positions.bit_length() + 3) + 4, warm
    # ... and min_gpu_count answers a warm repeat from the memo.
    assert warm["min_count_unit"] == 0, warm
