"""``serve --upgrade`` and ``rollback`` of a NATIVE endpoint (``vllm serve`` supervised by
the tool, no Docker): the same path as the docker route's (``runtime.upgrade``) over the
native backend, with the fake ``vllm`` executable (the vLLM test double) found through
``INSTINCT_VLLM_COMMAND``. A plan that differs by ``--max-model-len`` is the upgrade; the
process's own argv says which plan runs. Every wait is bounded."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL, parse_lines, run_cli


@pytest.fixture
def native_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        INSTINCT_VLLM_COMMAND=str(install_fake_vllm(tmp_path / "bin")),
        VLLM_DOUBLE_LOAD_S="0.3",
        INSTINCT_DATA_DIR=str(tmp_path / "data"),
        INSTINCT_CACHE_DIR=str(tmp_path / "cache"),
    )
    return env


def _serve(
    env: dict[str, str], root: Path, port: int, name: str, length: str, *extra: str
) -> list[str]:
    argv = ["serve", MODEL, "--engine", "native", "--gpu", "mi300x", "--gpus", "1"]
    argv += ["--port", str(port), "--name", name, "--root", str(root), "--timeout", "60"]
    return [*argv, "--yes", "--json", *extra, "--", "--max-model-len", length]


def _argv(name: str, env: dict[str, str]) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSTINCT_DATA_DIR", env["INSTINCT_DATA_DIR"])
        status = launcher.status(LocalHost(), name)
    assert status is not None and status.running, name
    return list(status.process.argv)


def _length(argv: list[str]) -> str:
    return argv[argv.index("--max-model-len") + 1]


def _answers(port: int) -> bool:
    body = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8}
    response = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=10)
    return response.status_code == 200 and "Paris" in response.json()["choices"][0]["text"]


def _stop(env: dict[str, str], *names: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSTINCT_DATA_DIR", env["INSTINCT_DATA_DIR"])
        for name in names:
            if launcher.load(LocalHost(), name) is not None:
                launcher.stop(LocalHost(), name)


@pytest.mark.heavy
def test_native_upgrade_switches_over_and_rollback_returns(
    native_env: dict[str, str], gpu_root: Path
) -> None:
    port, name = free_port(), f"native-up-{free_port()}"
    try:
        first = run_cli(_serve(native_env, gpu_root, port, name, "4096"), env=native_env)
        assert first.returncode == 0, first.explain()
        old_argv = _argv(name, native_env)
        assert _length(old_argv) == "4096"

        up = run_cli(
            _serve(native_env, gpu_root, port, name, "8192", "--upgrade"),
            env=native_env,
            timeout=180,
        )
        assert up.returncode == 0, up.explain()
        result = up.result
        assert result["status"] == "ready", result
        assert 0 < result["figures"]["downtime_s"] < 30, result["figures"]
        notes = [e["message"] for e in up.of("note")]
        assert any(name + "-next" in n and "beside" in n for n in notes), notes
        assert _length(_argv(name, native_env)) == "8192"  # the new plan on the real port
        with pytest.MonkeyPatch.context() as mp:  # the proven candidate is gone
            mp.setenv("INSTINCT_DATA_DIR", native_env["INSTINCT_DATA_DIR"])
            gone = launcher.status(LocalHost(), name + "-next")
        assert gone is None or not gone.running
        assert _answers(port)

        back = run_cli(
            ["rollback", "--yes", name, "--root", str(gpu_root), "--json"], env=native_env
        )
        assert back.returncode == 0, back.explain()
        assert parse_lines(back.stdout)[-1]["status"] == "ready"
        assert _length(_argv(name, native_env)) == "4096"  # the old plan again
        assert _answers(port)
    finally:
        _stop(native_env, name, name + "-next")


@pytest.mark.heavy
def test_a_bad_native_upgrade_leaves_the_old_process_serving(
    native_env: dict[str, str], gpu_root: Path
) -> None:
    port, name = free_port(), f"native-bad-{free_port()}"
    try:
        first = run_cli(_serve(native_env, gpu_root, port, name, "4096"), env=native_env)
        assert first.returncode == 0, first.explain()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("INSTINCT_DATA_DIR", native_env["INSTINCT_DATA_DIR"])
            before = launcher.status(LocalHost(), name)
        assert before is not None and before.running

        bad = ("--upgrade", "--env", "VLLM_DOUBLE_MODE=incoherent")
        up = run_cli(_serve(native_env, gpu_root, port, name, "8192", *bad), env=native_env)
        assert up.returncode == 1, up.explain()
        assert up.result["status"] == "failed", up.result
        assert any("still serves the old plan, untouched" in n for n in up.result["notes"])
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("INSTINCT_DATA_DIR", native_env["INSTINCT_DATA_DIR"])
            after = launcher.status(LocalHost(), name)
        assert after is not None and after.running
        assert after.process.pid == before.process.pid  # the same process, untouched
        assert _length(list(after.process.argv)) == "4096"
        assert _answers(port)
    finally:
        _stop(native_env, name, name + "-next")
