"""What the processes of one test run share (pytest plugin): a run directory, and locks in it.

Under pytest-xdist a run is a controller and its workers, each with its own session-scoped
fixtures. What must exist once per run (the Docker daemon, the test images) is made by the
first worker that needs it, under a file lock in the run directory, and reused by the
others; what must outlive every worker (stopping a daemon one of them started, removing the
images the run built) is recorded in the run directory (``record``) and done by the
controller in its ``pytest_unconfigure`` (before this plugin's, which removes the directory).
Without xdist the one process is both.

The run directory is made by the controller at configure time and handed to the workers
through ``INSTINCT_TEST_RUN_DIR`` (they inherit the environment).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

RUN_DIR_ENV = "INSTINCT_TEST_RUN_DIR"
OWNER_FILE = "owner.pid"  # the controller's pid: the run is alive while it is
_owned: list[Path] = []


def is_worker() -> bool:
    """True in a pytest-xdist worker (False in its controller and in a plain run)."""
    return "PYTEST_XDIST_WORKER" in os.environ


def run_dir() -> Path:
    """The run's shared directory (made on first use outside pytest, e.g. capture scripts)."""
    path = os.environ.get(RUN_DIR_ENV)
    if not path:
        path = tempfile.mkdtemp(prefix="instinct-test-run-")
        os.environ[RUN_DIR_ENV] = path
        _owned.append(Path(path))
    return Path(path)


@contextlib.contextmanager
def once(name: str) -> Iterator[Path]:
    """Hold the run-wide lock ``name``; yields the run directory (for markers)."""
    directory = run_dir()
    with FileLock(str(directory / f"{name}.lock")):
        yield directory


def record(name: str, line: str) -> None:
    """Append ``line`` to the run's list ``name`` (one appender at a time)."""
    with once(f"list-{name}") as directory, open(directory / name, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def recorded(name: str) -> list[str]:
    """The lines of the run's list ``name``, in the order they were recorded."""
    try:
        return (run_dir() / name).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []


def run_id() -> str:
    """The run's name, unique on this machine (its run directory's)."""
    return run_dir().name


def owner_pid() -> int:
    """The pid of the run's controller (this process outside pytest-xdist)."""
    try:
        return int((run_dir() / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return os.getpid()


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker():
        # made here, before xdist starts the workers, so they inherit it
        (run_dir() / OWNER_FILE).write_text(str(os.getpid()), encoding="utf-8")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if is_worker():
        return
    for path in _owned:
        shutil.rmtree(path, ignore_errors=True)
        if os.environ.get(RUN_DIR_ENV) == str(path):
            del os.environ[RUN_DIR_ENV]
    _owned.clear()
