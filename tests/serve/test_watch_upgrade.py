"""Day two on the real dockerd with the vLLM test double: ``watch`` restarts an endpoint
that died in service, ``serve --upgrade`` proves a new plan beside the old one (a bad one
leaves the old untouched), ``rollback`` returns to the old plan; ``ps`` shows restarts and
the last failure. Every loop is bounded (``watch --checks``, deadlines)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.infra.ports import free_port, free_port_run
from tests.serve.conftest import CLI, MODEL, Serve, inspect, parse_lines, run_cli

pytestmark = pytest.mark.docker


def _complete(port: int) -> httpx.Response:
    body = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8}
    return httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=10)


def _wait_exited(name: str, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = inspect(name)
        assert info is not None
        if info["State"]["Status"] == "exited":
            return info
        time.sleep(0.1)
    raise AssertionError(f"{name} did not exit: {inspect(name)}")


def _ps(name: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    run = run_cli(["ps", "--json", "--no-health"], env=env)
    assert run.returncode == 0, run.explain()
    rows = [e for e in json.loads(run.stdout)["endpoints"] if e["name"] == name]
    assert rows, run.stdout
    return rows[0]


def test_watch_restarts_an_endpoint_that_died_in_service(serve: Serve) -> None:
    # serve's warm-up and coherence probe are requests 1 and 2 of each run; exit 0 is a
    # clean exit, which docker's on-failure policy leaves alone: watch must restart it
    image = serve.double(load_s=0.5, VLLM_DOUBLE_DIE_AFTER_REQUESTS="3", VLLM_DOUBLE_EXIT_CODE="0")
    port, name = free_port(), serve.name("watch")
    run = serve(image=image, port=port, name=name)
    assert run.returncode == 0, run.explain()
    info = inspect(name)
    assert info is not None
    # proven, so handed to the daemon's bounded restart policy
    assert info["HostConfig"]["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    first_id = info["Id"]

    assert _complete(port).status_code == 200  # the third request: it answers, then dies
    died = time.monotonic()
    assert _wait_exited(name)["State"]["ExitCode"] == 0

    bounded = ["--interval", "0.2", "--backoff", "0", "--checks", "3", "--timeout", "60"]
    watch = run_cli(["watch", name, *bounded, "--root", str(serve.root), "--json"], timeout=150)
    back = time.monotonic()
    assert watch.returncode == 0, watch.explain()
    events = parse_lines(watch.stdout)
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "watch_started" and kinds[-1] == "watch_stopped", kinds
    assert "exited" in kinds and "recovered" in kinds, kinds
    restarted = next(e for e in events if e["kind"] == "restarted")
    assert restarted["by"] == "watch" and restarted["status"] == "ready"
    recovered = next(e for e in events if e["kind"] == "recovered")
    assert recovered["coherence"] == "coherent" and recovered["restart_s"] > 0
    print(
        f"\nrestart latency: watch relaunch to proven {recovered['restart_s']} s; "
        f"death to watch returning {back - died:.2f} s"
    )

    again = inspect(name)
    assert again is not None and again["State"]["Running"] and again["Id"] != first_id
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200
    # the crashed container's log was saved beside the journal before the relaunch, and
    # the container (renamed out of the way) removed only once the relaunch was proven
    saved = next(e for e in events if e["kind"] == "crash_log")
    assert saved["id"] == first_id and saved["container"].startswith(f"{name}-crashed-")
    log = Path(saved["saved"])
    assert log.parent == Path(os.environ["INSTINCT_DATA_DIR"]) / "events"
    assert "Starting vLLM server" in log.read_text()
    assert inspect(first_id) is None and inspect(saved["container"]) is None
    assert kinds.index("crash_log") < kinds.index("restarted") < kinds.index("recovered")
    row = _ps(name)
    assert row["restarts"] == 1
    assert row["last_failure"]["kind"] == "exited" and "exited" in row["last_failure"]["why"]
    assert row["verified"]["coherence"] == "coherent"  # re-proven after the restart


def test_watch_restarts_a_hung_endpoint_the_daemon_sees_as_running(serve: Serve) -> None:
    image = serve.double(load_s=0.3, VLLM_DOUBLE_HANG_AFTER_REQUESTS="3")
    port, name = free_port(), serve.name("hang")
    assert serve(image=image, port=port, name=name).returncode == 0
    first = inspect(name)
    assert first is not None
    assert _complete(port).status_code == 200  # the third: from now on it never answers
    bounded = ["--interval", "0.2", "--backoff", "0", "--unhealthy-after", "2", "--checks", "4"]
    watch = run_cli(
        ["watch", name, *bounded, "--timeout", "60", "--root", str(serve.root), "--json"],
        timeout=150,
    )
    assert watch.returncode == 0, watch.explain()
    events = parse_lines(watch.stdout)
    kinds = [e["kind"] for e in events]
    assert kinds.index("unhealthy") < kinds.index("hung") < kinds.index("restarted"), kinds
    assert "recovered" in kinds, kinds
    again = inspect(name)
    assert again is not None and again["Id"] != first["Id"] and again["State"]["Running"]
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    assert _ps(name)["last_failure"]["kind"] == "hung"


def test_watch_records_a_restart_by_the_daemon_policy(serve: Serve) -> None:
    image = serve.double(load_s=0.5, VLLM_DOUBLE_DIE_AFTER_REQUESTS="3", VLLM_DOUBLE_EXIT_CODE="1")
    port, name = free_port(), serve.name("policy")
    assert serve(image=image, port=port, name=name).returncode == 0
    assert _complete(port).status_code == 200  # dies with 1: the daemon restarts it
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = inspect(name)
        assert info is not None
        if info["RestartCount"] == 1 and info["State"]["Running"]:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"not restarted by the daemon: {inspect(name)}")
    row = _ps(name)
    assert row["restarts"] == 1 and row["verified"] is None  # a new run: not proven
    watch = run_cli(
        ["watch", name, "--interval", "0.3", "--checks", "4", "--root", str(serve.root), "--json"],
        timeout=120,
    )
    assert watch.returncode == 0, watch.explain()
    kinds = [e["kind"] for e in parse_lines(watch.stdout)]
    assert "proven" in kinds and "exited" not in kinds, kinds  # docker restarted, watch proved
    row = _ps(name)
    assert row["restarts"] == 1 and row["verified"]["coherence"] == "coherent"


@pytest.mark.parametrize("bad", ["incoherent", "die"])
def test_a_bad_upgrade_leaves_the_old_endpoint_serving_untouched(serve: Serve, bad: str) -> None:
    port, name = free_port(), serve.name("upgrade")
    serve.names.append(name + "-next")
    assert serve(image=serve.double(load_s=0.3), port=port, name=name).returncode == 0
    before = inspect(name)
    assert before is not None

    run = serve("--upgrade", image=serve.double(bad, load_s=0.3), port=port, name=name)
    assert run.returncode == 1, run.explain()
    assert run.result["status"] == "failed", run.explain()
    assert any("still serves the old plan, untouched" in n for n in run.result["notes"])
    after = inspect(name)
    assert after is not None
    assert (
        after["Id"] == before["Id"] and after["State"]["StartedAt"] == before["State"]["StartedAt"]
    )
    assert after["State"]["Running"] and after["RestartCount"] == before["RestartCount"]
    answer = _complete(port)
    assert answer.status_code == 200 and "Paris" in answer.json()["choices"][0]["text"]
    candidate = inspect(name + "-next")  # kept, stopped, for its log
    assert candidate is not None and not candidate["State"]["Running"]
    assert _ps(name)["last_failure"]["kind"] == "upgrade_failed"


def test_upgrade_switches_over_and_rollback_returns_to_the_old_plan(serve: Serve) -> None:
    port, name = free_port(), serve.name("upgrade")
    serve.names.append(name + "-next")
    old_image = serve.double(load_s=0.3)
    new_image = serve.double(load_s=0.3, VLLM_DOUBLE_SALAD="repeat")  # another image
    assert old_image != new_image
    assert serve(image=old_image, port=port, name=name).returncode == 0
    old = inspect(name)
    assert old is not None

    run = serve("--upgrade", image=new_image, port=port, name=name)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "ready" and result["endpoint"]["image"] == new_image
    downtime = result["figures"]["downtime_s"]
    assert 0 < downtime < 30
    notes = [e["message"] for e in run.of("note")]
    assert any("beside" in n and name + "-next" in n for n in notes), notes
    new = inspect(name)
    assert new is not None and new["Config"]["Image"] == new_image and new["Id"] != old["Id"]
    assert inspect(name + "-next") is None  # the candidate is gone once proven
    assert _complete(port).status_code == 200

    # no terminal and no --yes: refused, with what it would replace; nothing touched
    asked = run_cli(["rollback", name, "--root", str(serve.root), "--json"])
    refusal = json.loads(asked.stdout)["error"]
    assert asked.returncode == 2 and refusal["id"] == "confirmation_required", asked.explain()
    assert name in {item["name"] for item in refusal["details"]["change"]["touch"]}
    still = inspect(name)
    assert still is not None and still["Id"] == new["Id"] and still["State"]["Running"]
    back = run_cli(["rollback", "--yes", name, "--root", str(serve.root), "--json"], timeout=120)
    assert back.returncode == 0, back.explain()
    rolled = parse_lines(back.stdout)[-1]
    assert rolled["status"] == "ready" and rolled["endpoint"]["image"] == old_image
    current = inspect(name)
    assert current is not None and current["Config"]["Image"] == old_image
    assert _complete(port).status_code == 200
    print(
        f"\nupgrade switch-over downtime {downtime} s; rollback downtime "
        f"{rolled['figures']['downtime_s']} s"
    )


@pytest.mark.heavy
def test_watch_relaunches_a_native_endpoint_once_with_the_known_fix(
    tmp_path: Path, gpu_root: Path
) -> None:
    """No daemon restarts a native process: watch does, with serve's fix for the
    diagnosed cause the first time (here the double replays a real graph-capture OOM
    log as it dies), and as it is after that (the fix is applied once per endpoint)."""
    from instinct_serve.engine import launcher
    from instinct_serve.hosts import LocalHost
    from tests.infra.vllm_double import install_fake_vllm

    env = dict(os.environ)
    env.update(
        INSTINCT_VLLM_COMMAND=str(install_fake_vllm(tmp_path / "bin")),
        VLLM_DOUBLE_LOAD_S="0.3",
        VLLM_DOUBLE_DIE_AFTER_REQUESTS="3",
        VLLM_DOUBLE_DIE_REPLAY="02_oom_during_cuda_graph_capture.log",
    )
    port = free_port()
    name = f"native-watch-{port}"
    serve_argv = ["serve", MODEL, "--engine", "native", "--gpu", "mi300x", "--gpus", "1"]
    serve_argv += ["--port", str(port), "--name", name, "--root", str(gpu_root)]
    watch_argv = ["watch", name, "--interval", "0.2", "--backoff", "0", "--checks", "2"]
    watch_argv += ["--timeout", "60", "--json"]
    host = LocalHost()
    try:
        run = run_cli([*serve_argv, "--timeout", "60", "--yes", "--json"], env=env)
        assert run.returncode == 0, run.explain()
        assert run.result["relaunches"] == []

        assert _complete(port).status_code == 200  # the third: it dies, OOM in its log
        _wait_native_exit(host, name)
        first = run_cli(watch_argv, env=env, timeout=120)
        assert first.returncode == 0, first.explain()
        relaunched = [e for e in parse_lines(first.stdout) if e["kind"] == "relaunched"]
        assert relaunched and relaunched[0]["fixes"] == ["oom_graph_capture"], first.stdout
        status = launcher.status(host, name)
        assert status is not None and status.running
        assert "--enforce-eager" in status.process.argv

        assert _complete(port).status_code == 200  # dies again, the same way
        _wait_native_exit(host, name)
        second = run_cli(watch_argv, env=env, timeout=120)
        assert second.returncode == 0, second.explain()
        kinds = [e["kind"] for e in parse_lines(second.stdout)]
        assert "restarted" in kinds and "relaunched" not in kinds, kinds  # the fix once
        status = launcher.status(host, name)
        assert status is not None and status.running
        assert "--enforce-eager" in status.process.argv  # kept

        # `instinct stop` is not a failure: a running watch ends (0), and restarts nothing
        bounded = ["--interval", "0.2", "--checks", "150", "--json"]
        watching = subprocess.Popen(
            [*CLI, "watch", name, *bounded], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            time.sleep(1.0)
            assert run_cli(["stop", "--yes", name], env=env).returncode == 0
            out, _ = watching.communicate(timeout=60)
        finally:
            if watching.poll() is None:
                watching.kill()
        assert watching.returncode == 0, out
        events = parse_lines(out)
        assert [e["kind"] for e in events][-1] == "watch_stopped", out
        assert "instinct stop" in events[-1]["why"]
        assert not any(e["kind"] in ("restarted", "relaunched") for e in events), out
        assert _ps(name, env)["restarts"] == 2
    finally:
        if launcher.load(host, name) is not None:
            launcher.stop(host, name)


def _wait_native_exit(host: Any, name: str, timeout: float = 20.0) -> None:
    from instinct_serve.engine import launcher

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = launcher.status(host, name)
        if status is not None and not status.running:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} still runs")


def test_a_spare_port_taken_before_the_launch_is_passed_over(serve: Serve) -> None:
    """The spare port has no listener when it is chosen, but a socket bound to it (a
    connection's local port, another program) makes docker fail to publish it: the
    candidate is launched again on the next spare port instead of failing the upgrade."""
    port, name = free_port_run(3), serve.name("upspare")
    serve.names.append(name + "-next")
    assert serve(image=serve.double(load_s=0.3), port=port, name=name).returncode == 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", port + 1))  # bound, not listening: no listener to see
        new_image = serve.double(load_s=0.3, VLLM_DOUBLE_SALAD="repeat")
        run = serve("--upgrade", image=new_image, port=port, name=name)
    assert run.returncode == 0, run.explain()
    notes = [e["message"] for e in run.of("note")]
    assert any("taken before the launch" in n for n in notes), notes
    assert any(f"port {port + 2}" in n for n in notes), notes
    current = inspect(name)
    assert current is not None and current["Config"]["Image"] == new_image
    assert inspect(name + "-next") is None


def test_watch_killed_during_its_relaunch_is_finished_by_the_next_command(serve: Serve) -> None:
    """``kill -9`` of ``watch`` once its relaunch has begun (the crashed container set aside
    with its log saved, the new one on its way): the next ``ps`` names the interrupted
    relaunch and finishes it, and the endpoint answers on its port again."""
    image = serve.double(load_s=1.0, VLLM_DOUBLE_DIE_AFTER_REQUESTS="3", VLLM_DOUBLE_EXIT_CODE="0")
    port, name = free_port(), serve.name("watchkill")
    run = serve(image=image, port=port, name=name)
    assert run.returncode == 0, run.explain()
    assert _complete(port).status_code == 200  # the third request: it answers, then dies
    _wait_exited(name)
    bounded = ["--interval", "0.2", "--backoff", "0", "--checks", "3", "--timeout", "60"]
    argv = [*CLI, "watch", name, *bounded, "--root", str(serve.root), "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        kinds = []
        for line in proc.stdout:  # bounded by watch's own --timeout and --checks
            kinds.append(json.loads(line)["kind"] if line.startswith("{") else None)
            if kinds[-1] == "crash_log":
                proc.kill()
                break
        assert "crash_log" in kinds, kinds
    finally:
        proc.kill()
        proc.wait(timeout=60)
    ps = run_cli(["ps", "--json", "--no-health"], timeout=150)
    assert ps.returncode == 0, ps.explain()
    interrupted = [i for i in json.loads(ps.stdout).get("interrupted", []) if i["name"] == name]
    assert len(interrupted) == 1 and interrupted[0]["resolved"].startswith("finished"), ps.stdout
    again = inspect(name)
    assert again is not None and again["State"]["Running"]
    assert _complete(port).status_code == 200
    records = Path(os.environ["INSTINCT_DATA_DIR"]) / "intents"
    assert not records.is_dir() or not list(records.glob(f"{name}.*"))
