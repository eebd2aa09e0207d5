"""SGLang's start-up log, read into the same phases as vLLM's (``diagnose.phases``).

SGLang (``sglang/srt``) prints its own milestones: ``Load weight begin`` / ``Load weight
end. elapsed=... avail mem=... mem usage=...`` (model_runner.py), ``KV Cache is allocated.
dtype: ..., #tokens: N, ...`` (the KV pool), ``Capture cuda graph begin`` / ``end``
(cuda_graph_runner.py), uvicorn's ``Application startup complete`` and ``Uvicorn running on
http://HOST:PORT`` (before the warm-up: not ready yet) and, once its warm-up
request answered, ``The server is fired up and ready to roll!`` (http_server.py), the moment
``/health`` turns 200. Its own failures (``SGLANG_FAILURE_SIGNALS``) end the start-up
whatever came before (they are in ``failure_signals``' one table, which ``diagnose`` reads
too); vLLM's readings stay (a traceback is read as for vLLM). Pure.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from instinct_serve.diagnose.failure_signals import SGLANG_FAILURE_SIGNALS
from instinct_serve.diagnose.phase_lines import Phase
from instinct_serve.diagnose.phases import PhaseEvent, PhaseTracker, _later

READY_LINE = "The server is fired up and ready to roll!"

_FAILED = re.compile("|".join(f"(?:{s.pattern})" for s in SGLANG_FAILURE_SIGNALS))

# What only SGLang prints: its logger's rank tag ("[2025-07-02 07:41:59 DP0 TP0] "), frames of
# its package, its launcher, its start-up milestones and its own failure lines. A log with one
# of them is SGLang's (``diagnose`` reads it with ``SglangTracker`` and words SGLang's fixes).
_EVIDENCE = re.compile(
    r"^\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?: [A-Z][A-Z_]{1,7}\d+)+\] "
    r"|[/\\]sglang[/\\]srt[/\\]|\bsglang\.launch_server\b|\bsglang serve\b"
    r"|Capture (?:cuda|hip) graph (?:begin|end|failed)|Load weight (?:begin|end)\."
    r"|KV Cache is allocated\.|is larger than the profiled value -?\d"
    r"|scheduler died during initialization|" + _FAILED.pattern,
    re.MULTILINE,
)


def is_sglang_log(text: str) -> bool:
    """Whether ``text`` holds a line only SGLang prints."""
    return _EVIDENCE.search(text) is not None


@dataclass(frozen=True)
class _Milestone:
    pattern: re.Pattern[str]
    phase: Phase
    message: str  # formatted with the match's named groups


MILESTONES = (
    _Milestone(
        re.compile(r"Load weight begin\. avail mem=(?P<mem>[\d.]+ GB)"),
        "loading_weights",
        "loading weights ({mem} free)",
    ),
    _Milestone(
        re.compile(r"Load weight end\..*?mem usage=(?P<mem>[\d.]+ GB)"),
        "loading_weights",
        "weights loaded ({mem} per GPU)",
    ),
    _Milestone(
        re.compile(r"KV Cache is allocated\..*?#tokens: (?P<tokens>\d+)"),
        "profiling",
        "KV cache allocated: {tokens} tokens",
    ),
    # the KV pool as profiled (logged when --max-total-tokens asks for more; <= 0: no room)
    _Milestone(
        re.compile(r"is larger than the profiled value (?P<tokens>-?\d+)"),
        "profiling",
        "KV pool profiled: {tokens} tokens",
    ),
    _Milestone(
        re.compile(r"Capture (?:cuda|hip|npu) graph begin"), "capturing_graphs", "capturing graphs"
    ),
    _Milestone(
        re.compile(r"Capture (?:cuda|hip|npu) graph end"), "capturing_graphs", "graphs captured"
    ),
    # uvicorn's own lines come before SGLang's warm-up request: not ready yet (vLLM's tracker
    # takes "Application startup complete" as ready)
    _Milestone(
        re.compile(r"Application startup complete"),
        "starting_server",
        "HTTP server started, warming up",
    ),
    _Milestone(
        re.compile(r"Uvicorn running on (?P<url>\S+)"),
        "starting_server",
        "HTTP server listening on {url}, warming up",
    ),
    _Milestone(re.compile(re.escape(READY_LINE)), "ready", "SGLang ready"),
)
_KV_TOKENS = re.compile(r"KV Cache is allocated\..*?#tokens: (\d+)")
# "Exception: Capture cuda graph failed: ..." (cuda_graph_runner.py): the capture had begun
_CAPTURE_FAILED = re.compile(r"Capture (?:cuda|hip|npu) graph failed")


class SglangTracker(PhaseTracker):
    """vLLM's tracker (image pulls, downloads, tracebacks), with SGLang's milestones and
    failure lines read first."""

    def feed(self, line: str, now: float | None = None) -> PhaseEvent | None:
        text = line.strip()
        failed = _FAILED.search(text)
        if _CAPTURE_FAILED.search(text) and self.phase != "failed":
            self._reached = _later(self._reached, "capturing_graphs")  # read on as an exception
        if failed is not None and not self.shutting_down and self.phase != "failed":
            return self._sglang_event(now, "failed", text[:300], line=line)
        for milestone in MILESTONES:
            m = milestone.pattern.search(text)
            if m is None or self.phase == "failed":
                continue
            tokens = _KV_TOKENS.search(text)
            if tokens:
                self._figures["kv_cache_tokens"] = int(tokens.group(1))
            return self._sglang_event(
                now, milestone.phase, milestone.message.format(**m.groupdict())
            )
        return super().feed(line, now)

    def _sglang_event(
        self, now: float | None, phase: Phase, message: str, line: str | None = None
    ) -> PhaseEvent | None:
        self.last_line_at = time.monotonic() if now is None else now
        if phase != "failed" and not self._accepts(phase):
            return None
        if phase == "failed":
            self._reached = self.stage
            self.failed_line = line
            self._soft_failed_from = None
        else:
            self._reached = phase
        self.phase, self.message, self.progress = phase, message, None
        return self.snapshot()
