"""The documents of ``instinct check``: one ``Check`` per fact, gathered in a ``CheckReport``.

Check ids are a stable contract (agents and ``serve`` branch on them); messages and fix
texts are for people and may improve over time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "error", "skip"]

STATUSES: tuple[Status, ...] = ("ok", "warn", "error", "skip")


@dataclass(frozen=True)
class Check:
    """The outcome of one check. ``fixable``: ``--auto-fix`` knows a safe fix for it."""

    id: str
    status: Status
    message: str
    fix: str | None = None
    fixable: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    agent_fix: str | None = None  # the fix in an MCP caller's words, where it differs

    def fix_for(self, agent: bool = False) -> str | None:
        return self.agent_fix if agent and self.agent_fix else self.fix

    def to_dict(self, agent: bool = False) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "message": self.message,
            "fix": self.fix_for(agent),
            "fixable": self.fixable,
            "details": dict(self.details),
        }

    def brief(self, agent: bool = False) -> dict[str, Any]:
        """The short form listed under ``errors`` and ``warnings``."""
        return {"id": self.id, "message": self.message, "fix": self.fix_for(agent)}


@dataclass(frozen=True)
class FixOutcome:
    """A fix that ran (or would run without ``--yes``): the exact command, shown as text."""

    id: str
    command: str
    ok: bool
    message: str
    privileged: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "command": self.command,
            "ok": self.ok,
            "message": self.message,
            "privileged": self.privileged,
        }


@dataclass
class CheckReport:
    """Everything ``instinct check`` found and did on one host.

    ``fixes_applied``: fixes that ran and succeeded. ``fixes_failed``: fixes that ran and
    failed (e.g. sudo wanted a password). ``fixes_pending``: privileged fixes that
    ``--auto-fix`` would run with ``--yes``.
    """

    host: str
    checks: list[Check]
    fixes_applied: list[FixOutcome] = field(default_factory=list)
    fixes_failed: list[FixOutcome] = field(default_factory=list)
    fixes_pending: list[FixOutcome] = field(default_factory=list)

    @property
    def errors(self) -> list[Check]:
        return [c for c in self.checks if c.status == "error"]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status == "warn"]

    @property
    def ready(self) -> bool:
        """No check failed: the host can serve (warnings allowed)."""
        return not self.errors

    def get(self, check_id: str) -> Check | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def to_dict(self, agent: bool = False) -> dict[str, Any]:
        """``check --json``; ``agent``: the fixes in an MCP caller's words."""
        return {
            "host": self.host,
            "ready": self.ready,
            "errors": [c.brief(agent) for c in self.errors],
            "warnings": [c.brief(agent) for c in self.warnings],
            "fixes_applied": [f.to_dict() for f in self.fixes_applied],
            "fixes_failed": [f.to_dict() for f in self.fixes_failed],
            "fixes_pending": [f.to_dict() for f in self.fixes_pending],
            "checks": [c.to_dict(agent) for c in self.checks],
        }


@dataclass(frozen=True)
class CheckOptions:
    """What the caller knows about the job, and what ``--auto-fix`` may do.

    ``root`` prefixes the /dev, /proc and /sys paths read on the host (tests, chroots).
    ``model_gated``: True makes a missing HF token an error; None means unknown.
    ``need_gb``: free GB (10^9 bytes) the model download needs in the HF cache.
    ``hf_cache``: the HF hub cache directory on the host (default: from its environment).
    """

    model: str | None = None
    model_gated: bool | None = None
    port: int | None = None
    hf_cache: str | None = None
    need_gb: float | None = None
    root: str = ""
    auto_fix: bool = False
    yes: bool = False
    min_free_gb: float = 50.0
