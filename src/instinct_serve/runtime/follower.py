"""A streaming process read line by line on a thread: ``docker logs -f``, ``tail -F``."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from contextlib import suppress


class LogFollower:
    """A streaming process (``docker logs -f``, ``tail -F``) read by a thread into a queue.

    ``get(timeout)`` wakes the moment a line arrives, which is what lets serve react to
    "Application startup complete" at once instead of on the next poll.
    """

    _EOF = object()

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self._queue: queue.Queue[object] = queue.Queue()
        self.ended = False
        self._thread = threading.Thread(target=self._pump, name="log-follower", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        stream = self.proc.stdout
        try:
            if stream is not None:
                for line in stream:
                    self._queue.put(line.rstrip("\n"))
        except (OSError, ValueError):  # closed under us by close()
            pass
        finally:
            self._queue.put(self._EOF)

    def get(self, timeout: float) -> str | None:
        """The next line, or None after ``timeout`` (or once the stream has ended)."""
        if self.ended:
            return None
        try:
            item = self._queue.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if item is self._EOF:
            self.ended = True
            return None
        assert isinstance(item, str)
        return item

    def drain(self, timeout: float) -> list[str]:
        """Whatever arrives until the stream ends or ``timeout`` passes (after an exit)."""
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        while not self.ended and (left := deadline - time.monotonic()) > 0:
            line = self.get(left)
            if line is not None:
                lines.append(line)
        return lines

    def close(self) -> None:
        """Stop the process and everything it started (it leads its own session)."""
        proc = self.proc
        if proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    proc.send_signal(sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._thread.join(timeout=2.0)
        # Closing the pipe under a reader still blocked in read() would block on the
        # reader's lock; a daemon thread stuck there ends with the process instead.
        if proc.stdout is not None and not self._thread.is_alive():
            with suppress(OSError):
                proc.stdout.close()
