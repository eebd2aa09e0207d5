"""Machine-wide leases on what concurrent test runs share: the Docker daemon and the test
images.

Two checkouts (two sessions, CI beside a developer) run their suites against one daemon.
Without a count, the run that built an image (or started the daemon) removed it at its end
while the other still used it: its next ``docker run`` tried to pull the image from a
registry and failed (``image_pull_failed``), or found no daemon at all. A run therefore
takes a lease on each shared thing before it uses it (``take``) and drops it at its end
(``release``); the thing goes only with its last live lease, and only when a test run made
it (``made``). A lease names the run's controller pid: the lease of a run that was killed
(its pid gone) does not count. Taking and releasing hold one lock per thing, so no run
takes a lease on an image another run is removing.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock

from tests.infra import shared

LEASES = Path(tempfile.gettempdir()) / "instinct-test-leases"
MADE = "made"  # in a thing's directory: a test run made it (its content: a pid, or empty)


def _directory(thing: str) -> Path:
    return LEASES / re.sub(r"[^A-Za-z0-9_.-]", "_", thing)


@contextlib.contextmanager
def held(name: str) -> Iterator[None]:
    """The machine-wide lock ``name`` ("images", "dockerd"): what runs take and release
    under it, and what they make and remove, happens one run at a time."""
    LEASES.mkdir(parents=True, exist_ok=True)
    with FileLock(str(LEASES / f"{name}.lock")):
        yield


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (another user's too)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_of(path: Path) -> int:
    try:
        return int(path.read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return 0


def take(thing: str, *, made: bool = False, pid: int | None = None) -> None:
    """This run holds ``thing`` (``made``: this run made it; ``pid``: the process to stop
    when it goes, for a daemon). Call under ``held``, with the making."""
    directory = _directory(thing)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{shared.run_id()}.lease").write_text(str(shared.owner_pid()))
    if made:
        (directory / MADE).write_text("" if pid is None else str(pid))


def release(thing: str) -> tuple[bool, int | None]:
    """Drop this run's lease. ``(last, pid)``: ``last`` when no live run holds ``thing``
    any more and a test run made it (the caller removes it now, under ``held``); ``pid``:
    the process recorded with it (a daemon's), if any. Call under ``held``."""
    directory = _directory(thing)
    (directory / f"{shared.run_id()}.lease").unlink(missing_ok=True)
    live = []
    for lease in directory.glob("*.lease"):
        if pid_alive(_pid_of(lease)):
            live.append(lease)
        else:
            lease.unlink(missing_ok=True)  # a run that was killed: its lease holds nothing
    made = directory / MADE
    if live or not made.exists():
        return False, None
    pid = _pid_of(made) or None
    made.unlink(missing_ok=True)
    return True, pid


def in_use(thing: str) -> bool:
    """True while a live run holds ``thing`` (an old image's clean-up passes it over)."""
    return any(pid_alive(_pid_of(lease)) for lease in _directory(thing).glob("*.lease"))
