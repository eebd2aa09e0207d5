"""Before ``serve --upgrade`` switches, the proven candidate's fingerprint is compared with
the running endpoint's: one that computes something else does not get the port (native
engine, the vLLM double as ``vllm``; a plan that differs by ``--max-model-len`` is the
upgrade, the process's argv says which plan runs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import run_cli
from tests.serve.test_native_upgrade import _answers, _argv, _length, _serve, _stop

DRIFT = ("--env-literal", "VLLM_DOUBLE_DRIFT_AFTER_S=0")
NO_FIX = ("--env-literal", "VLLM_DOUBLE_FAULT_FIX=none")


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


def _pid(env: dict[str, str], name: str) -> int:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSTINCT_DATA_DIR", env["INSTINCT_DATA_DIR"])
        status = launcher.status(LocalHost(), name)
    assert status is not None and status.running
    return status.process.pid


def test_a_candidate_that_computes_something_else_does_not_get_the_port(
    native_env: dict[str, str], gpu_root: Path
) -> None:
    port, name = free_port(), f"fp-up-{free_port()}"
    try:
        first = run_cli(_serve(native_env, gpu_root, port, name, "4096"), env=native_env)
        assert first.returncode == 0, first.explain()
        before = _pid(native_env, name)
        # no reference for the checkpoint (records lost): the candidate passes its own
        # checks, and only the comparison with the running endpoint can see the drift
        records = Path(native_env["INSTINCT_DATA_DIR"]) / "fingerprints"
        for ref in (records / "references").glob("*.json"):
            ref.unlink()
        up = run_cli(
            _serve(native_env, gpu_root, port, name, "8192", "--upgrade", *DRIFT, *NO_FIX),
            env=native_env,
            timeout=180,
        )
        assert up.returncode == 1, up.explain()
        failure = up.result["failure"]
        assert failure["id"] == "wrong_output", failure
        assert "something else than the running endpoint: drift" in failure["title"]
        assert "short: moved 2.000 (segment)" in failure["cause"]
        notes = [e["message"] for e in up.of("note")]
        assert any("against the running one (now)" in n for n in notes), notes
        assert any("still serves the old plan, untouched" in n for n in up.result["notes"])
        assert _pid(native_env, name) == before  # the same process, untouched
        assert _length(_argv(name, native_env)) == "4096"
        assert _answers(port)
        assert not list((records / "references").glob("*.json"))  # a candidate is no reference
        journal = Path(native_env["INSTINCT_DATA_DIR"]) / "journal" / f"{name}.jsonl"
        if journal.exists():
            kinds = [json.loads(line)["kind"] for line in journal.read_text().splitlines()]
            assert "upgrade_failed" in kinds
    finally:
        _stop(native_env, name, name + "-next")


def test_a_drifted_candidate_is_caught_by_its_own_check_against_the_reference(
    native_env: dict[str, str], gpu_root: Path
) -> None:
    port, name = free_port(), f"fp-ref-up-{free_port()}"
    try:
        first = run_cli(_serve(native_env, gpu_root, port, name, "4096"), env=native_env)
        assert first.returncode == 0, first.explain()
        up = run_cli(
            _serve(native_env, gpu_root, port, name, "8192", "--upgrade", *DRIFT, *NO_FIX),
            env=native_env,
            timeout=180,
        )
        assert up.returncode == 1, up.explain()
        failure = up.result["failure"]
        assert failure["id"] == "wrong_output" and "drift" in failure["title"]
        assert len(up.result["relaunches"]) == 1  # the AITER switch, once
        assert _length(_argv(name, native_env)) == "4096"
        assert _answers(port)
    finally:
        _stop(native_env, name, name + "-next")


def test_an_equivalent_candidate_switches(native_env: dict[str, str], gpu_root: Path) -> None:
    port, name = free_port(), f"fp-ok-up-{free_port()}"
    try:
        first = run_cli(_serve(native_env, gpu_root, port, name, "4096"), env=native_env)
        assert first.returncode == 0, first.explain()
        up = run_cli(
            _serve(native_env, gpu_root, port, name, "8192", "--upgrade"),
            env=native_env,
            timeout=180,
        )
        assert up.returncode == 0, up.explain()
        notes = [e["message"] for e in up.of("note")]
        assert any("against the running one (now): within tolerance" in n for n in notes)
        assert _length(_argv(name, native_env)) == "8192"
    finally:
        _stop(native_env, name, name + "-next")
