"""Concurrent test runs share the Docker daemon and the test images through leases
(``tests/infra/leases.py``): what another live run holds is never removed under it, a killed
run's lease counts for nothing, and what no test run made is never removed at all."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra import leases, shared


@pytest.fixture
def lease_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(leases, "LEASES", tmp_path / "leases")
    return tmp_path / "leases"


@pytest.fixture
def other_run() -> Iterator[int]:
    """A live process standing for another run's controller."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _hold(root: Path, thing: str, run: str, pid: int) -> None:
    directory = root / thing
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{run}.lease").write_text(str(pid))


def test_the_last_live_run_removes_what_a_test_run_made(lease_root: Path, other_run: int) -> None:
    with leases.held("images"):
        leases.take("img", made=True)
    _hold(lease_root, "img", "other-run", other_run)
    assert leases.in_use("img")
    with leases.held("images"):
        assert leases.release("img") == (False, None)  # the other run still uses it
    with leases.held("images"):
        leases.take("img")  # a run that found it: it may not remove it while others hold it
    (lease_root / "img" / "other-run.lease").unlink()
    with leases.held("images"):
        assert leases.release("img") == (True, None)
    assert not leases.in_use("img")


def test_a_killed_runs_lease_counts_for_nothing(lease_root: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    leases.take("dockerd", made=True, pid=4242)
    _hold(lease_root, "dockerd", "killed-run", dead.pid)
    assert leases.release("dockerd") == (True, 4242)
    assert list((lease_root / "dockerd").glob("*.lease")) == []


def test_what_no_test_run_made_is_never_removed(lease_root: Path) -> None:
    leases.take("found-image")
    assert leases.release("found-image") == (False, None)


def test_a_lease_names_this_runs_controller() -> None:
    assert shared.owner_pid() > 0 and shared.run_id()
