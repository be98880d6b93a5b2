"""Shell arithmetic expansion (service/workloads/arithmetic.py), checked against a real shell.

The oracle is ``bash -c 'echo $((...))'`` (and dash where installed): every expression the
evaluator accepts must give the shell's value; what it refuses is what these manifests never
need (other operators, octal, unset variables).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.workloads.arithmetic import MAX_DEPTH, MAX_LENGTH, evaluate
from service.workloads.commands import parse_command

SHELLS = [s for s in ("bash", "dash") if shutil.which(s)]
ENV = {"LWS_GROUP_SIZE": "2", "DP_SIZE_LOCAL": "8", "EMPTY": "", "SUM": "2+3"}


def _shell(shell: str, expression: str) -> int | None:
    done = subprocess.run(
        [shell, "-c", f"echo $(({expression}))"],
        env={"PATH": "/usr/bin:/bin", **ENV},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return int(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def _expressions() -> st.SearchStrategy[str]:
    leaves = st.one_of(
        st.integers(min_value=0, max_value=999).map(str),
        st.sampled_from(["LWS_GROUP_SIZE", "$DP_SIZE_LOCAL", "${LWS_GROUP_SIZE}", "${NOPE:-3}"]),
    )

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
                lambda t: f"{t[0]} {t[1]} {t[2]}"
            ),
            inner.map(lambda e: f"({e})"),
            inner.map(lambda e: f"-{e}"),
        )

    return st.recursive(leaves, extend, max_leaves=8)


@pytest.mark.skipif(not SHELLS, reason="no POSIX shell on this machine")
@settings(max_examples=150, deadline=None)
@given(_expressions())
def test_every_value_it_gives_is_the_shells(expression: str) -> None:
    found = evaluate(expression, ENV.get)
    expected = _shell(SHELLS[0], expression)
    if found is None:
        # Refused only where the shell fails too (division by zero), where bash reads
        # increment or decrement (-- and ++), or past the nesting bound.
        assert (
            expected is None
            or "--" in expression
            or "++" in expression
            or "(" * (MAX_DEPTH // 2) in expression
        ), expression
        return
    assert found.value == expected, expression


@pytest.mark.parametrize(
    "expression",
    [
        "2 ** 3",  # not POSIX
        "010",  # octal in the shells
        "0x10",
        "UNSET * 2",
        "SUM * 2",  # a value that is itself an expression: not read
        "1 / 0",
        "5 % 0",
        "9223372036854775807 + 1",
        "a = 3",
        "1 < 2",
        "",
        "(1",
        "1)",
        "(" * (MAX_DEPTH + 2) + "1" + ")" * (MAX_DEPTH + 2),
        "1+" * MAX_LENGTH + "1",
    ],
)
def test_what_it_does_not_evaluate_gives_none(expression: str) -> None:
    assert evaluate(expression, ENV.get) is None


def test_the_issue_line_gives_the_data_parallel_size_with_its_sources() -> None:
    command = parse_command(
        "vllm serve deepseek-ai/DeepSeek-R1-0528 "
        "--data-parallel-size $((LWS_GROUP_SIZE * DP_SIZE_LOCAL))",
        env={"LWS_GROUP_SIZE": "2", "DP_SIZE_LOCAL": "8"},
    )
    read = command.options["data_parallel_size"]
    assert read.value == 16
    assert "$((LWS_GROUP_SIZE * DP_SIZE_LOCAL)) = 16" in read.source
    assert "LWS_GROUP_SIZE from env LWS_GROUP_SIZE" in read.source


def test_an_expression_on_an_unset_variable_is_named_as_written() -> None:
    with pytest.raises(ValueError, match=r"'\$\(\(LWS_GROUP_SIZE \* DP_SIZE_LOCAL\)\)'"):
        parse_command("vllm serve m --data-parallel-size $((LWS_GROUP_SIZE * DP_SIZE_LOCAL))")


def test_an_assignment_from_arithmetic_feeds_later_commands() -> None:
    command = parse_command(
        "START=$(( ${LWS_WORKER_INDEX:-0} * 8 + 2 )); exec vllm serve m --max-model-len $START",
        env={"LWS_WORKER_INDEX": "1"},
    )
    assert command.options["max_model_len"].value == 10
