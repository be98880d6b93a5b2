"""Storage formats: the bytes of a tensor element, and of a linear weight in each weight format.

This module is the one place a dtype's size lives (docs/CONTRIBUTING.md). Every other
module asks it for bytes: `bytes_per_element("bf16")` for plain tensors, `linear_weight_bytes(fmt,
in_features, out_features)` for a linear layer's weight stored in a (possibly quantized) format,
scales, zero points and index tensors included.

Each quantized layout follows the tensors its checkpoint format really stores:

- fp8 (vLLM ``--quantization fp8`` on a 16-bit checkpoint): one e4m3 byte per weight and one fp32
  scale per tensor. ``fp8-channel`` (compressed-tensors "fp8-dynamic"): one fp32 scale per output
  channel. ``fp8-block`` (DeepSeek-V3 ``weight_block_size`` [128, 128]): one fp32 scale per
  128 x 128 block.
- int8 (w8a8 / bitsandbytes LLM.int8): one byte per weight, one fp32 scale per output channel.
- int4 (compressed-tensors w4a16, symmetric): 4-bit weights packed in int32, one 16-bit scale per
  group of 128 input features and output channel, no zero point.
- GPTQ (AutoGPTQ layout): ``qweight`` int32 [in * bits / 32, out], ``qzeros`` int32
  [in / g, out * bits / 32], ``scales`` fp16 [in / g, out], ``g_idx`` int32 [in].
- AWQ (AutoAWQ GEMM layout): ``qweight`` int32 [in, out * bits / 32], ``qzeros`` int32
  [in / g, out * bits / 32], ``scales`` fp16 [in / g, out].
- bitsandbytes nf4 / fp4 (``bnb_4bit_use_double_quant=True``, QLoRA's setting): two weights per
  uint8, one uint8 absmax per block of 64 weights, then per 256 blocks one fp32 second-level
  absmax, plus a 256-entry fp32 code book, an fp32 offset and the 16-entry fp32 4-bit code per
  tensor. ``nf4-single`` is the same without double quantization (fp32 absmax per block).
- mxfp4 (OCP microscaling, as gpt-oss stores its experts): e2m1 values two per byte and one e8m0
  (uint8) scale per block of 32 weights.
- GGUF (llama.cpp ``ggml-common.h`` block structs), pure types only: q8_0 34 bytes per 32 weights,
  q4_0 18/32, q4_1 20/32, q5_0 22/32, q5_1 24/32, q2_K 84/256, q3_K 110/256, q4_K 144/256,
  q5_K 176/256, q6_K 210/256. A GGUF file quantizes embeddings and the output matrix as well; the
  k-quant mixes (Q4_K_M, ...) choose types per tensor and are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from service.estimator.errors import InvalidRequest

__all__ = [
    "DTYPE_BYTES",
    "KV_CACHE_DTYPES",
    "WEIGHT_FORMATS",
    "WeightFormat",
    "bytes_per_element",
    "get_format",
    "kv_dtype_bytes",
    "linear_weight_bytes",
    "normalize_dtype",
]

# Bytes of one element of a plain (unquantized) tensor.
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

_DTYPE_ALIASES: dict[str, str] = {
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


def normalize_dtype(name: str) -> str:
    """The canonical short name of a dtype ("bfloat16" -> "bf16"); unknown names pass through."""
    key = name.strip().lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(key, key)


def bytes_per_element(dtype: str) -> float:
    """Bytes of one element of a plain tensor of `dtype` (0.5 for the packed 4-bit types)."""
    key = normalize_dtype(dtype)
    try:
        return DTYPE_BYTES[key]
    except KeyError:
        raise InvalidRequest(
            f"unknown dtype {dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}", field="dtype"
        ) from None


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """How one format stores a linear layer's weight, and which tensors it leaves unquantized.

    `kind` selects the layout function; `bits` is the width of one stored weight; `group_size`
    the number of weights sharing one scale (along the input dimension for GPTQ/AWQ/int4, along
    the flattened tensor for block formats). `dense_dtype` is the dtype of everything the format
    does not quantize (embeddings, lm_head, norms, routers, biases) when the checkpoint's own
    dtype is not known to override it. `quantize_embeddings` is true for formats that also store
    the token embedding and the output matrix quantized (GGUF). `experts_only` quantizes only
    the MoE experts when the model has them (mxfp4, as gpt-oss ships).
    """

    name: str
    kind: str
    bits: int
    group_size: int = 0
    dense_dtype: str | None = None  # None: the checkpoint's own dtype
    quantize_embeddings: bool = False
    experts_only: bool = False
    block_bytes: int = 0  # GGUF: bytes of one block of `group_size` weights
    description: str = ""

    @property
    def quantized(self) -> bool:
        return self.kind != "plain"


_FORMATS: tuple[WeightFormat, ...] = (
    WeightFormat("fp32", "plain", 32, dense_dtype="fp32", description="32-bit float"),
    WeightFormat("fp16", "plain", 16, dense_dtype="fp16", description="16-bit float"),
    WeightFormat("bf16", "plain", 16, dense_dtype="bf16", description="bfloat16"),
    WeightFormat("fp8", "fp8-tensor", 8, description="fp8 e4m3, one fp32 scale per tensor"),
    WeightFormat("fp8-channel", "fp8-channel", 8, description="fp8 e4m3, fp32 scale per row"),
    WeightFormat("fp8-block", "fp8-block", 8, 128, description="fp8 e4m3, 128x128 fp32 scales"),
    WeightFormat("int8", "int8-channel", 8, description="int8 (w8a8), fp32 scale per row"),
    WeightFormat("int4", "int4-sym", 4, 128, description="int4 w4a16, 16-bit scale per 128"),
    WeightFormat("gptq-int4", "gptq", 4, 128, dense_dtype="fp16", description="GPTQ 4-bit g128"),
    WeightFormat("gptq-int8", "gptq", 8, 128, dense_dtype="fp16", description="GPTQ 8-bit g128"),
    WeightFormat("gptq-int3", "gptq", 3, 128, dense_dtype="fp16", description="GPTQ 3-bit g128"),
    WeightFormat("gptq-int2", "gptq", 2, 128, dense_dtype="fp16", description="GPTQ 2-bit g128"),
    WeightFormat("awq-int4", "awq", 4, 128, dense_dtype="fp16", description="AWQ 4-bit g128"),
    WeightFormat("nf4", "bnb4-dq", 4, 64, description="bitsandbytes NF4, block 64, double quant"),
    WeightFormat("fp4", "bnb4-dq", 4, 64, description="bitsandbytes FP4, block 64, double quant"),
    WeightFormat(
        "nf4-single", "bnb4", 4, 64, description="bitsandbytes NF4, block 64, fp32 absmax"
    ),
    WeightFormat("mxfp4", "mx", 4, 32, experts_only=True, description="MXFP4, e8m0 scale per 32"),
    WeightFormat("gguf-q8_0", "gguf", 8, 32, "fp32", True, block_bytes=34),
    WeightFormat("gguf-q4_0", "gguf", 4, 32, "fp32", True, block_bytes=18),
    WeightFormat("gguf-q4_1", "gguf", 4, 32, "fp32", True, block_bytes=20),
    WeightFormat("gguf-q5_0", "gguf", 5, 32, "fp32", True, block_bytes=22),
    WeightFormat("gguf-q5_1", "gguf", 5, 32, "fp32", True, block_bytes=24),
    WeightFormat("gguf-q2_k", "gguf", 2, 256, "fp32", True, block_bytes=84),
    WeightFormat("gguf-q3_k", "gguf", 3, 256, "fp32", True, block_bytes=110),
    WeightFormat("gguf-q4_k", "gguf", 4, 256, "fp32", True, block_bytes=144),
    WeightFormat("gguf-q5_k", "gguf", 5, 256, "fp32", True, block_bytes=176),
    WeightFormat("gguf-q6_k", "gguf", 6, 256, "fp32", True, block_bytes=210),
)

_BY_NAME: dict[str, WeightFormat] = {f.name: f for f in _FORMATS}

# Every weight format the service accepts (the API's enum is built from this tuple).
WEIGHT_FORMATS: tuple[str, ...] = tuple(f.name for f in _FORMATS)

_FORMAT_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "awq": "awq-int4",
    "gptq": "gptq-int4",
    "w8a8": "int8",
    "w4a16": "int4",
    "fp8-dynamic": "fp8-channel",
    "bnb-nf4": "nf4",
    "bnb-int8": "int8",
}

# KV-cache dtypes a request may name; "auto" is the activation (model) dtype.
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp32")


def get_format(name: str) -> WeightFormat:
    """The format called `name` (aliases such as "awq" or "bfloat16" accepted)."""
    key = name.strip().lower()
    key = _FORMAT_ALIASES.get(key, key)
    try:
        return _BY_NAME[key]
    except KeyError:
        raise InvalidRequest(
            f"unknown weight_format {name!r}; supported: {', '.join(WEIGHT_FORMATS)}",
            field="weight_format",
        ) from None


def kv_dtype_bytes(kv_cache_dtype: str, activation_dtype: str) -> float:
    """Bytes of one KV-cache element: "auto" follows the activation dtype."""
    key = kv_cache_dtype.strip().lower()
    if key not in KV_CACHE_DTYPES:
        raise InvalidRequest(
            f"unknown kv_cache_dtype {kv_cache_dtype!r}; allowed: {', '.join(KV_CACHE_DTYPES)}",
            field="kv_cache_dtype",
        )
    return bytes_per_element(activation_dtype if key == "auto" else key)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@lru_cache(maxsize=4096)
def linear_weight_bytes(
    fmt: str | WeightFormat, in_features: int, out_features: int, dense_dtype: str = "bf16"
) -> int:
    """Bytes of one linear weight of shape [out, in] stored in `fmt`, scales and zeros included.

    `dense_dtype` is used for plain formats' neighbours only when the format names none; a plain
    format ("bf16") always uses its own width. Biases are not included (they stay unquantized).
    """
    f = fmt if isinstance(fmt, WeightFormat) else get_format(fmt)
    n = in_features * out_features
    kind = f.kind
    if kind == "plain":
        return int(n * bytes_per_element(f.name))
    if kind == "fp8-tensor":
        return n + 4
    if kind in ("fp8-channel", "int8-channel"):
        return n + 4 * out_features
    if kind == "fp8-block":
        blocks = _cdiv(out_features, f.group_size) * _cdiv(in_features, f.group_size)
        return n + 4 * blocks
    if kind == "int4-sym":
        groups = _cdiv(in_features, f.group_size)
        packed = _cdiv(in_features * f.bits, 32) * 4 * out_features
        return packed + 2 * groups * out_features
    if kind in ("gptq", "awq"):
        groups = _cdiv(in_features, f.group_size)
        if kind == "gptq":
            qweight = _cdiv(in_features * f.bits, 32) * 4 * out_features
            g_idx = 4 * in_features
        else:
            qweight = in_features * _cdiv(out_features * f.bits, 32) * 4
            g_idx = 0
        qzeros = groups * _cdiv(out_features * f.bits, 32) * 4
        scales = 2 * groups * out_features
        return qweight + qzeros + scales + g_idx
    if kind in ("bnb4", "bnb4-dq"):
        blocks = _cdiv(n, f.group_size)
        packed = _cdiv(n, 2)
        code4 = 16 * 4  # the 4-bit code book, fp32
        if kind == "bnb4":
            return packed + 4 * blocks + code4
        # absmax quantized to uint8, second level: fp32 absmax per 256 blocks, a 256-entry fp32
        # code book and an fp32 offset.
        return packed + blocks + 4 * _cdiv(blocks, 256) + 256 * 4 + 4 + code4
    if kind == "mx":
        return _cdiv(n, 2) + _cdiv(n, f.group_size)
    if kind == "gguf":
        return _cdiv(n, f.group_size) * f.block_bytes
    raise AssertionError(f"unhandled format kind {kind}")  # pragma: no cover


def dense_bytes_per_element(fmt: WeightFormat, checkpoint_dtype: str) -> float:
    """Bytes of one element of a tensor the format leaves unquantized (norms, biases, routers)."""
    return bytes_per_element(fmt.dense_dtype or checkpoint_dtype)


def embedding_bytes(fmt: WeightFormat, rows: int, cols: int, checkpoint_dtype: str) -> int:
    """Bytes of an embedding or output matrix: quantized only by formats that say so (GGUF)."""
    if fmt.quantize_embeddings:
        return linear_weight_bytes(fmt, cols, rows)
    return int(rows * cols * dense_bytes_per_element(fmt, checkpoint_dtype))
