"""Where the native route finds SGLang (``discover(server="sglang")``), over real
interpreters placed in temp dirs: ``INSTINCT_SGLANG_PYTHON``, the managed environment,
``python3`` on PATH when its environment holds sglang; what is probed, and the errors a user
can act on when none is found or the one found cannot serve."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from instinct_serve.engine.discovery import discover, require_usable
from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.hosts import LocalHost
from tests.engine.envs import make_env

SGLANG = "0.5.23"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("INSTINCT_SGLANG_PYTHON", "INSTINCT_ALLOW_CPU_ENGINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("INSTINCT_DATA_DIR", str(tmp_path / "data"))
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}:/usr/bin:/bin")  # python3 there has no sglang
    return empty


def test_the_interpreter_variable_is_the_command_and_its_versions_are_probed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "rocm", vllm=None, sglang=SGLANG)
    monkeypatch.setenv("INSTINCT_SGLANG_PYTHON", str(python))

    engine = require_usable(discover(LocalHost(), server="sglang"))

    assert (engine.source, engine.kind, engine.server) == (
        "INSTINCT_SGLANG_PYTHON",
        "python",
        "sglang",
    )
    assert engine.command == str(python) == engine.python  # it runs -m sglang.launch_server
    doc = engine.to_dict()
    assert doc["server_version"] == SGLANG and doc["torch_build"] == "rocm"
    assert doc["command"] == str(python)


def test_a_cpu_torch_is_refused_unless_allowed_then_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "cpu", torch="2.13.0+cpu", kind="cpu", vllm=None, sglang=SGLANG)
    monkeypatch.setenv("INSTINCT_SGLANG_PYTHON", str(python))

    with pytest.raises(NotReadyError) as err:
        require_usable(discover(LocalHost(), server="sglang"))
    assert err.value.id == "server_unusable"
    assert "CPU-only engine: SGLang 0.5.23 with torch 2.13.0+cpu" in err.value.message
    assert "INSTINCT_SGLANG_PYTHON" in err.value.fix and "--engine docker" in err.value.fix

    monkeypatch.setenv("INSTINCT_ALLOW_CPU_ENGINE", "1")
    engine = require_usable(discover(LocalHost(), server="sglang"))
    assert engine.cpu_only
    (warning,) = engine.warnings
    assert warning.startswith("CPU-only engine: SGLang 0.5.23 with torch 2.13.0+cpu serves on")
    assert "--device cpu --attention-backend torch_native" in warning


def test_an_interpreter_without_sglang_is_unusable_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_env(tmp_path / "vllm-only")  # a ROCm vLLM environment, no sglang
    python = tmp_path / "vllm-only" / "bin" / "python"
    monkeypatch.setenv("INSTINCT_SGLANG_PYTHON", str(python))

    with pytest.raises(NotReadyError) as err:
        require_usable(discover(LocalHost(), server="sglang"))
    assert "sglang is not installed in " in err.value.message  # the probed interpreter


def test_a_relative_interpreter_path_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTINCT_SGLANG_PYTHON", "venv/bin/python")
    with pytest.raises(UsageError) as err:
        discover(LocalHost(), server="sglang")
    assert "INSTINCT_SGLANG_PYTHON must be an absolute path" in err.value.message


def test_python3_on_path_is_taken_only_when_it_holds_sglang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    found = discover(LocalHost(), server="sglang")
    assert found.engine is None
    path = found.candidates[-1]
    assert (path.source, path.status) == ("PATH", "not_found")
    assert path.note is not None and path.note.endswith("has no sglang")
    with pytest.raises(NotReadyError) as err:
        require_usable(found)
    assert err.value.id == "server_not_found"
    assert "no SGLang found on local" in err.value.message
    assert "managed: not installed" in err.value.message and "has no sglang" in err.value.message
    assert "INSTINCT_SGLANG_PYTHON=/path/to/that/venv/bin/python" in err.value.fix

    python = make_env(tmp_path / "onpath", vllm=None, sglang=SGLANG)
    os.symlink(python, clean_env / "python3")
    engine = require_usable(discover(LocalHost(), server="sglang"))
    assert (engine.source, engine.command) == ("PATH", str(clean_env / "python3"))


def test_the_managed_environment_comes_before_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "data" / "engines" / "sglang" / "venv"
    make_env(root, vllm=None, sglang=SGLANG)
    engine = require_usable(discover(LocalHost(), server="sglang"))
    assert engine.source == "managed" and engine.command == str(root / "bin" / "python")
    # vLLM's discovery does not take it: its managed environment is its own
    assert discover(LocalHost()).engine is None
