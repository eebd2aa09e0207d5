"""One ``serve`` at a time per host in the critical part: look for the endpoint, clear the
way, launch. A lock file in the tool's data directory on the target host, held with
``flock`` (the kernel drops it when its holder dies: no stale lock after a crash).

Two runs of the same plan then serialize: the second waits (bounded, with a clear
message) until the first has launched, then finds that endpoint and reuses it (or
follows it while it loads) instead of racing it for the name and the port.

On this machine the lock is ``fcntl.flock`` on the file itself. On an ssh host it is held
by ``flock FILE sh -c 'cat >/dev/null'`` on the far side of one ssh connection whose
stdin we keep open: closing it (``release``) or our death ends ``cat``, and the lock goes
with it.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

from instinct_serve.errors import HostError, NotReadyError
from instinct_serve.hosts import Host, SshHost, ssh_missing

LOCK_WAIT_S = 600.0  # a launch holds it seconds; a slow docker run, a few minutes
POLL_S = 0.1

# $1 the lock file, $2 seconds to wait. Prints "locked" once held, then holds it until its
# stdin closes (our end of the ssh connection). A first try without waiting tells us
# whether someone holds it ("busy", exit 1 from flock -n), so the wait is announced at
# once; exit 1 from flock -w means "timed out".
_HOLD = "sh -c 'echo locked; exec cat >/dev/null'"
_REMOTE = (
    'umask 077; mkdir -p "${1%/*}" || exit 3; command -v flock >/dev/null 2>&1 || exit 4; '
    f'flock -n "$1" {_HOLD}; rc=$?; [ "$rc" = 1 ] || exit "$rc"; '
    f'echo busy; exec flock -w "$2" "$1" {_HOLD}'
)


def lock_path(host: Host, name: str = "serve") -> str:
    from instinct_serve.engine import hostfs

    return hostfs.join(hostfs.data_dir(host), "locks", f"{name}.lock")


class HostLock:
    """``with HostLock(host): ...``: exclusive among this tool's runs on ``host``."""

    def __init__(
        self,
        host: Host,
        name: str = "serve",
        *,
        wait_s: float = LOCK_WAIT_S,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.host = host
        self.name = name
        self.wait_s = wait_s
        self.on_wait = on_wait
        self.path = ""
        self._fd: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.waited_s = 0.0

    # -- the context manager

    def __enter__(self) -> HostLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    @property
    def held(self) -> bool:
        return self._fd is not None or self._proc is not None

    def acquire(self) -> None:
        self.path = lock_path(self.host, self.name)
        start = time.monotonic()
        if self.host.is_local:
            self._acquire_local()
        elif isinstance(self.host, SshHost):
            self._acquire_remote(self.host)
        else:  # pragma: no cover - every Host is one of the two
            raise HostError(f"cannot lock {self.host.name}", id="lock_unsupported")
        self.waited_s = time.monotonic() - start

    def release(self) -> None:
        if self._fd is not None:
            import fcntl

            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        if self._proc is not None:
            proc, self._proc = self._proc, None
            _end(proc, grace_s=10.0)  # closing stdin ends the remote holder, and the lock

    # -- waiting

    def _timed_out(self, holder: str) -> NotReadyError:
        return NotReadyError(
            f"another instinct-serve serve{holder} has held the launch lock on "
            f"{self.host.name} for more than {self.wait_s:g} s ({self.path})",
            fix="wait for it to finish (`instinct ps` shows what it launched) and run serve "
            "again; the lock is released when that serve ends, even if it is killed",
            id="serve_lock_timeout",
            details={"lock": self.path, "waited_s": self.wait_s},
        )

    def _waiting(self, holder: str) -> None:
        if self.on_wait is not None:
            self.on_wait(
                f"another instinct-serve serve{holder} is launching on {self.host.name}: "
                f"waiting for it (at most {self.wait_s:g} s)"
            )

    def _acquire_local(self) -> None:
        import fcntl

        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.wait_s
        told = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    holder = _holder(fd)
                    if time.monotonic() >= deadline:
                        raise self._timed_out(holder) from None
                    if not told:
                        told = True
                        self._waiting(holder)
                    time.sleep(POLL_S)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _acquire_remote(self, host: SshHost) -> None:
        argv = [
            *host.ssh_argv(),
            "--",
            host.remote_command(["sh", "-c", _REMOTE, "sh", self.path, f"{self.wait_s:g}"], None),
        ]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise ssh_missing() from exc
        assert proc.stdout is not None
        deadline = time.monotonic() + self.wait_s + host.connect_timeout + 20
        line = b""
        try:
            while time.monotonic() < deadline:
                if _readable(proc.stdout, 0.2):
                    line = proc.stdout.readline()
                    if line.strip() == b"busy":
                        self._waiting("")
                        continue
                    break
                if proc.poll() is not None:
                    break
        except BaseException:
            _end(proc, grace_s=0.0)
            raise
        if line.strip() == b"locked":
            self._proc = proc
            return
        _end(proc)
        code = proc.returncode
        if code == 4:  # no flock on the host: serve as before, unserialized
            return
        if code == 1 or code is None:
            raise self._timed_out("")
        raise HostError(
            f"cannot take the launch lock {self.path} on {host.name} (exit {code})",
            fix="check that the tool's data directory on the host is writable",
            id="serve_lock_failed",
        )


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return f" ({text})" if text.startswith("pid ") and text[4:].isdigit() else ""


def _readable(stream: IO[bytes], timeout: float) -> bool:
    ready, _, _ = select.select([stream], [], [], timeout)
    return bool(ready)


def _end(proc: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """Close our end; let the process finish (its exit status tells why), else kill it."""
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()
