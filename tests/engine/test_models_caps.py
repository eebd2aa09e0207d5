"""``resolve-model`` (local dir, HF cache layout, Hub) and ``capabilities``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from instinct_serve.engine.capabilities import Requirement, assess, judge
from instinct_serve.engine.models import resolve_model
from instinct_serve.errors import UsageError
from instinct_serve.hosts import LocalHost
from tests.engine.envs import make_env
from tests.infra import tables
from tests.infra.cli import run_instinct
from tests.infra.paths import CONFIGS


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    return home


def cache_snapshot(hf_home: Path, hub_id: str, rev: str = "0123abcd") -> Path:
    repo = hf_home / "hub" / ("models--" + hub_id.replace("/", "--"))
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text((CONFIGS / "Qwen__Qwen3-8B.json").read_text())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    return snap


def test_local_directory(tmp_path: Path, hf_home: Path) -> None:
    model = tmp_path / "my model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    source = resolve_model(LocalHost(), str(model))
    assert source.kind == "local_path" and source.to_dict()["serve_as"] == str(model)
    with pytest.raises(UsageError) as err:
        resolve_model(LocalHost(), str(tmp_path))
    assert "no config.json" in err.value.message


def test_hf_cache_snapshot_and_hub(hf_home: Path) -> None:
    snap = cache_snapshot(hf_home, "Qwen/Qwen3-8B")
    cached = resolve_model(LocalHost(), "Qwen/Qwen3-8B")
    assert (cached.kind, cached.path, cached.revision) == ("hf_cache", str(snap), "0123abcd")
    remote = resolve_model(LocalHost(), "meta-llama/Llama-3.1-8B-Instruct")
    assert remote.kind == "hub" and remote.path is None
    assert remote.to_dict()["serve_as"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "HF_TOKEN" in remote.notes[0]
    for bad in ("", "not a model", "a/b/c"):
        with pytest.raises(UsageError):
            resolve_model(LocalHost(), bad)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_instinct(args, timeout=120)


def test_gpu_required_fails_without_gpu_and_gpu_preferred_reports(
    hf_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "env")
    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", str(python))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no amd-smi here: no GPU

    required = run_cli("engine", "resolve-model", "Qwen/Qwen3-8B", "--json")
    assert required.returncode == 3
    error = json.loads(required.stdout)["error"]
    assert error["id"] == "gpu_required" and "no AMD GPU" in error["message"]

    preferred = run_cli(
        "engine", "resolve-model", "Qwen/Qwen3-8B", "--device-policy", "gpu_preferred", "--json"
    )
    assert preferred.returncode == 0
    doc = json.loads(preferred.stdout)
    assert doc["servable"] is False and doc["engine"]["usable"] is True
    assert doc["model"]["kind"] == "hub"


def test_assess_by_architecture() -> None:
    caps = assess(
        "0.10.1",
        [
            Requirement("a/dense-old", "dense", "0.8.5"),
            Requirement("a/dense-new", "dense", "0.11.0"),
            Requirement("a/moe-nightly", "moe", "nightly"),
            Requirement("a/free", None, None),
        ],
    )
    groups = caps.by_architecture()
    assert groups["dense"]["supported"] == 1 and groups["dense"]["unsupported"] == ["a/dense-new"]
    assert groups["dense"]["newest_min_vllm_version"] == "0.11.0"
    assert groups["moe"]["unknown"] == ["a/moe-nightly"]
    assert groups["unknown"]["supported"] == 1
    assert judge(None, Requirement("x/y", "dense", "0.1")).supported is None


def test_capabilities_cli_judges_the_installed_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "env", vllm="0.9.0+rocm700")
    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", str(python))

    ok = run_cli("engine", "capabilities", "--model", "Qwen/Qwen3-8B", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["vllm_version"] == "0.9.0+rocm700"
    assert doc["model"]["verdict"]["supported"] is True  # Qwen3-8B needs 0.8.5
    assert doc["features"]["cpu_fallback"] is False
    assert doc["architectures"]["dense"]["recipes"] > 10

    old = make_env(tmp_path / "old", vllm="0.6.0")
    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", str(old))
    too_old = run_cli("engine", "capabilities", "--model", "Qwen/Qwen3-8B", "--json")
    assert too_old.returncode == 1
    assert json.loads(too_old.stdout)["model"]["verdict"]["note"] == "needs vLLM >= 0.8.5"

    # the table by architecture: one line per row through a pipe, whole at 80 columns
    monkeypatch.setenv("COLUMNS", "80")
    piped = run_cli("engine", "capabilities").stdout
    tables.one_line(piped, "ARCHITECTURE", "SUPPORTED", "RECIPES", "NEWEST MINIMUM")
    tables.one_line(piped, "dense ", "0.")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    tables.fits(run_cli("engine", "capabilities").stdout, "ARCHITECTURE", "dense")
