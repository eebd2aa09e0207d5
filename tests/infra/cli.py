"""The ``instinct`` command called in-process, for tests that are not about the process.

A subprocess ``python -m instinct_serve ...`` costs about 0.8 s of interpreter start-up and
imports; the suite made about 135 of them. ``run_instinct`` calls the same entry point
(``instinct_serve.cli.main.main``, the error boundary included) with the same contract a
subprocess has: ``env`` *replaces* the environment for the call, stdin is empty (as
``stdin=DEVNULL``; ``input`` gives it text), stdout and stderr are captured apart as text,
and the exit code is what ``sys.exit`` was given (1 for an exception that escapes). Both
streams are pipes to the command (not terminals), as under ``capture_output=True``; the
``timeout`` raises ``subprocess.TimeoutExpired`` as ``subprocess.run`` does.

Keep the subprocess where the test is about the process: signals and Ctrl-C, what reaches
the real file descriptors, ssh, a daemon, the console script itself.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from types import FrameType

ARGV0 = [sys.executable, "-m", "instinct_serve"]  # what the result's args say was run


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so the CLI's error boundary lets it through."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


def _exit_code(code: object) -> int:
    """``sys.exit(code)`` as a process's exit status (a message means 1, printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def run_instinct(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """``instinct ARGS`` in this process, as ``subprocess.run(..., capture_output=True,
    text=True, env=env, timeout=timeout)`` would report it (see the module docstring)."""
    from instinct_serve.cli.main import main

    argv = [*ARGV0, *args]
    saved_env = dict(os.environ)
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    out, err = io.BytesIO(), io.BytesIO()
    streams = (
        io.TextIOWrapper(io.BytesIO((input or "").encode()), encoding="utf-8"),
        io.TextIOWrapper(out, encoding="utf-8", write_through=True),
        io.TextIOWrapper(err, encoding="utf-8", write_through=True),
    )
    sys.stdin, sys.stdout, sys.stderr = streams
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except _Timeout:
            raise subprocess.TimeoutExpired(argv, timeout, out.getvalue(), err.getvalue()) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for stream in streams:
            stream.flush()
            stream.detach()  # else closing the wrapper would close the buffer we read
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        if os.environ != saved_env:
            os.environ.clear()
            os.environ.update(saved_env)
    return subprocess.CompletedProcess(argv, code, out.getvalue().decode(), err.getvalue().decode())
