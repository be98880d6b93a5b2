"""Read an engine command line into the model, the options and where each came from.

Accepts what a user or a manifest holds: ``vllm serve <model> [flags]``, ``python -m
vllm.entrypoints.openai.api_server --model …``, ``python3 -m sglang.launch_server
--model-path …``, ``sglang serve <model>``, the same inside ``sh -c``/``bash -lc`` scripts, after
``exec``, ``env``, ``VAR=x`` assignments or in an ``&&`` chain (see `service.workloads.shell`).
Flags are read the way the engine's argparse parser reads them (`service.workloads.engine_flags`
holds the tables): ``--flag value`` and ``--flag=value``, ``--no-flag`` where the engine has it,
the last occurrence winning, vLLM's positional model after ``serve`` and its ``--max_model_len``
spelling. A flag no table models goes to ``ignored_args``; a modelled flag with a value the
engine would refuse is a `WorkloadError` naming the flag and where it was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from service.workloads.engine_flags import (
    ENGINE_FLAGS,
    Engine,
    EngineFlags,
    OptionValue,
    ValueSyntaxError,
)
from service.workloads.models import ModelRef, model_ref
from service.workloads.shell import SimpleCommand, basename, simple_commands
from service.workloads.sources import Sourced, Token, WorkloadError

__all__ = [
    "EngineCommand",
    "IgnoredArg",
    "find_engine_command",
    "format_engine_args",
    "parse_command",
    "parse_engine_args",
]

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
# python -m <module>: the engine, whether a positional model may follow, extra words to match.
_MODULES: dict[str, Engine] = {
    "vllm.entrypoints.openai.api_server": "vllm",
    "vllm.entrypoints.api_server": "vllm",
    "sglang.launch_server": "sglang",
    # NVIDIA Dynamo's workers take the engine's own arguments (ai-dynamo/dynamo
    # components/src/dynamo/vllm/args.py builds vLLM's AsyncEngineArgs from them; dynamo.sglang
    # SGLang's ServerArgs); their own flags (--is-prefill-worker, ...) are not the engine's.
    "dynamo.vllm": "vllm",
    "dynamo.sglang": "sglang",
}
_SUBCOMMAND_MODULES: dict[str, Engine] = {
    "vllm.entrypoints.cli.main": "vllm",
    "sglang.cli.main": "sglang",
}
# Python interpreter options that take the next word as their value.
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "-Q"})


@dataclass(frozen=True)
class IgnoredArg:
    """Words of the command line that no flag table models (e.g. ``--port 8000``)."""

    words: tuple[str, ...]
    source: str

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True)
class EngineCommand:
    """An engine invocation as read: engine, model, modelled options, and what was ignored."""

    engine: Engine
    entrypoint: str
    """How the engine was started: ``vllm serve``, ``python3 -m sglang.launch_server``, …"""
    entrypoint_source: str
    model: ModelRef | None
    options: Mapping[str, Sourced[OptionValue]]
    """Modelled options by the engine's own name (``tensor_parallel_size``, ``tp_size``),
    each with the position of the word it was read from, and the engine's environment
    switches (``allow_long_max_model_len`` from ``env VLLM_ALLOW_LONG_MAX_MODEL_LEN``). Only
    what the command gives; `value` adds the defaults."""
    ignored_args: tuple[IgnoredArg, ...] = ()
    env: Mapping[str, Sourced[str]] = field(default_factory=dict)
    """Variables set for the command (container ``env``, ``VAR=x`` prefixes, ``export``)."""
    notes: tuple[str, ...] = ()

    @property
    def flags(self) -> EngineFlags:
        return ENGINE_FLAGS[self.engine]

    def value(self, option: str) -> Sourced[OptionValue] | None:
        """The option as given, else the engine's constant default (source ``default``), else None.

        None means the engine resolves the value at start-up (from the model or the GPU).
        """
        given = self.options.get(option)
        if given is not None:
            return given
        if any(setting.option == option for setting in self.flags.env_options):
            return Sourced(False, "default")
        default = self.flags.option(option).default
        return None if default is None else Sourced(default, "default")

    def layout(self) -> dict[str, Sourced[int]]:
        """Tensor, pipeline and data parallel sizes, each given or the engine's default of 1."""
        out: dict[str, Sourced[int]] = {}
        for role, option in self.flags.layout.items():
            read = self.value(option)
            value = read.value if read is not None else 1
            out[role] = Sourced(
                value if isinstance(value, int) else 1, read.source if read else "default"
            )
        return out


def parse_command(
    command: str | Sequence[str], *, env: Mapping[str, str] | None = None
) -> EngineCommand:
    """Read the first engine invocation in a command line.

    A string is read as a shell command line (sources are ``command word N``); a list is an
    argv as ``exec`` receives it (sources are ``argv[N]``). ``env`` gives variables the command
    line may reference. Raises `WorkloadError` when no vLLM or SGLang invocation is found or a
    modelled flag has a value the engine would refuse.
    """
    known = {name: Sourced(value, f"env {name}") for name, value in (env or {}).items()}
    if isinstance(command, str):
        words = [Token("sh", "command"), Token("-c", "command"), Token(command, "command")]
        origin = "command"
    else:
        if not all(isinstance(word, str) for word in command):
            raise WorkloadError("command", "an argv list must hold only strings")
        words = [Token(word, f"argv[{i}]") for i, word in enumerate(command)]
        origin = "argv"
    if not words or not any(w.text.strip() for w in words):
        raise WorkloadError(origin, "the command is empty", "give an engine command line")
    found = find_engine_command(words, known)
    if found is None:
        raise WorkloadError(
            origin,
            "no vLLM or SGLang invocation found",
            "expected e.g. 'vllm serve <model> …', 'python -m vllm.entrypoints.openai.api_server "
            "--model …' or 'python -m sglang.launch_server --model-path …'",
        )
    return found


def find_engine_command(
    words: Sequence[Token], env: Mapping[str, Sourced[str]] | None = None
) -> EngineCommand | None:
    """The first engine invocation in a word list (wrappers and scripts unwrapped), or None.

    Raises `WorkloadError` for a script that cannot be split or a modelled flag with a bad value.
    """
    try:
        commands = simple_commands(words, env)
    except ValueError as exc:
        source = words[-1].source if words else "command"
        raise WorkloadError(source, f"the shell command cannot be split: {exc}") from None
    invocations = [(cmd, found) for cmd in commands if (found := _invocation(cmd)) is not None]
    if not invocations:
        return None
    (command, (engine, entrypoint, start, positional_rule)), *others = invocations
    notes = []
    if others:
        notes.append(
            f"the command starts {len(invocations)} engine processes; the first one is read"
        )
    return parse_engine_args(
        engine,
        command.words[start:],
        entrypoint=entrypoint,
        entrypoint_source=command.words[0].source,
        env=command.env,
        positional_model=positional_rule,
        notes=tuple(notes),
    )


def _invocation(command: SimpleCommand) -> tuple[Engine, str, int, str | None] | None:
    """(engine, entrypoint, index of the first argument, positional-model rule) or None.

    The rule is ``anywhere`` (vLLM's ``serve`` takes its model positional anywhere argparse
    finds a free word), ``first`` (``sglang serve <model>`` only right after ``serve``) or None.
    """
    words = [w.text for w in command.words]
    program = basename(words[0])
    if program == "uv" and len(words) > 2 and words[1] == "run":
        inner = 2
        while inner < len(words) and words[inner].startswith("-"):
            inner += 1
        rest = SimpleCommand(command.words[inner:], command.env)
        found = _invocation(rest) if rest.words else None
        if found is None:
            return None
        inner_engine, entrypoint, start, rule = found
        return inner_engine, entrypoint, start + inner, rule
    if program in ("vllm", "sglang") and len(words) > 1 and words[1] == "serve":
        serving: Engine = "vllm" if program == "vllm" else "sglang"
        return serving, f"{program} serve", 2, "anywhere" if serving == "vllm" else "first"
    if _PYTHON.match(program):
        i = 1
        while i < len(words) and words[i].startswith("-") and words[i] != "-m":
            if words[i].startswith("-m"):
                break
            i += 2 if words[i] in _PYTHON_OPTIONS_WITH_VALUE else 1
        if i >= len(words):
            return None
        if words[i] == "-m" and i + 1 < len(words):
            module, after = words[i + 1], i + 2
        elif words[i].startswith("-m") and len(words[i]) > 2:
            module, after = words[i][2:], i + 1
        else:
            return None
        entry = f"{program} -m {module}"
        if module in _MODULES:
            return _MODULES[module], entry, after, None
        if module in _SUBCOMMAND_MODULES and after < len(words) and words[after] == "serve":
            sub = _SUBCOMMAND_MODULES[module]
            return sub, f"{entry} serve", after + 1, "anywhere" if sub == "vllm" else "first"
    return None


def _is_flag(text: str) -> bool:
    """Whether argparse reads a word as an option (not a value): ``-x``/``--x``, not ``-1``."""
    return text.startswith("-") and len(text) > 1 and not _NEGATIVE_NUMBER.match(text)


def parse_engine_args(
    engine: Engine,
    words: Sequence[Token],
    *,
    entrypoint: str,
    entrypoint_source: str,
    env: Mapping[str, Sourced[str]] | None = None,
    positional_model: str | None = None,
    notes: tuple[str, ...] = (),
) -> EngineCommand:
    """Read the arguments that follow an engine's entrypoint.

    ``positional_model``: ``anywhere`` (vLLM ``serve``), ``first`` (``sglang serve``) or None.
    Raises `WorkloadError` for a modelled flag whose value the engine would refuse.
    """
    table = ENGINE_FLAGS[engine]
    options: dict[str, Sourced[OptionValue]] = {}
    ignored: list[IgnoredArg] = []
    positional: Sourced[str] | None = None
    notes_out = list(notes)
    i, n = 0, len(words)
    while i < n:
        word = words[i]
        text = word.text
        if text == "--":
            if i + 1 < n:
                ignored.append(IgnoredArg(tuple(w.text for w in words[i:]), word.source))
            break
        if not _is_flag(text):
            may_be_model = positional_model == "anywhere" or (
                positional_model == "first" and i == 0
            )
            if may_be_model and positional is None:
                positional = Sourced(text, word.source)
            else:
                ignored.append(IgnoredArg((text,), word.source))
            i += 1
            continue
        name, has_inline, inline = text.partition("=")
        found = table.lookup(name)
        if found is None:
            takes_next = (
                not has_inline
                and not table.is_switch(name)
                and i + 1 < n
                and not _is_flag(words[i + 1].text)
            )
            taken = words[i : i + 2] if takes_next else words[i : i + 1]
            ignored.append(IgnoredArg(tuple(w.text for w in taken), word.source))
            if name in ("--config", "-c") or name.startswith("--config="):
                notes_out.append(f"options inside the {name} file ({word.source}) are not read")
            i += len(taken)
            continue
        spec, negated = found
        flag = table.normalise(name)
        if spec.kind in ("switch", "bool_optional"):
            if has_inline:
                raise WorkloadError(
                    word.source,
                    f"{flag} takes no value, got {inline!r}",
                    f"write {flag} alone"
                    + (
                        f" or {spec.spellings[0].replace('--', '--no-', 1)}"
                        if spec.kind == "bool_optional"
                        else ""
                    ),
                )
            options[spec.option] = Sourced(not negated, word.source)
            i += 1
            continue
        if spec.kind == "str_list":
            values: list[str] = [inline] if has_inline else []
            first_source = word.source if has_inline else None
            j = i + 1
            if not has_inline:
                while j < n and not _is_flag(words[j].text):
                    values.append(words[j].text)
                    first_source = first_source or words[j].source
                    j += 1
            if not values or first_source is None:
                raise WorkloadError(word.source, f"{flag} expects one or more names", None)
            options[spec.option] = Sourced(tuple(values), first_source)
            i = j
            continue
        if has_inline:
            value_text, value_source, i = inline, word.source, i + 1
        elif i + 1 < n and not _is_flag(words[i + 1].text):
            value_text, value_source, i = words[i + 1].text, words[i + 1].source, i + 2
        else:
            raise WorkloadError(
                word.source, f"{flag} expects a value", f"{flag} takes {spec.expects()}"
            )
        if value_text.strip() == "" and spec.default is None and table.empty_means_unset:
            # vLLM parses an optional option with ``optional_type``: "" is None, i.e. unset
            # (an empty ``${VAR-}`` in a manifest).
            notes_out.append(f"{flag} is empty ({value_source}): unset, as vLLM reads it")
            continue
        try:
            options[spec.option] = Sourced(spec.parse(value_text), value_source)
        except ValueSyntaxError as exc:
            unresolved = "$" in value_text
            raise WorkloadError(
                value_source,
                f"{flag}: {exc}",
                "the variable it names is not set in the object"
                if unresolved
                else f"{flag} takes {spec.expects()}",
            ) from None
    model = _model(table, options, positional, notes_out)
    known_env = env or {}
    for setting in table.env_options:
        read = known_env.get(setting.variable)
        if read is not None:
            origin = read.source
            where = origin if origin.startswith("env ") else f"env {setting.variable} ({origin})"
            options[setting.option] = Sourced(
                read.value.strip().lower() in setting.true_values, where
            )
    for spec in table.flags:
        read = known_env.get(spec.env) if spec.env else None
        if read is None or spec.option in options:
            continue  # a flag given wins over the variable, as in the engine
        origin = read.source
        where = origin if origin.startswith("env ") else f"env {spec.env} ({origin})"
        try:
            options[spec.option] = Sourced(spec.parse(read.value), where)
        except ValueSyntaxError as exc:
            raise WorkloadError(where, f"{spec.env}: {exc}", f"it takes {spec.expects()}") from None
    return EngineCommand(
        engine=engine,
        entrypoint=entrypoint,
        entrypoint_source=entrypoint_source,
        model=model,
        options=options,
        ignored_args=tuple(ignored),
        env=dict(env or {}),
        notes=tuple(notes_out),
    )


def _model(
    table: EngineFlags,
    options: dict[str, Sourced[OptionValue]],
    positional: Sourced[str] | None,
    notes: list[str],
) -> ModelRef | None:
    """The model named by the flag or the positional word; the flag wins, as in vLLM."""
    flagged = options.pop(table.model_option, None)
    if flagged is not None and positional is not None:
        notes.append(
            f"the model is given twice ({positional.source} and {flagged.source}); the engine "
            f"refuses that, the flag's value is read"
        )
    chosen = flagged if flagged is not None else positional
    if chosen is None:
        return None
    return model_ref(str(chosen.value), chosen.source)


def format_engine_args(engine: Engine, options: Mapping[str, OptionValue]) -> list[str]:
    """The flags that set ``options``, in the engine's own spelling (the first listed).

    The inverse of `parse_engine_args` for modelled options: reading the result back gives the
    same values. Raises KeyError for an option the table does not model and TypeError for a
    value of the wrong type.
    """
    table = ENGINE_FLAGS[engine]
    argv: list[str] = []
    for name, value in options.items():
        spec = table.option(name)
        flag = spec.spellings[0]
        if spec.kind in ("switch", "bool_optional"):
            if not isinstance(value, bool):
                raise TypeError(f"{name} takes true or false, got {value!r}")
            if value:
                argv.append(flag)
            elif spec.kind == "bool_optional":
                argv.append("--no-" + flag[2:])
        elif spec.kind == "str_list":
            items = (value,) if isinstance(value, str) else value
            if not isinstance(items, tuple) or not items:
                raise TypeError(f"{name} takes one or more names, got {value!r}")
            argv.extend([flag, *items])
        elif spec.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} takes an integer, got {value!r}")
            argv.extend([flag, str(value)])
        elif spec.kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} takes a number, got {value!r}")
            argv.extend([flag, repr(float(value))])
        else:
            if not isinstance(value, str):
                raise TypeError(f"{name} takes a string, got {value!r}")
            argv.extend([flag, value])
    return argv
