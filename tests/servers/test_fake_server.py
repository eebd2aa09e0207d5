"""A second server kind, added as one module (``tests/infra/fake_server.py``) and registered
by entry point, is planned, launched natively and proven by the unchanged tool: health on
its own route, its own ready line, the warm-up and the coherence probe.

The fake kind is served by the vLLM test double (the fake ``vllm`` executable of the
native route), told by the kind's own variables to answer on the fake routes only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.fakeroot import build_gpu_root
from tests.infra.paths import REPO
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL, run_cli


@pytest.fixture
def env(fake_site: Path, tmp_path: Path) -> dict[str, str]:
    exe = install_fake_vllm(tmp_path / "bin")
    out = dict(os.environ)
    out.update({"INSTINCT_VLLM_COMMAND": str(exe), "VLLM_DOUBLE_LOAD_S": "0.5"})
    return out


def test_the_fake_server_is_planned_for_by_name(env: dict[str, str]) -> None:
    run = run_cli(["plan", MODEL, "--server", "fake", "--gpu", "mi300x", "--json"], env=env)
    assert run.returncode == 0, run.explain()
    plan = json.loads(run.stdout)
    assert plan["server"] == "fake"
    vllm = run_cli(["plan", MODEL, "--gpu", "mi300x", "--json"], env=env)
    assert "server" not in json.loads(vllm.stdout)
    assert json.loads(vllm.stdout)["plan_hash"] != plan["plan_hash"]
    native = run_cli(["plan", MODEL, "--server", "fake", "--gpu", "mi300x", "--format", "native"])
    assert "VLLM_DOUBLE_HEALTH_PATH=/livez" in native.stdout, native.explain()
    unknown = run_cli(["plan", MODEL, "--server", "nope", "--gpu", "mi300x", "--json"], env=env)
    error = json.loads(unknown.stdout)["error"]
    assert unknown.returncode == 2 and error["id"] == "bad_server" and "fake" in error["fix"]


def test_the_fake_server_is_launched_and_proven(env: dict[str, str], tmp_path: Path) -> None:
    root = tmp_path / "gpu-root"
    build_gpu_root(root)
    port = free_port()
    name = f"fake-{port}"
    host = LocalHost()
    args = ["serve", MODEL, "--server", "fake", "--engine", "native", "--gpu", "mi300x"]
    args += ["--gpus", "1", "--port", str(port), "--name", name, "--root", str(root)]
    args += ["--timeout", "60", "--yes", "--json"]
    try:
        run = run_cli(args, env=env)
        assert run.returncode == 0, run.explain()
        result = run.result
        assert result["status"] == "ready", result
        ready = [e for e in run.of("phase") if e["phase"] == "ready"]
        assert ready and ready[0]["message"].startswith("fake server ready on"), ready
        assert "warming_up" in run.phases
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/livez", trust_env=False).status_code == 200
        assert httpx.get(f"{base}/health", trust_env=False).status_code == 404
        assert httpx.get(f"{base}/v1/models", trust_env=False).status_code == 404
        ps = run_cli(["ps", "--json"], env=env)
        rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
        assert rows[name]["health"] == "healthy", rows[name]
    finally:
        if launcher.load(host, name) is not None:
            launcher.stop(host, name)


def test_no_tool_code_names_the_fake_server() -> None:
    src = REPO / "src" / "instinct_serve"
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "fake_server" not in text and "/livez" not in text, path
