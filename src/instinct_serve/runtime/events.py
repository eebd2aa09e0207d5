"""The progress events of ``serve``: typed until the JSON edge.

``runtime.prepare`` and the ``Deployer`` hand these to a sink; the CLI renders them as a
status line or, with ``--json``, one ``to_dict()`` per line; the MCP tool forwards
``to_dict()`` as progress notifications. That JSON is a contract agents depend on:
``{"event": KIND, "ts": ..., FIELDS...}`` in this order, each kind with exactly its fields
(``attempt`` of a phase only when set).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from instinct_serve.diagnose.phases import PhaseEvent


def _now() -> float:
    return round(time.time(), 3)


@dataclass(frozen=True, kw_only=True)
class ServeEvent:
    """One progress event; ``kind`` is its ``"event"`` in JSON."""

    kind: ClassVar[str]
    omitted_when_none: ClassVar[frozenset[str]] = frozenset()
    ts: float = field(default_factory=_now)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"event": self.kind}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is None and item.name in self.omitted_when_none:
                continue
            if isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, list | tuple):
                value = list(value)
            doc[item.name] = value
        return doc


@dataclass(frozen=True, kw_only=True)
class PhaseUpdate(ServeEvent):
    """The startup phase: serve's own steps and the ones the log shows (``PhaseTracker``)."""

    kind: ClassVar[str] = "phase"
    omitted_when_none: ClassVar[frozenset[str]] = frozenset({"attempt"})
    phase: str
    message: str
    progress: float | None = None
    figures: Mapping[str, Any] = field(default_factory=dict)
    attempt: int | None = None

    @classmethod
    def of(cls, event: PhaseEvent) -> PhaseUpdate:
        """The tracker's phase change as a serve event."""
        return cls(
            phase=event.phase,
            message=event.message,
            progress=event.progress,
            figures=dict(event.figures),
        )


@dataclass(frozen=True, kw_only=True)
class Launched(ServeEvent):
    kind: ClassVar[str] = "launched"
    container: str
    engine: str
    attempt: int


@dataclass(frozen=True, kw_only=True)
class Healthy(ServeEvent):
    kind: ClassVar[str] = "healthy"
    elapsed_s: float


@dataclass(frozen=True, kw_only=True)
class WarmedUp(ServeEvent):
    kind: ClassVar[str] = "warmup"
    latency_s: float | None
    endpoint: str  # the API path the first request used


@dataclass(frozen=True, kw_only=True)
class CoherenceChecked(ServeEvent):
    kind: ClassVar[str] = "coherence"
    verdict: str
    text: str  # the probe's answer, cut to 200 characters


@dataclass(frozen=True, kw_only=True)
class Relaunching(ServeEvent):
    kind: ClassVar[str] = "relaunch"
    finding: str
    title: str
    changes: list[str]
    message: str


@dataclass(frozen=True, kw_only=True)
class Stalled(ServeEvent):
    kind: ClassVar[str] = "stalled"
    phase: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Replaced(ServeEvent):
    kind: ClassVar[str] = "replaced"
    container: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Reused(ServeEvent):
    kind: ClassVar[str] = "reused"
    container: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Attached(ServeEvent):
    kind: ClassVar[str] = "attached"
    container: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Note(ServeEvent):
    kind: ClassVar[str] = "note"
    message: str


@dataclass(frozen=True, kw_only=True)
class WarningEvent(ServeEvent):
    kind: ClassVar[str] = "warning"
    message: str


EVENT_TYPES: tuple[type[ServeEvent], ...] = (
    PhaseUpdate,
    Launched,
    Healthy,
    WarmedUp,
    CoherenceChecked,
    Relaunching,
    Stalled,
    Replaced,
    Reused,
    Attached,
    Note,
    WarningEvent,
)

EventSink = Callable[[ServeEvent], None]


def _first_word(text: str) -> str:
    found = re.search(r"[a-z]+", text.lower())
    return found.group(0) if found else ""


def phase_label(phase: str, message: str) -> str | None:
    """The phase's name in words to show before ``message`` (``starting_server`` is
    "starting server": ids stay in the JSON events), or None where the message starts with
    a word of the name ("loading weights: shard 2/4" or "weights read in 3 s" in
    ``loading_weights``): status lines never say a word twice."""
    if message and _first_word(message) in phase.lower().split("_"):
        return None
    return phase.replace("_", " ")


def phase_words(phase: str, message: str) -> str:
    """``phase: message`` in plain words (a failure's cause), without a doubled word."""
    label = phase_label(phase, message)
    if label is None:
        return message
    return f"{label}: {message}" if message else label
