"""Units and element sizes: the one home of a dtype's width and of the byte multiples.

Every module asks here for the bytes of a tensor element (``bytes_per_element("bf16")``) and
for the ceiling division that block layouts use, instead of writing either again.
GB = 10^9 bytes and GiB = 2^30 bytes: figures meant for people always name which.
"""

from __future__ import annotations

from service.estimator.errors import InvalidRequest

__all__ = [
    "CHECKPOINT_DTYPES",
    "DTYPE_BYTES",
    "GB",
    "GIB",
    "MIB",
    "bytes_per_element",
    "cdiv",
    "checkpoint_dtype",
    "normalize_dtype",
]

KIB = 2**10
MIB = 2**20
GIB = 2**30
GB = 10**9

#: Bytes of one element of a plain (unquantized) tensor, by canonical short name.
DTYPE_BYTES: dict[str, float] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int4": 0.5,
    "fp4": 0.5,
}

# Other spellings (torch, numpy, configs) of the canonical names above.
_ALIASES: dict[str, str] = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
}

#: The dtypes a checkpoint's ``torch_dtype`` may name, as transformers spells them.
CHECKPOINT_DTYPES: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def normalize_dtype(name: str) -> str:
    """The canonical short name of a dtype ("bfloat16" -> "bf16"); unknown names pass through."""
    key = name.strip().lower().removeprefix("torch.")
    return _ALIASES.get(key, key)


def checkpoint_dtype(name: str) -> str | None:
    """transformers' spelling of a checkpoint dtype ("bf16" -> "bfloat16"), None if not one."""
    return CHECKPOINT_DTYPES.get(normalize_dtype(name))


def bytes_per_element(dtype: str) -> float:
    """Bytes of one element of a plain tensor of `dtype` (0.5 for the packed 4-bit types)."""
    try:
        return DTYPE_BYTES[normalize_dtype(dtype)]
    except KeyError:
        raise InvalidRequest(
            f"unknown dtype {dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}", field="dtype"
        ) from None


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers (blocks, pages, shards)."""
    return -(-a // b)
