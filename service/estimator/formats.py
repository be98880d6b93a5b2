"""Storage formats: the bytes of a tensor element, and of a linear weight in each weight format.

A dtype's size lives in :mod:`service.estimator.units`; this module is the one place a weight
format lives: :func:`linear_weight_bytes` gives the bytes of a linear layer's weight stored in a
(possibly quantized) format, scales, zero points and index tensors included, and
:func:`format_from_quantization` the format a checkpoint's ``quantization_config`` describes.
Adding a format is a row in ``_FORMATS`` (and, for a new layout, a function in ``_LAYOUTS``),
plus its parser in ``service/estimator/model/quantization.py`` when a config can name it.

Each quantized layout follows the tensors its checkpoint format really stores:

- fp8 (vLLM ``--quantization fp8`` on a 16-bit checkpoint): one e4m3 byte per weight and one fp32
  scale per tensor. ``fp8-channel`` (compressed-tensors "fp8-dynamic"): one fp32 scale per output
  channel. ``fp8-block`` (DeepSeek-V3 ``weight_block_size`` [128, 128]): one fp32 scale per
  128 x 128 block.
- int8 (w8a8 / bitsandbytes LLM.int8): one byte per weight, one fp32 scale per output channel.
- int4 (compressed-tensors w4a16, symmetric): 4-bit weights packed in int32, one 16-bit scale per
  group of 128 input features and output channel, no zero point.
- GPTQ (AutoGPTQ layout): ``qweight`` int32 [in * bits / 32, out], ``qzeros`` int32
  [in / g, out * bits / 32], ``scales`` fp16 [in / g, out], ``g_idx`` int32 [in]. A group size
  of -1 in the config (per channel) is one group spanning the whole input.
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
  k-quant mixes (Q4_K_M, ...) choose types per tensor: :mod:`service.estimator.gguf_quant`.
- llama.cpp's own names, as users write them: every llama-quantize preset of
  :data:`~service.estimator.gguf_quant.PRESETS` is a format of its own name (``Q4_K_M``,
  ``Q8_0``, ``IQ4_XS``: the names of the files people pull), its ``preset`` set; a linear
  weight alone is priced in the preset's bulk type, and the answer prices the whole preset
  tensor by tensor where the model's shape allows (``service/estimator/answer.py``). The
  ``gguf-`` names stay the pure types (every matrix in one type, ``llama-quantize --pure``).
  ``F16``, ``BF16`` and ``F32`` are the converter's output types: names of fp16, bf16, fp32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from gguf.constants import GGML_QUANT_SIZES

from service.estimator.errors import InvalidRequest
from service.estimator.gguf_quant import PRESETS
from service.estimator.model.quantization import QuantizationSpec
from service.estimator.units import bytes_per_element, cdiv

__all__ = [
    "KV_CACHE_DTYPES",
    "QLORA_FORMATS",
    "WEIGHT_FORMATS",
    "WeightFormat",
    "canonical_format_name",
    "format_from_quantization",
    "get_format",
    "kv_dtype_bytes",
    "linear_weight_bytes",
]


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """How one format stores a linear layer's weight, and which tensors it leaves unquantized.

    `kind` selects the layout function (``_LAYOUTS``); `bits` is the width of one stored weight;
    `group_size` the number of weights sharing one scale (along the input dimension for
    GPTQ/AWQ/int4, 0 meaning one group per output channel; along the flattened tensor for block
    formats). `dense_dtype` is the dtype of everything the format
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
    # A frozen base a LoRA adapter can train on (bitsandbytes 4- and 8-bit: QLoRA).
    qlora_base: bool = False
    # The llama-quantize preset the format names (Q4_K_M, ...): types chosen per tensor.
    preset: str | None = None

    @property
    def quantized(self) -> bool:
        return self.kind != "plain"

    @property
    def groups_per_channel(self) -> bool:
        """One scale per output channel (group size 0: the whole input is one group)."""
        return self.group_size == 0


_FORMATS: tuple[WeightFormat, ...] = (
    WeightFormat("fp32", "plain", 32, dense_dtype="fp32", description="32-bit float"),
    WeightFormat("fp16", "plain", 16, dense_dtype="fp16", description="16-bit float"),
    WeightFormat("bf16", "plain", 16, dense_dtype="bf16", description="bfloat16"),
    WeightFormat("fp8", "fp8-tensor", 8, description="fp8 e4m3, one fp32 scale per tensor"),
    WeightFormat("fp8-channel", "fp8-channel", 8, description="fp8 e4m3, fp32 scale per row"),
    WeightFormat("fp8-block", "fp8-block", 8, 128, description="fp8 e4m3, 128x128 fp32 scales"),
    WeightFormat(
        "int8", "int8-channel", 8, qlora_base=True, description="int8 (w8a8), fp32 scale per row"
    ),
    WeightFormat("int4", "int4-sym", 4, 128, description="int4 w4a16, 16-bit scale per 128"),
    WeightFormat("gptq-int4", "gptq", 4, 128, dense_dtype="fp16", description="GPTQ 4-bit g128"),
    WeightFormat("gptq-int8", "gptq", 8, 128, dense_dtype="fp16", description="GPTQ 8-bit g128"),
    WeightFormat("gptq-int3", "gptq", 3, 128, dense_dtype="fp16", description="GPTQ 3-bit g128"),
    WeightFormat("gptq-int2", "gptq", 2, 128, dense_dtype="fp16", description="GPTQ 2-bit g128"),
    WeightFormat("awq-int4", "awq", 4, 128, dense_dtype="fp16", description="AWQ 4-bit g128"),
    WeightFormat(
        "nf4", "bnb4-dq", 4, 64, qlora_base=True, description="bitsandbytes NF4, block 64, dq"
    ),
    WeightFormat(
        "fp4", "bnb4-dq", 4, 64, qlora_base=True, description="bitsandbytes FP4, block 64, dq"
    ),
    WeightFormat(
        "nf4-single",
        "bnb4",
        4,
        64,
        qlora_base=True,
        description="bitsandbytes NF4, block 64, fp32 absmax",
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

# The converter's plain output types (convert_hf_to_gguf.py --outtype) are plain formats.
_PLAIN_PRESETS = {"F16": "fp16", "BF16": "bf16", "F32": "fp32"}


def _preset_format(name: str) -> WeightFormat:
    """A llama-quantize preset as a format: its bulk type's block layout (what one linear
    weight costs), the nominal bits of its name, embeddings and output quantized."""
    bulk = PRESETS[name].default
    block, size = GGML_QUANT_SIZES[bulk]
    bits = int(next(c for c in bulk.name if c.isdigit()))
    return WeightFormat(
        name,
        "gguf",
        bits,
        block,
        "fp32",
        True,
        block_bytes=size,
        description=f"llama-quantize {name}: {PRESETS[name].description}",
        preset=name,
    )


_FORMATS += tuple(_preset_format(name) for name in PRESETS if name not in _PLAIN_PRESETS)

# Names as a request may write them, lower-cased: llama.cpp's are upper-case (Q4_K_M).
_BY_NAME: dict[str, WeightFormat] = {f.name.lower(): f for f in _FORMATS}

# Every weight format the service accepts (the API's enum is built from this tuple).
WEIGHT_FORMATS: tuple[str, ...] = tuple(f.name for f in _FORMATS)

# Formats a QLoRA base may be stored in (bitsandbytes 4- and 8-bit).
QLORA_FORMATS: tuple[str, ...] = tuple(f.name for f in _FORMATS if f.qlora_base)

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
    **{preset.lower(): plain for preset, plain in _PLAIN_PRESETS.items()},
}

# KV-cache dtypes a request may name; "auto" is the activation (model) dtype.
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp32")


def canonical_format_name(name: str) -> str | None:
    """The service's name of the format `name` spells, in any case, aliases included
    ("awq", "bfloat16", llama.cpp's "q4_k_m" or "F16"); None for a name it does not know."""
    key = name.strip().lower()
    found = _BY_NAME.get(_FORMAT_ALIASES.get(key, key))
    return None if found is None else found.name


def get_format(name: str) -> WeightFormat:
    """The format called `name` (aliases such as "awq" or "bfloat16" accepted)."""
    canonical = canonical_format_name(name)
    if canonical is None:
        raise InvalidRequest(
            f"unknown weight_format {name[:40]!r}; supported: {', '.join(WEIGHT_FORMATS)}",
            field="weight_format",
        )
    return _BY_NAME[canonical.lower()]


def kv_dtype_bytes(kv_cache_dtype: str, activation_dtype: str) -> float:
    """Bytes of one KV-cache element: "auto" follows the activation dtype."""
    key = kv_cache_dtype.strip().lower()
    if key not in KV_CACHE_DTYPES:
        raise InvalidRequest(
            f"unknown kv_cache_dtype {kv_cache_dtype[:40]!r}; "
            f"allowed: {', '.join(KV_CACHE_DTYPES)}",
            field="kv_cache_dtype",
        )
    return bytes_per_element(activation_dtype if key == "auto" else key)


def _groups(f: WeightFormat, in_features: int) -> int:
    """Scale groups along the input of one output channel (one when per channel)."""
    return 1 if f.groups_per_channel else cdiv(in_features, f.group_size)


def _plain(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    return int(fan_in * fan_out * bytes_per_element(f.name))


def _fp8_tensor(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    return fan_in * fan_out + 4


def _per_channel_8bit(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    return fan_in * fan_out + 4 * fan_out


def _fp8_block(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    blocks = cdiv(fan_out, f.group_size) * cdiv(fan_in, f.group_size)
    return fan_in * fan_out + 4 * blocks


def _int4_symmetric(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    packed = cdiv(fan_in * f.bits, 32) * 4 * fan_out
    return packed + 2 * _groups(f, fan_in) * fan_out


def _gptq(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    groups = _groups(f, fan_in)
    qweight = cdiv(fan_in * f.bits, 32) * 4 * fan_out
    qzeros = groups * cdiv(fan_out * f.bits, 32) * 4
    return qweight + qzeros + 2 * groups * fan_out + 4 * fan_in  # + scales + g_idx


def _awq(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    groups = _groups(f, fan_in)
    qweight = fan_in * cdiv(fan_out * f.bits, 32) * 4
    qzeros = groups * cdiv(fan_out * f.bits, 32) * 4
    return qweight + qzeros + 2 * groups * fan_out


_CODE4_BYTES = 16 * 4  # bitsandbytes' 16-entry fp32 4-bit code book


def _bnb4(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    n = fan_in * fan_out
    return cdiv(n, 2) + 4 * cdiv(n, f.group_size) + _CODE4_BYTES


def _bnb4_double_quant(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    # absmax quantized to uint8; second level: an fp32 absmax per 256 blocks, a 256-entry fp32
    # code book and an fp32 offset.
    n = fan_in * fan_out
    blocks = cdiv(n, f.group_size)
    return cdiv(n, 2) + blocks + 4 * cdiv(blocks, 256) + 256 * 4 + 4 + _CODE4_BYTES


def _mx(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    n = fan_in * fan_out
    return cdiv(n, 2) + cdiv(n, f.group_size)


def _gguf(f: WeightFormat, fan_in: int, fan_out: int) -> int:
    return cdiv(fan_in * fan_out, f.group_size) * f.block_bytes


_LAYOUTS: dict[str, Callable[[WeightFormat, int, int], int]] = {
    "plain": _plain,
    "fp8-tensor": _fp8_tensor,
    "fp8-channel": _per_channel_8bit,
    "int8-channel": _per_channel_8bit,
    "fp8-block": _fp8_block,
    "int4-sym": _int4_symmetric,
    "gptq": _gptq,
    "awq": _awq,
    "bnb4": _bnb4,
    "bnb4-dq": _bnb4_double_quant,
    "mx": _mx,
    "gguf": _gguf,
}


@lru_cache(maxsize=4096)
def linear_weight_bytes(fmt: str | WeightFormat, in_features: int, out_features: int) -> int:
    """Bytes of one linear weight of shape [out, in] stored in `fmt`, scales and zeros included.

    Biases are not included (they stay unquantized).
    """
    f = fmt if isinstance(fmt, WeightFormat) else get_format(fmt)
    return _LAYOUTS[f.kind](f, in_features, out_features)


def _with_group(fmt: WeightFormat, group_size: int | None) -> WeightFormat:
    return dataclasses.replace(fmt, group_size=group_size or 0)


def format_from_quantization(q: QuantizationSpec) -> WeightFormat:
    """The storage format a checkpoint's ``quantization_config`` describes."""
    method = q.method
    if method == "gptq":
        if q.bits not in (2, 3, 4, 8):
            raise InvalidRequest(f"GPTQ with {q.bits} bits is not supported", field="weight_format")
        return dataclasses.replace(get_format(f"gptq-int{q.bits}"), group_size=q.group_size or 0)
    if method == "awq":
        return dataclasses.replace(
            get_format("awq-int4"), bits=q.bits, group_size=q.group_size or 0
        )
    if method == "bitsandbytes":
        if q.bits == 8:
            return get_format("int8")
        name = q.quant_type or "nf4"
        fmt = get_format(name)
        if not q.double_quant:
            fmt = dataclasses.replace(fmt, name=f"{name}-single", kind="bnb4")
        return fmt
    if method == "fp8" or (
        method == "compressed-tensors"
        and q.bits == 8
        and (q.quant_type or "int").startswith("float")
    ):
        if q.weight_block_size:
            return _with_group(get_format("fp8-block"), q.weight_block_size[0])
        return get_format("fp8" if method == "fp8" else "fp8-channel")
    if method == "mxfp4":
        return get_format("mxfp4")
    if method == "compressed-tensors":
        if q.bits == 8:
            return get_format("int8")
        if q.bits == 4:
            return _with_group(get_format("int4"), q.group_size)
    raise InvalidRequest(
        f"quantization {method} with {q.bits} bits is not supported", field="weight_format"
    )
