"""What every table test checks, through a pipe and on an 80-column terminal.

``terminal(monkeypatch)`` makes the next command's stdout count as an 80-column terminal
(rich's ``TTY_COMPATIBLE=1`` and ``COLUMNS``, read from the environment as a shell sets
them; ``fits`` reads it without its colour escapes); ``pipe(monkeypatch)`` is a pipe
with ``COLUMNS=80`` still set, as in a narrow terminal running ``instinct ps | grep NAME``.
"""

from __future__ import annotations

import re

import pytest

WIDTH = 80


def pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("TTY_COMPATIBLE", "1")


def one_line(out: str, *cells: str) -> str:
    """The one line of a piped table that holds ``cells[0]`` (as ``grep``), which holds
    every other cell of the row too: one line per row, nothing wrapped or cut."""
    found = [line for line in out.splitlines() if cells[0] in line]
    assert len(found) == 1, f"{cells[0]!r} on {len(found)} lines:\n{out}"
    for cell in cells[1:]:
        assert cell in found[0], f"{cell!r} not on the row of {cells[0]!r}:\n{out}"
    return found[0]


def fits(out: str, *whole: str) -> None:
    """A terminal view: no line wider than the terminal, every ``whole`` value (names,
    ids) on one line, uncut."""
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)
    wide = [line for line in out.splitlines() if len(line) > WIDTH]
    assert not wide, f"lines over {WIDTH} columns:\n" + "\n".join(wide)
    for value in whole:
        assert any(value in line for line in out.splitlines()), f"{value!r} cut:\n{out}"
