"""Properties of the command reader over random argv lists.

- Any argv made of modelled flags (any spelling, ``--flag v`` or ``--flag=v``) reads back the
  values it was written from, whatever unmodelled flags are mixed in; the unmodelled ones all
  land in ``ignored_args``.
- `format_engine_args` and the reader are inverse on modelled options.
- No input, however odd, raises anything but `WorkloadError`.
"""

from __future__ import annotations

import json
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from service.workloads.commands import format_engine_args, parse_command
from service.workloads.engine_flags import ENGINE_FLAGS, Engine, FlagSpec, OptionValue
from service.workloads.sources import WorkloadError

_WORD = st.text(string.ascii_lowercase + string.digits + "_.", min_size=1, max_size=12).filter(
    lambda w: w[0] not in "-."
)


def _value(spec: FlagSpec) -> st.SearchStrategy[OptionValue]:
    """Values the engine accepts for this flag, drawn from the table's own bounds."""
    if spec.kind == "int":
        low = int(spec.minimum) if spec.minimum is not None else 0
        high = min(2**24, int(spec.maximum)) if spec.maximum is not None else 2**24
        return st.integers(min_value=low, max_value=high)
    if spec.kind == "float":
        low = spec.minimum if spec.minimum is not None else 0.0
        high = spec.maximum if spec.maximum is not None else 1e4
        return st.floats(
            min_value=low,
            max_value=high,
            exclude_min=spec.minimum_exclusive,
            allow_nan=False,
            allow_infinity=False,
        )
    if spec.kind == "str":
        return st.sampled_from(spec.choices) if spec.choices else _WORD
    if spec.kind == "str_list":
        return st.lists(_WORD, min_size=1, max_size=3).map(tuple)
    if spec.kind == "switch":
        return st.just(True)
    if spec.kind == "json":
        objects = st.dictionaries(_WORD, st.integers(0, 99), min_size=1, max_size=3)
        return objects.map(lambda d: json.dumps(d, sort_keys=True))
    return st.booleans()


def _render(spec: FlagSpec, value: OptionValue, draw: st.DrawFn) -> list[str]:
    """One way the engine's parser accepts ``value``: any spelling, either value style."""
    spelling = draw(st.sampled_from(spec.spellings))
    if spec.kind in ("switch", "bool_optional"):
        if value:
            return [spelling]
        long_form = next(s for s in spec.spellings if s.startswith("--"))
        return ["--no-" + long_form[2:]]
    if spec.kind == "str_list":
        assert isinstance(value, tuple)
        return [spelling, *value]
    text = repr(value) if isinstance(value, float) else str(value)
    if draw(st.booleans()):
        return [f"{spelling}={text}"]
    return [spelling, text]


@st.composite
def _unknown(draw: st.DrawFn) -> list[str]:
    """An unmodelled flag in one of the shapes argparse flags take; never a known spelling."""
    name = "--zz-" + draw(_WORD).replace("_", "-")
    shape = draw(st.sampled_from(["alone", "inline", "spaced"]))
    if shape == "alone":
        return [name]
    if shape == "inline":
        return [f"{name}={draw(_WORD)}"]
    return [name, draw(_WORD)]


@st.composite
def _argv(draw: st.DrawFn, engine: Engine) -> tuple[list[str], dict[str, OptionValue], list[str]]:
    table = ENGINE_FLAGS[engine]
    modelled = [s for s in table.flags if s.option != table.model_option and s.spellings]
    chosen = draw(st.lists(st.sampled_from(modelled), unique_by=lambda s: s.option, max_size=12))
    groups: list[list[str]] = []
    expected: dict[str, OptionValue] = {}
    for spec in chosen:
        value = draw(_value(spec))
        expected[spec.option] = value
        groups.append(_render(spec, value, draw))
    unknown = draw(st.lists(_unknown(), max_size=4))
    for group in unknown:
        groups.insert(draw(st.integers(0, len(groups))), group)
    head = (
        ["vllm", "serve", "org/model"]
        if engine == "vllm"
        else ["python3", "-m", "sglang.launch_server", "--model-path", "org/model"]
    )
    return head + [w for g in groups for w in g], expected, [" ".join(g) for g in unknown]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["vllm", "sglang"]).flatmap(_argv))
def test_modelled_flags_round_trip_among_unknown_ones(
    case: tuple[list[str], dict[str, OptionValue], list[str]],
) -> None:
    argv, expected, unknown = case
    cmd = parse_command(argv)
    assert {k: v.value for k, v in cmd.options.items()} == expected
    assert sorted(a.text for a in cmd.ignored_args) == sorted(unknown)
    assert cmd.model is not None and cmd.model.repo_id == "org/model"
    for read in cmd.options.values():
        assert read.source.startswith("argv[")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["vllm", "sglang"]).flatmap(_argv))
def test_format_engine_args_is_the_inverse(
    case: tuple[list[str], dict[str, OptionValue], list[str]],
) -> None:
    argv, expected, _ = case
    engine: Engine = "vllm" if argv[0] == "vllm" else "sglang"
    head = argv[:3] if engine == "vllm" else argv[:5]
    cmd = parse_command(head + format_engine_args(engine, expected))
    assert {k: v.value for k, v in cmd.options.items()} == expected


_ANY_WORD = st.text(max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([["vllm", "serve"], ["python", "-m", "sglang.launch_server"], ["sh", "-c"]]),
    st.lists(_ANY_WORD, max_size=10),
)
def test_any_argv_reads_or_raises_workload_error(head: list[str], tail: list[str]) -> None:
    try:
        parse_command(head + tail)
    except WorkloadError as exc:
        assert exc.problem.detail


@settings(max_examples=300, deadline=None)
@given(_ANY_WORD.map(lambda t: "vllm serve org/m " + t))
def test_any_command_string_reads_or_raises_workload_error(command: str) -> None:
    try:
        parse_command(command)
    except WorkloadError as exc:
        assert exc.problem.detail


@settings(max_examples=200, deadline=None)
@given(st.lists(_unknown(), max_size=6))
def test_unknown_flags_never_raise(unknown: list[list[str]]) -> None:
    words = [w for group in unknown for w in group]
    for head in (["vllm", "serve", "org/m"], ["python", "-m", "sglang.launch_server"]):
        cmd = parse_command(head + words)
        assert [a.text for a in cmd.ignored_args] == [" ".join(g) for g in unknown]
