"""Every status or hold message the docs quote is one the code produces.

The convention (README.md, Develop, says it to writers too): a message is
quoted **whole**, the way a user sees it, in

* a fenced code block of README.md, docs/*.md or examples/*/README.md: any line
  holding `gang <namespace>/<name>: ` (the prefix of every gang message), or
* prose, inside backquotes or double quotes, starting with `gang <ns>/<name>: `.

A line is accepted when the whole line, or the part from `gang ` to its end
(without a closing YAML quote), is produced by a format string of `extender/`
(an f-string, a %-format, or a plain string). kube-scheduler's FailedScheduling
(`0/2 nodes are available: 2 gang ...: <message>. <its own text>`) is cut at its
first ". ". A placeholder stands for one word (a name, a number, a quantity), a
comma-separated list of words, or, recursively, another produced message; so
`gang ns/a: {outcome.message}` accepts only real planner messages after it.

Shorter quotes in prose (backquoted or double-quoted) that use a message's words
(`N/M members`, `members exist`, `members placeable`, `members bound`,
`largest free node has`) must be a piece of one produced message.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "examples").glob("*/README.md")]
)

WILD = None  # a placeholder in a template
Template = tuple[str | None, ...]

GANG_PREFIX = re.compile(r"\bgang [a-z0-9][a-z0-9.-]*/[a-z0-9][a-z0-9.-]*: ")
MESSAGE_WORDS = re.compile(
    r"\b(\d+|[A-Z])/(\d+|[A-Z]) members\b|members exist|members placeable|members bound"
    r"|largest free node has",
    re.IGNORECASE,
)
PRINTF = re.compile(r"%(?:\.\d+)?[sdrf]")


# ------------------------------------------------------------------ templates of the code
def _string_constants(trees: list[ast.Module]) -> dict[str, str]:
    """NAME -> value of every module-level `NAME = "text"` (f-strings inline them)."""
    found: dict[str, str] = {}
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                found[node.targets[0].id] = node.value.value
    return found


def _merge(parts: list[str | None]) -> Template:
    merged: list[str | None] = []
    for part in parts:
        if part is WILD:
            if not merged or merged[-1] is not WILD:
                merged.append(WILD)
        elif merged and merged[-1] is not WILD:
            merged[-1] = str(merged[-1]) + part
        else:
            merged.append(part)
    return tuple(merged)


def _printf_template(text: str) -> Template:
    pieces = PRINTF.split(text)
    parts: list[str | None] = []
    for i, piece in enumerate(pieces):
        if i:
            parts.append(WILD)
        if piece:
            parts.append(piece)
    return _merge(parts)


@functools.cache
def templates() -> tuple[Template, ...]:
    trees = [ast.parse(p.read_text()) for p in sorted((REPO / "extender").rglob("*.py"))]
    constants = _string_constants(trees)
    found: set[Template] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                parts: list[str | None] = []
                for value in node.values:
                    if isinstance(value, ast.Constant):
                        parts.append(str(value.value))
                        continue
                    assert isinstance(value, ast.FormattedValue)
                    expr = value.value
                    name = (
                        expr.id
                        if isinstance(expr, ast.Name)
                        else expr.attr
                        if isinstance(expr, ast.Attribute)
                        else None
                    )
                    plain = value.conversion == -1 and value.format_spec is None
                    if plain and name in constants:
                        parts.append(constants[name])
                    else:
                        parts.append(WILD)
                found.add(_merge(parts))
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and "\n" not in node.value
                and node.value.strip()
            ):
                found.add(_printf_template(node.value))
    # A template must say something of its own: not "{a}: {b}".
    return tuple(
        t for t in found if re.search(r"[A-Za-z]{3}", "".join(p for p in t if p is not WILD))
    )


# ------------------------------------------------------------------ matching
@functools.cache
def _compiled() -> tuple[frozenset[str], tuple[tuple[Template, re.Pattern[str]], ...]]:
    """Plain strings as a set; templates with placeholders with a quick regex pre-check."""
    plain = frozenset(str(t[0]) for t in templates() if len(t) == 1 and t[0] is not WILD)
    shaped = tuple(
        (t, re.compile("".join(".+" if p is WILD else re.escape(p) for p in t), re.DOTALL))
        for t in templates()
        if WILD in t
    )
    return plain, shaped


def _word_or_list(value: str) -> bool:
    return bool(value) and all(item and not re.search(r"\s", item) for item in value.split(", "))


@functools.cache
def produced(text: str) -> bool:
    """True when some template, its placeholders filled validly, gives exactly `text`."""
    plain, shaped = _compiled()
    if text in plain:
        return True
    return any(pattern.fullmatch(text) and _fits(t, text) for t, pattern in shaped)


def _value_ok(value: str) -> bool:
    return _word_or_list(value) or produced(value)


def _ends(template: Template, i: int, text: str, pos: int) -> list[int]:
    """Where the placeholder template[i] starting at pos may end: before its next literal."""
    if i + 1 == len(template):
        return [len(text)]
    literal = str(template[i + 1])
    ends, at = [], text.find(literal, pos + 1)
    while at != -1:
        ends.append(at)
        at = text.find(literal, at + 1)
    return ends


def _fits(template: Template, text: str, partial: bool = False) -> bool:
    @functools.cache
    def go(i: int, pos: int) -> bool:
        if pos == len(text) and (partial or i == len(template)):
            return True
        if i == len(template):
            return False
        part = template[i]
        if part is not WILD:
            if text.startswith(part, pos):
                return go(i + 1, pos + len(part))
            return partial and part.startswith(text[pos:])
        ends = _ends(template, i, text, pos)
        if partial:  # the piece may stop inside the placeholder or the literal after it
            after = str(template[i + 1]) if i + 1 < len(template) else ""
            ends += [
                end
                for end in range(pos + 1, len(text) + 1)
                if end not in ends and after.startswith(text[end:])
            ]
        for end in ends:
            value = text[pos:end]
            ok = _word_or_list(value) if (partial and end == len(text)) else _value_ok(value)
            if ok and go(i + 1, end):
                return True
        return False

    if not partial:
        return go(0, 0)
    for i, part in enumerate(template):  # a piece may begin anywhere in a template
        if part is WILD:
            if go(i, 0):
                return True
            continue
        for start in range(len(part)):
            suffix = part[start:]
            if text.startswith(suffix) and go(i + 1, len(suffix)):
                return True
            if suffix.startswith(text):
                return True
    return False


def is_piece_of_a_message(text: str) -> bool:
    return any(_fits(t, text, partial=True) for t in templates())


# ------------------------------------------------------------------ quotes in the docs
def doc_lines(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, line, inside a fenced block) of every line but the fences."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        else:
            yield number, line, fenced


def prose_quotes(line: str) -> list[str]:
    """The `code` and "quoted" spans of a line of prose."""
    return [a or b for a, b in re.findall(r"`([^`]+)`|\"([^\"]+)\"", line)]


def quoted_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every fenced-block line and prose quote holding a gang message."""
    found: list[tuple[int, str]] = []
    for number, line, fenced in doc_lines(text):
        if fenced:
            if GANG_PREFIX.search(line):
                found.append((number, line.strip()))
            continue
        found.extend((number, span) for span in prose_quotes(line) if GANG_PREFIX.match(span))
    return found


def quoted_pieces(text: str) -> list[tuple[int, str]]:
    """Shorter prose quotes that use a message's words."""
    return [
        (number, span)
        for number, line, fenced in doc_lines(text)
        if not fenced
        for span in prose_quotes(line)
        if MESSAGE_WORDS.search(span) and not GANG_PREFIX.match(span)
    ]


def candidates(line: str) -> list[str]:
    """The readings of a quoted line that may be a produced message (any one suffices)."""
    line = line.removeprefix("$ ").strip()
    match = GANG_PREFIX.search(line)
    readings = [line]
    if match:
        message = line[match.start() :].rstrip()
        if message.endswith(("'", '"')):
            message = message[:-1]
        readings.append(message)
        if "nodes are available:" in line[: match.start()] and ". " in message:
            readings.append(message[: message.index(". ")])
    return readings


def accepted(line: str) -> bool:
    return any(produced(reading) for reading in candidates(line))


QUOTES = [
    pytest.param(line, id=f"{path.relative_to(REPO)}:{number}")
    for path in DOCS
    for number, line in quoted_lines(path.read_text())
]
PIECES = [
    pytest.param(piece, id=f"{path.relative_to(REPO)}:{number}")
    for path in DOCS
    for number, piece in quoted_pieces(path.read_text())
]


def test_the_docs_quote_gang_messages_at_all() -> None:
    # The convention finds what it is meant to: the README's demo, the troubleshooting page.
    ids = [p.id for p in QUOTES]
    assert any(i.startswith("README.md:") for i in ids), ids
    assert sum(i.startswith("docs/troubleshooting.md:") for i in ids) >= 5, ids


@pytest.mark.parametrize("line", QUOTES)
def test_every_quoted_gang_message_is_produced_by_the_code(line: str) -> None:
    assert accepted(line), (
        f"no format string in extender/ produces {line!r}; quote the message the code "
        "prints (run the example, or read extender/domain/) or change the code"
    )


@pytest.mark.parametrize("piece", PIECES)
def test_every_quoted_piece_of_a_message_is_a_piece_of_a_produced_one(piece: str) -> None:
    assert is_piece_of_a_message(piece), f"no message of extender/ contains {piece!r}"


# ------------------------------------------------------------------ the check can fail
@pytest.mark.parametrize(
    "line",
    [
        # What examples/deepspeed/README.md used to quote (no such message).
        "gang deepspeed/ds-llm: 4/4 members exist; needs 8 nvidia.com/gpu in all",
        "gang team-a/big: 2/3 members fit: needs 12 nvidia.com/gpu",
        "gang team-a/big: Secret team-a/big-ssh is not managed by gang-extender; delete it",
        "gang team-a/big: waiting for the scheduler",
    ],
)
def test_a_message_the_code_does_not_produce_is_refused(line: str) -> None:
    assert not accepted(line)


@pytest.mark.parametrize(
    "line",
    [
        "gang ns/g: 2/4 members placeable: needs 8 nvidia.com/gpu in all (2 for g-2), 4 free, "
        "largest free node has 2",
        "gang ns/g: 2/4 members exist; waiting for the rest to be created",
        "gang ns/g: waiting to be scheduled",
        "gang ns/g: 4/4 members bound",
    ],
)
def test_messages_the_core_produces_are_accepted(line: str) -> None:
    assert accepted(line)


def test_pieces_are_checked_too() -> None:
    assert is_piece_of_a_message("2/4 members exist")
    assert is_piece_of_a_message("largest free node has N")
    assert not is_piece_of_a_message("4/4 members exist, needs 8")
    assert not is_piece_of_a_message("2/4 members missing")
