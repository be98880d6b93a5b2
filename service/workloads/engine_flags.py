"""The command-line flags of each serving engine, as data: spellings, value syntax, option name.

One `EngineFlags` table per engine. Each `FlagSpec` names the option the way the engine itself
names it (argparse's ``dest``), lists every spelling the engine's parser accepts, and says how a
value is read. The tables follow the engines' own parsers, read from their released wheels:

- vLLM 0.22.0 and 0.34.0: ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``: spellings,
  ``-tp``/``-pp``/``-dp``/``-q``/``-ep``, which options take human-readable integers),
  ``vllm/config/*.py`` (types, bounds, choices), ``vllm/utils/argparse_utils.py``
  (``human_readable_int``; ``FlexibleArgumentParser`` turns ``_`` into ``-`` in flag names and
  moves ``vllm serve --model X`` to the positional ``model_tag``). Boolean config fields become
  ``argparse.BooleanOptionalAction``, so each has a ``--no-`` form.
- SGLang 0.5.23: ``sglang/srt/arg_groups/fields/*.py`` (one field per option; the flag is the
  field name with ``_`` turned into ``-``, plus the listed aliases),
  ``sglang/srt/arg_groups/arg_utils.py`` (booleans are ``store_true``: no ``--no-`` form) and
  ``sglang/srt/utils/common.py`` (its own ``human_readable_int``: SI ``k/M/G/T`` and IEC
  ``Ki/Mi/Gi/Ti``, unlike vLLM's ``k``/``K``). SGLang's parser is a plain ``argparse`` parser,
  which accepts unambiguous prefixes: ``--tp`` and ``--dp`` are prefixes of one flag each
  (``--tp-size``, ``--dp-size``) and are listed here; ``--pp`` is not (it also prefixes
  ``--pp-max-micro-batch-size``).

A flag that no table lists is not an error: the command reader reports it in ``ignored_args``.
``switches`` lists flags each engine has that take no value and are not modelled, so that the
reader does not take the word after them for their value.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cached_property
from typing import Literal

from service.estimator.engines import REGISTRY
from service.estimator.engines.base import Option

__all__ = [
    "ENGINE_FLAGS",
    "SGLANG_FLAGS",
    "VLLM_FLAGS",
    "Engine",
    "EngineFlags",
    "EnvOption",
    "FlagKind",
    "FlagSpec",
    "OptionValue",
    "ValueSyntaxError",
    "parse_plain_int",
    "parse_sglang_int",
    "parse_vllm_int",
    "parse_vllm_int_or_auto",
]

Engine = Literal["vllm", "sglang"]
OptionValue = int | float | str | bool | tuple[str, ...]
FlagKind = Literal["int", "float", "str", "str_list", "switch", "bool_optional", "json"]
"""How a flag reads its value.

``int``/``float``/``str``: one value (``--flag v`` or ``--flag=v``). ``str_list``: one or more
words up to the next flag (argparse ``nargs="+"``). ``switch``: no value, sets True
(``store_true``). ``bool_optional``: no value; ``--flag`` sets True and ``--no-flag`` False
(``argparse.BooleanOptionalAction``). ``json``: one JSON object (``--speculative-config
'{"model": ...}'``), or ``key=value,...`` as older vLLM lines wrote ``--limit-mm-per-prompt``.
"""


class ValueSyntaxError(ValueError):
    """A flag's value is not in the syntax the engine's parser accepts; the text says why."""


def parse_plain_int(text: str) -> int:
    """An integer as Python's ``int()`` reads it, which is what argparse ``type=int`` does."""
    try:
        return int(text)
    except ValueError:
        raise ValueSyntaxError(f"{text!r} is not an integer") from None


_VLLM_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_VLLM_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_VLLM_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_vllm_int(text: str) -> int:
    """vLLM's human-readable integer: ``8k`` = 8000, ``8K`` = 8192, ``25.6k`` = 25600.

    Lower-case suffixes are decimal and allow a fraction; upper-case suffixes are binary and
    do not. The decimal case multiplies a float, as vLLM does, so the result is what vLLM
    itself will use (``4.1k`` is 4099: 4.1 x 1000 is 4099.999... in binary floating point).
    """
    stripped = text.strip()
    match = _VLLM_SUFFIXED.fullmatch(stripped)
    if match:
        number, suffix = match.groups()
        if suffix in _VLLM_DECIMAL:
            return int(float(number) * _VLLM_DECIMAL[suffix])
        if "." in number:
            raise ValueSyntaxError(
                f"{text!r}: vLLM allows no fraction with the binary suffix {suffix!r} "
                f"(use {number}{suffix.lower()} for a decimal multiple)"
            )
        return int(number) * _VLLM_BINARY[suffix]
    try:
        return int(stripped)
    except ValueError:
        raise ValueSyntaxError(
            f"{text!r} is not an integer (vLLM also accepts k/m/g/t = 10^3/10^6/10^9/10^12 "
            "and K/M/G/T = 2^10/2^20/2^30/2^40, e.g. 32k or 32K)"
        ) from None


def parse_vllm_int_or_auto(text: str) -> int:
    """``--max-model-len``: a vLLM human-readable integer, or ``-1``/``auto`` (read as -1).

    -1 asks vLLM to pick the largest length that fits in memory (``ModelConfig.max_model_len``).
    """
    stripped = text.strip()
    if stripped == "-1" or stripped.lower() == "auto":
        return -1
    return parse_vllm_int(stripped)


_SGLANG_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_SGLANG_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_SGLANG_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def parse_sglang_int(text: str) -> int:
    """SGLang's human-readable integer: SI ``k/M/G/T`` (fractions allowed, exact decimal
    arithmetic) and IEC ``Ki/Mi/Gi/Ti`` (whole numbers only). Suffixes are case-sensitive:
    SGLang's ``1M`` is 10^6 where vLLM's is 2^20.
    """
    stripped = text.strip()
    match = _SGLANG_SUFFIXED.fullmatch(stripped)
    if match:
        number, suffix = match.groups()
        if suffix in _SGLANG_IEC:
            if "." in number:
                raise ValueSyntaxError(
                    f"{text!r}: SGLang allows no fraction with the IEC suffix {suffix!r}"
                )
            return int(number) * _SGLANG_IEC[suffix]
        try:
            return int(Decimal(number) * _SGLANG_SI[suffix])
        except InvalidOperation:  # pragma: no cover - the pattern admits only digits
            raise ValueSyntaxError(f"{text!r} is not a number") from None
    try:
        return int(stripped)
    except ValueError:
        raise ValueSyntaxError(
            f"{text!r} is not an integer (SGLang also accepts k/M/G/T = 10^3/10^6/10^9/10^12 "
            "and Ki/Mi/Gi/Ti = 2^10/2^20/2^30/2^40, case-sensitive)"
        ) from None


def parse_float(text: str) -> float:
    """A finite number as ``float()`` reads it (argparse ``type=float``).

    ``nan`` and ``inf`` pass argparse but every engine's config validation refuses them; they
    are refused here so that no estimate is made from them.
    """
    try:
        value = float(text)
    except ValueError:
        raise ValueSyntaxError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueSyntaxError(f"{text!r} is not a finite number")
    return value


# A JSON flag's value: at most this many characters and this much nesting.
MAX_JSON_FLAG_CHARS = 16 * 1024
MAX_JSON_FLAG_DEPTH = 8
_KEY_VALUE = re.compile(r"[A-Za-z_][\w.-]*=[^,=]*(?:,[A-Za-z_][\w.-]*=[^,=]*)*")


def _depth(value: object, level: int = 1) -> int:
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def parse_json_object(text: str) -> str:
    """A JSON-object flag value (``--speculative-config '{...}'``), or the ``key=value,...``
    form older vLLM lines took, returned as canonical JSON text; bounded in size and depth."""
    stripped = text.strip()
    if len(stripped) > MAX_JSON_FLAG_CHARS:
        raise ValueSyntaxError(f"a JSON value of at most {MAX_JSON_FLAG_CHARS} characters")
    try:
        value = json.loads(stripped)
    except ValueError:
        if not _KEY_VALUE.fullmatch(stripped):
            raise ValueSyntaxError(f"{text[:60]!r} is not a JSON object") from None
        pairs = (item.split("=", 1) for item in stripped.split(","))
        value = {k: int(v) if v.isdigit() else v for k, v in pairs}
    if not isinstance(value, dict):
        raise ValueSyntaxError(f"{text[:60]!r} is not a JSON object")
    if _depth(value) > MAX_JSON_FLAG_DEPTH:
        raise ValueSyntaxError(f"a JSON object nested at most {MAX_JSON_FLAG_DEPTH} levels")
    return json.dumps(value, sort_keys=True)


_INT_SYNTAX: dict[Callable[[str], int], str] = {
    parse_vllm_int: "an integer (k/m/g/t and K/M/G/T suffixes allowed)",
    parse_vllm_int_or_auto: "an integer (k/K suffixes allowed), -1 or auto",
    parse_sglang_int: "an integer (k/M/G/T and Ki/Mi/Gi/Ti suffixes allowed)",
}


@dataclass(frozen=True)
class FlagSpec:
    """One modelled option: its spellings, how its value is read and what the engine allows."""

    option: str
    spellings: tuple[str, ...]
    kind: FlagKind
    parse_int: Callable[[str], int] = parse_plain_int
    minimum: float | None = None
    minimum_exclusive: bool = False
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    default: OptionValue | None = None
    """The engine's command-line default where it is a constant; None where the engine
    resolves it at start-up (from the model, the GPU or other options)."""
    env: str | None = None
    """The environment variable the engine also reads the option from (a flag wins)."""

    def parse(self, text: str) -> OptionValue:
        """The value of ``--flag text``; raises `ValueSyntaxError` saying what is wrong."""
        value: OptionValue
        if self.kind == "int":
            value = self.parse_int(text)
        elif self.kind == "float":
            value = parse_float(text)
        elif self.kind == "json":
            return parse_json_object(text)
        elif self.kind == "str":
            value = text
            if self.choices and text not in self.choices:
                raise ValueSyntaxError(
                    f"{text!r} is not one of the accepted values: {', '.join(self.choices)}"
                )
            return value
        else:  # pragma: no cover - the command reader never calls parse for other kinds
            raise ValueSyntaxError(f"a {self.kind} flag takes no single value")
        self._check_bounds(value)
        return value

    def _check_bounds(self, value: float) -> None:
        if self.minimum is not None and (
            value <= self.minimum if self.minimum_exclusive else value < self.minimum
        ):
            relation = "greater than" if self.minimum_exclusive else "at least"
            raise ValueSyntaxError(
                f"{value} is out of range: it must be {relation} {self.minimum:g}"
            )
        if self.maximum is not None and value > self.maximum:
            raise ValueSyntaxError(f"{value} is out of range: it must be at most {self.maximum:g}")

    def expects(self) -> str:
        """What a value must look like, for error messages."""
        if self.kind == "int":
            return _INT_SYNTAX.get(self.parse_int, "an integer")
        if self.kind == "float":
            return "a number"
        if self.kind == "str" and self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind == "str_list":
            return "one or more names"
        if self.kind == "json":
            return "a JSON object"
        return "a value"


@dataclass(frozen=True)
class EnvOption:
    """An environment variable the engine reads as a boolean option."""

    variable: str
    option: str
    true_values: frozenset[str]
    """Values (stripped, lower-cased) the engine reads as true; anything else is false."""


@dataclass(frozen=True)
class EngineFlags:
    """One engine's flag table and the facts about its parser that a reader needs."""

    engine: Engine
    flags: tuple[FlagSpec, ...]
    model_option: str
    """The option that names the model (``model`` for vLLM, ``model_path`` for SGLang)."""
    layout: Mapping[str, str]
    """Parallelism roles (``tensor``, ``pipeline``, ``data``) to this engine's option names."""
    switches: frozenset[str] = field(default_factory=frozenset)
    underscores_as_dashes: bool = False
    """vLLM's parser reads ``--max_model_len`` as ``--max-model-len``; SGLang's does not."""
    empty_means_unset: bool = False
    """vLLM reads an empty value of an optional option as None (``optional_type``)."""
    env_options: tuple[EnvOption, ...] = ()
    """Variables that change how the engine judges its options (all default to false)."""

    @cached_property
    def _by_spelling(self) -> dict[str, FlagSpec]:
        index: dict[str, FlagSpec] = {}
        for spec in self.flags:
            for spelling in spec.spellings:
                if spelling in index:
                    raise ValueError(f"{self.engine}: flag {spelling} listed twice")
                index[spelling] = spec
        return index

    @cached_property
    def _by_option(self) -> dict[str, FlagSpec]:
        return {spec.option: spec for spec in self.flags}

    def normalise(self, spelling: str) -> str:
        """The spelling the engine's parser matches: vLLM turns ``_`` into ``-`` after ``--``."""
        if self.underscores_as_dashes and spelling.startswith("--"):
            return "--" + spelling[2:].replace("_", "-")
        return spelling

    def lookup(self, spelling: str) -> tuple[FlagSpec, bool] | None:
        """The flag a spelling names and whether it is the ``--no-`` form, or None."""
        name = self.normalise(spelling)
        spec = self._by_spelling.get(name)
        if spec is not None:
            return spec, False
        if name.startswith("--no-"):
            spec = self._by_spelling.get("--" + name[5:])
            if spec is not None and spec.kind == "bool_optional":
                return spec, True
        return None

    def is_switch(self, spelling: str) -> bool:
        """Whether an unmodelled flag is known to take no value."""
        return self.normalise(spelling) in self.switches

    def option(self, name: str) -> FlagSpec:
        """The spec of an option by its engine name; KeyError names the known ones."""
        try:
            return self._by_option[name]
        except KeyError:
            known = ", ".join(sorted(self._by_option))
            raise KeyError(
                f"{self.engine} has no modelled option {name!r}; known: {known}"
            ) from None

    def options(self) -> tuple[str, ...]:
        """Every modelled option name, in table order."""
        return tuple(spec.option for spec in self.flags)


_INT_SYNTAX_PARSERS: dict[str, Callable[[str], int]] = {
    "plain": parse_plain_int,
    "vllm": parse_vllm_int,
    "vllm_or_auto": parse_vllm_int_or_auto,
    "sglang": parse_sglang_int,
}
_KINDS: dict[type, FlagKind] = {int: "int", float: "float", str: "str"}


def _spec(option: Option, bool_flags: FlagKind) -> FlagSpec:
    """The reader's spec of one declared option (its engine's declaration is the one source:
    spellings, value syntax, bounds, choices and default)."""
    kind: FlagKind = option.cli_kind or (bool_flags if option.kind is bool else _KINDS[option.kind])
    low = option.cli_low if option.cli_low is not None else option.low
    numeric = kind in ("int", "float")
    return FlagSpec(
        option=option.name,
        spellings=option.spellings,
        kind=kind,
        parse_int=_INT_SYNTAX_PARSERS[option.int_syntax],
        minimum=low if numeric else None,
        minimum_exclusive=option.low_open and option.cli_low is None and numeric,
        maximum=option.high if numeric else None,
        choices=tuple(str(c) for c in option.choices) if kind == "str" else (),
        default=option.default,
        env=option.env,
    )


def _derived(engine: str) -> tuple[FlagSpec, ...]:
    """Every declared option of ``engine`` that has a flag, as the reader's specs."""
    declared = REGISTRY[engine]
    bool_flags: FlagKind = declared.bool_flags
    return tuple(_spec(o, bool_flags) for o in declared.declared if o.spellings or o.env)


VLLM_FLAGS = EngineFlags(
    engine="vllm",
    model_option="model",
    layout={
        "tensor": "tensor_parallel_size",
        "pipeline": "pipeline_parallel_size",
        "data": "data_parallel_size",
    },
    underscores_as_dashes=True,
    empty_means_unset=True,
    # vllm/envs.py: a max_model_len above the model's derived maximum is refused unless
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN is "1" or "true".
    env_options=(
        EnvOption(
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "allow_long_max_model_len", frozenset({"1", "true"})
        ),
    ),
    flags=_derived("vllm"),
    switches=frozenset(
        {
            "--enable-prefix-caching",
            "--no-enable-prefix-caching",
            "--enable-chunked-prefill",
            "--no-enable-chunked-prefill",
            "--disable-log-requests",
            "--enable-log-requests",
            "--disable-log-stats",
            "--enable-auto-tool-choice",
            "--disable-custom-all-reduce",
            "--enable-sleep-mode",
            "--disable-frontend-multiprocessing",
            "--disable-fastapi-docs",
            "--enable-server-load-tracking",
            "--enable-prompt-tokens-details",
            "--enable-force-include-usage",
            "--async-scheduling",
            "--no-async-scheduling",
            "--enable-dbo",
            "--headless",
            "--skip-tokenizer-init",
            "--enable-prompt-embeds",
            "--disable-uvicorn-access-log",
            "--enable-request-id-headers",
            "--enable-tokenizer-info-endpoint",
            "--return-tokens-as-token-ids",
            "--disable-sliding-window",
            "--disable-cascade-attn",
        }
    ),
)

SGLANG_FLAGS = EngineFlags(
    engine="sglang",
    model_option="model_path",
    layout={"tensor": "tp_size", "pipeline": "pp_size", "data": "dp_size"},
    # sglang/srt/environ.py: EnvBool, true for "true", "1", "yes", "y".
    env_options=(
        EnvOption(
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
            "allow_overwrite_longer_context_len",
            frozenset({"true", "1", "yes", "y"}),
        ),
    ),
    flags=_derived("sglang"),
    switches=frozenset(
        {
            "--enable-metrics",
            "--disable-radix-cache",
            "--enable-torch-compile",
            "--disable-cuda-graph-padding",
            "--enable-dp-lm-head",
            "--enable-mixed-chunk",
            "--log-requests",
            "--skip-server-warmup",
            "--enable-cache-report",
            "--disable-overlap-schedule",
            "--enable-p2p-check",
            "--disable-custom-all-reduce",
            "--show-time-cost",
            "--allow-auto-truncate",
            "--is-embedding",
            "--enable-two-batch-overlap",
        }
    ),
)

ENGINE_FLAGS: Mapping[Engine, EngineFlags] = {"vllm": VLLM_FLAGS, "sglang": SGLANG_FLAGS}
