"""Startup phases from vLLM's own log lines, for a status line and JSON events.

``serve`` follows ``docker logs -f`` and feeds every line to a ``PhaseTracker``; the tracker
turns the wording of several vLLM versions (V0 and V1 engines, 0.5 to 0.2x), which
``phase_lines`` reads, into one phase sequence with the figures users ask about (weights
size, KV cache tokens, concurrency, graph capture time) and remembers when the last line
arrived, so that serve can tell a graph-capture hang from a slow but live start-up.

For ``diagnose`` the tracker also keeps ``reached``, the furthest phase the log shows by any
evidence (traceback frames, the error that ends a step, V1's fixed order after the KV cache
is sized), which later lines never lower and a failure does not hide; the status line keeps
to what was printed.

Phases only move forward (a line from a lagging tensor-parallel rank does not move the
status back), except ``downloading_weights``/``loading_weights`` and ``compiling``/
``profiling``, which interleave in real logs. Pure: text and times in, events out; the
clock is read only when ``feed`` is not given one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.diagnose.failure_signals import STRONG_FAILURE
from instinct_serve.diagnose.logline import EXCEPTION_START, LogLine, iter_lines
from instinct_serve.diagnose.phase_lines import LineReader, Phase, Update

# Ordered position of each phase; equal numbers may alternate. ``warming_up`` is serve's own
# phase (its first request after /health); the tracker never emits it.
PHASE_ORDER: Mapping[str, int] = {
    "starting": 0,
    "pulling_image": 1,
    "downloading_weights": 2,
    "loading_weights": 2,
    "compiling": 3,
    "profiling": 3,
    "capturing_graphs": 4,
    "starting_server": 5,
    "ready": 6,
    "warming_up": 7,
}

# Phases in which a silent log means trouble (graph capture and weight loading print
# progress regularly; downloads and JIT builds may legitimately stay silent for minutes).
STALL_PHASES: frozenset[str] = frozenset({"capturing_graphs", "loading_weights"})


@dataclass(frozen=True)
class PhaseEvent:
    """One change of the startup status: what to show and what to emit as a JSON event."""

    phase: Phase
    message: str
    progress: float | None = None  # 0..1 within the phase, where the log shows it
    figures: Mapping[str, Any] = field(default_factory=dict)  # cumulative snapshot
    line_no: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": "phase",
            "phase": self.phase,
            "message": self.message,
            "progress": self.progress,
            "figures": dict(self.figures),
        }


# A stop asked from outside (SIGTERM/SIGINT: ``instinct stop``, ``docker stop``): vLLM 0.32's
# "[shutdown] API server: shutdown triggered", "[shutdown] EngineCore: trigger received
# signal=SIGTERM", uvicorn's "Shutting down". What follows is teardown: vLLM 0.32 races and
# may log "AsyncLLM output_handler failed" / EngineDeadError then, which is no failure.
_SHUTDOWN = re.compile(
    r"^\[shutdown\] (?:API server: shutdown triggered|EngineCore: trigger received signal)"
    r"|^Shutting down$"
)


class PhaseTracker:
    """Feed it log lines; it returns a ``PhaseEvent`` whenever the status changes.

    ``stalled(now, stall_s)`` is true when the current phase is one where silence means a
    hang (graph capture, weight loading) and no line at all arrived for ``stall_s`` seconds,
    unless a JIT kernel build is known to be running.
    """

    def __init__(self) -> None:
        self.phase: Phase = "starting"
        self.message: str = "no progress line yet"
        self.progress: float | None = None
        self.failed_line: str | None = None
        self.last_line_at: float | None = None
        self._figures: dict[str, Any] = {}
        self._lines = LineReader(self._figures)  # what each line says (phase_lines)
        self._soft_failed_from: Phase | None = None
        self._last_key: tuple[Any, ...] | None = None
        self._lines_seen = 0
        self.shutting_down = False  # a stop was asked for: later failure lines are teardown
        self._reached: Phase = "starting"  # the furthest phase any evidence shows

    # -- public API -------------------------------------------------------------------

    @property
    def figures(self) -> dict[str, Any]:
        return dict(self._figures)

    @property
    def failed_for_good(self) -> bool:
        """A strong failure signal (``failure_signals``) ended the start-up: no later line
        can overrule it, unlike a bare exception (a soft failure)."""
        return self.phase == "failed" and self._soft_failed_from is None

    @property
    def reached(self) -> Phase:
        """The furthest start-up phase the log shows, failed or not: progress lines, the
        frames of a traceback (``capture_model``), the errors raised after a step (the
        KV-capacity error ends the memory profile), and a failure after V1 sized its KV
        cache, which captures graphs next (unless eager)."""
        return self._reached

    @property
    def stage(self) -> Phase:
        """The step the engine is in now, as far as the log tells (``reached`` while
        failed): V1 goes from sizing the KV cache straight to graph capture, printing
        nothing in between, so a failure there is a capture failure."""
        base = self._reached if self.phase == "failed" else _later(self._reached, self.phase)
        if base == "profiling" and self._lines.kv_sized_v1 and not self._lines.eager:
            return "capturing_graphs"
        return base

    @property
    def building(self) -> bool:
        """A JIT kernel build has started and not yet reported its end."""
        return bool(self._lines.building)

    def feed(self, line: str, now: float | None = None) -> PhaseEvent | None:
        """Take one line of output (tqdm's ``\\r`` updates and several lines are fine)."""
        self.last_line_at = time.monotonic() if now is None else now
        if line.endswith("\n"):
            line = line[:-1]
        event: PhaseEvent | None = None
        for log_line in iter_lines(line):
            produced = self._feed_one(log_line, self._lines_seen + log_line.no)
            if produced is not None and (event is None or event.phase != "failed"):
                event = produced
        self._lines_seen += line.count("\n") + 1
        return event

    def stalled(self, now: float, stall_s: float, phases: Iterable[str] = STALL_PHASES) -> bool:
        """No line for ``stall_s`` seconds while in a phase where that means a hang."""
        if self.last_line_at is None or self.phase not in set(phases) or self.building:
            return False
        return now - self.last_line_at >= stall_s

    def snapshot(self) -> PhaseEvent:
        """The current status as an event (for a status line redrawn on a timer)."""
        return PhaseEvent(self.phase, self.message, self.progress, self.figures)

    # -- internals --------------------------------------------------------------------

    def _feed_one(self, line: LogLine, line_no: int) -> PhaseEvent | None:
        update = self._classify(line)
        if update is None:
            return None
        self._figures.update(update.figures)
        if update.phase == "failed":
            return self._fail(line, line_no, soft=update.soft_failure)
        if (update.phase is None and self.phase == "failed") or (
            update.phase is not None and not self._accepts(update.phase)
        ):
            # A lagging rank's line, or news after a failure: keep its figures only.
            return self._emit(line_no) if update.figures else None
        if update.phase is not None:
            if update.phase != self.phase:
                self.progress = None
            self.phase = update.phase
            self._reached = _later(self._reached, update.phase)
            self._soft_failed_from = None
        if update.message is not None:
            self.message = update.message
        if update.progress is not None:
            self.progress = max(0.0, min(1.0, update.progress))
        if self.phase == "ready":
            self._lines.building.clear()
        return self._emit(line_no)

    def _accepts(self, phase: Phase) -> bool:
        if self.phase == "failed":
            # Only progress past the point of a soft failure overrules it.
            base = self._soft_failed_from
            return base is not None and PHASE_ORDER[phase] > PHASE_ORDER[base]
        return PHASE_ORDER[phase] >= PHASE_ORDER[self.phase]

    def _fail(self, line: LogLine, line_no: int, *, soft: bool) -> PhaseEvent | None:
        if self.phase == "failed" and (soft or self._soft_failed_from is None):
            return None  # already failed; keep the first failure line
        if self.phase != "failed":
            self._reached = _later(self._reached, self.stage)
        if soft:
            self._soft_failed_from = self.phase
        else:
            self._soft_failed_from = None
        self.phase = "failed"
        self.progress = None
        self.failed_line = line.raw
        self.message = line.text.strip()[:300] or line.raw[:300]
        return self._emit(line_no)

    def _emit(self, line_no: int) -> PhaseEvent | None:
        progress = None if self.progress is None else round(self.progress, 2)
        key = (self.phase, self.message, progress, tuple(sorted(self._figures.items())))
        if key == self._last_key:
            return None
        self._last_key = key
        return PhaseEvent(self.phase, self.message, progress, self.figures, line_no)

    def _classify(self, line: LogLine) -> Update | None:
        text = line.text.strip()
        if not text:
            return None
        if self.shutting_down:
            return None
        if _SHUTDOWN.match(text) and self.phase != "failed":
            self.shutting_down = True
            return Update(message="shutting down: a stop was asked for")
        reached, evidence = self._lines.evidence(text)
        if reached is not None:
            self._reached = _later(self._reached, reached)
        # A strong signal (``failure_signals``) ends the start-up whatever came before; a
        # bare exception line before the server is ready is a soft failure that later
        # progress lines can overrule (some libraries log a traceback and carry on).
        if STRONG_FAILURE.search(text) and line.errorish:
            return Update(phase="failed", figures=evidence)
        update = self._lines.read(text, self.phase)
        if update is not None:
            return update
        if (
            EXCEPTION_START.match(line.text)
            and line.errorish
            and PHASE_ORDER.get(self.phase, 0) < PHASE_ORDER["ready"]
        ):
            return Update(phase="failed", soft_failure=True, figures=evidence)
        return Update(figures=evidence) if evidence else None


def _later(a: Phase, b: Phase) -> Phase:
    """The later of two phases, ``b`` (the newer) on a tie; ``failed`` is no phase."""
    if b == "failed":
        return a
    if a == "failed":
        return b
    return b if PHASE_ORDER[b] >= PHASE_ORDER[a] else a


def track(lines: Iterable[str]) -> list[PhaseEvent]:
    """Every event a fresh tracker produces over these lines (logs, tests, ``instinct logs``)."""
    tracker = PhaseTracker()
    events = []
    for number, line in enumerate(lines):
        event = tracker.feed(line, now=float(number))
        if event is not None:
            events.append(event)
    return events
