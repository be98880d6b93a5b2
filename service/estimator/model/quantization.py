"""What a checkpoint's ``quantization_config`` says about its stored weights.

One parser per ``quant_method`` (the table at the bottom), each reading the fields its
quantizer writes: AutoGPTQ / GPTQModel (``gptq``), AutoAWQ (``awq``), bitsandbytes,
fp8 (per tensor or ``weight_block_size`` blocks, DeepSeek-V3 style), OCP mxfp4 (gpt-oss) and
compressed-tensors (llm-compressor's ``config_groups``). Every documented variant is read:
``group_size: -1`` (GPTQ/AWQ per channel), compressed-tensors ``strategy`` ``channel``,
``group``, ``block`` and ``tensor``. How each stores its bytes is in
``service/estimator/formats.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from service.estimator.errors import InvalidConfig
from service.estimator.model.config_reader import (
    check_int,
    echo,
    module_pattern_matches,
    str_tuple,
)

__all__ = ["QUANT_METHODS", "QuantizationSpec", "parse_quantization"]

_FIELD = "quantization_config"
_MAX_GROUP = 1 << 20


@dataclass(frozen=True)
class QuantizationSpec:
    """A checkpoint's quantization: ``bits`` per weight element, ``group_size`` elements per
    scale (None: per output channel or per block, see ``weight_block_size``), ``symmetric``
    False when a zero point is stored too. ``modules_not_converted`` holds the config's own
    exclusion patterns (``modules_to_not_convert``, ``ignore``, ``llm_int8_skip_modules``),
    matched by :meth:`is_quantized`."""

    method: str
    bits: int
    group_size: int | None = None
    symmetric: bool | None = None
    quant_type: str | None = None
    double_quant: bool = False
    weight_block_size: tuple[int, ...] | None = None
    modules_not_converted: tuple[str, ...] = ()
    quantize_lm_head: bool = False
    format: str | None = None

    def is_quantized(self, path: str) -> bool:
        """Whether the linear weight at module ``path`` (e.g. ``model.layers.3.mlp.up_proj``)
        is stored quantized. lm_head stays in the checkpoint dtype unless the config says
        otherwise, as transformers' quantizers do."""
        is_lm_head = path == "lm_head" or path.endswith(".lm_head")
        if is_lm_head and not self.quantize_lm_head:
            return False
        return not any(module_pattern_matches(p, path) for p in self.modules_not_converted)


def _bits(value: Any, key: str) -> int:
    return check_int(value, f"{_FIELD}.{key}", 1, 32)


def _group_size(value: Any, key: str = "group_size") -> int | None:
    """A group size; -1 (and null) mean one scale per output channel."""
    if value is None or value == -1:
        return None
    return check_int(value, f"{_FIELD}.{key}", 1, _MAX_GROUP)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _block(value: Any, key: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise InvalidConfig(
            f"{key} must be a list of block sizes such as [128, 128], got {echo(value)}",
            field=key,
        )
    return tuple(check_int(b, key, 1, _MAX_GROUP) for b in value)


def _gptq(qc: Mapping[str, Any], skip: tuple[str, ...]) -> QuantizationSpec:
    return QuantizationSpec(
        method="gptq",
        bits=_bits(qc.get("bits", 4), "bits"),
        group_size=_group_size(qc.get("group_size", 128)),
        symmetric=bool(qc.get("sym", True)),
        modules_not_converted=skip,
        quantize_lm_head=bool(qc.get("lm_head", False)),
        format=_text(qc.get("checkpoint_format")),
    )


def _awq(qc: Mapping[str, Any], skip: tuple[str, ...]) -> QuantizationSpec:
    group_key = "group_size" if "group_size" in qc else "q_group_size"
    return QuantizationSpec(
        method="awq",
        bits=_bits(qc.get("bits", qc.get("w_bit", 4)), "bits"),
        group_size=_group_size(qc.get(group_key, 128), group_key),
        symmetric=not bool(qc.get("zero_point", True)),
        modules_not_converted=skip,
        format=_text(qc.get("version")),
    )


def _bitsandbytes(qc: Mapping[str, Any], skip: tuple[str, ...]) -> QuantizationSpec:
    four = bool(qc.get("load_in_4bit", False))
    eight = bool(qc.get("load_in_8bit", False))
    if four == eight:
        raise InvalidConfig(
            "bitsandbytes quantization_config must set exactly one of load_in_4bit and "
            "load_in_8bit",
            field=f"{_FIELD}.load_in_4bit",
        )
    skip = skip + str_tuple(qc.get("llm_int8_skip_modules"), f"{_FIELD}.llm_int8_skip_modules")
    if eight:
        return QuantizationSpec(
            method="bitsandbytes",
            bits=8,
            symmetric=True,
            quant_type="int8",
            modules_not_converted=skip,
        )
    quant_type = str(qc.get("bnb_4bit_quant_type", "fp4")).lower()
    if quant_type not in ("nf4", "fp4"):
        raise InvalidConfig(
            f"bnb_4bit_quant_type must be nf4 or fp4, got {echo(quant_type)}",
            field=f"{_FIELD}.bnb_4bit_quant_type",
        )
    return QuantizationSpec(
        method="bitsandbytes",
        bits=4,
        group_size=64,
        symmetric=True,
        quant_type=quant_type,
        double_quant=bool(qc.get("bnb_4bit_use_double_quant", False)),
        modules_not_converted=skip,
    )


def _fp8(qc: Mapping[str, Any], skip: tuple[str, ...]) -> QuantizationSpec:
    return QuantizationSpec(
        method="fp8",
        bits=8,
        quant_type="float8_e4m3fn",
        weight_block_size=_block(qc.get("weight_block_size"), f"{_FIELD}.weight_block_size"),
        modules_not_converted=skip,
        format=_text(qc.get("fmt")),
    )


def _mxfp4(qc: Mapping[str, Any], skip: tuple[str, ...]) -> QuantizationSpec:
    return QuantizationSpec(
        method="mxfp4",
        bits=4,
        group_size=32,
        symmetric=True,
        quant_type="mxfp4",
        modules_not_converted=skip,
    )


# compressed-tensors strategies (compressed_tensors.quantization.QuantizationStrategy).
_CT_STRATEGIES = ("tensor", "channel", "group", "block", "token", "tensor_group")


def _compressed_tensors(qc: Mapping[str, Any], skip: tuple[str, ...]) -> QuantizationSpec:
    field = f"{_FIELD}.config_groups"
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise InvalidConfig("compressed-tensors config needs config_groups", field=field)
    weights: Mapping[str, Any] | None = None
    lm_head = False
    for group in groups.values():
        if not isinstance(group, Mapping):
            raise InvalidConfig("each config group must be an object", field=field)
        w = group.get("weights")
        if isinstance(w, Mapping):
            weights = w
            targets = str_tuple(group.get("targets"), f"{field}.targets")
            lm_head = any("lm_head" in t for t in targets)
            break
    if weights is None:
        raise InvalidConfig("compressed-tensors config has no weight scheme", field=field)
    strategy = weights.get("strategy", "tensor")
    if strategy not in _CT_STRATEGIES:
        raise InvalidConfig(
            f"weights.strategy {echo(strategy)} is not a compressed-tensors strategy; one of "
            + ", ".join(_CT_STRATEGIES),
            field=f"{field}.weights.strategy",
        )
    group_size = None
    if strategy in ("group", "tensor_group"):
        group_size = _group_size(weights.get("group_size"), "config_groups.weights.group_size")
        if group_size is None:
            raise InvalidConfig(
                f"weights.strategy {strategy!r} needs a positive group_size",
                field=f"{field}.weights.group_size",
            )
    block = None
    if strategy == "block":
        block = _block(weights.get("block_structure"), f"{field}.weights.block_structure")
    return QuantizationSpec(
        method="compressed-tensors",
        bits=_bits(weights.get("num_bits", 8), "config_groups.weights.num_bits"),
        group_size=group_size,
        symmetric=bool(weights.get("symmetric", True)),
        quant_type=str(weights.get("type", "int")),
        weight_block_size=block,
        modules_not_converted=skip + str_tuple(qc.get("ignore"), f"{_FIELD}.ignore"),
        quantize_lm_head=lm_head,
        format=_text(qc.get("format")),
    )


_PARSERS: Mapping[str, Callable[[Mapping[str, Any], tuple[str, ...]], QuantizationSpec]] = (
    MappingProxyType(
        {
            "awq": _awq,
            "bitsandbytes": _bitsandbytes,
            "compressed-tensors": _compressed_tensors,
            "fp8": _fp8,
            "gptq": _gptq,
            "mxfp4": _mxfp4,
        }
    )
)

#: The quant_method values a config may name.
QUANT_METHODS: tuple[str, ...] = tuple(_PARSERS)


def parse_quantization(qc: Any) -> QuantizationSpec | None:
    """The spec a ``quantization_config`` describes (None without one)."""
    if qc is None:
        return None
    if not isinstance(qc, Mapping):
        raise InvalidConfig("quantization_config must be an object", field=_FIELD)
    method = qc.get("quant_method")
    if method is None and (qc.get("load_in_4bit") or qc.get("load_in_8bit")):
        method = "bitsandbytes"
    if not isinstance(method, str):
        raise InvalidConfig(
            "quantization_config.quant_method is missing", field=f"{_FIELD}.quant_method"
        )
    key = method.lower().replace("_", "-")
    parser = _PARSERS.get(key)
    if parser is None:
        raise InvalidConfig(
            f"quantization method {echo(method)} is not supported; supported: "
            + ", ".join(QUANT_METHODS),
            field=f"{_FIELD}.quant_method",
        )
    skip = str_tuple(qc.get("modules_to_not_convert"), f"{_FIELD}.modules_to_not_convert")
    return parser(qc, skip)
