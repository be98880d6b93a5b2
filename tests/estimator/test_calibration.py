"""The calibration register, and each calibrated or sourced term where the estimate uses it.

The first test pins the register's values, so that changing one is a decision (it fails until
the register, this test and docs/accuracy.md change together). The others each check one term
in the figure it enters, with the expected bytes written out by hand from the term's meaning:
each fails when its term changes (the mutation list of issue 13).
"""

from __future__ import annotations

import dataclasses

from service.estimator import calibration
from service.estimator.engines.overhead import (
    cuda_context_bytes,
    driver_reservation_note,
    library_workspace_bytes,
)
from service.estimator.gpu import GpuSpec
from service.estimator.inference import InferenceRequest, estimate_inference, stage_figures
from service.estimator.inference.request import setup_for
from service.estimator.model import read_config
from service.estimator.training import FinetuneRequest, estimate_finetune
from service.estimator.training.activations import activation_coefficients
from tests.estimator.conftest import (
    LLAMA_8B,
    catalog_architecture,
    catalog_config,
    full_bf16_activation_setup,
)

MIB = 2**20
GIB = 2**30
LLAMA = catalog_architecture(LLAMA_8B)
H, FF, V, L = 4096, 14336, 128256, 32  # Llama-3.1-8B: hidden, MLP width, vocabulary, layers


def test_register_values_are_pinned() -> None:
    pinned = {
        "cuda.context_bytes_per_resident_thread": 2060,
        "cuda.library_workspace_bytes_per_resident_thread": 993,
        "nccl.tp_group_bytes": 1832 * MIB,
        "nccl.tp_peer_bytes": 40 * MIB,
        "nccl.pp_peer_bytes": 64 * MIB,
        "vllm.cuda_graph_base_bytes": 384 * MIB,
        "vllm.cuda_graph_per_layer_bytes": 17 * MIB,
        "transformers.sampling_bytes_per_logit": 16,
        "training.fragmentation_fraction": 0.05,
        "training.backward_work_intermediate": 3,
        "training.backward_work_hidden": 4,
        "perf.vllm.hopper.memory_efficiency": 0.753,
        "perf.vllm.hopper.compute_efficiency": 0.698,
        "perf.vllm.step_overhead_s": 0.00144,
        "perf.vllm.request_overhead_s": 0.0236,
        "perf.vllm.sequence_overhead_s": 8.4e-05,
        "perf.band.memory_efficiency_low": 0.4,
        "perf.band.memory_efficiency_high": 0.95,
        "perf.band.compute_efficiency_low": 0.25,
        "perf.band.compute_efficiency_high": 0.8,
        "perf.band.overhead_factor_low": 0.5,
        "perf.band.overhead_factor_high": 2.0,
    }
    assert {n: e.value for n, e in calibration.REGISTER.items()} == pinned
    for entry in calibration.REGISTER.values():
        assert entry.mechanism and entry.source and entry.unit


def test_override_is_scoped_and_checked() -> None:
    with calibration.overridden(nccl__pp_peer_bytes=1.0):
        assert calibration.value("nccl.pp_peer_bytes") == 1.0
    assert calibration.value("nccl.pp_peer_bytes") == 64 * MIB
    try:
        with calibration.overridden(no__such_entry=1.0):
            raise AssertionError("an unknown entry must be refused")
    except KeyError:
        pass


def test_transformers_decode_sampling_term() -> None:
    # Prompt of 1 token, 2 in all: decoding sets the peak. The decoded position holds its
    # bf16 logits and their fp32 copy (V × 6 B), the sampling work on the fp32 scores
    # (V × 16 B) and one token's layer transient (2 B × (4h + 3I)); DynamicCache's torch.cat
    # copies one layer's K (the 2-token cache of one layer, K only).
    req = InferenceRequest(
        architecture=LLAMA, engine="transformers", sequence_length=2, prompt_tokens=1
    )
    e = estimate_inference(req)
    kv_token = 2 * 8 * 128 * 2  # K and V, 8 KV heads of 128, bf16, per layer
    cat = 2 * kv_token * L // (2 * L)
    decode_extra = V * (2 + 4) + V * 16 + 2 * (4 * H + 3 * FF)
    assert e.per_gpu["activations"] == cat + decode_extra


def test_training_layernorm_keeps_its_input_and_row_statistics() -> None:
    # Full fine-tuning in bf16 (no autocast): an RMSNorm whose weight trains keeps its fp32
    # copy and its normalized output (4 + 2 B per element); a LayerNorm keeps its input and an
    # fp32 mean and rstd per row (2 B per element + 8 B). Two such norms per Llama layer.
    def layer_lin(norm: str) -> float:
        arch = dataclasses.replace(LLAMA, norm=norm)
        setup = full_bf16_activation_setup(arch, attention="flash")
        return activation_coefficients(setup).layer_lin[5]

    assert layer_lin("rmsnorm") - layer_lin("layernorm") == 2 * ((4 + 2) * H - (2 * H + 8))


def test_backward_work_of_a_layer() -> None:
    # Without checkpointing, a layer's backward working set is the gradients of the gated
    # MLP's three FF-wide intermediates and four hidden-width rows, in bf16.
    setup = full_bf16_activation_setup(LLAMA, attention="flash")
    assert activation_coefficients(setup).recompute_lin == 3 * FF * 2 + 4 * H * 2


def test_pipeline_p2p_buffers() -> None:
    one = estimate_inference(InferenceRequest(architecture=LLAMA)).per_gpu["overhead"]
    two = estimate_inference(
        InferenceRequest(architecture=LLAMA, pipeline_parallel_size=2)
    ).per_gpu["overhead"]
    assert two - one == 64 * MIB  # one send/recv peer each way


def test_vllm_graph_pool_and_context_outside_the_budget() -> None:
    # Up to the 0.19 line the graphs are captured after the KV cache is sized.
    v019 = {"version": "0.19"}
    req = InferenceRequest(
        architecture=LLAMA, engine="vllm", gpu_memory_bytes=80 * GIB, engine_options=v019
    )
    outside = setup_for(req).outside_budget
    assert outside.cuda_graphs == 384 * MIB + 17 * MIB * L
    # No GPU named: the context of the reference GPU, an H100 SXM (132 SMs × 2048 threads).
    assert outside.cuda_context == 132 * 2048 * 2060
    # An RTX 3090: 82 SMs × 1536 resident threads each (compute capability 8.6).
    rtx3090 = GpuSpec("rtx-3090", "RTX 3090", 24 * GIB, (8, 6), vendor="nvidia", multiprocessors=82)
    on_3090 = dataclasses.replace(req, gpu=rtx3090, gpu_memory_bytes=rtx3090.total_bytes)
    assert setup_for(on_3090).outside_budget.cuda_context == 82 * 1536 * 2060
    eager = dataclasses.replace(req, engine_options={**v019, "enforce_eager": True})
    assert setup_for(eager).outside_budget.cuda_graphs == 0


def test_context_and_first_forward_growth_follow_the_resident_threads() -> None:
    # 2060 B (context) and 993 B (first forward's growth) per resident thread: an L4 holds
    # 58 SMs × 1536 threads, an H100 SXM 132 × 2048. A GPU whose SMs are unknown (a MIG
    # slice, AMD) is priced as the reference H100 SXM.
    l4 = GpuSpec("l4", "L4", 22 * GIB, (8, 9), vendor="nvidia", multiprocessors=58)
    h100 = GpuSpec("h100", "H100", 79 * GIB, (9, 0), vendor="nvidia", multiprocessors=132)
    mig = GpuSpec("h100/1g.10gb", "H100 1g", 10 * GIB, (9, 0), vendor="nvidia", mig_profile="1g")
    amd = GpuSpec("mi300x", "MI300X", 192 * GIB, vendor="amd", multiprocessors=None)
    assert cuda_context_bytes(l4) == 58 * 1536 * 2060
    assert library_workspace_bytes(l4) == 58 * 1536 * 993
    assert cuda_context_bytes(h100) == cuda_context_bytes(mig) == cuda_context_bytes(amd)
    assert cuda_context_bytes(h100) == cuda_context_bytes(None) == 132 * 2048 * 2060
    assert library_workspace_bytes(None) == 132 * 2048 * 993
    # The answer's assumption names the threads it priced: the GPU's, or the reference's.
    assert "89,088 resident threads (58 multiprocessors)" in driver_reservation_note(l4)
    assert "H100 SXM's 270,336 resident threads" in driver_reservation_note(mig)
    assert "H100 SXM's 270,336 resident threads" in driver_reservation_note(None)
    # The growth term was fitted on H100 SXM rows only: an answer on another GPU says it is
    # applied there uncalibrated; one on a GPU of the H100's threads does not.
    assert "uncalibrated" in driver_reservation_note(l4)
    assert "uncalibrated" not in driver_reservation_note(h100)


def test_triton_sampler_buffer_takes_the_gpus_multiprocessors() -> None:
    # v0.22's Triton top-k/top-p (its sampler below compute capability 7.5) keeps a
    # [min(next_pow2(min(SM, R)), SM), V] fp32 buffer: 80 rows on a V100 (80 SMs), 132 on an
    # unnamed GPU (132 assumed) for R = 256 sequences.
    def activations(gpu: GpuSpec) -> int:
        req = InferenceRequest(
            architecture=LLAMA,
            engine="vllm",
            engine_options={"version": "0.22.0", "sampler": "auto", "max_num_seqs": 256},
            gpu=gpu,
            gpu_memory_bytes=gpu.total_bytes,
        )
        return stage_figures(req)[0].activations

    v100 = GpuSpec("v100", "V100", 31 * GIB, (7, 0), vendor="nvidia", multiprocessors=80)
    unnamed = dataclasses.replace(v100, multiprocessors=None)
    assert activations(unnamed) - activations(v100) == (132 - 80) * V * 4


def test_gemma3_two_rope_tables_under_vllm() -> None:
    # Gemma 3 precomputes its global rope over max_position × factor rows and its local rope
    # over max_position rows, head_dim wide, in bf16, on every GPU.
    cfg = catalog_config("google/gemma-3-27b-it")
    text = cfg["text_config"]
    positions = text["max_position_embeddings"]
    factor = (text.get("rope_scaling") or {}).get("factor", 1.0)
    head_dim = text["head_dim"]
    with_rope = stage_figures(InferenceRequest(architecture=read_config(cfg), engine="vllm"))[
        0
    ].weights
    no_rope = dataclasses.replace(read_config(cfg), max_position_embeddings=None)
    without = stage_figures(InferenceRequest(architecture=no_rope, engine="vllm"))[0].weights
    assert with_rope - without == int(positions * factor + positions) * head_dim * 2


def test_exllama_scratch_for_gptq_4bit() -> None:
    # exllama v2 reserves the largest quantized layer dequantized to fp16 (4096 × 14336 × 2)
    # and its fp32 output for 2048 input tokens (14336 × 2048 × 4), plus 256 bytes.
    req = InferenceRequest(
        architecture=LLAMA, engine="transformers", weight_format="gptq-int4", sequence_length=8
    )
    assert stage_figures(req)[0].activations == H * FF * 2 + FF * 2048 * 4 + 256
    int8 = dataclasses.replace(req, weight_format="gptq-int8")
    assert stage_figures(int8)[0].activations == 0


def test_data_parallel_nccl_pricing() -> None:
    # A data-parallel group gets a communicator priced like a TP group of min(dp, 8) peers
    # (ring buffers per channel, not per peer beyond a node's 8 NVLink peers).
    def fixed_overhead(gpus: int) -> int:
        e = estimate_finetune(
            FinetuneRequest(architecture=LLAMA, gpu_count=gpus, zero_stage=3, sequence_length=256)
        )
        alloc = int(e.details["allocated_peak_bytes"])  # type: ignore[arg-type]
        return e.per_gpu["overhead"] - int(alloc * 0.05)

    base = 132 * 2048 * 2060 + 132 * 2048 * 993  # context and workspace, no GPU named
    assert fixed_overhead(4) == base + 1832 * MIB + 40 * MIB * 3
    assert fixed_overhead(16) == base + 1832 * MIB + 40 * MIB * 7


def test_vllm_profiling_peak_is_the_sampler_run() -> None:
    # On an H100-sized GPU vLLM 0.19 profiles 8192 tokens and samples min(1024, 8192) rows:
    # bf16 logits plus Triton top-k/top-p's 12 B per logit (fp32 copy, probabilities, the
    # exponential draw) and its cached [132, V] fp32 buffer (no SMs named: 132), while the
    # 8192-row hidden states and two 1024-row copies stay alive. That exceeds the forward's
    # 8192 × 2 × (4h + 3I) bytes.
    req = InferenceRequest(
        architecture=LLAMA,
        engine="vllm",
        gpu_memory_bytes=80 * GIB,
        engine_options={"version": "0.19"},
    )
    sampler = 1024 * V * (2 + 12) + 132 * V * 4 + 8192 * H * 2 + 2 * 1024 * H * 2
    assert sampler > 8192 * 2 * (4 * H + 3 * FF)
    assert stage_figures(req)[0].activations == int(sampler)
