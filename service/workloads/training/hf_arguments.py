"""Hugging Face argument parsing: the dataclass fields trainer scripts take as flags.

transformers' ``HfArgumentParser`` (5.24 ``hf_argparser.py`` ``_parse_dataclass_field``) turns
each dataclass field into ``--name`` (and ``--name-with-dashes``); a ``bool`` field takes an
optional value (``--bf16`` alone is true; ``--bf16 false``), one defaulting to true also gets
``--no_name``; a list field takes one or more words; ``string_to_bool`` reads yes/no,
true/false, t/f, y/n, 1/0. TRL's ``TrlParser`` (``trl/scripts/utils.py``) adds ``--config
file.yaml``, whose keys replace the dataclasses' defaults and which the command line overrides.

`FIELDS` lists the fields read here, with the default of the dataclass that declares them:
``TrainingArguments`` (transformers 5.24 ``training_args.py``), TRL's ``_BaseConfig``
(``trl/trainer/base_config.py``: ``gradient_checkpointing`` true, ``bf16`` true unless
``fp16``), ``SFTConfig`` (``trl/trainer/sft_config.py``: ``max_length`` 1024, ``loss_type``
``chunked_nll`` unless Liger) and ``ModelConfig`` (``trl/trainer/model_config.py``: ``dtype``
``float32``, ``lora_r`` 16, ``bnb_4bit_quant_type`` nf4). A flag of no listed field is kept as
an ignored argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from service.workloads.commands import IgnoredArg
from service.workloads.sources import ReadProblem, Sourced, Token
from service.workloads.training.settings import Value

__all__ = ["FIELDS", "TRL_DEFAULTS", "HfArgs", "HfField", "config_values", "parse_hf_args"]

Kind = Literal["bool", "int", "str", "list", "json"]


@dataclass(frozen=True)
class HfField:
    """One dataclass field read as a flag: its kind and the declaring class's default."""

    name: str
    kind: Kind
    default: Value
    owner: str
    aliases: tuple[str, ...] = ()


_TA = "TrainingArguments"
_MC = "ModelConfig"
_SFT = "SFTConfig"

FIELDS: tuple[HfField, ...] = (
    HfField("per_device_train_batch_size", "int", 8, _TA),
    HfField("gradient_accumulation_steps", "int", 1, _TA),
    HfField("gradient_checkpointing", "bool", False, _TA, ("activation_checkpointing",)),
    HfField(
        "gradient_checkpointing_kwargs", "json", None, _TA, ("activation_checkpointing_kwargs",)
    ),
    HfField("bf16", "bool", False, _TA),
    HfField("fp16", "bool", False, _TA),
    HfField("optim", "str", "adamw_torch_fused", _TA),
    HfField("deepspeed", "str", None, _TA),
    HfField("fsdp", "str", None, _TA),
    HfField("fsdp_config", "str", None, _TA),
    HfField("use_liger_kernel", "bool", False, _TA),
    HfField("torch_compile", "bool", False, _TA),
    HfField("auto_find_batch_size", "bool", False, _TA),
    HfField("dataloader_num_workers", "int", 0, _TA),
    HfField("dataloader_pin_memory", "bool", True, _TA),
    HfField("dataloader_prefetch_factor", "int", None, _TA),
    HfField("use_cpu", "bool", False, _TA),
    # The model: TRL's ModelConfig and the transformers example scripts' ModelArguments.
    HfField("model_name_or_path", "str", None, _MC),
    HfField("dtype", "str", "auto", "from_pretrained", ("torch_dtype",)),
    HfField("attn_implementation", "str", None, _MC),
    HfField("use_peft", "bool", False, _MC),
    HfField("lora_r", "int", 16, _MC),
    HfField("lora_target_modules", "list", None, _MC),
    HfField("lora_modules_to_save", "list", None, _MC),
    HfField("lora_target_parameters", "list", None, _MC),
    HfField("use_dora", "bool", False, _MC),
    HfField("load_in_4bit", "bool", False, _MC),
    HfField("load_in_8bit", "bool", False, _MC),
    HfField("bnb_4bit_quant_type", "str", "nf4", _MC),
    HfField("use_bnb_nested_quant", "bool", False, _MC),
    # Sequence length: SFTConfig's, and the example scripts' spellings.
    HfField("max_length", "int", None, _SFT, ("max_seq_length", "block_size")),
    HfField("packing", "bool", False, _SFT),
    HfField("padding_free", "bool", False, _SFT),
    HfField("loss_type", "str", None, _SFT),
    HfField("activation_offloading", "bool", False, _SFT),
)

# TRL's defaults where they differ from TrainingArguments / from_pretrained.
TRL_DEFAULTS: Mapping[str, tuple[Value, str]] = {
    "gradient_checkpointing": (True, "TRL _BaseConfig"),
    "bf16": (True, "TRL _BaseConfig (true unless fp16)"),
    "dtype": ("float32", "TRL ModelConfig"),
    "max_length": (1024, "TRL SFTConfig"),
}

_BY_FLAG: dict[str, HfField] = {}
for _field in FIELDS:
    for _name in (_field.name, *_field.aliases):
        _BY_FLAG[f"--{_name}"] = _field
        _BY_FLAG[f"--{_name.replace('_', '-')}"] = _field

_TRUE = frozenset({"yes", "true", "t", "y", "1"})
_FALSE = frozenset({"no", "false", "f", "n", "0"})


def _is_flag(text: str) -> bool:
    return text.startswith("-") and len(text) > 1 and not text[1:].replace(".", "").isdigit()


def _convert(spec: HfField, text: str, source: str) -> Value:
    if spec.kind == "bool":
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError(f"--{spec.name} takes true or false, got {text!r}")
    if spec.kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"--{spec.name} takes an integer, got {text!r}") from None
    del source
    return text


@dataclass(frozen=True)
class HfArgs:
    """Field values as given (by canonical field name), and the words no field models."""

    values: Mapping[str, Sourced[Value]]
    ignored: tuple[IgnoredArg, ...]
    rest: tuple[Token, ...] = ()
    """Words not consumed as flags or their values (positional arguments)."""


def parse_hf_args(words: Sequence[Token]) -> HfArgs | ReadProblem:
    """Read HfArgumentParser-style flags from ``words``; the last occurrence wins."""
    values: dict[str, Sourced[Value]] = {}
    ignored: list[IgnoredArg] = []
    rest: list[Token] = []
    i, n = 0, len(words)
    while i < n:
        word = words[i]
        text = word.text
        if not _is_flag(text):
            rest.append(word)
            i += 1
            continue
        flag, has_inline, inline = text.partition("=")
        negated = False
        spec = _BY_FLAG.get(flag)
        if spec is None and flag.startswith(("--no_", "--no-")):
            spec = _BY_FLAG.get("--" + flag[5:])
            negated = spec is not None and spec.kind == "bool"
            if not negated:
                spec = None
        if spec is None:
            takes = not has_inline and i + 1 < n and not _is_flag(words[i + 1].text)
            taken = words[i : i + 2] if takes else words[i : i + 1]
            ignored.append(IgnoredArg(tuple(w.text for w in taken), word.source))
            i += len(taken)
            continue
        try:
            if negated:
                values[spec.name] = Sourced(False, word.source)
                i += 1
            elif spec.kind == "bool":
                nxt = words[i + 1].text.lower() if i + 1 < n else ""
                if has_inline:
                    values[spec.name] = Sourced(_convert(spec, inline, word.source), word.source)
                    i += 1
                elif nxt in _TRUE or nxt in _FALSE:
                    values[spec.name] = Sourced(nxt in _TRUE, words[i + 1].source)
                    i += 2
                else:
                    values[spec.name] = Sourced(True, word.source)
                    i += 1
            elif spec.kind == "list":
                items = [inline] if has_inline else []
                j = i + 1
                while not has_inline and j < n and not _is_flag(words[j].text):
                    items.append(words[j].text)
                    j += 1
                if not items:
                    return ReadProblem(word.source, f"{flag} expects one or more names")
                values[spec.name] = Sourced(tuple(items), word.source)
                i = j
            else:
                if has_inline:
                    value_text, source, i = inline, word.source, i + 1
                elif i + 1 < n and not _is_flag(words[i + 1].text):
                    value_text, source, i = words[i + 1].text, words[i + 1].source, i + 2
                elif spec.name == "fsdp":
                    # `--fsdp` alone turns FSDP on (transformers: nargs "?", const True).
                    values[spec.name] = Sourced("full_shard", word.source)
                    i += 1
                    continue
                else:
                    return ReadProblem(word.source, f"{flag} expects a value")
                values[spec.name] = Sourced(_convert(spec, value_text, source), source)
        except ValueError as exc:
            return ReadProblem(word.source, str(exc))
    return HfArgs(values, tuple(ignored), tuple(rest))


def config_values(doc: Mapping[str, object], label: str) -> dict[str, Sourced[Value]]:
    """A TrlParser ``--config`` YAML's keys that name listed fields, as values."""
    out: dict[str, Sourced[Value]] = {}
    for key, raw in doc.items():
        spec = _BY_FLAG.get(f"--{key}")
        if spec is None:
            continue
        value: Value
        if isinstance(raw, list):
            value = tuple(str(v) for v in raw)
        elif isinstance(raw, dict):
            value = json.dumps(raw, sort_keys=True)
        elif isinstance(raw, bool | int | float | str) or raw is None:
            value = raw
        else:
            continue
        out[spec.name] = Sourced(value, f"{label} {key}")
    return out
