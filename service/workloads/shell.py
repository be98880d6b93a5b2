"""Unwrap what a container or a CI step runs into the simple commands inside it.

Serving manifests rarely call the engine directly. They run ``sh -c "…"`` or ``bash -lc``
scripts with ``exec``, ``VAR=x cmd`` assignments, ``export``, ``&&`` chains (``ray start … &&
vllm serve …``), ``env``, and init wrappers such as ``tini --`` or ``dumb-init``. This module
turns such a word list into the simple commands a shell would run, each with the variables in
force, keeping for every word where it came from. It expands ``$VAR``, ``${VAR}`` and
``${VAR:-default}`` from the variables it knows (the container's ``env``, those its controller
sets, earlier assignments), evaluates arithmetic ``$((...))`` on them
(`service.workloads.arithmetic`: integers, ``+ - * / %``, bounded), and leaves a reference it
cannot resolve as written (an expression as one word), so the caller can say which variable was
missing. It does not run anything, follow ``if``/``for``, or read files a script sources.

Splitting uses ``shlex`` in POSIX mode, one command at a time: a quote-aware pass first cuts
the script at unquoted ``;``, ``&``, ``|`` and line breaks (dropping comments and
backslash-newline continuations), then expands each command with the variables set before it
(not inside single quotes; an unquoted value splits into words as a shell splits it). As in a
shell, ``VAR=x cmd`` sets ``VAR`` for ``cmd``'s environment, not for the words of its own line.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.workloads.arithmetic import MAX_LENGTH, evaluate
from service.workloads.sources import Sourced, Token

__all__ = ["SimpleCommand", "basename", "simple_commands", "split_command_string"]

SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
# Prefix commands that run the rest of the line as the real command.
_PASSTHROUGH = frozenset({"exec", "nohup", "command", "time"})
_INIT_WRAPPERS = frozenset({"tini", "tini-static", "dumb-init"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_MAX_DEPTH = 4

# Private-use characters mark where an expanded variable starts and ends inside the text
# handed to shlex, so each resulting word can say which variables it holds.
_OPEN, _MID, _CLOSE = "\ue000", "\ue001", "\ue002"
_MARKED = re.compile(f"{_OPEN}([^{_MID}]*){_MID}")


@dataclass(frozen=True)
class SimpleCommand:
    """One command a shell would run: its words and the variables set for it."""

    words: tuple[Token, ...]
    env: Mapping[str, Sourced[str]]


def basename(word: str) -> str:
    """The program name of a path: ``/opt/venv/bin/vllm`` -> ``vllm``."""
    return word.rsplit("/", 1)[-1]


def split_command_string(text: str, origin: str) -> list[Token]:
    """Split a one-line command given as a string into words (``shlex``, POSIX rules).

    Raises ValueError (from shlex) for an unbalanced quote.
    """
    return [Token(word, f"{origin} word {i}") for i, word in enumerate(shlex.split(text))]


def simple_commands(
    words: Sequence[Token], env: Mapping[str, Sourced[str]] | None = None
) -> list[SimpleCommand]:
    """The simple commands that running ``words`` would start, wrappers and scripts unwrapped.

    A word list that is not a wrapper comes back as one command. Raises ValueError for a shell
    script that cannot be split (an unbalanced quote).
    """
    return _unwrap(list(words), dict(env or {}), 0)


def _unwrap(words: list[Token], env: dict[str, Sourced[str]], depth: int) -> list[SimpleCommand]:
    """Unwrap one word list; ``env`` holds the shell's variables and is updated by ``export``
    and by assignments that stand alone, as later commands of the same script see them."""
    words, command_env = _strip_prefixes(words, env)
    if not words:
        # Assignments without a command set shell variables for the rest of the script.
        env.update(command_env)
        return []
    program = basename(words[0].text)
    if program in SHELLS and depth < _MAX_DEPTH:
        script = _shell_script(words)
        if script is not None:
            # A child shell starts from the exported environment plus the prefix assignments.
            return _run_script(script, dict(command_env), depth + 1)
    if program == "export":
        for word in words[1:]:
            if _ASSIGNMENT.match(word.text):
                name, value = word.text.split("=", 1)
                env[name] = Sourced(value, word.source)
        return []
    return [SimpleCommand(tuple(words), command_env)]


def _run_script(script: Token, env: dict[str, Sourced[str]], depth: int) -> list[SimpleCommand]:
    """The simple commands of a script, expanding each with the variables set before it."""
    commands: list[SimpleCommand] = []
    index = 0
    computed: dict[str, str] = {}
    for segment in _segments(script.text):
        words: list[Token] = []
        open_names: list[str] = []
        for raw in shlex.split(_expand_all(segment, env, computed)):
            text, names, open_names = _unmark(raw, open_names)
            source = f"{script.source} word {index}"
            index += 1
            if names:
                refs = ", ".join(
                    computed[name]
                    if name in computed
                    else f"${name} from {env[name].source}"
                    if name in env
                    else f"${name} unset, its default"
                    for name in names
                )
                source = f"{source} ({refs})"
            words.append(Token(text, source))
        if words:
            commands.extend(_unwrap(words, env, depth))
    return commands


def _strip_prefixes(
    words: list[Token], env: dict[str, Sourced[str]]
) -> tuple[list[Token], dict[str, Sourced[str]]]:
    """Drop ``VAR=x``, ``exec``, ``env [-i] [-u N]``, ``nohup``, ``tini --`` and the like.

    Returns the remaining words and the environment the command runs with.
    """
    env = dict(env)
    i = 0
    while i < len(words):
        text = words[i].text
        program = basename(text)
        if _ASSIGNMENT.match(text):
            name, value = text.split("=", 1)
            env[name] = Sourced(value, words[i].source)
            i += 1
        elif program in _PASSTHROUGH:
            i += 1
            while i < len(words) and words[i].text.startswith("-"):
                i += 1
        elif program == "env":
            i += 1
            while i < len(words) and words[i].text.startswith("-"):
                takes_name = words[i].text in ("-u", "--unset", "-C", "--chdir")
                i += 2 if takes_name else 1
        elif program in _INIT_WRAPPERS:
            i += 1
            while i < len(words) and words[i].text.startswith("-"):
                i += 1
                if words[i - 1].text == "--":
                    break
        else:
            break
    return words[i:], env


def _shell_script(words: list[Token]) -> Token | None:
    """The script of ``sh [-opts] -c 'script' [arg0 args…]``, or None when there is no ``-c``."""
    has_c = False
    i = 1
    while i < len(words):
        text = words[i].text
        if text == "--":
            i += 1
            break
        if text in ("-o", "+o", "-O", "+O"):
            i += 2
            continue
        if len(text) > 1 and text[0] in "-+" and text[1:].isalpha():
            has_c = has_c or (text[0] == "-" and "c" in text[1:])
            i += 1
            continue
        break
    if has_c and i < len(words):
        return words[i]
    return None


def _unmark(raw: str, carried: list[str]) -> tuple[str, list[str], list[str]]:
    """Remove expansion markers from a word: (text, variables it holds, still open after it).

    An unquoted value with spaces splits into several words; the variable stays open from the
    word holding its start marker to the word holding its end marker.
    """
    opened = _MARKED.findall(raw)
    pending = carried + opened
    still_open = pending[raw.count(_CLOSE) :]
    text = _MARKED.sub("", raw).replace(_CLOSE, "")
    return text, sorted(set(pending)), still_open


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _segments(script: str) -> list[str]:
    """Split a script at unquoted ``;``, ``&``, ``|`` and line breaks, dropping comments and
    backslash-newline continuations; quotes and escapes are kept for the later split."""
    segments: list[str] = []
    current: list[str] = []
    i, n = 0, len(script)
    quote: str | None = None
    at_word_start = True
    while i < n:
        char = script[i]
        if quote == "'":
            current.append(char)
            quote = None if char == "'" else quote
            i += 1
            continue
        if char == "\\" and i + 1 < n:
            if script[i + 1] != "\n":
                current.append(script[i : i + 2])
                at_word_start = False
            i += 2
            continue
        if quote == '"':
            current.append(char)
            quote = None if char == '"' else quote
            i += 1
            continue
        if char in "'\"":
            quote = char
            current.append(char)
            at_word_start = False
        elif char in ";&|\n":
            segments.append("".join(current))
            current = []
            at_word_start = True
        elif char == "#" and at_word_start:
            while i < n and script[i] != "\n":
                i += 1
            continue
        else:
            current.append(char)
            at_word_start = char in " \t"
        i += 1
    segments.append("".join(current))
    return [segment for segment in segments if segment.strip()]


def _expand_all(text: str, env: Mapping[str, Sourced[str]], computed: dict[str, str]) -> str:
    """Expand variable references and arithmetic outside single quotes, escaped for the
    ``shlex`` split; ``computed`` collects how each arithmetic result was reached."""
    out: list[str] = []
    i, n = 0, len(text)
    quote: str | None = None
    while i < n:
        char = text[i]
        if quote == "'":
            out.append(char)
            quote = None if char == "'" else quote
            i += 1
            continue
        if char == "\\" and i + 1 < n:
            if quote == '"' and text[i + 1] in "$`":
                # POSIX: inside double quotes a backslash makes $ and ` literal; shlex would
                # keep the backslash, and expansion is this pass's job, so the character goes.
                out.append(text[i + 1])
            else:
                out.append(text[i : i + 2])
            i += 2
            continue
        if char == "$" and text.startswith("((", i + 1):
            consumed, replacement = _arithmetic(text, i, env, computed, quoted=quote == '"')
            if consumed:
                out.append(replacement)
                i += consumed
                continue
        if char == "$" and i + 1 < n:
            consumed, replacement = _expand(text, i, env, quoted=quote == '"')
            if consumed:
                out.append(replacement)
                i += consumed
                continue
        if char == '"':
            quote = None if quote == '"' else '"'
        elif char == "'" and quote is None:
            quote = "'"
        out.append(char)
        i += 1
    return "".join(out)


def _expand(
    script: str, start: int, env: Mapping[str, Sourced[str]], *, quoted: bool
) -> tuple[int, str]:
    """Expand the reference at ``script[start] == "$"``: (characters consumed, replacement).

    Returns (0, "") when the text is not a reference this reader expands (``$(…)``, ``$1``);
    an unknown variable stays as written.
    """
    rest = script[start + 1 :]
    default: str | None = None
    if rest.startswith("{"):
        close = rest.find("}")
        if close < 0:
            return 0, ""
        inner = rest[1:close]
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?::?-(.*))?", inner, re.DOTALL)
        if match is None:
            return 0, ""
        name, default = match.group(1), match.group(2)
        consumed = close + 2
    else:
        match = _NAME.match(rest)
        if match is None:
            return 0, ""
        name = match.group(0)
        consumed = len(name) + 1
    if name in env:
        value = env[name].value
    elif default is not None:
        value = default
    else:
        return consumed, script[start : start + consumed]
    escaped = _escape(value, quoted=quoted)
    return consumed, f"{_OPEN}{name}{_MID}{escaped}{_CLOSE}"


def _arithmetic_end(script: str, start: int) -> int | None:
    """The index just past the ``))`` closing the ``$((`` at ``start``, or None."""
    depth = 0
    limit = min(len(script), start + 3 + 2 * MAX_LENGTH)
    i = start + 3
    while i < limit:
        char = script[i]
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                return i + 2 if script.startswith("))", i) else None
            depth -= 1
        i += 1
    return None


def _arithmetic(
    script: str,
    start: int,
    env: Mapping[str, Sourced[str]],
    computed: dict[str, str],
    *,
    quoted: bool,
) -> tuple[int, str]:
    """Expand the ``$((...))`` at ``start`` (`service.workloads.arithmetic`): (characters
    consumed, replacement). One it cannot evaluate stays as written, as one word."""
    end = _arithmetic_end(script, start)
    if end is None:
        return 0, ""
    literal = script[start:end]
    found = evaluate(script[start + 3 : end - 2], lambda name: _value(env, name))
    if found is None:
        escaped = _escape(literal, quoted=quoted)
        return len(literal), escaped if quoted else re.sub(r"(\s)", r"\\\1", escaped)
    key = f"(({len(computed)}))"
    reads = ", ".join(f"{name} from {env[name].source}" for name in found.names)
    computed[key] = f"{literal} = {found.value}" + (f" ({reads})" if reads else "")
    return len(literal), f"{_OPEN}{key}{_MID}{found.value}{_CLOSE}"


def _value(env: Mapping[str, Sourced[str]], name: str) -> str | None:
    read = env.get(name)
    return None if read is None else read.value


def _escape(value: str, *, quoted: bool) -> str:
    """Protect an expanded value from being re-read as quotes, escapes or operators."""
    if quoted:
        return value.replace("\\", "\\\\").replace('"', '\\"')
    return "".join("\\" + c if c in "\\'\";&|" else c for c in value)
