"""A parsed log that rules query: lines, levels, the startup phase before each line.

Matching is anchored: a rule's pattern must match at the start of an error-capable line's
message (ERROR/CRITICAL or unlevelled, see ``logline``), optionally after the exception
name (``RuntimeError: ``) or pydantic's ``Value error, ``. That is what keeps a WARNING
which quotes an exception, an INFO line about an ``out-of-memory`` setting, or an argument
dump from firing a rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.diagnose.logline import LogLine

# Optional exception name (or pydantic's "Value error, ") before an anchored message.
EXC_OPT = (
    r"^\s*(?:(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?:\[[^\]\n]{0,80}\])?:\s*|"
    r"Value error,\s*)?"
)

TRACEBACK_START = re.compile(r"^\s*Traceback \(most recent call last\)")


def exc(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """A pattern anchored at the message start, after an optional exception name."""
    return re.compile(EXC_OPT + "(?:" + pattern + ")", flags)


@dataclass(frozen=True)
class Hit:
    """One matching line: its index in ``Scan.lines`` and the match."""

    index: int
    line: LogLine
    match: re.Match[str]


_FRAME = re.compile(r'^\s*File "')
_CARETS = re.compile(r"^\s*[\^~]+\s*$")


def source_echo(lines: list[LogLine]) -> frozenset[int]:
    """Indexes of the source lines a traceback quotes under each ``File "..."`` frame.

    ``raise RuntimeError("Engine core initialization failed. "`` is code, not the error;
    Python 3.11+ quotes every line of a multi-line statement, and carets under them.
    """
    echo: set[int] = set()
    for i, line in enumerate(lines):
        if i == 0 or not line.text.startswith("    "):
            if _CARETS.match(line.text) and i - 1 in echo:
                echo.add(i)
            continue
        before = lines[i - 1].text
        if _FRAME.match(before) or i - 1 in echo:
            echo.add(i)
    return frozenset(echo)


@dataclass
class Scan:
    lines: list[LogLine]
    phase_before: Mapping[int, str] = field(default_factory=dict)  # line index -> phase
    facts: dict[str, Any] = field(default_factory=dict)
    echo: frozenset[int] = field(init=False)
    memo: dict[str, Any] = field(init=False, default_factory=dict)  # work rules share

    def __post_init__(self) -> None:
        self.echo = source_echo(self.lines)

    def hits(
        self, *patterns: re.Pattern[str], errorish: bool = True, search: bool = False
    ) -> Iterator[Hit]:
        """Lines matching any pattern, in order (``match`` unless ``search``)."""
        for index, line in enumerate(self.lines):
            if (errorish and not line.errorish) or index in self.echo:
                continue
            for pattern in patterns:
                m = pattern.search(line.text) if search else pattern.match(line.text)
                if m:
                    yield Hit(index, line, m)
                    break

    def first(
        self, *patterns: re.Pattern[str], errorish: bool = True, search: bool = False
    ) -> tuple[Hit | None, int]:
        """The first hit and the number of distinct lines that hit."""
        first: Hit | None = None
        seen: set[int] = set()
        for hit in self.hits(*patterns, errorish=errorish, search=search):
            first = first or hit
            seen.add(hit.line.no)
        return first, len(seen)

    def contains(self, pattern: re.Pattern[str], errorish: bool = False) -> bool:
        return any(True for _ in self.hits(pattern, errorish=errorish, search=True))

    def window(self, index: int, before: int, after: int) -> list[LogLine]:
        return self.lines[max(0, index - before) : index + after + 1]

    def traceback_before(self, index: int, limit: int = 150) -> list[LogLine]:
        """The traceback that ends at ``index``: back to its header, or, when the header was
        cut off, the contiguous frame and source lines just above."""
        start = max(0, index - limit)
        for i in range(index - 1, start - 1, -1):
            if TRACEBACK_START.match(self.lines[i].text):
                return self.lines[i:index]
        first = index
        while first > start and (
            first - 1 in self.echo or _FRAME.match(self.lines[first - 1].text)
        ):
            first -= 1
        return self.lines[first:index]

    def phase_at(self, index: int) -> str:
        """The startup phase the log was in just before line ``index``."""
        return self.phase_before.get(index, "starting")
