"""Storage formats: element sizes and quantized linear layouts, checked by hand calculation."""

from __future__ import annotations

import pytest

from service.estimator.errors import InvalidRequest
from service.estimator.formats import (
    KV_CACHE_DTYPES,
    WEIGHT_FORMATS,
    bytes_per_element,
    get_format,
    kv_dtype_bytes,
    linear_weight_bytes,
)


@pytest.mark.parametrize(
    ("dtype", "size"),
    [
        ("bf16", 2),
        ("bfloat16", 2),
        ("torch.float16", 2),
        ("fp32", 4),
        ("fp8_e4m3", 1),
        ("int4", 0.5),
    ],
)
def test_bytes_per_element(dtype: str, size: float) -> None:
    assert bytes_per_element(dtype) == size


def test_api_formats_present() -> None:
    for name in (
        "fp32",
        "fp16",
        "bf16",
        "fp8",
        "int8",
        "int4",
        "nf4",
        "gptq-int4",
        "gptq-int8",
        "awq-int4",
        "mxfp4",
    ):
        assert name in WEIGHT_FORMATS
    assert KV_CACHE_DTYPES[:1] == ("auto",) and "fp8" in KV_CACHE_DTYPES


def test_unknown_format_names_field() -> None:
    with pytest.raises(InvalidRequest) as e:
        get_format("int3-magic")
    assert e.value.field == "weight_format"
    assert "gptq-int4" in e.value.detail


def test_plain_and_fp8() -> None:
    assert linear_weight_bytes("bf16", 4096, 4096) == 4096 * 4096 * 2
    assert linear_weight_bytes("fp8", 4096, 1024) == 4096 * 1024 + 4  # one fp32 scale
    assert linear_weight_bytes("fp8-channel", 4096, 1024) == 4096 * 1024 + 4 * 1024
    # DeepSeek-V3 blocks: 7168 x 2048 weight -> ceil(2048/128) * ceil(7168/128) = 16 * 56 scales
    assert linear_weight_bytes("fp8-block", 7168, 2048) == 7168 * 2048 + 4 * 16 * 56


def test_gptq_int4_layout() -> None:
    # AutoGPTQ: qweight int32 [4096*4/32, 11008], qzeros int32 [32, 11008*4/32],
    # scales fp16 [32, 11008], g_idx int32 [4096].
    expected = 512 * 11008 * 4 + 32 * 1376 * 4 + 32 * 11008 * 2 + 4096 * 4
    assert linear_weight_bytes("gptq-int4", 4096, 11008) == expected


def test_awq_int4_layout() -> None:
    # AutoAWQ GEMM: qweight int32 [4096, 11008/8], qzeros int32 [32, 1376], scales fp16 [32, 11008]
    expected = 4096 * 1376 * 4 + 32 * 1376 * 4 + 32 * 11008 * 2
    assert linear_weight_bytes("awq-int4", 4096, 11008) == expected


def test_nf4_double_quant() -> None:
    n = 4096 * 4096
    blocks = n // 64
    # packed nibbles, uint8 absmax per block, fp32 absmax per 256 blocks, 256-entry fp32 code,
    # fp32 offset, 16-entry fp32 nf4 code.
    expected = n // 2 + blocks + 4 * (blocks // 256) + 1024 + 4 + 64
    assert linear_weight_bytes("nf4", 4096, 4096) == expected
    # about 4.127 bits per weight
    assert 4.12 < expected * 8 / n < 4.13


def test_mxfp4_and_gguf() -> None:
    assert linear_weight_bytes("mxfp4", 2880, 5760) == 2880 * 5760 // 2 + 2880 * 5760 // 32
    # q4_K: 144 bytes per 256 weights (4.5 bits), q8_0: 34 bytes per 32 (8.5 bits)
    assert linear_weight_bytes("gguf-q4_k", 4096, 4096) == 4096 * 4096 // 256 * 144
    assert linear_weight_bytes("gguf-q8_0", 4096, 4096) == 4096 * 4096 // 32 * 34


def test_kv_dtype() -> None:
    assert kv_dtype_bytes("auto", "bf16") == 2
    assert kv_dtype_bytes("fp8", "bf16") == 1
    assert kv_dtype_bytes("auto", "fp32") == 4
    with pytest.raises(InvalidRequest) as e:
        kv_dtype_bytes("int2", "bf16")
    assert e.value.field == "kv_cache_dtype"
