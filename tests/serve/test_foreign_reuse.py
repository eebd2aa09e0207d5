"""A healthy OpenAI endpoint that instinct-serve did not start, on the asked port: serve
offers it for reuse when it serves the asked model (exit 0, its URL under --json, left
untouched and unmanaged), and refuses the port (``port_in_use``) when it serves another.
The endpoint is the vLLM test double run by hand: a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL, answers, run_cli


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("INSTINCT_DATA_DIR", str(tmp_path / "data"))
    values = dict(os.environ)
    values.update(
        {
            "INSTINCT_VLLM_COMMAND": str(install_fake_vllm(tmp_path / "bin")),
            "VLLM_DOUBLE_LOAD_S": "0.2",
        }
    )
    return values


@pytest.fixture
def by_hand(env: dict[str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Servers started by hand (not by instinct); stopped by pid after the test."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.terminate()
        proc.wait(timeout=10)


def _start(env: dict[str, str], started: list[subprocess.Popen[bytes]], *args: str) -> int:
    port = free_port()
    argv = [env["INSTINCT_VLLM_COMMAND"], "serve", MODEL, "--host", "127.0.0.1"]
    argv += ["--port", str(port), *args]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(proc)
    assert answers(port, timeout=30)
    return port


def _serve(env: dict[str, str], port: int, name: str, root: Path) -> list[str]:
    args = ["serve", MODEL, "--engine", "native", "--gpu", "mi300x", "--gpus", "1"]
    args += ["--port", str(port), "--name", name, "--root", str(root)]
    return [*args, "--timeout", "60", "--yes", "--json"]


def test_a_foreign_endpoint_of_the_same_model_is_offered_for_reuse(
    env: dict[str, str], by_hand: list[subprocess.Popen[bytes]], gpu_root: Path
) -> None:
    port = _start(env, by_hand)
    name = f"foreign-{port}"
    run = run_cli(_serve(env, port, name, gpu_root), env=env, timeout=120)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "reused" and not run.of("launched")
    endpoint = result["endpoint"]
    assert endpoint["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert endpoint["model"] == MODEL and f"pid {by_hand[0].pid}" in endpoint["container"]
    assert any("did not start it" in n for n in result["notes"]), result["notes"]
    # untouched, and nothing of ours was started in its place
    assert by_hand[0].poll() is None and answers(port, timeout=5)
    assert launcher.load(LocalHost(), name) is None


def test_a_foreign_endpoint_of_another_model_keeps_the_port_refused(
    env: dict[str, str], by_hand: list[subprocess.Popen[bytes]], gpu_root: Path
) -> None:
    port = _start(env, by_hand, "--served-model-name", "someone-elses-model")
    name = f"foreign-{port}"
    run = run_cli(_serve(env, port, name, gpu_root), env=env, timeout=120)
    assert run.returncode == 3, run.explain()
    assert run.result["error"]["id"] == "port_in_use"
    assert by_hand[0].poll() is None and launcher.load(LocalHost(), name) is None
