"""``instinct serve --engine native``: the supervised ``vllm serve`` without Docker, with the
fake ``vllm`` executable (the test double) found through ``INSTINCT_VLLM_COMMAND``."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL, processes_mentioning, run_cli


@pytest.fixture
def native_env(tmp_path: Path) -> dict[str, str]:
    exe = install_fake_vllm(tmp_path / "bin")
    env = dict(os.environ)
    env.update({"INSTINCT_VLLM_COMMAND": str(exe), "VLLM_DOUBLE_LOAD_S": "0.5"})
    return env


def native_args(root: Path, port: int, name: str, *extra: str) -> list[str]:
    return [
        "serve",
        MODEL,
        "--engine",
        "native",
        "--gpu",
        "mi300x",
        "--gpus",
        "1",
        "--port",
        str(port),
        "--name",
        name,
        "--root",
        str(root),
        "--timeout",
        "60",
        "--yes",
        "--json",
        *extra,
    ]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in raw if b"=" in e)


@pytest.mark.heavy
def test_native_serve_pins_the_gpu_and_relaunches(
    native_env: dict[str, str], gpu_root: Path
) -> None:
    port = free_port()
    name = f"native-{port}"
    host = LocalHost()
    try:
        run = run_cli(
            native_args(
                gpu_root, port, name, "--env-literal", "VLLM_DOUBLE_MODE=oom_graph_capture"
            ),
            env=native_env,
        )
        assert run.returncode == 0, run.explain()
        result = run.result
        assert result["engine"] == "native" and result["status"] == "ready"
        assert result["endpoint"]["base_url"] == f"http://127.0.0.1:{port}/v1"
        assert result["endpoint"]["image"] is None
        assert [r["finding"] for r in result["relaunches"]] == ["oom_graph_capture"]
        for phase in ("loading_weights", "capturing_graphs", "ready", "warming_up"):
            assert phase in run.phases

        status = launcher.status(host, name)
        assert status is not None and status.running
        assert "--enforce-eager" in status.process.argv
        assert status.process.argv[0] == native_env["INSTINCT_VLLM_COMMAND"]
        assert status.process.argv[3:5] == ["--host", "127.0.0.1"]  # not vLLM's 0.0.0.0
        pids = launcher.group_pids(host, status.process)
        double = [p for p in pids if "vllm_double" in Path(f"/proc/{p}/cmdline").read_text()]
        assert double and _environ(double[0])["HIP_VISIBLE_DEVICES"] == "1"

        mode = ("--env-literal", "VLLM_DOUBLE_MODE=oom_graph_capture")
        again = run_cli(native_args(gpu_root, port, name, *mode), env=native_env)
        assert again.returncode == 0, again.explain()
        assert again.result["status"] == "reused"
        other = run_cli(native_args(gpu_root, port, name), env=native_env)  # another plan
        assert other.returncode == 1 and other.result["error"]["id"] == "endpoint_exists"

        ps = run_cli(["ps", "--json"], env=native_env)
        rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
        assert rows[name]["engine"] == "native" and rows[name]["health"] == "healthy"
        logs = run_cli(["logs", name, "--tail", "30"], env=native_env)
        assert logs.returncode == 0 and "Application startup complete" in logs.stdout
        stop = run_cli(["stop", "--yes", name, "--json"], env=native_env)
        assert stop.returncode == 0, stop.explain()
        status = launcher.status(host, name)
        assert status is not None and not status.running
        ps = run_cli(["ps", "--json", "--no-health"], env=native_env)
        rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
        # the launcher's own description: "stopped (exit N)", never "exited (None)"
        assert re.fullmatch(r"stopped \(exit -?\d+\)", rows[name]["status"]), rows[name]
        # launcher.stop returns once every process of the launch is gone
        deadline = time.monotonic() + 10
        while processes_mentioning(f"--port {port}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_mentioning(f"--port {port}") == []
    finally:
        if launcher.load(host, name) is not None:
            launcher.stop(host, name)


def test_native_without_vllm_is_not_ready(tmp_path: Path, gpu_root: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{tmp_path}:/usr/bin:/bin"
    env.pop("INSTINCT_VLLM_COMMAND", None)
    env.pop("VIRTUAL_ENV", None)
    run = run_cli(native_args(gpu_root, free_port(), "native-none"), env=env)
    assert run.returncode == 3, run.explain()
    assert run.result["error"]["id"] == "vllm_not_found"


def test_native_sglang_looks_for_sglang_not_vllm(
    tmp_path: Path, gpu_root: Path, native_env: dict[str, str]
) -> None:
    """``--server sglang`` on the native route wants an SGLang install: the vLLM found by
    ``INSTINCT_VLLM_COMMAND`` does not count; none found is ``server_not_found`` (exit 3),
    naming where it looked and how to give one."""
    env = {**native_env, "PATH": f"{tmp_path}:/usr/bin:/bin"}  # python3 there has no sglang
    for name in ("INSTINCT_SGLANG_PYTHON", "VIRTUAL_ENV"):
        env.pop(name, None)
    env["INSTINCT_DATA_DIR"] = str(tmp_path / "data")
    args = native_args(gpu_root, free_port(), "native-no-sglang", "--server", "sglang")
    run = run_cli(args, env=env)
    assert run.returncode == 3, run.explain()
    error = run.result["error"]
    assert error["id"] == "server_not_found", error
    assert error["message"].startswith("no SGLang found on local (checked INSTINCT_SGLANG_PYTHON")
    assert "has no sglang" in error["message"]
    assert "INSTINCT_SGLANG_PYTHON=" in error["fix"] and "--engine docker" in error["fix"]


@pytest.mark.heavy
def test_an_unknown_failure_quotes_the_servers_last_line(tmp_path: Path, gpu_root: Path) -> None:
    """No rule matches: the failure still says what the server said last, and its exit code."""
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\necho 'loading plugin table'\necho 'plugin table is empty'\nexit 2\n")
    exe.chmod(0o755)
    env = dict(os.environ, INSTINCT_VLLM_COMMAND=str(exe))
    name = f"native-odd-{os.getpid()}"
    try:
        run = run_cli(native_args(gpu_root, free_port(), name), env=env)
        assert run.returncode == 1, run.explain()
        failure = run.result["failure"]
        assert failure["id"] == "startup_failed"
        assert "exited with code 2" in failure["cause"]
        assert failure["cause"].endswith("no error line, the last line: plugin table is empty")
    finally:
        if launcher.load(LocalHost(), name) is not None:
            launcher.stop(LocalHost(), name)


def test_the_native_argv_binds_loopback_unless_told_otherwise() -> None:
    from instinct_serve.plan.model import LaunchPlan
    from instinct_serve.runtime.native import native_argv

    plan = LaunchPlan(MODEL, MODEL, "", "n", port=8123, launcher="native")
    plan.vllm_args = ["--port", "8123"]
    assert native_argv("/v/bin/vllm", plan) == [
        "/v/bin/vllm",
        "serve",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
    ]
    for given in (["--host", "::1"], ["--host=localhost"]):  # the plan's own (loopback)
        plan.vllm_args = ["--port", "8123", *given]
        argv = native_argv("/v/bin/vllm", plan)
        assert argv[3:] == plan.vllm_args and "127.0.0.1" not in argv
    plan.vllm_args = ["--port", "8123"]
    plan.public = True  # every interface, with an API key (the planner's --public)
    assert native_argv("/v/bin/vllm", plan)[3:5] == ["--host", "0.0.0.0"]


def test_native_public_listens_everywhere_with_a_generated_key(
    native_env: dict[str, str], gpu_root: Path
) -> None:
    import httpx

    port = free_port()
    name = f"native-pub-{port}"
    host = LocalHost()
    try:
        run = run_cli(native_args(gpu_root, port, name, "--public"), env=native_env)
        assert run.returncode == 0, run.explain()
        endpoint = run.result["endpoint"]
        assert run.result["status"] == "ready" and endpoint["bind_address"] == "0.0.0.0"
        key_file = Path(endpoint["api_key"]["file"])
        key = key_file.read_text().strip()
        assert key not in run.stdout + run.stderr
        status = launcher.status(host, name)
        assert status is not None and status.running
        argv = status.process.argv
        assert argv[3:5] == ["--host", "0.0.0.0"] and key not in " ".join(argv)
        assert "VLLM_API_KEY" in status.process.env_names  # by name in the record
        assert key not in Path(status.process.state_dir, "state.json").read_text()
        assert _environ(status.process.pid)["VLLM_API_KEY"] == key
        url = f"http://127.0.0.1:{port}/v1/models"
        assert httpx.get(url, timeout=5).status_code == 401
        assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=5).is_success
        again = run_cli(native_args(gpu_root, port, name, "--public"), env=native_env)
        assert again.returncode == 0 and again.result["status"] == "reused", again.explain()
        refused = run_cli(
            native_args(gpu_root, free_port(), name + "x", "--", "--host", "0.0.0.0"),
            env=native_env,
        )
        assert refused.returncode == 2 and refused.result["error"]["id"] == "bad_extra_args"
    finally:
        if launcher.load(host, name) is not None:
            launcher.stop(host, name)
