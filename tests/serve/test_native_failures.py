"""``instinct serve --engine native`` when the engine fails: the test double replays a real
vLLM 0.32 failure (tests/fixtures/logs/real-vllm-cpu/) and, like the real API server after
its engine core died, stays up. Serve must end the wait promptly (not at ``--timeout``),
diagnose it, stop it, and point at commands that work on a native endpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from instinct_serve.runtime.startup import FAILED_GRACE_S
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL, run_cli

SHM_LOG = "real-vllm-cpu/17_docker_default_shm_64m_too_small.log"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("INSTINCT_DATA_DIR", str(tmp_path / "data"))  # this process's too
    values = dict(os.environ)
    values.update(
        {
            "INSTINCT_VLLM_COMMAND": str(install_fake_vllm(tmp_path / "bin")),
            "VLLM_DOUBLE_LOAD_S": "0.5",
        }
    )
    return values


@pytest.mark.heavy
def test_a_failed_engine_whose_server_stays_up_ends_promptly_and_is_diagnosed(
    env: dict[str, str], gpu_root: Path
) -> None:
    port = free_port()
    name = f"native-fail-{port}"
    args = ["serve", MODEL, "--engine", "native", "--gpu", "mi300x", "--gpus", "1"]
    args += ["--port", str(port), "--name", name, "--root", str(gpu_root)]
    args += ["--timeout", "240", "--yes", "--json"]
    args += ["--env", "VLLM_DOUBLE_MODE=die", "--env", "VLLM_DOUBLE_STAY_UP=1"]
    args += ["--env", f"VLLM_DOUBLE_REPLAY={SHM_LOG}"]
    host = LocalHost()
    try:
        run = run_cli(args, env=env, timeout=200)
        assert run.returncode == 1, run.explain()
        result = run.result
        assert result["status"] == "failed"
        failure = result["failure"]
        assert failure["id"] == "shm_too_small", failure
        assert "still up" in failure["cause"] and failure["left"] == "stopped, kept for its log"
        # the grace, not the --timeout of 240 s
        assert FAILED_GRACE_S <= result["elapsed_s"] < FAILED_GRACE_S + 30, result["elapsed_s"]
        status = launcher.status(host, name)
        assert status is not None and not status.running

        # the commands the failure suggests work on a native endpoint
        commands = failure["commands"]
        assert f"instinct diagnose --container {name}" in commands
        assert f"instinct logs {name}" in commands
        diagnosis = run_cli(["diagnose", "--container", name, "--json"], env=env)
        assert diagnosis.returncode == 0, diagnosis.explain()
        assert json.loads(diagnosis.stdout)["primary"] == "shm_too_small"
        logs = run_cli(["logs", name, "--tail", "200"], env=env)
        assert logs.returncode == 0 and "Insufficient space in /dev/shm" in logs.stdout
    finally:
        if launcher.load(host, name) is not None:
            launcher.stop(host, name, timeout=5)


DOCKER_WORDS = ("container", "image", "docker", "--ipc", "--shm-size")


def test_a_native_failure_is_worded_for_processes_and_directories(
    env: dict[str, str], gpu_root: Path, tmp_path: Path
) -> None:
    """The real vLLM's /dev/shm failure (real-vllm-cpu/17), served natively: the failure and
    ``diagnose --container`` speak of the host and its processes, not of a container's
    flags; the docker route's words for the same log are the rules' own."""
    port = free_port()
    name = f"native-words-{port}"
    env = {**env, "HF_HOME": str(tmp_path / "hf-home")}  # the native process's own cache
    args = ["serve", MODEL, "--engine", "native", "--gpu", "mi300x", "--gpus", "1"]
    args += ["--port", str(port), "--name", name, "--root", str(gpu_root)]
    args += ["--timeout", "60", "--yes", "--json"]
    args += ["--env", "VLLM_DOUBLE_MODE=die", "--env", f"VLLM_DOUBLE_REPLAY={SHM_LOG}"]
    host = LocalHost()
    try:
        run = run_cli(args, env=env, timeout=120)
        assert run.returncode == 1, run.explain()
        failure = run.result["failure"]
        assert failure["id"] == "shm_too_small", failure
        said = " ".join([failure["title"], failure["cause"], failure["fix"]])
        assert not [w for w in DOCKER_WORDS if w in said.lower()], said
        assert "/dev/shm on this host" in failure["cause"]
        assert "Make /dev/shm larger on the host" in failure["fix"]

        diagnosis = run_cli(["diagnose", "--container", name, "--json"], env=env)
        assert diagnosis.returncode == 0, diagnosis.explain()
        found = json.loads(diagnosis.stdout)["findings"][0]
        assert found["id"] == "shm_too_small" and found["fix"] == failure["fix"]
        log = launcher.load(host, name)
        assert log is not None
        docker_words = run_cli(["diagnose", "--log", log.log_path, "--json"], env=env)
        assert "--ipc=host" in json.loads(docker_words.stdout)["findings"][0]["fix"]
    finally:
        if launcher.load(host, name) is not None:
            launcher.stop(host, name, timeout=5)
