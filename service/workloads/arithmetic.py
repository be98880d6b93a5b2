"""Shell arithmetic expansion, ``$((...))``, on integers only, bounded.

Manifests compute engine flags from the variables a controller sets, e.g. llm-d's wide-EP
decode LeaderWorkerSet passes ``--data-parallel-size $((LWS_GROUP_SIZE * DP_SIZE_LOCAL))``.
This evaluates the part of POSIX arithmetic (XCU 2.6.4 "Arithmetic Expansion") such lines use:
decimal integer constants, ``+ - * / %`` with C precedence and truncating division, unary
``+``/``-``, parentheses, and variables written ``NAME``, ``$NAME``, ``${NAME}`` or
``${NAME:-default}``/``${NAME-default}``, whose values must themselves be decimal integers.

Anything else gives None, and the reader leaves the expression as written so the engine flag
it feeds is reported as unread: other operators (``**``, ``<<``, comparisons, assignment,
``++``/``--``, which bash reads as increment and decrement),
octal or hex constants, a variable the object does not set, a value that is not an integer,
division by zero, a result outside the signed 64-bit range the shells use, an expression
longer than `MAX_LENGTH` characters or nested deeper than `MAX_DEPTH`. It runs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "Evaluation", "evaluate"]

MAX_LENGTH = 256
MAX_DEPTH = 16
_LIMIT = 2**63  # bash and dash compute in intmax_t

_TOKEN = re.compile(
    r"\s*(?:"
    r"(?P<number>\d+)"
    r"|\$\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<colon>:?)-(?P<default>[^}]*))?\}"
    r"|\$?(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>[-+*/%()])"
    r")"
)
_INTEGER = re.compile(r"\s*[-+]?\d+\s*")

Lookup = Callable[[str], str | None]


@dataclass(frozen=True)
class Evaluation:
    """The value of an arithmetic expression and the variables it read, in order."""

    value: int
    names: tuple[str, ...]


class _Unevaluable(Exception):
    pass


def _integer(text: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise _Unevaluable
    stripped = text.strip().lstrip("+-")
    if len(stripped) > 1 and stripped.startswith("0"):
        raise _Unevaluable  # the shells read a leading 0 as octal
    return int(text)


class _Parser:
    def __init__(self, text: str, lookup: Lookup) -> None:
        self.names: list[str] = []
        self.tokens = self._tokenize(text, lookup)
        self.position = 0

    def _tokenize(self, text: str, lookup: Lookup) -> list[int | str]:
        tokens: list[int | str] = []
        index = 0
        while index < len(text):
            if not text[index:].strip():
                break
            match = _TOKEN.match(text, index)
            if match is None or match.end() == index:
                raise _Unevaluable
            index = match.end()
            if match.group("number") is not None:
                tokens.append(_integer(match.group("number")))
            elif match.group("op") is not None:
                operator = match.group("op")
                if operator in "+-" and text.startswith(operator, index):
                    raise _Unevaluable  # ++ and -- increment and decrement in bash and ksh
                tokens.append(operator)
            else:
                name = match.group("braced") or match.group("name")
                value = lookup(name)
                default = match.group("default")
                if default is not None and (value is None or (match.group("colon") and not value)):
                    value = default
                elif value is not None:
                    self.names.append(name)
                if value is None:
                    raise _Unevaluable
                tokens.append(_integer(value))
        return tokens

    def _peek(self) -> int | str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self) -> int | str | None:
        token = self._peek()
        self.position += 1
        return token

    def expression(self, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise _Unevaluable
        value = self._term(depth)
        while self._peek() in ("+", "-"):
            operator = self._take()
            right = self._term(depth)
            value = _checked(value + right if operator == "+" else value - right)
        return value

    def _term(self, depth: int) -> int:
        value = self._unary(depth)
        while self._peek() in ("*", "/", "%"):
            operator = self._take()
            right = self._unary(depth)
            if operator == "*":
                value = _checked(value * right)
            elif right == 0:
                raise _Unevaluable
            else:
                # C division truncates toward zero; the remainder takes the dividend's sign.
                quotient = abs(value) // abs(right) * (1 if (value < 0) == (right < 0) else -1)
                value = _checked(quotient if operator == "/" else value - quotient * right)
        return value

    def _unary(self, depth: int) -> int:
        token = self._take()
        if token in ("+", "-"):
            if depth > MAX_DEPTH:
                raise _Unevaluable
            value = self._unary(depth + 1)
            return _checked(-value if token == "-" else value)
        if token == "(":
            value = self.expression(depth + 1)
            if self._take() != ")":
                raise _Unevaluable
            return value
        if isinstance(token, int):
            return _checked(token)
        raise _Unevaluable


def _checked(value: int) -> int:
    if not -_LIMIT <= value < _LIMIT:
        raise _Unevaluable
    return value


def evaluate(expression: str, lookup: Lookup) -> Evaluation | None:
    """The value of ``expression`` (the text between ``$((`` and ``))``), reading variables
    through ``lookup``; None when it is not an expression this module evaluates."""
    if len(expression) > MAX_LENGTH:
        return None
    try:
        parser = _Parser(expression, lookup)
        if not parser.tokens:
            return None
        value = parser.expression(0)
        if parser.position != len(parser.tokens):
            return None
    except _Unevaluable:
        return None
    return Evaluation(value, tuple(dict.fromkeys(parser.names)))
