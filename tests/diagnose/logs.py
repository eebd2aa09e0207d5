"""The captured vLLM logs of tests/fixtures/logs as the tool would see them.

Provenance notes (``#`` lines), cut markers (``[... TRUNCATED ...]``) and a pasted shell
prompt were added when the excerpts were collected; they are not log output.
"""

from __future__ import annotations

import re

from tests.infra.paths import LOGS

_PROMPT = re.compile(r"^\([\w.-]+\) \S+@\S+:.*\$\s*$")


def real_lines(name: str) -> list[str]:
    out = []
    for line in (LOGS / name).read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or _PROMPT.match(stripped):
            continue
        if stripped.startswith("[...") and stripped.endswith("]"):
            continue
        out.append(line.rstrip())
    return out


def real_log(name: str) -> str:
    return "\n".join(real_lines(name)) + "\n"


def blocks(name: str) -> dict[str, str]:
    """The excerpts of a multi-source file, keyed by their ``# (A)`` ... headers."""
    found: dict[str, list[str]] = {}
    current: str | None = None
    for line in (LOGS / name).read_text(encoding="utf-8").splitlines():
        header = re.match(r"^# \(([A-Z])\)", line)
        if header:
            current = header.group(1)
            found[current] = []
            continue
        stripped = line.strip()
        if current is None or stripped.startswith("#"):
            continue
        if stripped.startswith("[...") and stripped.endswith("]"):
            continue
        found[current].append(line.rstrip())
    return {key: "\n".join(lines) + "\n" for key, lines in found.items()}


def log_names() -> list[str]:
    return sorted(p.name for p in LOGS.glob("*.log"))
