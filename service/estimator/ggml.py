"""ggml's tensor types: bytes of a row, and what the CUDA backend allocates for a tensor.

Block sizes and block bytes come from the ``gguf`` package (llama.cpp's ``gguf-py``,
``gguf/constants.py::GGML_QUANT_SIZES``, which mirrors ggml's ``type_traits``). A tensor of
``n`` elements in a type with blocks of ``b`` elements and ``s`` bytes takes ``n / b · s`` bytes
(``ggml_nbytes``). The CUDA backend allocates a little more
(``ggml/src/ggml-cuda/ggml-cuda.cu``, ``ggml_backend_cuda_buffer_type_get_alloc_size``): a
quantized tensor whose rows are not a multiple of 512 elements (``MATRIX_ROW_PADDING``) gets
the bytes of ``512 - ne0 % 512`` more elements, and every tensor starts on a 128-byte boundary
(the buffer type's alignment).
"""

from __future__ import annotations

from functools import lru_cache

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from service.estimator.units import cdiv

__all__ = ["CUDA_ALIGNMENT", "cuda_alloc_bytes", "is_quantized", "row_bytes", "type_named"]

CUDA_ALIGNMENT = 128
MATRIX_ROW_PADDING = 512


@lru_cache(maxsize=64)
def type_named(name: str) -> GGMLQuantizationType:
    """The ggml type called ``name`` (any case: ``q8_0``, ``Q4_K``, ``f16``)."""
    try:
        return GGMLQuantizationType[name.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown ggml type {name[:20]!r}") from None


def is_quantized(t: GGMLQuantizationType) -> bool:
    """Block types (ggml_is_quantized): every type whose block holds more than one element."""
    return GGML_QUANT_SIZES[t][0] > 1


def row_bytes(t: GGMLQuantizationType, elements: int) -> int:
    """Bytes of ``elements`` consecutive elements of type ``t`` (ggml_row_size)."""
    block, size = GGML_QUANT_SIZES[t]
    if elements % block:
        raise ValueError(f"{elements} elements are not whole {t.name} blocks of {block}")
    return elements // block * size


def cuda_alloc_bytes(t: GGMLQuantizationType, n_elements: int, ne0: int) -> int:
    """What the CUDA backend allocates for one tensor: its bytes, the padded row of a
    quantized tensor, rounded up to the buffer alignment."""
    block, size = GGML_QUANT_SIZES[t]
    nbytes = n_elements // block * size
    if is_quantized(t) and ne0 % MATRIX_ROW_PADDING:
        nbytes += row_bytes(t, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING)
    return cdiv(nbytes, CUDA_ALIGNMENT) * CUDA_ALIGNMENT
