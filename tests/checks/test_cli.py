"""`instinct check` as a user runs it: the CLI (in-process) with a crafted environment."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from tests.infra import tables
from tests.infra.cli import run_instinct
from tests.infra.docker import DockerDaemon
from tests.infra.ports import free_port

from .conftest import FakeRoot

SENTINEL = "hf_SENTINELcli0123456789abcdefXYZ"


def instinct(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_instinct(args, env=env, timeout=120)


def crafted_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    for name in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        env.pop(name, None)
    env.pop("DOCKER_HOST", None)
    env.update({"HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    env.update(extra)
    return env


@pytest.mark.docker
def test_ready_host_json(
    docker_daemon: DockerDaemon, fake_root: FakeRoot, target_env: Path
) -> None:
    (target_env / ".cache/huggingface/hub").mkdir(parents=True)
    env = crafted_env(target_env, HF_TOKEN=SENTINEL, PATH=os.environ["PATH"])
    port = free_port()
    proc = instinct("check", "--json", "--root", str(fake_root), "--port", str(port), env=env)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, doc["errors"]
    assert doc["ready"] is True and doc["errors"] == [] and doc["host"] == "local"
    statuses = {c["id"]: c["status"] for c in doc["checks"]}
    assert statuses["docker_daemon"] == "ok" and statuses["hf_token"] == "ok"
    assert statuses["port_free"] == "ok"
    assert SENTINEL not in proc.stdout + proc.stderr


def test_not_ready_exit_3_and_human_view(fake_root: FakeRoot, target_env: Path) -> None:
    fake_root.remove("/dev/kfd")
    fake_root.write("/proc/sys/kernel/numa_balancing", "1\n")
    env = crafted_env(target_env, HF_TOKEN=SENTINEL, HIP_VISIBLE_DEVICES="")
    proc = instinct("check", "--root", str(fake_root), env=env)
    assert proc.returncode == 3
    out = proc.stdout
    assert "✗" in out and "✓" in out and "!" in out
    assert "dev_kfd" in out and "/dev/kfd is missing" in out
    assert "visible_devices_empty" in out and "unset HIP_VISIBLE_DEVICES" in out
    assert "To fix:" in out and "instinct check --auto-fix" in out
    assert "Not ready:" in out
    assert SENTINEL not in proc.stdout + proc.stderr
    tables.one_line(out.split("To fix:")[0], "dev_kfd", "/dev/kfd is missing")  # as piped
    env |= {"COLUMNS": "80", "TTY_COMPATIBLE": "1"}
    shown = instinct("check", "--root", str(fake_root), env=env).stdout
    tables.fits(shown.split("To fix:")[0], "visible_devices_empty", "dev_kfd")

    as_json = instinct("check", "--json", "--root", str(fake_root), env=env)
    doc = json.loads(as_json.stdout)
    assert as_json.returncode == 3 and doc["ready"] is False
    assert {"dev_kfd", "visible_devices_empty"} <= {e["id"] for e in doc["errors"]}
    assert "numa_balancing" in {w["id"] for w in doc["warnings"]}
    assert SENTINEL not in as_json.stdout + as_json.stderr


def test_auto_fix_human_view(fake_root: FakeRoot, target_env: Path) -> None:
    numa = fake_root.write("/proc/sys/kernel/numa_balancing", "1\n")
    proc = instinct("check", "--auto-fix", "--root", str(fake_root), env=crafted_env(target_env))
    assert "Fixes applied:" in proc.stdout and "mkdir -p --" in proc.stdout
    assert "Fixes that need --yes (root):" in proc.stdout and "tee --" in proc.stdout
    assert (target_env / ".cache/huggingface/hub").is_dir()
    assert numa.read_text() == "1\n"


def test_gated_model_from_the_hub(
    httpserver: HTTPServer, fake_root: FakeRoot, target_env: Path
) -> None:
    for model, gated in (("meta-llama/Llama-3.1-8B", "manual"), ("Qwen/Qwen3-8B", False)):
        httpserver.expect_request(f"/api/models/{model}").respond_with_json(
            {"id": model, "modelId": model, "private": False, "gated": gated}
        )
    env = crafted_env(
        target_env, HF_ENDPOINT=httpserver.url_for("/").rstrip("/"), HF_HUB_OFFLINE="0"
    )
    gated_run = instinct(
        "check", "--json", "--root", str(fake_root), "--model", "meta-llama/Llama-3.1-8B", env=env
    )
    doc = json.loads(gated_run.stdout)
    token = next(c for c in doc["checks"] if c["id"] == "hf_token")
    assert token["status"] == "error" and token["details"]["model_gated"] is True
    assert gated_run.returncode == 3

    open_run = instinct(
        "check", "--json", "--root", str(fake_root), "--model", "Qwen/Qwen3-8B", env=env
    )
    token = next(c for c in json.loads(open_run.stdout)["checks"] if c["id"] == "hf_token")
    assert token["status"] == "ok" and token["details"]["model_gated"] is False


def test_unknown_gating_offline_is_a_warning(fake_root: FakeRoot, target_env: Path) -> None:
    proc = instinct(
        "check",
        "--json",
        "--root",
        str(fake_root),
        "--model",
        "org/model",
        env=crafted_env(target_env),
    )
    token = next(c for c in json.loads(proc.stdout)["checks"] if c["id"] == "hf_token")
    assert token["status"] == "warn" and token["details"]["model_gated"] is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "0"], "Error: invalid value for '--port'"),
        (["--need-gb", "-1"], "Error: invalid value for '--need-gb'"),
        (["--host", "bad host"], "Error: invalid --host 'bad host'"),
    ],
)
def test_bad_usage_exit_2(args: list[str], needle: str, target_env: Path) -> None:
    proc = instinct("check", *args, env=crafted_env(target_env))
    assert proc.returncode == 2 and needle in proc.stderr


def test_help_lists_the_options(target_env: Path) -> None:
    proc = instinct("check", "--help", env=crafted_env(target_env))
    assert proc.returncode == 0
    for option in ("--auto-fix", "--yes", "--json", "--host", "--model", "--port", "--hf-cache"):
        assert option in proc.stdout
    assert "--root" not in proc.stdout  # hidden: for tests and chroots
