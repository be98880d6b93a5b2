"""Quantization configs as real checkpoints carry them, every documented variant.

Each method's variants (from the quantizers' own documentation and configs: AutoGPTQ /
GPTQModel, AutoAWQ, bitsandbytes' BitsAndBytesConfig, fp8 with and without weight blocks,
OCP mxfp4, compressed-tensors' strategies) must be read and priced, or refused with a
problem naming the field; never an exception of another kind.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.estimator.errors import InvalidConfig, InvalidRequest
from service.estimator.formats import format_from_quantization, linear_weight_bytes
from service.estimator.model import read_config
from service.estimator.model.quantization import parse_quantization
from service.estimator.weights import weight_layout
from tests.estimator.conftest import LLAMA_8B, catalog_config

GROUP = st.sampled_from([-1, 32, 64, 128, 256, None])

GPTQ = st.fixed_dictionaries(
    {"quant_method": st.just("gptq"), "bits": st.sampled_from([2, 3, 4, 8])},
    optional={
        "group_size": GROUP,
        "sym": st.booleans(),
        "desc_act": st.booleans(),
        "checkpoint_format": st.sampled_from(["gptq", "gptq_v2"]),
        "lm_head": st.booleans(),
    },
)
AWQ = st.fixed_dictionaries(
    {"quant_method": st.just("awq")},
    optional={
        "bits": st.just(4),
        "group_size": GROUP,
        "zero_point": st.booleans(),
        "version": st.sampled_from(["gemm", "gemv", "gemv_fast"]),
        "modules_to_not_convert": st.sampled_from([None, ["visual"], ["lm_head"]]),
    },
)
BNB = st.one_of(
    st.fixed_dictionaries(
        {"quant_method": st.just("bitsandbytes"), "load_in_4bit": st.just(True)},
        optional={
            "bnb_4bit_quant_type": st.sampled_from(["nf4", "fp4"]),
            "bnb_4bit_use_double_quant": st.booleans(),
            "bnb_4bit_compute_dtype": st.sampled_from(["bfloat16", "float16"]),
            "llm_int8_skip_modules": st.sampled_from([None, ["lm_head"]]),
        },
    ),
    st.fixed_dictionaries(
        {"quant_method": st.just("bitsandbytes"), "load_in_8bit": st.just(True)},
        optional={"llm_int8_threshold": st.just(6.0)},
    ),
)
FP8 = st.fixed_dictionaries(
    {"quant_method": st.just("fp8")},
    optional={
        "weight_block_size": st.sampled_from([None, [128, 128], [64, 64]]),
        "activation_scheme": st.sampled_from(["dynamic", "static"]),
        "fmt": st.just("e4m3"),
    },
)
MXFP4 = st.fixed_dictionaries(
    {"quant_method": st.just("mxfp4")},
    optional={"modules_to_not_convert": st.just(["model.layers.*.self_attn", "lm_head"])},
)


@st.composite
def compressed_tensors(draw: st.DrawFn) -> dict[str, Any]:
    strategy = draw(st.sampled_from(["tensor", "channel", "group", "block", "tensor_group"]))
    weights: dict[str, Any] = {
        "num_bits": draw(st.sampled_from([4, 8])),
        "type": draw(st.sampled_from(["int", "float"])),
        "symmetric": draw(st.booleans()),
        "strategy": strategy,
    }
    if strategy in ("group", "tensor_group"):
        # A real group scheme names its size; the strategy without one is refused (below).
        weights["group_size"] = draw(st.sampled_from([32, 64, 128]))
    if strategy == "block":
        weights["block_structure"] = [128, 128]
    return {
        "quant_method": "compressed-tensors",
        "format": draw(st.sampled_from(["pack-quantized", "float-quantized", "int-quantized"])),
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        "ignore": ["lm_head"],
    }


QUANT_CONFIGS = st.one_of(GPTQ, AWQ, BNB, FP8, MXFP4, compressed_tensors())


@settings(max_examples=300, deadline=None)
@given(qc=QUANT_CONFIGS)
def test_every_documented_variant_is_priced(qc: dict[str, Any]) -> None:
    cfg = {**catalog_config(LLAMA_8B), "quantization_config": qc}
    try:
        arch = read_config(cfg)
        layout = weight_layout(arch)
    except InvalidRequest as exc:  # a refusal names the field
        assert exc.field and exc.field.startswith(("quantization_config", "weight_format"))
        return
    assert 0 < layout.model_bytes < weight_layout(arch, "fp32").model_bytes


@pytest.mark.parametrize(
    ("qc", "groups_per_row"),
    [
        ({"quant_method": "gptq", "bits": 4, "group_size": -1}, 1),  # per channel
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, 4096 // 128),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, 4096 // 128),
    ],
)
def test_group_size_minus_one_is_one_group_per_channel(
    qc: dict[str, Any], groups_per_row: int
) -> None:
    # An fp16 scale per group and output channel: a 4096 × 4096 projection holds
    # 2 B × groups × 4096 of scales.
    fmt = format_from_quantization(parse_quantization(qc))  # type: ignore[arg-type]
    per_channel = linear_weight_bytes(
        format_from_quantization(parse_quantization({**qc, "group_size": -1})),  # type: ignore[arg-type]
        4096,
        4096,
    )
    grouped = linear_weight_bytes(fmt, 4096, 4096)
    scales_and_zeros = 2 * 4096 + 4096 * 4 // 8  # fp16 scale + packed 4-bit zero, one group
    assert grouped - per_channel == (groups_per_row - 1) * scales_and_zeros


def test_compressed_tensors_channel_strategy() -> None:
    qc = {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "g": {"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "channel"}}
        },
    }
    fmt = format_from_quantization(parse_quantization(qc))  # type: ignore[arg-type]
    # int4 packed two per byte, one 16-bit scale per output channel.
    assert linear_weight_bytes(fmt, 4096, 1024) == 4096 * 1024 // 2 + 2 * 1024


@pytest.mark.parametrize(
    ("qc", "field"),
    [
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 4, "strategy": "group"}}},
            },
            "quantization_config.config_groups.weights.group_size",
        ),
        (
            {"quant_method": "fp8", "weight_block_size": "128"},
            "quantization_config.weight_block_size",
        ),
        ({"quant_method": "gptq", "group_size": 0}, "quantization_config.group_size"),
        ({"quant_method": "hqq"}, "quantization_config.quant_method"),
    ],
)
def test_unreadable_variants_name_the_field(qc: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidConfig) as exc:
        parse_quantization(qc)
    assert exc.value.field == field
    assert len(exc.value.detail) < 300


def test_block_size_error_quotes_the_value() -> None:
    with pytest.raises(InvalidConfig) as exc:
        parse_quantization({"quant_method": "fp8", "weight_block_size": "128"})
    assert "'128'" in exc.value.detail
