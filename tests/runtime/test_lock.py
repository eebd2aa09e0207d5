"""The host's launch lock: exclusive, bounded wait with a clear error, released on release
and when its holder dies; on this machine and through the real sshd."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from instinct_serve.errors import NotReadyError
from instinct_serve.hosts import Host, LocalHost
from instinct_serve.runtime.lock import HostLock
from tests.infra.ssh import SshServer


def _exclusive(host: Host, other: Host) -> None:
    waits: list[str] = []
    with HostLock(host) as first:
        assert first.held and first.path.endswith("/locks/serve.lock")
        start = time.monotonic()
        with pytest.raises(NotReadyError) as busy:
            HostLock(other, wait_s=0.6, on_wait=waits.append).acquire()
        assert busy.value.id == "serve_lock_timeout"
        assert first.path in busy.value.message and "held" in busy.value.message
        assert 0.5 <= time.monotonic() - start < 30
        assert waits and "waiting" in waits[0]
    with HostLock(other, wait_s=5) as second:  # released: taken at once
        assert second.held and second.waited_s < 5
    assert not second.held


def test_the_lock_is_exclusive_on_this_machine() -> None:
    _exclusive(LocalHost(), LocalHost())


def test_the_lock_is_exclusive_over_ssh(sshd: SshServer) -> None:
    _exclusive(sshd.host(), sshd.host())


def test_a_dead_holder_leaves_no_stale_lock() -> None:
    code = textwrap.dedent(
        """
        import sys, time
        from instinct_serve.hosts import LocalHost
        from instinct_serve.runtime.lock import HostLock
        HostLock(LocalHost()).acquire()
        print("held", flush=True)
        time.sleep(60)
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    with pytest.raises(NotReadyError):
        HostLock(LocalHost(), wait_s=0.3).acquire()
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with HostLock(LocalHost(), wait_s=5) as lock:
        assert lock.held


def test_a_waiter_gets_the_lock_once_released(sshd: SshServer) -> None:
    first = HostLock(sshd.host())
    first.acquire()
    released_at: list[float] = []

    def release_soon() -> None:
        time.sleep(0.8)
        released_at.append(time.monotonic())
        first.release()

    import threading

    thread = threading.Thread(target=release_soon)
    thread.start()
    with HostLock(sshd.host(), wait_s=20) as second:
        assert released_at and second.held
    thread.join()
