"""Discovery order and the probe, over real executables placed in temp dirs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from instinct_serve.engine.discovery import (
    discover,
    interpreter_from_header,
    require_usable,
    windows_refusal,
)
from instinct_serve.engine.hostfs import classify_platform
from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.hosts import LocalHost
from tests.engine.envs import make_env
from tests.infra.cli import run_instinct
from tests.infra.ssh import SshServer

VARS = (
    "INSTINCT_VLLM_COMMAND",
    "INSTINCT_VLLM_PYTHON",
    "ROCM_CLI_VLLM_COMMAND",
    "ROCM_CLI_VLLM_PYTHON",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in VARS:
        monkeypatch.delenv(var, raising=False)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}:/usr/bin:/bin")  # no vllm on PATH


def test_python_override_with_a_rocm_torch_is_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "rocm")
    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", str(python))

    found = discover(LocalHost())

    engine = require_usable(found)
    assert engine.source == "INSTINCT_VLLM_PYTHON" and engine.kind == "python"
    assert engine.vllm_command == str(python.parent / "vllm")
    doc = engine.to_dict()
    assert doc["vllm_version"] == "0.27.1.dev5+rocm10.0.0.gf46a9dfe2.d20260826"
    assert doc["torch_version"] == "2.12.0+rocm10.0.0"
    assert doc["torch_build"] == "rocm" and doc["torch_rocm"] == "10.0"
    assert doc["hip_version"] == "10.0.40000-test"
    assert doc["hip_library"] == {
        "origin": "torch wheel",
        "path": str(tmp_path / "rocm/lib/site-packages/torch/lib/libamdhip64.so"),
    }
    assert doc["probe"]["packages"]["amd-torch-device-gfx942"] == "2.12.0+rocm10.0.0"


def test_command_override_with_a_cuda_torch_is_unusable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "cuda", torch="2.12.0+cu128", kind="cuda")
    monkeypatch.setenv("INSTINCT_VLLM_COMMAND", str(python.parent / "vllm"))

    found = discover(LocalHost())

    assert found.engine is not None and found.engine.source == "INSTINCT_VLLM_COMMAND"
    assert found.engine.python == str(python)  # read from the script's shebang
    assert not found.usable
    assert "CUDA build (CUDA 12.8)" in found.engine.reasons[0]
    with pytest.raises(NotReadyError) as err:
        require_usable(found)
    assert err.value.id == "vllm_unusable" and "INSTINCT_VLLM_COMMAND" in err.value.fix


def test_rocm_cli_python_with_a_cpu_torch_has_no_cpu_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "cpu", torch="2.12.0+cpu", kind="cpu")
    monkeypatch.setenv("ROCM_CLI_VLLM_PYTHON", str(python))

    found = discover(LocalHost())

    assert found.engine is not None and found.engine.source == "ROCM_CLI_VLLM_PYTHON"
    assert any("CPU-only build" in r and "no CPU fallback" in r for r in found.engine.reasons)


def test_a_cpu_engine_allowed_by_the_user_is_usable_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "cpu", torch="2.12.0+cpu", kind="cpu", vllm="0.11.0+cpu")
    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", str(python))
    monkeypatch.setenv("INSTINCT_ALLOW_CPU_ENGINE", "1")

    found = discover(LocalHost())

    assert found.engine is not None and found.usable and found.engine.reasons == []
    assert found.engine.cpu_only
    (warning,) = found.engine.warnings
    assert warning.startswith("CPU-only engine: vLLM 0.11.0+cpu with torch 2.12.0+cpu")
    doc = found.engine.to_dict()
    assert (doc["cpu_only"], doc["serves_on"], doc["vllm_build"]) == (True, "cpu", "cpu")
    assert require_usable(found) is found.engine

    monkeypatch.setenv("INSTINCT_ALLOW_CPU_ENGINE", "0")  # only a true value allows it
    assert not discover(LocalHost()).usable


def test_broken_torch_and_missing_vllm_are_reasons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(
        tmp_path / "broken",
        vllm=None,
        torch_raises="libcudart.so.12: cannot open shared object file",
    )
    (python.parent / "vllm").chmod(0o755)  # a stale script, but no vllm package
    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", str(python))

    reasons = discover(LocalHost()).engine.reasons  # type: ignore[union-attr]

    assert any("vllm is not installed" in r for r in reasons)
    assert any("torch fails to import: ImportError: libcudart.so.12" in r for r in reasons)


def test_order_command_beats_python_and_ours_beat_rocm_clis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = make_env(tmp_path / "a")
    b = make_env(tmp_path / "b")
    monkeypatch.setenv("ROCM_CLI_VLLM_COMMAND", str(b.parent / "vllm"))
    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", str(a))
    monkeypatch.setenv("INSTINCT_VLLM_COMMAND", str(a.parent / "vllm"))

    found = discover(LocalHost(), probe=False)

    assert found.engine is not None and found.engine.source == "INSTINCT_VLLM_COMMAND"
    status = {c.source: c.status for c in found.candidates}
    assert status == {
        "INSTINCT_VLLM_COMMAND": "found",
        "ROCM_CLI_VLLM_COMMAND": "skipped",
        "INSTINCT_VLLM_PYTHON": "skipped",
        "ROCM_CLI_VLLM_PYTHON": "not_set",
        "managed": "skipped",
        "PATH": "skipped",
    }


def test_vllm_on_path_with_a_long_path_shebang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = tmp_path / "p" / "bin" / "python"
    header = f"#!/bin/sh\n'''exec' {python} \"$0\" \"$@\"\n' '''\n"
    make_env(tmp_path / "p", header=header)
    monkeypatch.setenv("PATH", f"{python.parent}:/usr/bin:/bin")

    found = discover(LocalHost())

    assert found.engine is not None and found.engine.source == "PATH"
    assert found.engine.python == str(python) and found.usable


def test_explicit_overrides_that_are_wrong_fail_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = make_env(tmp_path / "x")
    (python.parent / "vllm").unlink()
    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", str(python))
    with pytest.raises(NotReadyError) as err:
        discover(LocalHost())
    assert err.value.id == "vllm_override_invalid" and "no vllm beside it" in err.value.message

    monkeypatch.setenv("INSTINCT_VLLM_PYTHON", "venv/bin/python")
    with pytest.raises(UsageError):
        discover(LocalHost())

    monkeypatch.delenv("INSTINCT_VLLM_PYTHON")
    monkeypatch.setenv("INSTINCT_VLLM_COMMAND", str(tmp_path / "nope" / "vllm"))
    with pytest.raises(NotReadyError):
        discover(LocalHost())


def test_nothing_found_exits_not_ready_with_the_fix() -> None:
    proc = run_instinct(["engine", "detect", "--json"], timeout=120)
    assert proc.returncode == 3
    doc = json.loads(proc.stdout)
    assert doc["found"] is False
    assert [c["status"] for c in doc["candidates"]] == [
        "not_set",
        "not_set",
        "not_set",
        "not_set",
        "not_installed",
        "not_found",
    ]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("#!/opt/venv/bin/python3.12\nimport x\n", "/opt/venv/bin/python3.12"),
        ("#!/opt/venv/bin/python -E\n", "/opt/venv/bin/python"),
        ("#!/usr/bin/env python3\n", "python3"),
        ("#!/usr/bin/env -S python3 -u\n", "python3"),
        ("#!/bin/sh\n'''exec' '/a b/python' \"$0\" \"$@\"\n' '''\n", "/a b/python"),
        ("#!/bin/sh\n'''exec' /long/venv/bin/python \"$0\" \"$@\"\n", "/long/venv/bin/python"),
        (
            '#!/bin/sh\n\'\'\'exec\' "$(dirname -- "$(realpath -- "$0")")"/\'python\' "$0" '
            "\"$@\"\n' '''\n",
            "/opt/v/bin/python",
        ),
        ("\x7fELF\x02\x01", None),
        ("#!/bin/bash\necho hi\n", None),
        ("", None),
    ],
)
def test_interpreter_from_header(header: str, expected: str | None) -> None:
    assert interpreter_from_header(header, "/opt/v/bin/vllm") == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("win32", "windows"),
        ("MINGW64_NT-10.0-19045\n", "windows"),
        ("MSYS_NT-10.0", "windows"),
        ("CYGWIN_NT-10.0", "windows"),
        ("Linux\n", "linux"),  # WSL included
        ("linux", "linux"),
        ("Darwin", "darwin"),
        ("", "unknown"),
    ],
)
def test_platform_classification(name: str, expected: str) -> None:
    assert classify_platform(name) == expected


def test_native_windows_refusal_points_at_wsl() -> None:
    err = windows_refusal()
    assert err.id == "native_windows" and err.exit_code == 3
    assert "WSL" in (err.fix or "")


def test_discovery_over_ssh_reads_the_remote_login_environment(
    sshd: SshServer, tmp_path: Path
) -> None:
    python = make_env(tmp_path / "remote env")  # a space: argv must survive the remote shell
    client = sshd.client(
        "discovery",
        set_env={"ROCM_CLI_VLLM_PYTHON": str(python), "INSTINCT_DATA_DIR": str(tmp_path / "d")},
    )

    found = discover(client.host())

    assert found.engine is not None and found.engine.source == "ROCM_CLI_VLLM_PYTHON"
    assert found.usable and found.engine.to_dict()["torch_rocm"] == "10.0"
    assert found.candidates[4].value == str(tmp_path / "d" / "engines" / "vllm" / "venv")


def test_the_human_detect_view_says_what_the_engine_serves_on(tmp_path: Path) -> None:
    python = make_env(tmp_path / "cpu", torch="2.12.0+cpu", kind="cpu", vllm="0.11.0+cpu")
    env = {**os.environ, "INSTINCT_VLLM_PYTHON": str(python), "INSTINCT_ALLOW_CPU_ENGINE": "1"}
    proc = run_instinct(["engine", "detect"], env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    for line in ("vllm_build: cpu", "serves_on: cpu", "cpu_only: True", "CPU-only engine"):
        assert line in flat, flat
