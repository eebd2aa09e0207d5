"""The native launcher starts a real process (the vLLM test double as ``vllm serve``),
finds it again from its state, and stops only what it started, locally and over ssh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from instinct_serve.engine import launcher
from instinct_serve.engine.launcher import NativeProcess, parse_stat, vllm_serve_argv
from instinct_serve.errors import UsageError
from instinct_serve.hosts import Host, LocalHost
from tests.infra.paths import TESTS
from tests.infra.ssh import SshServer, free_port

DOUBLE = TESTS / "infra" / "vllm_double.py"
SECRET = "hf_test_secret_value_that_must_not_leak"


def wait_for(predicate: object, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.1) + 1):
        if predicate():  # type: ignore[operator]
            return True
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return False


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    parsed = parse_stat(stat)
    return parsed is not None and parsed.state not in ("Z", "X")


def serve_argv(port: int) -> list[str]:
    return vllm_serve_argv(
        f"{sys.executable}", "facebook/opt-125m", port=port, bind="127.0.0.1", utilization=0.5
    )


def start_double(host: Host, name: str, port: int) -> NativeProcess:
    argv = [sys.executable, str(DOUBLE), *serve_argv(port)[1:]]
    return launcher.launch(
        host,
        name,
        argv,
        env={"HF_TOKEN": SECRET, "VLLM_DOUBLE_LOAD_S": "0.2", "HIP_VISIBLE_DEVICES": "3"},
        meta={"model": "facebook/opt-125m", "port": port},
    )


def test_serve_argv_keeps_graph_capture_and_sets_tp() -> None:
    argv = vllm_serve_argv("/v/bin/vllm", "m", port=8000, tensor_parallel_size=2, utilization=0.9)
    assert argv == [
        "/v/bin/vllm",
        "serve",
        "m",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "2",
        "--gpu-memory-utilization",
        "0.9",
    ]
    assert "--enforce-eager" not in argv


def test_launch_status_health_and_stop() -> None:
    host, port = LocalHost(), free_port()
    proc = start_double(host, "opt", port)
    try:
        assert wait_for(lambda: healthy(port)), launcher.read_log(host, "opt")
        st = launcher.status(host, "opt")
        assert st is not None and st.running
        assert st.process.pid == proc.pid and st.process.meta["port"] == port
        # its own session and process group, and the env it was given (not in argv)
        assert os.getpgid(proc.pid) == proc.pid
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert b"HIP_VISIBLE_DEVICES=3" in environ
        assert launcher.group_pids(host, proc)  # the wrapper and the server
        assert "vllm-double" in launcher.read_log(host, "opt")
        state = Path(proc.state_dir, "state.json").read_text()
        assert "HF_TOKEN" in state and SECRET not in state
        for pid in launcher.group_pids(host, proc):
            assert SECRET.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        with pytest.raises(UsageError) as err:
            start_double(host, "opt", free_port())
        assert err.value.id == "name_in_use"
        assert [p.process.name for p in launcher.list_processes(host)] == ["opt"]
    finally:
        result = launcher.stop(host, "opt", timeout=10)
    assert result.was_running and result.stopped and result.signal == "TERM"
    assert not alive(proc.pid)
    assert not healthy(port)
    after = launcher.status(host, "opt")
    assert after is not None and not after.running
    assert not launcher.stop(host, "opt").was_running  # stopping twice is harmless


def test_a_command_that_ends_records_its_exit_status() -> None:
    host = LocalHost()
    proc = launcher.launch(host, "quick", ["sh", "-c", "echo bye; exit 3"])
    assert wait_for(lambda: not launcher.status(host, "quick").running)  # type: ignore[union-attr]
    st = launcher.status(host, "quick")
    assert st is not None and st.exit_code == 3
    assert "bye" in launcher.read_log(host, "quick")
    assert not alive(proc.pid)


def group_members(pgid: int) -> list[int]:
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = parse_stat(stat_file.read_text())
        except OSError:
            continue
        if stat is not None and stat.pgid == pgid and stat.state not in ("Z", "X"):
            found.append(stat.pid)
    return found


def test_stop_waits_for_the_whole_group_not_only_its_leader() -> None:
    """A worker that ignores SIGTERM outlives the leader (as a wedged vLLM worker holding
    GPU memory does): stop escalates to SIGKILL and returns once the group is gone."""
    host = LocalHost()
    worker = "trap '' TERM; while :; do sleep 0.05; done"
    proc = launcher.launch(host, "group", ["sh", "-c", f"sh -c {worker!r} & wait"])
    try:
        assert wait_for(lambda: len(group_members(proc.pid)) >= 3)
        result = launcher.stop(host, "group", timeout=1.0)
        assert result.was_running and result.stopped and result.signal == "KILL"
        assert group_members(proc.pid) == []
    finally:
        for pid in group_members(proc.pid):
            os.kill(pid, 9)


def test_stop_never_touches_a_process_it_did_not_start(tmp_path: Path) -> None:
    host = LocalHost()
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ticks = parse_stat(Path(f"/proc/{stranger.pid}/stat").read_text())
        assert ticks is not None
        # a state file that points at the stranger: wrong start time (a reused pid) ...
        proc = launcher.launch(host, "victim", ["sleep", "0"])
        state = Path(proc.state_dir, "state.json")
        doc = json.loads(state.read_text())
        doc.update(pid=stranger.pid, start_ticks=ticks.start_ticks + 1)
        state.write_text(json.dumps(doc))
        assert not launcher.stop(host, "victim", timeout=1).was_running
        # ... and the right start time, but not carrying our marker in its environment
        doc.update(start_ticks=ticks.start_ticks)
        state.write_text(json.dumps(doc))
        assert not launcher.stop(host, "victim", timeout=1).was_running
        assert stranger.poll() is None  # still running
    finally:
        stranger.kill()
        stranger.wait(timeout=10)


def test_bad_names_are_refused() -> None:
    for name in ("", "../x", "a b", "-rf", "x" * 65):
        with pytest.raises(UsageError):
            launcher.launch(LocalHost(), name, ["true"])


def test_launch_and_stop_over_ssh(sshd: SshServer, tmp_path: Path) -> None:
    data = tmp_path / "remote-data"
    client = sshd.client("engine-launcher", set_env={"INSTINCT_DATA_DIR": str(data)})
    host = client.host()
    port = free_port()
    proc = start_double(host, "remote-opt", port)
    try:
        assert proc.state_dir == str(data / "native" / "remote-opt")
        assert wait_for(lambda: healthy(port)), launcher.read_log(host, "remote-opt")
        st = launcher.status(host, "remote-opt")
        assert st is not None and st.running
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert f"HF_TOKEN={SECRET}".encode() in environ  # it arrived, over stdin
        assert SECRET not in Path(proc.state_dir, "state.json").read_text()
    finally:
        result = launcher.stop(host, "remote-opt", timeout=10)
    assert result.stopped and not alive(proc.pid)


def test_stop_records_how_it_ended_and_that_it_was_stopped() -> None:
    """The wrapper outlives the group's SIGTERM long enough to write the exit status."""
    host, port = LocalHost(), free_port()
    start_double(host, "stopped", port)
    try:
        assert wait_for(lambda: healthy(port)), launcher.read_log(host, "stopped")
    finally:
        result = launcher.stop(host, "stopped", timeout=10)
    assert result.was_running and result.stopped
    status = launcher.status(host, "stopped")
    assert status is not None and not status.running
    assert status.exit_code == 0  # the double, like vLLM 0.32, exits 0 on SIGTERM
    assert status.stopped and status.stopped_at
    assert status.describe() == "stopped (exit 0)"
    assert status.to_dict()["status"] == "stopped (exit 0)"
    ended = launcher.launch(host, "stopped", ["sh", "-c", "exit 4"])  # relaunch: not stopped
    assert wait_for(lambda: launcher.status(host, "stopped").exit_code == 4)  # type: ignore[union-attr]
    again = launcher.status(host, "stopped")
    assert again is not None and not again.stopped and again.describe() == "exited (4)"
    assert not alive(ended.pid)


def test_stop_removes_the_vllm_rendezvous_files_its_log_names(tmp_path: Path) -> None:
    host = LocalHost()
    ours = tmp_path / ("vllm_dist_" + "a" * 32)
    other = tmp_path / ("vllm_dist_" + "b" * 32)  # another vLLM's: not in our log
    script = (
        f"touch {ours} {other}; echo '(Worker pid=1) INFO 12-03 14:03:22 [parallel_state.py:1906]"
        f" world_size=1 rank=0 local_rank=0 distributed_init_method=file://{ours} "
        "backend=gloo'; sleep 60"
    )
    launcher.launch(host, "rendezvous", ["sh", "-c", script])
    assert wait_for(lambda: ours.exists() and "vllm_dist_" in launcher.read_log(host, "rendezvous"))
    assert launcher.vllm_temp_files(launcher.read_log(host, "rendezvous")) == [str(ours)]
    launcher.stop(host, "rendezvous", timeout=10)
    assert not ours.exists() and other.exists()


# --------------------------------------------------------------------------- process groups
# A vLLM whose API server is killed leaves its engine processes running (holding GPU memory):
# the double's VLLM_DOUBLE_CHILDREN stand in for them.


def start_with_children(host: Host, name: str, port: int, **env: str) -> NativeProcess:
    argv = [sys.executable, str(DOUBLE), *serve_argv(port)[1:]]
    env = {"VLLM_DOUBLE_LOAD_S": "0.2", "VLLM_DOUBLE_CHILDREN": "2", **env}
    proc = launcher.launch(host, name, argv, env=env, meta={"port": port})
    assert wait_for(lambda: healthy(port)), launcher.read_log(host, name)
    return proc


def engine_cores(port: int) -> list[int]:
    """The double's engine-core stand-ins of ``port`` alive now (read from /proc)."""
    needle = f"engine-core --port {port} "
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        pid = int(cmdline.parent.name)
        if needle in text and alive(pid):
            found.append(pid)
    return sorted(found)


def api_server(proc: NativeProcess, port: int) -> int:
    """The double itself (vLLM's API server): the member running ``serve ... --port P``."""
    for pid in launcher.members(proc, launcher.scan(LocalHost())):
        text = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        if text.startswith(sys.executable) and f"serve facebook/opt-125m --port {port}" in text:
            return pid
    raise AssertionError("no API server among the members")


def test_a_killed_leader_leaves_members_that_ps_names_and_stop_ends() -> None:
    host, port = LocalHost(), free_port()
    proc = start_with_children(host, "orphans", port)
    cores = engine_cores(port)
    try:
        assert len(cores) == 2
        assert set(cores) <= set(launcher.group_pids(host, proc))
        os.kill(proc.pid, 9)  # the group leader (the wrapper)
        assert wait_for(lambda: not alive(proc.pid))
        status = launcher.status(host, "orphans")
        assert status is not None and not status.running
        left = launcher.survivors_of(host, [proc])["orphans"]
        assert {s.pid for s in left} == {*cores, api_server(proc, port)}
        assert all(not s.left_group for s in left)
        assert any(f"engine-core --port {port} --index 1" in s.command for s in left)
        with pytest.raises(UsageError) as refused:  # the record would lose them
            start_double(host, "orphans", free_port())
        assert refused.value.id == "name_in_use" and str(cores[0]) in refused.value.message
        result = launcher.stop(host, "orphans", timeout=10)
        assert not result.was_running and result.stopped and result.signal == "TERM"
        assert set(result.members) == {s.pid for s in left} and result.survivors == []
        assert engine_cores(port) == [] and not healthy(port)
        assert launcher.survivors_of(host, [proc]) == {}
        members, took = len(result.members), result.elapsed_s
        print(f"\nstop of a leaderless group: {members} members ended in {took:.2f} s")
    finally:
        for pid in engine_cores(port):
            os.kill(pid, 9)


def test_members_in_another_group_of_the_session_that_ignore_sigterm_are_killed() -> None:
    host, port = LocalHost(), free_port()
    env = {"VLLM_DOUBLE_CHILDREN_DETACH": "group", "VLLM_DOUBLE_CHILDREN_TERM": "ignore"}
    proc = start_with_children(host, "wedged", port, **env)
    cores = engine_cores(port)
    try:
        assert len(cores) == 2 and all(os.getpgid(p) == p for p in cores)  # own groups
        assert all(os.getsid(p) == proc.pid for p in cores)  # the launch's session
        os.kill(api_server(proc, port), 9)  # the API server; the wrapper records 137
        assert wait_for(lambda: launcher.status(host, "wedged").exit_code == 137)  # type: ignore[union-attr]
        result = launcher.stop(host, "wedged", timeout=1.0)
        assert result.stopped and result.signal == "KILL" and set(cores) <= set(result.members)
        assert engine_cores(port) == []
        assert launcher.status(host, "wedged").describe() == "stopped (exit 137)"  # type: ignore[union-attr]
    finally:
        for pid in engine_cores(port):
            os.kill(pid, 9)


def test_a_process_that_left_the_session_is_reported_never_signalled() -> None:
    """Only the group and session are provably the launch's: a descendant that left them
    (found by the launch's token) is named with pid and command, and left alone."""
    from instinct_serve.errors import InstinctError
    from instinct_serve.runtime.native import NativeBackend

    host, port = LocalHost(), free_port()
    proc = start_with_children(host, "leaver", port, VLLM_DOUBLE_CHILDREN_DETACH="session")
    cores = engine_cores(port)
    try:
        assert len(cores) == 2 and all(os.getsid(p) == p for p in cores)
        os.kill(api_server(proc, port), 9)  # a crash: its clean shutdown would end them
        assert wait_for(lambda: not alive(proc.pid))
        ps_view = launcher.survivors_of(host, [proc])["leaver"]
        assert sorted(s.pid for s in ps_view) == cores
        result = launcher.stop(host, "leaver", timeout=10)
        assert not result.was_running and not result.stopped and result.members == []
        assert sorted(s.pid for s in result.survivors) == cores == engine_cores(port)
        assert all(s.left_group and "engine-core" in s.command for s in result.survivors)
        with pytest.raises(InstinctError) as err:
            NativeBackend(host, "vllm").discard("leaver", keep=True)
        assert err.value.id == "processes_survive" and f"pid {cores[0]}" in err.value.message
        assert [s["pid"] for s in err.value.details["survivors"]] == cores
    finally:
        for pid in engine_cores(port):
            os.kill(pid, 9)
    assert launcher.stop(host, "leaver").stopped  # once they are gone


def test_a_killed_leaders_members_are_stopped_over_ssh(sshd: SshServer, tmp_path: Path) -> None:
    client = sshd.client("engine-launcher", set_env={"INSTINCT_DATA_DIR": str(tmp_path / "d")})
    host, port = client.host(), free_port()
    proc = start_with_children(host, "remote-orphans", port)
    cores = engine_cores(port)
    try:
        assert len(cores) == 2 and os.getsid(cores[0]) == proc.pid
        os.kill(proc.pid, 9)
        assert wait_for(lambda: not alive(proc.pid))
        left = launcher.survivors_of(host, [proc])["remote-orphans"]
        assert set(cores) <= {s.pid for s in left}
        result = launcher.stop(host, "remote-orphans", timeout=10)
        assert result.stopped and set(cores) <= set(result.members)
        assert engine_cores(port) == [] and not healthy(port)
    finally:
        for pid in engine_cores(port):
            os.kill(pid, 9)


def test_parse_scan_reads_stats_and_markers() -> None:
    text = (
        "10 (sh) S 1 10 10 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 500 0 0\n"
        "11 (a b) c)) S 10 10 10 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 501 0 0\n"
        "@@MARKERS@@\n/proc/11/environ:INSTINCT_NATIVE_RUN=ab\0/proc/11/environ:"
        "INSTINCT_NATIVE_NAME=x\0/proc/zz/environ:INSTINCT_NATIVE_RUN=cd\0"
    )
    seen = launcher.parse_scan(text)
    assert sorted(seen.stats) == [10, 11] and seen.stats[11].comm == "a b) c)"
    assert seen.stats[11].sid == 10 and seen.stats[11].start_ticks == 501
    assert seen.markers == {11: frozenset({"INSTINCT_NATIVE_RUN=ab", "INSTINCT_NATIVE_NAME=x"})}
