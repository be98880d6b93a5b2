"""JSON from model files, read in bounded memory: an object member by member, and a whole
small document only when its parse is known to fit a budget.

A safetensors header may be 100 MB of JSON (the format's own limit) and a sharded checkpoint's
``model.safetensors.index.json`` megabytes of ``weight_map``: parsed whole, such a document
costs many times its size in Python objects (an 8 MiB ``[{},{},...]`` is 2.8 million
dicts, about 200 MiB). :class:`ObjectReader` walks a top-level object one member at a time
through a window of at most ``chunk`` bytes (256 KiB) plus the member in hand; a member is
parsed only if it is at most ``max_member_bytes`` long, and an object of strings
(``__metadata__``, ``weight_map``) can be skipped without building anything.
:func:`loads_bounded` parses a small document only when an upper bound of what its parse
allocates fits the budget.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import IO, Any

from service.model_store.deadline import check_deadline

__all__ = ["JsonBoundError", "ObjectReader", "loads_bounded", "parse_cost"]

_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()
# json.decoder's string scanner (C when available), as JSONDecoder uses it.
_scanstring: Any = getattr(json.decoder, "scanstring")  # noqa: B009 - untyped in typeshed
# An upper bound, in bytes, of what one JSON value costs parsed, beyond twice its text: a
# dict (64 B empty), a list (56 B + 8 per item), a str (49 B + its text), a float (24 B), an
# int (28 B), and the slot that holds it (a key and a dict entry for an object's member).
# Every value but the first of a container follows a comma, and every container opens with
# a bracket, so commas + brackets + 1 bounds the number of values. Measured with tracemalloc
# on CPython 3.11 (tests/model_store/test_hostile_files.py checks the bound on the costliest
# shapes): at most about 150 B per value (an object of distinct keys and floats).
VALUE_COST = 240


class JsonBoundError(ValueError):
    """The document is not valid JSON, or exceeds a bound."""


def parse_cost(raw: bytes) -> int:
    """An upper bound of the bytes ``json.loads(raw)`` allocates (see VALUE_COST)."""
    values = raw.count(b",") + raw.count(b"[") + raw.count(b"{") + 1
    return values * VALUE_COST + 2 * len(raw)


def loads_bounded(raw: bytes, budget: int) -> Any:
    """``json.loads(raw)`` if its :func:`parse_cost` is within ``budget`` bytes."""
    cost = parse_cost(raw)
    if cost > budget:
        raise JsonBoundError(
            f"{len(raw)} bytes of JSON would take up to {cost} bytes parsed (budget {budget})"
        )
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise JsonBoundError(f"not JSON: {exc}") from None


class ObjectReader:
    """The members of the JSON object in the next ``length`` bytes of ``f``, one at a time."""

    def __init__(
        self,
        f: IO[bytes],
        length: int,
        *,
        chunk: int = 1 << 18,
        max_member_bytes: int = 1 << 16,
        deadline: float | None = None,
    ) -> None:
        self.f = f
        self.remaining = length
        self.chunk = chunk
        self.max_member_bytes = max_member_bytes
        self.deadline = deadline
        self.text = ""
        self.pos = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.count = 0

    # -- the window ----------------------------------------------------------------------

    def _more(self) -> bool:
        """Append the next chunk to the window (dropping what was consumed); False at EOF."""
        if self.remaining <= 0:
            return False
        data = self.f.read(min(self.chunk, self.remaining))
        if not data:
            raise JsonBoundError("the file ends inside its JSON")
        self.remaining -= len(data)
        try:
            text = self.decoder.decode(data, final=self.remaining <= 0)
        except UnicodeDecodeError as exc:
            raise JsonBoundError(f"not UTF-8: {exc}") from None
        rest, self.text = self.text[self.pos :], ""  # the old window goes before the new one
        self.text = rest + text
        self.pos = 0
        return True

    def _char(self) -> str:
        """The next character that is not whitespace ("" at the end)."""
        while True:
            text, pos = self.text, self.pos
            while pos < len(text) and text[pos] in _WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < len(text):
                return text[pos]
            if not self._more():
                return ""

    def _expect(self, chars: str) -> str:
        c = self._char()
        if c == "" or c not in chars:
            raise JsonBoundError(f"expected {' or '.join(chars)} in the JSON, got {c!r}")
        self.pos += 1
        return c

    def _parse(self, parse: Any) -> Any:
        """``parse(text, pos) -> (value, end)`` at the cursor, growing the window until the
        value is whole; refuses a value longer than max_member_bytes."""
        start = self.pos
        while True:
            try:
                value, end = parse(self.text, self.pos)
            except (ValueError, StopIteration):
                if len(self.text) - self.pos > self.max_member_bytes:
                    raise JsonBoundError(
                        f"a member longer than {self.max_member_bytes} bytes"
                    ) from None
                if not self._more():
                    raise JsonBoundError("invalid JSON") from None
                start = self.pos
                continue
            if end - start > self.max_member_bytes:
                raise JsonBoundError(f"a member longer than {self.max_member_bytes} bytes")
            if end == len(self.text) and self.remaining > 0:
                # A number can end at the window's edge and go on in the next chunk.
                self._more()
                start = self.pos
                continue
            self.pos = end
            return value

    def _string(self) -> str:
        if self._char() != '"':
            raise JsonBoundError("expected a string in the JSON")
        return str(self._parse(lambda text, pos: _scanstring(text, pos + 1)))

    # -- members -------------------------------------------------------------------------

    def members(self) -> Iterator[str]:
        """Each member's key; the caller then takes its value with :meth:`value` or
        :meth:`skip_strings` before asking for the next key."""
        self._expect("{")
        if self._char() == "}":
            self.pos += 1
            return
        while True:
            key = self._string()
            self._expect(":")
            self.count += 1
            if self.count % 1024 == 0:
                check_deadline(self.deadline, "the JSON")
            yield key
            if self._expect(",}") == "}":
                return

    def value(self) -> Any:
        """The member value at the cursor, parsed (at most max_member_bytes of text)."""
        self._char()
        return self._parse(_DECODER.raw_decode)

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end), not consumed."""
        return self._char()

    def string_members(self) -> Iterator[tuple[str, str]]:
        """The members of an object whose values are strings (``weight_map``), one pair in
        memory at a time; a value that is not a string is a JsonBoundError."""
        self._expect("{")
        if self._char() == "}":
            self.pos += 1
            return
        count = 0
        while True:
            key = self._string()
            self._expect(":")
            yield key, self._string()
            count += 1
            if count % 4096 == 0:
                check_deadline(self.deadline, "the JSON")
            if self._expect(",}") == "}":
                return

    def skip_strings(self) -> int:
        """Skip an object whose values are strings (or a string): one string in memory at a
        time. Returns the number of members skipped."""
        if self._char() == '"':
            self._string()
            return 0
        return sum(1 for _ in self.string_members())

    def end(self) -> None:
        """Only whitespace may follow the object."""
        if self._char() != "":
            raise JsonBoundError("data after the JSON object")
