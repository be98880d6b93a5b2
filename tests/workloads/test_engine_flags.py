"""The engines' value syntaxes, checked against hand calculations of their documented rules.

vLLM (``vllm/utils/argparse_utils.py``, ``human_readable_int``): lower-case k/m/g/t are powers
of 1000 and allow a fraction; upper-case K/M/G/T are powers of 1024 and do not. SGLang
(``sglang/srt/utils/common.py``): k/M/G/T are powers of 1000, Ki/Mi/Gi/Ti powers of 1024,
case-sensitive.
"""

from __future__ import annotations

import pytest

from service.workloads.engine_flags import (
    SGLANG_FLAGS,
    VLLM_FLAGS,
    ValueSyntaxError,
    parse_sglang_int,
    parse_vllm_int,
    parse_vllm_int_or_auto,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8192", 8192),
        ("32k", 32 * 1000),
        ("32K", 32 * 1024),
        ("25.6k", 25_600),
        ("1m", 1_000_000),
        ("1M", 1024 * 1024),
        ("2g", 2 * 10**9),
        ("2G", 2 * 2**30),
        (" 128K ", 128 * 1024),
        # vLLM multiplies a float: 8.11 is stored as 8.1099999999999994315658..., so
        # 8.11 x 1000 is 8109.999999999999 and int() truncates it to 8109, as in vLLM.
        ("8.11k", 8109),
    ],
)
def test_vllm_human_readable_int(text: str, expected: int) -> None:
    assert parse_vllm_int(text) == expected


@pytest.mark.parametrize("text", ["1.5K", "32q", "", "k", "1e3"])
def test_vllm_human_readable_int_refuses(text: str) -> None:
    with pytest.raises(ValueSyntaxError):
        parse_vllm_int(text)


@pytest.mark.parametrize("text", ["-1", "auto", "AUTO", " Auto "])
def test_vllm_max_model_len_auto_reads_minus_one(text: str) -> None:
    assert parse_vllm_int_or_auto(text) == -1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("128Ki", 128 * 1024),
        ("1M", 10**6),
        ("1G", 10**9),
        ("32k", 32_000),
        # Decimal arithmetic: exactly 8110, unlike vLLM's float product above.
        ("8.11k", 8110),
        ("2Mi", 2 * 1024 * 1024),
    ],
)
def test_sglang_human_readable_int(text: str, expected: int) -> None:
    assert parse_sglang_int(text) == expected


@pytest.mark.parametrize("text", ["1m", "1K", "1.5Ki", "auto"])
def test_sglang_human_readable_int_is_case_sensitive(text: str) -> None:
    with pytest.raises(ValueSyntaxError):
        parse_sglang_int(text)


def test_bounds_follow_the_engine_configs() -> None:
    # vLLM CacheConfig.gpu_memory_utilization: Field(gt=0, le=1).
    spec = VLLM_FLAGS.option("gpu_memory_utilization")
    assert spec.parse("1") == 1.0
    for bad in ("0", "1.01", "nan", "inf"):
        with pytest.raises(ValueSyntaxError):
            spec.parse(bad)
    # ParallelConfig.tensor_parallel_size: Field(ge=1).
    with pytest.raises(ValueSyntaxError, match="at least 1"):
        VLLM_FLAGS.option("tensor_parallel_size").parse("0")


def test_dtype_choices() -> None:
    with pytest.raises(ValueSyntaxError, match="bfloat16"):
        VLLM_FLAGS.option("dtype").parse("fp8")
    assert SGLANG_FLAGS.option("dtype").parse("half") == "half"


def test_lookup_spellings() -> None:
    assert VLLM_FLAGS.lookup("-tp") == (VLLM_FLAGS.option("tensor_parallel_size"), False)
    assert VLLM_FLAGS.lookup("--max_model_len") == (VLLM_FLAGS.option("max_model_len"), False)
    assert VLLM_FLAGS.lookup("--no-enforce-eager") == (VLLM_FLAGS.option("enforce_eager"), True)
    # SGLang's parser keeps underscores and its booleans have no --no- form.
    assert SGLANG_FLAGS.lookup("--tp_size") is None
    assert SGLANG_FLAGS.lookup("--no-trust-remote-code") is None
    assert SGLANG_FLAGS.lookup("--tp") == (SGLANG_FLAGS.option("tp_size"), False)


def test_tables_have_no_duplicate_spellings() -> None:
    for table in (VLLM_FLAGS, SGLANG_FLAGS):
        spellings = [s for spec in table.flags for s in spec.spellings]
        assert len(spellings) == len(set(spellings))
        assert not table.switches & set(spellings)
        assert set(table.layout.values()) <= set(table.options())


def test_unknown_option_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="tensor_parallel_size"):
        VLLM_FLAGS.option("tp")
