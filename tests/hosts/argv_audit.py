"""Record the argv of every process this Python process starts (via a PEP 578 audit hook).

Tests use it to prove that a secret never reaches a process argument: it observes the real
``subprocess.Popen`` calls (local commands, and the ``ssh`` client with its remote command
string) without replacing any of our functions.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_sinks: list[list[tuple[str, ...]]] = []
_lock = threading.Lock()
_installed = False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event != "subprocess.Popen" or not _sinks:
        return
    argv = args[1]
    entry = (argv,) if isinstance(argv, str | bytes) else tuple(argv)
    text = tuple(a.decode() if isinstance(a, bytes) else str(a) for a in entry)
    with _lock:
        for sink in _sinks:
            sink.append(text)


@contextmanager
def recorded_argv() -> Iterator[list[tuple[str, ...]]]:
    """Collect the argv of every subprocess started (from any thread) inside the block."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)  # audit hooks cannot be removed: install once, gate by sinks
        _installed = True
    sink: list[tuple[str, ...]] = []
    with _lock:
        _sinks.append(sink)
    try:
        yield sink
    finally:
        with _lock:
            _sinks.remove(sink)
