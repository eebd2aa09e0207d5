"""A native endpoint is a process tree: vLLM's API server and its engine processes (the
double's ``VLLM_DOUBLE_CHILDREN`` stand in for them). When the server is killed, the engine
processes stay, holding GPU memory: ``ps`` names them, ``instinct stop`` ends them, and
``watch``'s restart ends them before it relaunches. Checked in /proc, with the real CLI."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL, Run, parse_lines, processes_mentioning, run_cli


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("INSTINCT_DATA_DIR", str(tmp_path / "data"))  # this process's too
    values = dict(os.environ)
    values.update(
        INSTINCT_VLLM_COMMAND=str(install_fake_vllm(tmp_path / "bin")),
        VLLM_DOUBLE_LOAD_S="0.3",
        VLLM_DOUBLE_CHILDREN="2",
    )
    return values


@pytest.fixture
def port() -> Iterator[int]:
    """A free port; whatever of the double on it is left at the end is killed."""
    chosen = free_port()
    yield chosen
    for pid, _ in processes_mentioning(f"--port {chosen}"):
        os.kill(pid, signal.SIGKILL)


def serve(gpu_root: Path, port: int, name: str, env: dict[str, str]) -> Run:
    args = ["serve", MODEL, "--engine", "native", "--gpu", "mi300x", "--gpus", "1"]
    args += ["--port", str(port), "--name", name, "--root", str(gpu_root)]
    return run_cli([*args, "--timeout", "60", "--yes", "--json"], env=env)


def crashed(gpu_root: Path, port: int, name: str, env: dict[str, str]) -> list[int]:
    """Serve ``name``, then SIGKILL its API server: the engine processes it leaves."""
    run = serve(gpu_root, port, name, env)
    assert run.returncode == 0 and run.result["status"] == "ready", run.explain()
    cores = engine_cores(port)
    assert len(cores) == 2
    kill_api_server(port)
    wait_ended(name)
    assert engine_cores(port) == cores  # what the issue saw: they outlive the server
    return cores


def _live(pid: int) -> bool:
    """A process that runs (not a zombie waiting to be reaped)."""
    try:
        stat = launcher.parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return False
    return stat is not None and stat.state not in ("Z", "X")


def engine_cores(port: int) -> list[int]:
    return sorted(pid for pid, _ in processes_mentioning(f"engine-core --port {port} "))


def kill_api_server(port: int) -> int:
    """SIGKILL vLLM's API server (the double serving ``port``), as an OOM killer would."""
    found = processes_mentioning(f"vllm_double.py serve {MODEL}")
    (pid,) = [pid for pid, cmd in found if f"--port {port}" in cmd and "sh -c" not in cmd]
    os.kill(pid, signal.SIGKILL)
    return pid


def wait_ended(name: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = launcher.status(LocalHost(), name)
        if status is not None and not status.running:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} still runs")


def test_ps_names_a_killed_servers_engine_processes_and_stop_ends_them(
    env: dict[str, str], gpu_root: Path, port: int
) -> None:
    name = f"native-tree-{port}"
    cores = crashed(gpu_root, port, name, env)

    ps = run_cli(["ps", "--json", "--no-health"], env=env)
    assert ps.returncode == 0, ps.explain()
    (row,) = [r for r in json.loads(ps.stdout)["endpoints"] if r["name"] == name]
    assert row["status"] == "exited (137)" and not row["running"]
    assert sorted(s["pid"] for s in row["survivors"]) == cores
    assert all(f"engine-core --port {port}" in s["command"] for s in row["survivors"])
    human = run_cli(["ps", "--no-health"], env={**env, "COLUMNS": "300"})
    assert f"{name} ended, but 2 of its processes still run: pid {cores[0]} (" in human.stdout

    started = time.monotonic()
    stop = run_cli(["stop", "--yes", name, "--json"], env=env)
    took = time.monotonic() - started
    assert stop.returncode == 0, stop.explain()
    (item,) = json.loads(stop.stdout)["stopped"]
    assert item["processes"] == cores and item["survivors"] == [] and not item["was_running"]
    assert engine_cores(port) == [] and processes_mentioning(f"--port {port}") == []
    ps = run_cli(["ps", "--json", "--no-health"], env=env)
    (row,) = [r for r in json.loads(ps.stdout)["endpoints"] if r["name"] == name]
    assert row["survivors"] == [] and row["status"] == "stopped (exit 137)"
    print(
        f"\nstop: {len(item['processes'])} survivors ended in {item['stop_s']} s ({took:.2f} s CLI)"
    )


def test_stop_fails_naming_a_process_that_left_the_group(
    env: dict[str, str], gpu_root: Path, port: int
) -> None:
    name = f"native-leaver-{port}"
    cores = crashed(gpu_root, port, name, {**env, "VLLM_DOUBLE_CHILDREN_DETACH": "session"})
    stop = run_cli(["stop", "--yes", name, "--json"], env=env)
    assert stop.returncode == 1, stop.explain()
    error = json.loads(stop.stdout)["error"]
    assert error["id"] == "processes_survive"
    for pid in cores:
        assert f"pid {pid} (" in error["message"] and "engine-core" in error["message"]
    (item,) = error["details"]["stopped"]
    assert sorted(s["pid"] for s in item["survivors"]) == cores == engine_cores(port)
    again = serve(gpu_root, port, name, env)
    assert again.returncode == 1, again.explain()  # not beside them: refused
    assert again.result["error"]["id"] == "processes_survive"
    assert engine_cores(port) == cores


def test_watch_ends_a_killed_servers_engine_processes_before_it_relaunches(
    env: dict[str, str], gpu_root: Path, port: int
) -> None:
    name = f"native-watch-tree-{port}"
    old = crashed(gpu_root, port, name, env)
    watch = ["watch", name, "--interval", "0.2", "--backoff", "0", "--checks", "2"]
    run = run_cli([*watch, "--timeout", "60", "--json"], env=env, timeout=120)
    assert run.returncode == 0, run.explain()
    kinds = [e["kind"] for e in parse_lines(run.stdout)]
    assert "restarted" in kinds, kinds
    status = launcher.status(LocalHost(), name)
    assert status is not None and status.running
    new = engine_cores(port)
    assert len(new) == 2 and not set(new) & set(old)  # the old ones were ended, not kept
    # ended: gone, or a zombie nobody reaps (this sandbox's pid 1 does not)
    assert not [pid for pid in old if _live(pid)], old
    assert launcher.stop(LocalHost(), name).stopped
    assert engine_cores(port) == []
