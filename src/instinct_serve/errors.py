"""Errors a user can act on, and the exit codes of DESIGN.md.

Every failure the tool reports carries a stable ``id`` (agents branch on it), a one-line
``message`` (what failed and why) and a ``fix`` (what to do). The CLI turns them into a
short message on stderr, or a JSON ``{"error": ...}`` document with ``--json``, and the
exit code of the class: never a traceback for bad input. Every id is listed once, with its
exit class and a generic fix, in ``error_ids`` (``tests/test_errors.py`` holds the two together).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Process exit codes shared by every command (DESIGN.md)."""

    OK = 0
    FAILED = 1  # the thing asked for failed: won't fit, unhealthy, ...
    USAGE = 2  # bad usage or input
    NOT_READY = 3  # environment not ready: no GPU, no docker, ssh refused, ...


class InstinctError(Exception):
    """Base class: a failure with a stable id, a message and a fix."""

    exit_code: ExitCode = ExitCode.FAILED
    default_id: str = "failed"

    def __init__(
        self,
        message: str,
        *,
        fix: str | None = None,
        id: str | None = None,
        details: dict[str, Any] | None = None,
        agent_fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.id = id or self.default_id
        self.details = details or {}
        self.agent_fix = agent_fix  # the fix in an MCP caller's words: tools and arguments

    def to_dict(self, agent: bool = False) -> dict[str, Any]:
        """The JSON form printed with ``--json`` and returned by the MCP server (``agent``:
        the fix that names tool arguments, where the error has one, not CLI flags)."""
        fix = self.agent_fix if agent and self.agent_fix else self.fix
        doc: dict[str, Any] = {"id": self.id, "message": self.message, "fix": fix}
        if self.details:
            doc["details"] = self.details
        return doc


class UsageError(InstinctError):
    """Bad arguments or input files (exit 2)."""

    exit_code = ExitCode.USAGE
    default_id = "bad_input"


class NotReadyError(InstinctError):
    """The environment cannot do what was asked (exit 3)."""

    exit_code = ExitCode.NOT_READY
    default_id = "not_ready"


class HostError(NotReadyError):
    """A host could not be reached or refused us (ssh key, host key, network)."""

    default_id = "host_unreachable"


class Reminder(str):
    """A warning worth showing now and then, not on every command (the recipes' age): the
    CLI prints one ``key`` at most once every ``every_h`` hours (``cli.common.warn``); the
    documents that carry it keep it. Otherwise the plain text of the warning."""

    key: str
    every_h: float

    def __new__(cls, text: str, key: str, every_h: float = 24.0) -> Reminder:
        made = super().__new__(cls, text)
        made.key, made.every_h = key, every_h
        return made

    def __getnewargs__(self) -> tuple[str, str, float]:  # type: ignore[override]
        return str(self), self.key, self.every_h  # copy and pickle keep what it is
