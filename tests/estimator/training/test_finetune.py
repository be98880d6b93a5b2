"""The detailed fine-tuning estimator: invariants, validation errors, fit, speed."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.estimator.errors import InvalidRequest
from service.estimator.gpu import GpuSpec
from service.estimator.model import read_config
from service.estimator.training import (
    FinetuneRequest,
    LoraSpec,
    estimate_finetune,
    fit_finetune,
)

LLAMA_8B = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
ARCH = read_config(LLAMA_8B)
N = 8_030_261_248  # Llama-3.1-8B parameters (model card / safetensors)
KEYS = {"weights", "gradients", "optimizer_states", "activations", "overhead"}


def test_shape_of_the_estimate():
    e = estimate_finetune(FinetuneRequest(ARCH))
    assert e.kind == "finetune" and e.estimator == "detailed"
    assert set(e.per_gpu) == KEYS and set(e.total) == KEYS
    assert e.details["trainable_parameters"] == N
    assert e.details["peak_phase"] in ("forward", "backward", "backward_end", "optimizer_step")


def test_full_mixed_adamw_states_are_16_bytes_per_parameter():
    # fp32 weights (4) + fp32 Adam states (8): 12 bytes per parameter resident at every phase.
    e = estimate_finetune(FinetuneRequest(ARCH, sequence_length=128))
    assert e.per_gpu["weights"] == 4 * N
    assert e.per_gpu["optimizer_states"] >= 8 * N


def test_qlora_is_smaller_than_lora_and_lora_than_full():
    full = estimate_finetune(FinetuneRequest(ARCH, precision="bf16")).per_gpu_bytes
    lora = estimate_finetune(FinetuneRequest(ARCH, method="lora", precision="bf16"))
    qlora = estimate_finetune(
        FinetuneRequest(ARCH, method="qlora", precision="bf16", kbit_preparation="none")
    )
    assert qlora.per_gpu_bytes < lora.per_gpu_bytes < full
    # nf4 with double quantization: about 0.52 bytes per linear weight
    assert qlora.per_gpu["weights"] < 0.4 * lora.per_gpu["weights"]


def test_kbit_preparation_holds_the_unquantized_tensors_in_fp32():
    # peft's prepare_model_for_kbit_training casts embeddings, lm_head and norms to fp32:
    # 2 more bytes for each of 2 · 128256 · 4096 + (2 · 32 + 1) · 4096 elements (Llama-3.1-8B).
    kw = dict(method="qlora", precision="bf16")
    prepared = estimate_finetune(FinetuneRequest(ARCH, **kw))
    plain = estimate_finetune(FinetuneRequest(ARCH, kbit_preparation="none", **kw))
    assert prepared.per_gpu["weights"] - plain.per_gpu["weights"] == 2 * (
        2 * 128256 * 4096 + 65 * 4096
    )
    assert any("prepare_model_for_kbit_training" in a for a in prepared.assumptions)


def test_kbit_preparation_fp32_residual_stream_under_checkpointing():
    # Checkpointed layers keep their fp32 input: 2 more bytes per hidden unit, token and layer
    # (the recomputed layer and the loss path change too, but not with the layer count).
    def slope(prep: str, layers: int) -> float:
        arch = read_config({**LLAMA_8B, "num_hidden_layers": layers})
        base = FinetuneRequest(
            arch,
            method="qlora",
            precision="bf16",
            gradient_checkpointing="full",
            kbit_preparation=prep,
        )
        a = estimate_finetune(base.__class__(**{**base.__dict__, "sequence_length": 8192}))
        b = estimate_finetune(base.__class__(**{**base.__dict__, "sequence_length": 16384}))
        x = a.details["allocated_peak_bytes"]
        y = b.details["allocated_peak_bytes"]
        assert isinstance(x, int) and isinstance(y, int)
        return (y - x) / 8192

    per_layer_prepared = slope("peft", 33) - slope("peft", 32)
    per_layer_plain = slope("none", 33) - slope("none", 32)
    assert per_layer_plain == pytest.approx(2 * 4096)
    assert per_layer_prepared == pytest.approx(4 * 4096)


def test_kbit_preparation_applies_to_qlora_only():
    with pytest.raises(InvalidRequest) as exc:
        estimate_finetune(FinetuneRequest(ARCH, method="lora", kbit_preparation="peft"))
    assert exc.value.field == "kbit_preparation"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"method": "lora", "lora": LoraSpec(rank=0)}, "lora.rank"),
        ({"method": "lora", "lora": LoraSpec(rank=8192)}, "lora.rank"),
        ({"method": "lora", "lora": LoraSpec(target_modules=("c_attn",))}, "lora.target_modules"),
        ({"zero_stage": 2}, "zero_stage"),
        ({"method": "qlora", "weight_format": "fp8"}, "weight_format"),
        ({"method": "freeze", "trainable_layers": 0}, "trainable_layers"),
        ({"method": "freeze", "trainable_layers": 33}, "trainable_layers"),
        ({"optimizer": "adagrad"}, "optimizer"),
        ({"gpu_count": 3, "tensor_parallel_size": 2}, "gpu_count"),
    ],
)
def test_bad_input_names_the_field(kw, field):
    with pytest.raises(InvalidRequest) as e:
        estimate_finetune(FinetuneRequest(ARCH, **kw))
    assert e.value.field == field


def test_sharding_never_raises_per_gpu():
    base = estimate_finetune(FinetuneRequest(ARCH, gpu_count=8)).per_gpu_bytes
    prev = base
    for stage in (1, 2, 3):
        cur = estimate_finetune(FinetuneRequest(ARCH, gpu_count=8, zero_stage=stage)).per_gpu_bytes
        assert cur <= prev
        prev = cur


def test_offload_reports_cpu_bytes():
    e = estimate_finetune(
        FinetuneRequest(
            ARCH, gpu_count=4, zero_stage=3, offload_optimizer=True, offload_parameters=True
        )
    )
    assert e.cpu_bytes > 12 * N  # fp32 master + two states at least
    assert e.per_gpu["optimizer_states"] == 0


def test_checkpointing_saves_memory():
    a = estimate_finetune(FinetuneRequest(ARCH, sequence_length=8192)).per_gpu["activations"]
    b = estimate_finetune(
        FinetuneRequest(ARCH, sequence_length=8192, gradient_checkpointing="full")
    ).per_gpu["activations"]
    assert b < a / 2


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 8),
    s=st.integers(1, 16384),
    method=st.sampled_from(("full", "lora", "qlora")),
)
def test_more_tokens_never_needs_less(b, s, method):
    r1 = FinetuneRequest(ARCH, method=method, batch_size=b, sequence_length=s)
    r2 = FinetuneRequest(ARCH, method=method, batch_size=b, sequence_length=s + 512)
    r3 = FinetuneRequest(ARCH, method=method, batch_size=b + 1, sequence_length=s)
    e1 = estimate_finetune(r1).per_gpu_bytes
    assert estimate_finetune(r2).per_gpu_bytes >= e1
    assert estimate_finetune(r3).per_gpu_bytes >= e1


def test_fit_and_inverse_answers_are_consistent():
    usable = 80 * 10**9
    req = FinetuneRequest(ARCH, method="lora", precision="bf16")
    fit = fit_finetune(req, GpuSpec("h100", "H100", usable))
    assert fit.fits and fit.headroom_bytes == usable - fit.required_bytes
    assert fit.max_batch_size and fit.max_sequence_length
    over = FinetuneRequest(ARCH, method="lora", precision="bf16", batch_size=fit.max_batch_size + 1)
    assert estimate_finetune(over).per_gpu_bytes > usable
    at = FinetuneRequest(ARCH, method="lora", precision="bf16", batch_size=fit.max_batch_size)
    assert estimate_finetune(at).per_gpu_bytes <= usable


def test_min_gpu_count_with_zero3():
    usable = 24 * 10**9
    fit = fit_finetune(
        FinetuneRequest(ARCH, gpu_count=2, zero_stage=3), GpuSpec("l4", "L4", usable)
    )
    # fp32 master copy and Adam states alone are 12 bytes per parameter, sharded over the
    # data-parallel GPUs: 8.03e9 × 12 / 2 = 48 GB per GPU at two, so more than two are needed.
    assert fit.min_gpu_count is not None and fit.min_gpu_count > 2
    at = FinetuneRequest(ARCH, gpu_count=fit.min_gpu_count, zero_stage=3)
    assert estimate_finetune(at).per_gpu_bytes <= usable
    fewer = FinetuneRequest(ARCH, gpu_count=fit.min_gpu_count - 1, zero_stage=3)
    assert estimate_finetune(fewer).per_gpu_bytes > usable


def test_qlora_dequantized_weight_transient():
    # bitsandbytes dequantizes one base weight to bf16 per matmul; the largest linear of
    # Llama-3.1-8B is a 14336 × 4096 MLP projection: 2 · 14336 · 4096 bytes on top of the
    # activations, absent from the same run with a bf16 base.
    kw = dict(precision="bf16", sequence_length=64, optimizer_foreach=False)
    e = estimate_finetune(FinetuneRequest(ARCH, method="qlora", kbit_preparation="none", **kw))
    assert e.details["peak_phase"] in ("forward", "backward")
    dense = estimate_finetune(FinetuneRequest(ARCH, method="lora", **kw))
    diff = e.per_gpu["activations"] - dense.per_gpu["activations"]
    assert diff == 2 * 14336 * 4096


def test_old_bitsandbytes_inputs_only_for_quantized_bases():
    kw = dict(precision="bf16", sequence_length=1024)
    lora = FinetuneRequest(ARCH, method="lora", **kw)
    assert (
        estimate_finetune(lora).per_gpu
        == estimate_finetune(
            FinetuneRequest(ARCH, method="lora", quantized_base_saves_inputs=True, **kw)
        ).per_gpu
    )
    kw["kbit_preparation"] = "none"
    q_new = estimate_finetune(FinetuneRequest(ARCH, method="qlora", **kw))
    q_old = estimate_finetune(
        FinetuneRequest(ARCH, method="qlora", quantized_base_saves_inputs=True, **kw)
    )
    # 32 layers × 1024 tokens × 2·(2h + I) bytes (q/k/v + gate/up inputs, down_proj input)
    expected = 32 * 1024 * 2 * (2 * 4096 + 14336)
    assert q_old.details["allocated_peak_bytes"] - q_new.details[
        "allocated_peak_bytes"
    ] == pytest.approx(expected, rel=1e-6)


def test_old_bitsandbytes_inputs_survive_checkpointing():
    # bitsandbytes < 0.43.2 holds each 4-bit matmul's input as an attribute of its autograd
    # context, which non-reentrant checkpointing does not free. Under full checkpointing each
    # Llama-3.1-8B layer then keeps, besides its input, the attention-norm output read by
    # q/k/v (4096), the attention output read by o_proj (32 heads × 128), the MLP-norm output
    # read by gate/up (4096) and the product read by down_proj (14336), 2 bytes each per token.
    kw = dict(
        precision="bf16",
        sequence_length=1024,
        gradient_checkpointing="full",
        kbit_preparation="none",
    )
    q_new = estimate_finetune(FinetuneRequest(ARCH, method="qlora", **kw))
    q_old = estimate_finetune(
        FinetuneRequest(ARCH, method="qlora", quantized_base_saves_inputs=True, **kw)
    )
    expected = 32 * 1024 * 2 * (4096 + 32 * 128 + 4096 + 14336)
    assert q_old.details["allocated_peak_bytes"] - q_new.details[
        "allocated_peak_bytes"
    ] == pytest.approx(expected, rel=1e-6)
    assert any("0.43.2" in a for a in q_old.assumptions)
    assert not any("0.43.2" in a for a in q_new.assumptions)


def test_old_bitsandbytes_inputs_on_a_prepared_base_are_one_copy_per_linear():
    # After peft's preparation the norm outputs are fp32, and each 4-bit linear's
    # ``x.to(bfloat16)`` makes its own copy, which old bitsandbytes keeps: q, k, v and gate,
    # up each keep one (5 · 4096), o_proj the attention output (32 · 128), down_proj the
    # product (14336), 2 bytes each per token and layer under full checkpointing.
    kw = dict(precision="bf16", sequence_length=1024, gradient_checkpointing="full")
    q_new = estimate_finetune(FinetuneRequest(ARCH, method="qlora", **kw))
    q_old = estimate_finetune(
        FinetuneRequest(ARCH, method="qlora", quantized_base_saves_inputs=True, **kw)
    )
    expected = 32 * 1024 * 2 * (5 * 4096 + 32 * 128 + 14336)
    assert q_old.details["allocated_peak_bytes"] - q_new.details[
        "allocated_peak_bytes"
    ] == pytest.approx(expected, rel=1e-6)


def test_freeze_defaults_to_the_last_two_layers():
    default = estimate_finetune(FinetuneRequest(ARCH, method="freeze"))
    two = estimate_finetune(FinetuneRequest(ARCH, method="freeze", trainable_layers=2))
    assert default.per_gpu == two.per_gpu
    # Two Llama-3.1-8B layers: 2 × (4096² × 2 + 4096 × 1024 × 2 + 3 × 4096 × 14336 + 2 × 4096)
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert default.details["trainable_parameters"] == 2 * layer
    assert any("last 2 decoder layers" in a for a in default.assumptions)


def test_a_job_across_mig_slices_cannot_run():
    # NCCL does not span MIG instances: data parallelism over slices is no layout.
    slice_ = GpuSpec("h100/3g.40gb", "H100 MIG 3g.40gb", 40 * 2**30, mig_profile="3g.40gb")
    fit = fit_finetune(FinetuneRequest(ARCH, method="qlora", gpu_count=2), slice_)
    assert not fit.fits and fit.reason == "mig_cannot_span"
    one = fit_finetune(FinetuneRequest(ARCH, method="qlora"), slice_)
    assert one.fits and one.min_gpu_count == 1
