"""``watch``'s canary (native engine, the vLLM double as ``vllm``): a healthy endpoint whose
numbers drift while it serves is caught within one canary interval, named, relaunched
once with the known kernel fallback and proven again, all journaled; ``ps`` shows when its
fingerprint last passed; a second failure after the fallback is not relaunched again."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from instinct_serve.agents import core
from instinct_serve.agents.inputs import StatusInput
from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import parse_lines, run_cli
from tests.serve.test_native_serve import native_args


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    values = dict(os.environ)
    values.update(
        INSTINCT_VLLM_COMMAND=str(install_fake_vllm(tmp_path / "bin")),
        VLLM_DOUBLE_LOAD_S="0.3",
        INSTINCT_DATA_DIR=str(tmp_path / "data"),
    )
    return values


def _stop(env: dict[str, str], name: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSTINCT_DATA_DIR", env["INSTINCT_DATA_DIR"])
        if launcher.load(LocalHost(), name) is not None:
            launcher.stop(LocalHost(), name)


def _journal(env: dict[str, str], name: str) -> list[dict[str, object]]:
    path = Path(env["INSTINCT_DATA_DIR"]) / "events" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _watch(name: str, seconds: float, env: dict[str, str]) -> list[dict[str, object]]:
    argv = ["watch", name, "--interval", "0.2", "--canary", "1", "--for", str(seconds)]
    run = run_cli([*argv, "--timeout", "60", "--json"], env=env, timeout=120)
    assert run.returncode == 0, run.explain()
    return parse_lines(run.stdout)


def test_drift_while_serving_is_caught_and_relaunched_once_with_the_fallback(
    env: dict[str, str], gpu_root: Path
) -> None:
    port = free_port()
    name = f"fp-watch-{port}"
    try:
        drift = ("--env-literal", "VLLM_DOUBLE_DRIFT_AFTER_S=3")
        run = run_cli(native_args(gpu_root, port, name, *drift), env=env)
        assert run.returncode == 0, run.explain()
        assert run.result["endpoint"]["fingerprint"]["ok"] is True  # not drifted yet
        time.sleep(3.2)
        started = time.monotonic()
        events = _watch(name, 5, env)
        kinds = [e["kind"] for e in events]
        failed = next(e for e in events if e["kind"] == "canary_failed")
        assert failed["failure"] == "drift" and failed["cost_tokens"] > 0
        assert kinds.index("canary_failed") < kinds.index("relaunched"), kinds
        relaunched = next(e for e in events if e["kind"] == "relaunched")
        assert relaunched["fixes"] == ["wrong_output"] and relaunched["status"] == "ready"
        assert "recovered" in kinds
        passed = "canary_passed" in kinds[kinds.index("recovered") :]
        for _ in range(3):  # on a loaded host the relaunch can take the whole window
            if passed:
                break
            passed = "canary_passed" in [e["kind"] for e in _watch(name, 3, env)]
        assert passed, kinds
        assert time.monotonic() - started < 60
        journal = [e["kind"] for e in _journal(env, name)]
        for kind in ("canary_failed", "relaunched", "recovered"):
            assert kind in journal, journal
        assert "canary_passed" not in journal  # passes are kept on the record, not journaled
        ps = run_cli(["ps", "--json"], env=env)
        row = next(r for r in json.loads(ps.stdout)["endpoints"] if r["name"] == name)
        shown = row["verified"]["fingerprint"]
        assert shown["ok"] is True and shown["last_passed_at"] == shown["last_check_at"]
        human = run_cli(["ps"], env={**env, "COLUMNS": "400"})
        assert "fingerprint passed" in human.stdout, human.stdout
        with pytest.MonkeyPatch.context() as mp:  # the MCP status: the same figures
            mp.setenv("INSTINCT_DATA_DIR", env["INSTINCT_DATA_DIR"])
            doc = core.status(StatusInput(no_health=True)).doc
        row = next(r for r in doc["endpoints"] if r["name"] == name)
        assert row["verified"]["fingerprint"]["last_passed_at"] == shown["last_passed_at"]
        top = run_cli(["top", name, "--once", "--interval", "0", "--no-gpu", "--json"], env=env)
        assert top.returncode == 0, top.explain()
        [seen] = [e for e in json.loads(top.stdout)["endpoints"] if e["name"] == name]
        assert seen["fingerprint"]["last_passed_at"] == shown["last_passed_at"]
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("INSTINCT_DATA_DIR", env["INSTINCT_DATA_DIR"])
            status = launcher.status(LocalHost(), name)
        assert status is not None and status.running
    finally:
        _stop(env, name)


def test_after_one_fallback_that_did_not_help_the_canary_stops_relaunching(
    env: dict[str, str], gpu_root: Path
) -> None:
    port = free_port()
    name = f"fp-watch-none-{port}"
    try:
        fault = ("--env-literal", "VLLM_DOUBLE_DRIFT_AFTER_S=2")
        fault += ("--env-literal", "VLLM_DOUBLE_FAULT_FIX=none")
        run = run_cli(native_args(gpu_root, port, name, *fault), env=env)
        assert run.returncode == 0, run.explain()
        time.sleep(2.2)
        events = _watch(name, 8, env)
        kinds = [e["kind"] for e in events]
        assert kinds.count("relaunched") == 1, kinds
        assert kinds.count("canary_failed") >= 2, kinds
        gave_up = next(e for e in events if e["kind"] == "canary_gave_up")
        assert gave_up["failure"] == "drift" and "applied already" in str(gave_up["why"])
        ps = run_cli(["ps", "--json"], env=env)
        row = next(r for r in json.loads(ps.stdout)["endpoints"] if r["name"] == name)
        assert row["verified"]["fingerprint"]["failure"] == "drift"
        journal = [e["kind"] for e in _journal(env, name)]
        assert journal.count("canary_gave_up") == 1, journal  # said once, not each check
    finally:
        _stop(env, name)


@pytest.mark.parametrize("key", ["generated", "given"])
def test_the_canary_uses_the_endpoints_api_key(
    env: dict[str, str], gpu_root: Path, key: str
) -> None:
    port = free_port()
    name = f"fp-watch-key-{port}"
    env.pop("VLLM_API_KEY", None)
    extra = ("--public",) if key == "generated" else ("--env", "VLLM_API_KEY")
    given = {"VLLM_API_KEY": "canary-test-key"} if key == "given" else {}
    try:
        run = run_cli(native_args(gpu_root, port, name, *extra), env={**env, **given})
        assert run.returncode == 0, run.explain()
        events = _watch(name, 1.5, env)  # the watch is not given the key: it finds it
        kinds = [e["kind"] for e in events]
        assert "canary_passed" in kinds and "canary_error" not in kinds, events
    finally:
        _stop(env, name)
