"""vLLM release lines: version mapping, per-line defaults and budgets, and the mechanisms that
differ between lines (fused-MoE buffers, mxfp4 kernel storage, the profiling run's sampler).

Expected values are hand calculations from the shapes in the models' config.json files and
the buffer shapes in vLLM's sources (vllm-project/vllm at the tags named), written out here.
"""

from __future__ import annotations

import pytest

from service.estimator.engines.moe_workspace import moe_buffers
from service.estimator.engines.mxfp4_storage import default_backend, mxfp4_extra_bytes
from service.estimator.engines.vllm import VllmEngine
from service.estimator.engines.vllm_profile import encoder_items, sampler_buffer_rows
from service.estimator.engines.vllm_versions import LINES, NEWEST, line_for
from service.estimator.errors import InvalidRequest
from service.estimator.gpu import GpuSpec
from service.estimator.inference import InferenceRequest, estimate_inference, stage_figures
from service.estimator.inference.request import setup_for
from tests.estimator.conftest import LLAMA_8B, catalog_architecture

GIB = 2**30
MIB = 2**20
H100 = GpuSpec("h100", "NVIDIA H100 SXM 80GB", round(79.19 * GIB), (9, 0), vendor="nvidia")
A100 = GpuSpec("a100", "NVIDIA A100 SXM4 80GB", round(79.15 * GIB), (8, 0), vendor="nvidia")


@pytest.mark.parametrize(
    ("given", "line", "mapped"),
    [
        ("0.19.0", "0.19", False),
        ("0.10.1.1", "0.10.1", False),  # a post release of a modelled one
        ("v0.8.5", "0.8.5", False),
        ("0.9.1", "0.9.1", False),
        ("0.9.0", "0.8.5", True),
        ("0.15.2rc1.dev93+g11a4c9d30", "0.16", True),
        ("0.18.0", "0.19", True),
        ("0.20.1", "0.20", True),
        ("0.12.0", "0.13", True),
        # A line covers releases from its first one, not from the release it was read from.
        ("0.11.1", "0.11.2", True),
        ("0.11.0", "0.11.0", False),
        ("0.21.0", "0.22", True),
        ("0.8.0", "0.8.5", True),
        ("0.6.0", "0.6.3", True),
        ("0.6.3.post1", "0.6.3", False),
        ("0.6.4.post1", "0.6.4", False),
        ("0.2.5", "0.6.3", True),  # before every line: the oldest, said so
        ("1.2.0", NEWEST.name, True),
    ],
)
def test_release_maps_to_the_line_at_or_below(given: str, line: str, mapped: bool) -> None:
    got, note = line_for(given)
    assert got.name == line
    assert (note is not None) == mapped
    if note:
        assert given in note and line in note


def test_0_6_3_budget_leaves_the_context_outside_and_0_6_4_charges_it() -> None:
    # v0.6.3.post1 worker.determine_num_available_blocks: peak = init free (read after the
    # context, before NCCL) - free after the profiling run; v0.6.4 (vllm-project/vllm#9352):
    # allocated peak + every non-torch byte on the device, the context included. Same model,
    # GPU and flags otherwise: the pools differ by the CUDA context alone.
    def pool(version: str) -> int:
        req = InferenceRequest(
            catalog_architecture(LLAMA_8B),
            engine="vllm",
            engine_options={"version": version, "max_model_len": 8192},
            gpu_memory_bytes=A100.total_bytes,
            gpu=A100,
        )
        cap = estimate_inference(req).capacity
        assert cap is not None
        return cap.kv_cache_pool_bytes

    from service.estimator.engines.overhead import cuda_context_bytes

    assert pool("0.6.3") - pool("0.6.4") == cuda_context_bytes(A100)


def test_lines_are_ordered_and_the_default_is_the_newest() -> None:
    keys = [line.key for line in LINES]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    req = InferenceRequest(catalog_architecture(LLAMA_8B), engine="vllm")
    assert req.settings()["version"] == NEWEST.name


@pytest.mark.parametrize("bad", ["latest", "", "0.x", "9" * 80])
def test_unparseable_version_is_a_422_naming_the_field(bad: str) -> None:
    req = InferenceRequest(
        catalog_architecture(LLAMA_8B), engine="vllm", engine_options={"version": bad}
    )
    with pytest.raises(InvalidRequest) as e:
        req.settings()
    assert e.value.field == "engine_options.version"


def _settings(version: str, **kw: object) -> dict[str, object]:
    req = InferenceRequest(
        catalog_architecture(LLAMA_8B),
        engine="vllm",
        engine_options={"version": version, **kw},
        gpu_memory_bytes=H100.total_bytes,
        gpu=H100,
    )
    return req.settings().as_dict()


def test_defaults_per_line() -> None:
    # gpu_memory_utilization: 0.9 (<= 0.19), 0.92 (config/cache.py v0.22.0), 1.0 with v0.34's
    # extensible KV cache; block size 16, then DEFAULT_BLOCK_SIZE = 64 in v0.34.0.
    assert _settings("0.19")["gpu_memory_utilization"] == 0.9
    assert _settings("0.22.0")["gpu_memory_utilization"] == 0.92
    s = _settings("0.34.0")
    assert (s["gpu_memory_utilization"], s["block_size"]) == (1.0, 64)
    # V0 profiles the whole max_model_len in 256 sequences; above 32768 chunked prefill takes
    # 512 tokens (v0.6.4) per step.
    v0 = _settings("0.6.4", max_model_len=20000)
    assert (v0["max_num_batched_tokens"], v0["max_num_seqs"]) == (20000, 256)
    assert _settings("0.6.4", max_model_len=35000)["max_num_batched_tokens"] == 512
    # V1 on an H100 (>= 70 GiB, not an A100): 8192 tokens, 1024 sequences.
    v1 = _settings("0.10.1")
    assert (v1["max_num_batched_tokens"], v1["max_num_seqs"]) == (8192, 1024)


def test_a100_takes_the_small_tier_from_0_10() -> None:
    def tier(version: str) -> tuple[object, object]:
        req = InferenceRequest(
            catalog_architecture(LLAMA_8B),
            engine="vllm",
            engine_options={"version": version},
            gpu_memory_bytes=A100.total_bytes,
            gpu=A100,
        )
        s = req.settings()
        return s["max_num_batched_tokens"], s["max_num_seqs"]

    assert tier("0.8.5") == (8192, 1024)  # no A100 exclusion yet
    assert tier("0.9.1") == (2048, 256)  # PR 17885's exclusion, in v0.9.1's arg_utils.py
    assert tier("0.10.1") == (2048, 256)


@pytest.mark.parametrize(
    ("gpu", "version", "serve", "llm"),
    [
        # EngineArgs._set_default_args (v0.10.1 arg_utils.py): the LLM class gets 16384 tokens
        # on a GPU of 70 GiB or more that is not an A100, 8192 below or on an A100; the
        # OpenAI server 8192 and 2048. The sequence defaults are the same for both.
        (H100, "0.10.1", (8192, 1024), (16384, 1024)),
        (A100, "0.10.1", (2048, 256), (8192, 256)),
        (A100, "0.8.5", (8192, 1024), (16384, 1024)),  # before the A100 exclusion
        # v0.34's tier for 160 GiB and more: 16384 either way.
        (
            GpuSpec("b200", "NVIDIA B200", 178 * GIB, (10, 0), vendor="nvidia"),
            "0.34.0",
            (16384, 1024),
            (16384, 1024),
        ),
        # v0.34 keeps GB10 (compute capability 12.1, 128 GB unified) on the small tier.
        (
            GpuSpec("gb10", "NVIDIA GB10", 119 * GIB, (12, 1), vendor="nvidia"),
            "0.34.0",
            (2048, 256),
            (8192, 256),
        ),
    ],
)
def test_entrypoint_picks_the_usage_context_tier(
    gpu: GpuSpec, version: str, serve: tuple[int, int], llm: tuple[int, int]
) -> None:
    def tier(entrypoint: str) -> tuple[object, object]:
        req = InferenceRequest(
            catalog_architecture(LLAMA_8B),
            engine="vllm",
            engine_options={"version": version, "entrypoint": entrypoint},
            gpu_memory_bytes=gpu.total_bytes,
            gpu=gpu,
        )
        s = req.settings()
        return s["max_num_batched_tokens"], s["max_num_seqs"]

    assert tier("serve") == serve
    assert tier("llm") == llm


def test_entrypoint_does_not_change_v0_defaults() -> None:
    assert _settings("0.6.4", max_model_len=20000, entrypoint="llm")["max_num_batched_tokens"] == (
        20000
    )


def test_unknown_entrypoint_is_a_422_naming_the_field() -> None:
    req = InferenceRequest(
        catalog_architecture(LLAMA_8B), engine="vllm", engine_options={"entrypoint": "grpc"}
    )
    with pytest.raises(InvalidRequest) as e:
        req.settings()
    assert e.value.field == "engine_options.entrypoint"


def _setup(version: str):  # type: ignore[no-untyped-def]
    req = InferenceRequest(
        catalog_architecture(LLAMA_8B),
        engine="vllm",
        engine_options={"version": version, "max_model_len": 8192},
        gpu_memory_bytes=H100.total_bytes,
        gpu=H100,
    )
    return setup_for(req)


def test_what_each_budget_charges() -> None:
    # 0.6.4 charges the CUDA context inside its budget; 0.19 leaves it and the graphs outside;
    # 0.22 estimates the CUDA graphs before sizing the pool and charges them.
    old, mid, new = _setup("0.6.4"), _setup("0.19"), _setup("0.22")
    assert old.overhead.cuda_context > 0 and old.outside_budget.cuda_context == 0
    assert mid.overhead.cuda_context == 0 and mid.outside_budget.cuda_graphs > 0
    assert new.overhead.cuda_graphs == mid.outside_budget.cuda_graphs
    assert new.outside_budget.cuda_graphs == 0


def test_moe_buffers_per_line_qwen3_30b_a3b() -> None:
    # Qwen3-30B-A3B: H 2048, moe_intermediate 768, 128 experts, top-8; TP 1, 8192 tokens, bf16.
    arch = catalog_architecture("Qwen/Qwen3-30B-A3B")
    m, k, h, i, e = 8192, 8, 2048, 768, 128
    router = m * e * 2 + m * k * 8
    shared = moe_buffers(arch, 1, m, 2, "shared")
    assert shared.transient - router == m * k * 2 * (max(2 * i, h) + i) == 352 * MIB
    out = moe_buffers(arch, 1, m, 2, "shared+out")
    assert out.transient - router == 384 * MIB
    ws = moe_buffers(arch, 1, m, 2, "workspace")
    # common max(M·k·max(I, H), M·H) + workspace2 M·k·max(2I, H), both kept; output M·H.
    assert ws.persistent == 512 * MIB and ws.transient - router == 32 * MIB
    # v0.6.4's three caches: M·k·(2I + I + H).
    assert moe_buffers(arch, 1, m, 2, "separate").transient - router == m * k * 2 * (3 * i + h)
    # Up to v0.11.2 the fused path works in chunks of 32768 tokens.
    big = moe_buffers(arch, 1, 65536, 2, "shared").transient - (65536 * e * 2 + 65536 * k * 8)
    assert big == 32768 * k * 2 * (max(2 * i, h) + i)


@pytest.mark.parametrize(
    ("tp", "backend", "stored"),
    [
        # E 32, H = I = 2880, 24 layers (gpt-oss-20b). Marlin: Ip = ru(I/TP, 128), Hp = 3072;
        # values E·3·Ip·Hp/2, scales E·3·Ip·Hp/32, bf16 biases 2·E·(2Ip + Hp).
        (1, "marlin", 11_083_579_392),
        (2, "marlin", 5_784_993_792),
        # Triton on Hopper: Ip = ru(I/TP, 64); both scale copies (original + swizzled, rows
        # padded to 256, K/32 to 2); fp32 biases.
        (1, "triton", 10_798_202_880),
        (2, "triton", 5_527_732_224),
        (4, "triton", 2_883_649_536),
    ],
)
def test_mxfp4_storage_per_kernel(tp: int, backend: str, stored: int) -> None:
    arch = catalog_architecture("openai/gpt-oss-20b")
    i = 2880 // tp
    checkpoint = 24 * (32 * 3 * i * 2880 * 17 // 32 + 2 * 32 * (2 * i + 2880))
    assert mxfp4_extra_bytes(arch, tp, 24, backend) == stored - checkpoint


def test_mxfp4_backend_follows_the_gpu() -> None:
    assert default_backend(A100, "triton") == "marlin"
    assert default_backend(H100, "triton") == "triton"
    assert default_backend(H100, "marlin") == "marlin"
    b200 = GpuSpec("b200", "NVIDIA B200", 178 * GIB, (10, 0))
    assert default_backend(b200, "triton") == "flashinfer"


def test_gpt_oss_weights_grow_with_the_kernel_layout() -> None:
    def weights(version: str, gpu: GpuSpec) -> int:
        req = InferenceRequest(
            catalog_architecture("openai/gpt-oss-20b"),
            engine="vllm",
            engine_options={"version": version, "max_model_len": 8192},
            gpu_memory_bytes=gpu.total_bytes,
            gpu=gpu,
        )
        return setup_for(req).stages[0].weights

    arch = catalog_architecture("openai/gpt-oss-20b")
    marlin = mxfp4_extra_bytes(arch, 1, 24, "marlin")
    triton = mxfp4_extra_bytes(arch, 1, 24, "triton")
    assert weights("0.22", A100) - weights("0.22", H100) == marlin - triton


@pytest.mark.parametrize("version", ["0.11.0", "0.19"])
def test_gpt_oss_rotary_table_is_float32_until_an_eager_run_casts_it(version: str) -> None:
    """vLLM builds gpt-oss's YaRN table in float32 whatever the model dtype
    (models/gpt_oss.py: ``get_rope(..., dtype=torch.float32)``): original_max_position 4096 ×
    factor 32 = 131072 rows of head_dim 64 (the cos and sin halves), 4 B each, loaded with the
    weights. An eager profiling run's ``forward_cuda`` replaces it by a bf16 copy
    (``_match_cos_sin_cache_dtype``), so vLLM's measured peak falls by the 2 B per entry the
    cast frees and the pool sits where a bf16 table would put it; compiled, it stays."""
    fp32_table, freed = 131072 * 64 * 4, 131072 * 64 * 2

    def stage(eager: bool):  # type: ignore[no-untyped-def]
        req = InferenceRequest(
            catalog_architecture("openai/gpt-oss-20b"),
            engine="vllm",
            engine_options={"version": version, "max_model_len": 8192, "enforce_eager": eager},
            gpu_memory_bytes=H100.total_bytes,
            gpu=H100,
        )
        return req, setup_for(req).stages[0]

    (req, compiled), (eager_req, eager) = stage(False), stage(True)
    arch = catalog_architecture("openai/gpt-oss-20b")
    assert VllmEngine().placement(arch, {}, 2.0).extra_per_gpu == fp32_table
    assert any("0.031 GiB per GPU (float32" in n for n in estimate_inference(req).assumptions)
    assert compiled.weights == eager.weights
    assert compiled.fixed_activation - eager.fixed_activation == freed
    pools = [stage_figures(r)[0].kv_pool_bytes for r in (req, eager_req)]
    assert pools[1] - pools[0] == freed  # type: ignore[operator]
    assert fp32_table == 32 * MIB


def test_sampler_buffer_rows() -> None:
    # min(next_pow2(min(SM, R)), SM) with 132 multiprocessors.
    assert sampler_buffer_rows(1024) == 132
    assert sampler_buffer_rows(100) == 128
    assert sampler_buffer_rows(64) == 64


def test_encoder_items() -> None:
    # Gemma 3: 256 tokens per image, 8192-token budget, 1024 sequences, 8192 max_model_len,
    # vLLM's default limit 999: min(8192 // 256, 1024 × min(999, 32)) = 32 images.
    assert encoder_items(256, 8192, 1024, 8192, 999) == 32
    assert encoder_items(3080, 8192, 1024, 131072, 1) == 2


def test_capacity_differs_by_line_with_the_same_flags() -> None:
    def pool(version: str) -> int:
        req = InferenceRequest(
            catalog_architecture(LLAMA_8B),
            engine="vllm",
            sequence_length=8192,
            engine_options={"version": version, "max_model_len": 8192},
            gpu_memory_bytes=H100.total_bytes,
            gpu=H100,
        )
        cap = estimate_inference(req).capacity
        assert cap is not None
        return cap.kv_cache_pool_bytes

    pools = {line.name: pool(line.name) for line in LINES}
    # 0.22 charges ~1 GiB of graphs and gives 0.92 of the GPU instead of 0.9 (+1.58 GiB).
    assert pools["0.22"] - pools["0.19"] == pytest.approx(0.02 * H100.total_bytes, abs=1.5 * GIB)
    assert pools["0.34"] > pools["0.22"]  # the whole GPU, less the margins


def _sampler_setup(version: str, sampler: str, gpu: GpuSpec = A100):  # type: ignore[no-untyped-def]
    req = InferenceRequest(
        catalog_architecture(LLAMA_8B),
        engine="vllm",
        engine_options={"version": version, "max_model_len": 8192, "sampler": sampler},
        gpu_memory_bytes=gpu.total_bytes,
        gpu=gpu,
    )
    return setup_for(req)


def test_flashinfer_sampler_holds_no_sort() -> None:
    # 0.10.1 on an A100: 2048 tokens, 256 sampler rows (the small tier), Llama 3.1 8B's
    # vocabulary 128256 (a multiple of 64). The sampler moment dominates the forward on both
    # paths. Sort-based (topk_topp_sampler.forward_native): bf16 logits 2 + fp32 copy 4 +
    # sorted values 4 + int64 indices 8 + torch.sort's temporaries 20 = 38 B per logit.
    # FlashInfer (flashinfer_sample -> top_k_top_p_sampling_from_logits, top_k_first): bf16
    # logits 2 + fp32 copy 4 + top-k-masked logits 4 + softmax probabilities 4 = 14 B.
    logits = 256 * 128256
    native = _sampler_setup("0.10.1", "native").stages[-1].fixed_activation
    flashinfer = _sampler_setup("0.10.1", "flashinfer").stages[-1].fixed_activation
    assert native - flashinfer == logits * (38 - 14)
    assert flashinfer >= logits * 14


def test_v0_keeps_its_sampler_under_the_flashinfer_option() -> None:
    # V0 samples with FlashInfer only under VLLM_USE_FLASHINFER_SAMPLER=1, not modelled.
    a = _sampler_setup("0.6.4", "auto").stages[-1].fixed_activation
    b = _sampler_setup("0.6.4", "flashinfer").stages[-1].fixed_activation
    assert a == b


def test_triton_sampler_from_0_17_and_its_warm_up_from_0_21() -> None:
    # 0.10.1 on an A100: 2048 tokens, 256 sampler rows, vocabulary 128256. The sort-based
    # top-k/top-p costs 38 B per logit (bf16 logits included), Triton's (0.17 on:
    # apply_top_k_top_p_triton from 8 rows) 14 B plus its cached [min(next_pow2(min(SM, R)),
    # SM), V] fp32 buffer: 132 rows for an A100 spec that names no SMs.
    logits, buffer = 256 * 128256, 132 * 128256 * 4

    def moment(version: str, sampler: str = "auto") -> int:
        return int(_sampler_setup(version, sampler).stages[-1].fixed_activation)

    assert moment("0.16.0", "native") - moment("0.19") == logits * (38 - 14) - buffer
    # FlashInfer on request in 0.19 (VLLM_USE_FLASHINFER_SAMPLER=1): 14 B per logit, no buffer.
    assert moment("0.19") - moment("0.19", "flashinfer") == buffer
    # From 0.21 the dummy run also warms the native path, so FlashInfer never lowers the peak.
    assert moment("0.22", "flashinfer") == moment("0.22")


def test_0_8_5_flashinfer_samples_from_probabilities() -> None:
    # 0.8.5 on an A100 (no A100 exclusion yet): 8192 tokens, 1024 sampler rows, vocabulary
    # 128256; the sampler moment dominates the forward. FlashInfer below 0.2.3
    # (topk_topp_sampler.forward_cuda -> top_k_top_p_sampling_from_probs): bf16 logits 2 + fp32
    # copy 4 + softmax probabilities 4 = 10 B per logit, against the sort path's 38 B.
    logits = 1024 * 128256
    native = _sampler_setup("0.8.5", "native").stages[-1].fixed_activation
    flashinfer = _sampler_setup("0.8.5", "flashinfer").stages[-1].fixed_activation
    assert native - flashinfer == logits * (38 - 10)


def test_0_9_1_flashinfer_samples_from_logits_on_256_rows_of_an_a100() -> None:
    # 0.9.1: the A100 takes 2048 tokens and 256 sequences; FlashInfer 0.2.3+ is called through
    # top_k_top_p_sampling_from_logits, as in 0.10.1: 14 B per logit against 38.
    logits = 256 * 128256
    native = _sampler_setup("0.9.1", "native").stages[-1].fixed_activation
    flashinfer = _sampler_setup("0.9.1", "flashinfer").stages[-1].fixed_activation
    assert native - flashinfer == logits * (38 - 14)


def test_auto_sampler_follows_the_official_image() -> None:
    # 0.8 - 0.10's V1 sampler takes FlashInfer whenever flashinfer imports
    # (topk_topp_sampler.TopKTopPSampler.__init__: VLLM_USE_FLASHINFER_SAMPLER unset is "on" in
    # V1), and the vllm/vllm-openai image of those releases ships it (vllm-project/vllm#6172,
    # #21768): `auto` is FlashInfer there, and the answer says so; 0.11.0's __init__ still reads
    # "VLLM_USE_FLASHINFER_SAMPLER is not False". From 0.11.1 FlashInfer is opt-in
    # (`if envs.VLLM_USE_FLASHINFER_SAMPLER:`): `auto` is the line's own sampler.
    for version in ("0.8.5", "0.9.1", "0.10.1", "0.11.0"):
        auto = _sampler_setup(version, "auto")
        assert auto.stages[-1].fixed_activation == (
            _sampler_setup(version, "flashinfer").stages[-1].fixed_activation
        )
        assert any("official image" in n for n in auto.assumptions), version
    for version in ("0.6.4", "0.11.1", "0.11.2", "0.16.0"):
        auto = _sampler_setup(version, "auto")
        assert auto.stages[-1].fixed_activation == (
            _sampler_setup(version, "native").stages[-1].fixed_activation
        )
        assert not any("official image" in n for n in auto.assumptions), version


def test_auto_sampler_is_native_on_rocm() -> None:
    # current_platform.is_cuda() is False on ROCm: the V1 sampler never takes FlashInfer.
    mi300x = GpuSpec("mi300x", "AMD Instinct MI300X", 192 * GIB, vendor="amd")
    auto = _sampler_setup("0.10.1", "auto", mi300x).stages[-1].fixed_activation
    assert auto == _sampler_setup("0.10.1", "native", mi300x).stages[-1].fixed_activation
    assert auto > _sampler_setup("0.10.1", "flashinfer").stages[-1].fixed_activation


def _v0_forward(model: str, max_model_len: int) -> int:
    req = InferenceRequest(
        catalog_architecture(model),
        engine="vllm",
        engine_options={"version": "0.6.4", "max_model_len": max_model_len},
        gpu_memory_bytes=A100.total_bytes,
        gpu=A100,
    )
    return int(setup_for(req).stages[-1].fixed_activation)


def test_v0_llama_mlp_frees_gate_up_before_down_proj() -> None:
    # 0.6.4, no chunked prefill at 20000 tokens: one 20000-token batch. models/llama.py's
    # LlamaMLP.forward rebinds x, so the gate/up output (2I) is gone by down_proj: the peak is
    # at act_fn, 3 hidden rows (embedding-level input, residual, MLP input) + gate/up 2I + its
    # activation I. Llama 3.1 8B: h 4096, I 14336, bf16: 20000 * (3*4096 + 3*14336) * 2 bytes,
    # above the sampler's 256 * 128256 * 38 + 256 * 4096 * 2.
    assert _v0_forward(LLAMA_8B, 20000) == 20000 * (3 * 4096 + 3 * 14336) * 2


def test_v0_qwen2_mlp_keeps_gate_up_through_down_proj() -> None:
    # models/qwen2.py names the gate/up output (gate_up, _ = ...), alive until the MLP returns:
    # 4 hidden rows + 3I. Qwen2-7B: h 3584, I 18944, bf16, one 20000-token batch.
    assert _v0_forward("Qwen/Qwen2-7B-Instruct", 20000) == 20000 * (4 * 3584 + 3 * 18944) * 2


def _profile(version: str, model: str, tokens: int, seqs: int, mm_limit: int | None):  # type: ignore[no-untyped-def]
    from service.estimator.engines.vllm_profile import profile_peak
    from service.estimator.forward import forward_coefficients

    arch = catalog_architecture(model)
    line, _ = line_for(version)
    c = forward_coefficients(arch, 2, 1, fused_moe=True, eager=False)
    run = profile_peak(
        arch,
        c,
        line,
        tp=1,
        tokens=tokens,
        max_num_seqs=seqs,
        max_model_len=8192,
        is_last=True,
        weight_kind="bf16",
        gpu=A100,
        mm_limit=mm_limit,
        sampler_kind="native",
    )
    return arch, run


def test_v0_multimodal_profile_fills_budget_over_image_tokens_sequences() -> None:
    # vLLM V0 (worker/model_runner.py: profile_run, v0.6.5 / v0.8.5's V0): max_num_seqs =
    # min(256, T // max_mm_tokens) with max_mm_tokens = limit (V0 default 1) x 256 tokens per
    # Gemma 3 image: 8192 // 256 = 32 sequences of one 896 px image each; the sampler runs on
    # those 32 rows. Pixels (fp32, 3 x 896 x 896) held; encoder outputs (256 x 2560 x bf16 for
    # gemma-3-4b) through the forward.
    arch, run = _profile("0.7.3", "google/gemma-3-4b-it", 8192, 256, None)
    _, text_only = _profile("0.7.3", "google/gemma-3-4b-it", 8192, 256, 0)
    assert arch.vision is not None and arch.vision.tokens_per_image == 256
    assert run.rows == 32 and text_only.rows == 256
    assert run.held - text_only.held == 32 * 3 * 896 * 896 * 4
    assert run.forward - text_only.forward == 32 * 256 * 2560 * 2
    # Two images per prompt: 8192 // 512 = 16 sequences, 32 images.
    _, two = _profile("0.7.3", "google/gemma-3-4b-it", 8192, 256, 2)
    assert two.rows == 16 and two.held - text_only.held == 32 * 3 * 896 * 896 * 4


def test_v0_default_batch_tokens() -> None:
    # EngineArgs (v0.7.3 create_engine_config; v0.8.5 _set_default_args_v0) and SchedulerConfig:
    # chunked prefill (2048 tokens) above 32768 on CUDA only for models without a multimodal
    # tower or a sliding window; else max(max_model_len, 2048), at least 5120 for a multimodal
    # model. 0.6.4 (512 chunked tokens) also chunks on ROCm.
    from service.estimator.engines.vllm_versions import v0_batch_tokens

    v065, v064 = line_for("0.6.5")[0], line_for("0.6.4")[0]
    plain = {"multimodal": False, "sliding_window": False, "mla": False, "rocm": False}
    assert v0_batch_tokens(v065, 65536, **plain) == 2048
    assert v0_batch_tokens(v064, 65536, **plain) == 512
    assert v0_batch_tokens(v065, 32768, **plain) == 32768
    assert v0_batch_tokens(v065, 1024, **plain) == 2048
    assert v0_batch_tokens(v065, 65536, **(plain | {"rocm": True})) == 65536
    assert v0_batch_tokens(v064, 65536, **(plain | {"rocm": True})) == 512
    assert v0_batch_tokens(v065, 65536, **(plain | {"sliding_window": True})) == 65536
    assert v0_batch_tokens(v065, 65536, **(plain | {"mla": True})) == 65536
    assert v0_batch_tokens(v065, 4096, **(plain | {"multimodal": True})) == 5120
    assert v0_batch_tokens(v065, 65536, **(plain | {"multimodal": True})) == 65536


def test_0_11_0_batch_and_moe_follow_its_own_code() -> None:
    # vLLM 0.11.0 (engine/arg_utils.py: _set_default_args) takes the tier's 2048 tokens under
    # `vllm serve` below 70 GiB whatever max_num_seqs × max_model_len is; 0.11.1 caps it there
    # (max_num_batched_tokens = min(max_num_seqs * max_model_len, ...)). With 4 sequences of
    # 256 tokens: 2048 against 1024 tokens.
    def profiled_tokens(version: str) -> int:
        req = InferenceRequest(
            catalog_architecture(LLAMA_8B),
            engine="vllm",
            sequence_length=256,
            engine_options={"version": version, "max_model_len": 256, "max_num_seqs": 4},
            gpu_memory_bytes=A100.total_bytes,
            gpu=A100,
        )
        notes = [n for n in estimate_inference(req).assumptions if "profiling run at" in n]
        assert len(notes) == 1
        return int(notes[0].split("max_num_batched_tokens=")[1].split(",")[0])

    assert profiled_tokens("0.11.0") == 2048
    assert profiled_tokens("0.11.1") == 4 * 256
    # 0.11.0 pins torch 2.8.0, where fused_experts still writes in place (no disable_inplace,
    # which 0.11.1 adds for torch >= 2.9): the 0.10 layout, not 0.11.1's extra output.
    assert line_for("0.11.0")[0].moe == line_for("0.10.1")[0].moe == "shared"
    assert line_for("0.11.1")[0].moe == "shared+out"
