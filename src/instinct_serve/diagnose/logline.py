"""One vLLM log line, reduced to its message and log level.

vLLM output reaches us wrapped in several layers of prefixes: the process tag of V1
multiprocessing (``(EngineCore_DP0 pid=494)``, nested for Ray workers), ``[rank0]:`` from
torch, the vLLM logger header (``ERROR 08-19 13:12:57 [core.py:708]``, older
``INFO 01-30 03:18:12 gpu_model_runner.py:848]``), uvicorn's ``INFO:     ``, c10's
``[W807 17:02:45.247 ProcessGroupNCCL.cpp:1476]``, docker-compose and CRI timestamps, a
wrapper's echo label (``vLLM STDOUT: ``), SGLang's ``[2025-07-02 07:41:59 DP0 TP0]``. The
rules in this package match the *message* and look at the *level*: an error anchored at
the start of an ERROR (or unlevelled) message is real, the same words inside a WARNING or an
INFO line are not. Pure functions, shared by ``diagnose`` and the startup phase tracker.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# Colour and cursor sequences (vLLM colours its logger on a TTY; tqdm moves the cursor).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")

# (EngineCore_DP0 pid=494), (VllmWorker rank=3 pid=1090), (RayWorkerWrapper pid=1, ip=10.0.0.1)
_PROC = re.compile(r"^\((?:[^()\n]{0,120}?\b)?pid=\d+[^()\n]{0,80}\)\s?")
_RANK = re.compile(r"^\[rank\d+\]:\s?")
# docker compose: "vllm-1  | "
_COMPOSE = re.compile(r"^[A-Za-z0-9][\w.\-]{0,63}\s+\|\s")
# a wrapper that echoes vLLM's output under a label of its own ("vLLM STDOUT: INFO 05-05 ..."
# from Unsloth): taken off only where a vLLM logger header follows (after a process tag)
_ECHO = re.compile(r"^[A-Za-z][\w .\-]{0,40}:\s+")
# CRI / buildkite / kubectl --timestamps: "2024-06-28T06:11:52.685Z ", "[2025-03-10T15:07:20Z] "
_STAMP = re.compile(
    r"^\[?\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s+"
    r"(?:(?:stdout|stderr)\s+[FP]\s+)?"
)
# vLLM logger: "ERROR 08-19 13:12:57 [core.py:708] " and "INFO 01-30 03:18:12 file.py:848] "
_VLLM = re.compile(
    r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? "
    r"(?:\[[^\]\s]{1,200}\]|[\w./\-]{1,200}:\d+\])\s?"
)
# uvicorn: "INFO:     Application startup complete."
_UVICORN = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
# c10 / glog: "[W807 17:02:45.247609838 ProcessGroupNCCL.cpp:1476] "
_C10 = re.compile(r"^\[([WEIF])\d{4} \d{2}:\d{2}:\d{2}(?:\.\d+)?[^\]\n]{0,200}\]\s?")
# Ray / aiter python logging: "[2025-12-18 06:00:39] WARNING core.py:622: "
_BRACKET = re.compile(
    r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w./\-]+:\d+:\s"
)
# SGLang's logger: "[2025-07-02 07:41:59 DP0 TP0] ", older "[22:30:32 TP0] " (the process's
# ranks), no level; not where a level and a file follow (aiter's "[date] WARNING core.py:622: ")
_SGLANG = re.compile(
    r"^\[(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?: [A-Z][A-Z_]{1,7}\d+)*\] "
    r"(?!(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w./\-]+:\d+:)"
)
# python logging default format: "2026-05-21 20:02:50,027 - INFO - "
_PYLOG = re.compile(
    r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d+ - (DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
)

_C10_LEVEL = {"W": "WARNING", "E": "ERROR", "I": "INFO", "F": "CRITICAL"}

# The first line of an exception as the interpreter (or a logger) prints it, or the
# pydantic "Value error, ..." line that newer vLLM uses for configuration errors.
EXCEPTION_START = re.compile(
    r"^\s*(?:(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?:\[[^\]\n]{0,80}\])?: |"
    r"Value error, )"
)

ERRORISH = frozenset({None, "ERROR", "CRITICAL"})


@dataclass(frozen=True)
class LogLine:
    """A log line: 1-based physical line number, raw text, message and level."""

    no: int
    raw: str
    text: str
    level: str | None

    @property
    def errorish(self) -> bool:
        """Could this line carry an error? (ERROR/CRITICAL, or no level at all)."""
        return self.level in ERRORISH


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def split_message(line: str) -> tuple[str, str | None]:
    """The message of one log line without its prefixes, and its log level (or None)."""
    text = strip_ansi(line).rstrip()
    level: str | None = None
    for _ in range(8):  # prefixes nest (engine core > ray worker > logger header)
        m = _PROC.match(text) or _RANK.match(text) or _COMPOSE.match(text) or _STAMP.match(text)
        m = m or _SGLANG.match(text)
        if m is None and (echo := _ECHO.match(text)):
            rest = text[echo.end() :]
            tag = _PROC.match(rest)
            m = echo if _VLLM.match(rest[tag.end() :] if tag else rest) else None
        if m:
            text = text[m.end() :]
            continue
        m = _VLLM.match(text) or _UVICORN.match(text) or _BRACKET.match(text)
        m = m or _PYLOG.match(text)
        if m:
            level = "WARNING" if m.group(1) == "WARN" else m.group(1)
            text = text[m.end() :]
            continue
        m = _C10.match(text)
        if m:
            level = _C10_LEVEL[m.group(1)]
            text = text[m.end() :]
            continue
        break
    return text, level


# The end of a tqdm bar ("[00:04<00:06,  3.54it/s]"); a log record written right after a
# bar (no newline in between) starts a new logical line there.
_TQDM_END = re.compile(
    r"\[\d{1,3}:\d{2}(?::\d{2})?<(?:\d{1,3}:\d{2}(?::\d{2})?|\?)(?:,[^\]\n]{0,40})?\](?=\S)"
)


def _segments(physical: str) -> Iterator[str]:
    for segment in strip_ansi(physical).split("\r"):
        start = 0
        for m in _TQDM_END.finditer(segment):
            yield segment[start : m.end()]
            start = m.end()
        yield segment[start:]


def iter_lines(text: str) -> Iterator[LogLine]:
    """Every logical line of a log: tqdm's carriage-return updates, and records glued to
    the end of a progress bar, become separate lines (with the physical line's number)."""
    for no, physical in enumerate(text.split("\n"), start=1):
        for segment in _segments(physical):
            if not segment.strip():
                continue
            message, level = split_message(segment)
            yield LogLine(no=no, raw=segment.rstrip(), text=message, level=level)
