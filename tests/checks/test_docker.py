"""docker_installed / docker_daemon: the real daemon, a dead socket, and captured failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve.checks import CheckOptions, run_checks
from instinct_serve.hosts import LocalHost
from tests.infra.docker import DockerDaemon, unavailable
from tests.infra.fakebin import FakeBin

from .conftest import FakeRoot, run_one

pytestmark = pytest.mark.usefixtures("target_env")

INFO = "info --format {{.ServerVersion}}"
# What the docker CLI prints when nothing listens on the default socket.
NOT_RUNNING = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?\n"
)
# ... and when the user may not open the socket (not in the docker group).
PERMISSION = (
    "permission denied while trying to connect to the Docker daemon socket at "
    'unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.24/info": '
    "dial unix /var/run/docker.sock: connect: permission denied\n"
)


@pytest.mark.docker
def test_real_daemon(docker_daemon: DockerDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    installed = run_one("docker_installed")
    assert installed.status == "ok" and installed.details["path"].endswith("/docker")
    daemon = run_one("docker_daemon")
    assert daemon.status == "ok", daemon.message
    assert daemon.details["server_version"] == docker_daemon.version


def test_dead_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if run_one("docker_installed").status != "ok":
        unavailable("the docker CLI is not installed (apt-get install docker.io)")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    report = run_checks(LocalHost(), CheckOptions())
    check = report.get("docker_daemon")
    assert check is not None and check.status == "error"
    assert check.message.startswith("the Docker daemon is not running")
    assert check.details["reason"] == "not_running"
    assert check.fix and f"DOCKER_HOST=unix://{tmp_path}/dead.sock" in check.fix
    assert not check.fixable  # a daemon someone pointed us at is not ours to start
    assert not report.ready


def test_docker_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    installed = run_one("docker_installed")
    assert installed.status == "error" and installed.message == (
        "docker is not installed on this machine"
    )
    assert run_one("docker_daemon").status == "skip"


def test_permission_denied(fakebin: FakeBin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    fakebin.add("docker", {INFO: ("", PERMISSION, 1)})
    check = run_one("docker_daemon")
    assert check.status == "error" and check.details["reason"] == "permission_denied"
    assert check.fix and "usermod -aG docker" in check.fix


def test_unknown_failure_keeps_dockers_words(fakebin: FakeBin) -> None:
    fakebin.add("docker", {INFO: ("", "error during connect: something odd\n", 1)})
    check = run_one("docker_daemon")
    assert check.status == "error" and check.details["reason"] == "failed"
    assert "something odd" in check.message


def _not_running_on_systemd(
    fakebin: FakeBin, fake_root: FakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    fakebin.add("docker", {INFO: ("", NOT_RUNNING, 1)})
    fakebin.add("systemctl", {"start docker": ""})  # never the real one
    fake_root.write("/proc/1/comm", "systemd\n")


def test_start_docker_offered_on_systemd_hosts_only(
    fakebin: FakeBin, fake_root: FakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    _not_running_on_systemd(fakebin, fake_root, monkeypatch)
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root)))
    check = report.get("docker_daemon")
    assert check is not None and check.details["reason"] == "not_running" and check.fixable
    fake_root.write("/proc/1/comm", "tini\n")
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root)))
    check = report.get("docker_daemon")
    assert check is not None and check.status == "error" and not check.fixable


def test_start_docker_needs_yes(
    fakebin: FakeBin, fake_root: FakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    _not_running_on_systemd(fakebin, fake_root, monkeypatch)
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root), auto_fix=True))
    assert fakebin.calls("systemctl") == []
    pending = [f for f in report.fixes_pending if f.id == "docker_daemon"]
    assert pending and pending[0].command == "systemctl start docker"  # root: no sudo
    assert pending[0].privileged and not pending[0].ok


def test_start_docker_with_yes_runs_and_rechecks(
    fakebin: FakeBin, fake_root: FakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    _not_running_on_systemd(fakebin, fake_root, monkeypatch)
    report = run_checks(LocalHost(), CheckOptions(root=str(fake_root), auto_fix=True, yes=True))
    assert fakebin.calls("systemctl") == [["start", "docker"]]
    failed = [f for f in report.fixes_failed if f.id == "docker_daemon"]
    # the fake daemon stays down: the fix ran, and the fresh check says it did not help
    assert failed and failed[0].message.startswith("ran, but the check still fails")
    assert "docker_daemon" not in {f.id for f in report.fixes_applied}
