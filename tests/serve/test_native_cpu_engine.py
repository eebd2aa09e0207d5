"""``instinct serve --engine native`` with a CPU-only engine (``INSTINCT_ALLOW_CPU_ENGINE=1``):
planned for vLLM's CPU backend, without ``--gpu`` or a GPU root on a machine with no GPU.

The engine is a Python environment whose torch is a CPU build (``tests/engine/envs.py``:
the probe runs for real) and whose ``vllm`` runs the test double.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from instinct_serve.options import PlanOptions
from instinct_serve.runtime.events import ServeEvent
from instinct_serve.runtime.prepare import prepare, serve_plan
from tests.engine.envs import make_env
from tests.infra.paths import CONFIGS, REPO
from tests.infra.ports import free_port
from tests.serve.conftest import run_cli

DOUBLE = REPO / "tests" / "infra" / "vllm_double.py"


@pytest.fixture
def cpu_engine_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    python = make_env(tmp_path / "cpu", torch="2.13.0+cpu", kind="cpu", vllm="0.32.0+cpu")
    vllm = python.parent / "vllm"  # the console script: the CPU env's python, the double
    vllm.write_text(
        f"#!{python}\nimport runpy, sys\nsys.argv[0] = 'vllm'\n"
        f"runpy.run_path({str(DOUBLE)!r}, run_name='__main__')\n"
    )
    monkeypatch.setenv("INSTINCT_DATA_DIR", str(tmp_path / "data"))  # this process's too
    env = dict(os.environ)
    env.pop("HF_TOKEN", None)
    env.update(
        {
            "INSTINCT_VLLM_COMMAND": str(vllm),
            "INSTINCT_ALLOW_CPU_ENGINE": "1",
            "VLLM_DOUBLE_LOAD_S": "0.5",
            "VLLM_DOUBLE_LOG_DIR": str(REPO / "tests" / "fixtures" / "logs"),
        }
    )
    return env


def smol_dir(tmp_path: Path) -> Path:
    model = tmp_path / "SmolLM2-135M-Instruct"
    model.mkdir()
    (model / "config.json").write_bytes(
        (CONFIGS / "HuggingFaceTB__SmolLM2-135M-Instruct.json").read_bytes()
    )
    return model


def test_a_cpu_only_engine_serves_without_a_gpu(
    cpu_engine_env: dict[str, str], tmp_path: Path
) -> None:
    model = smol_dir(tmp_path)
    port = free_port()
    name = f"native-cpu-{port}"
    args = ["serve", str(model), "--engine", "native", "--port", str(port), "--name", name]
    args += ["--env-literal", "VLLM_CPU_KVCACHE_SPACE=1", "--timeout", "60", "--yes", "--json"]
    try:
        run = run_cli(args, env=cpu_engine_env, timeout=120)
        assert run.returncode == 0, run.explain()
        assert run.result["status"] == "ready", run.result.get("failure")
        warnings = [e["message"] for e in run.of("warning")]
        assert any(w.startswith("CPU-only engine: vLLM 0.32.0+cpu") for w in warnings)
        assert not any(w.startswith(("dev_kfd", "amdgpu_driver")) for w in warnings), warnings
        status = launcher.status(LocalHost(), name)
        assert status is not None and status.running
        # no ROCm variable, no HIP_VISIBLE_DEVICES: the KV space and vLLM's compile cache only
        # (and the launcher's markers: its name, and this launch's token)
        names = [launcher.MARKER_ENV, launcher.RUN_ENV, "VLLM_CACHE_ROOT", "VLLM_CPU_KVCACHE_SPACE"]
        assert status.process.env_names == names
        assert status.process.meta["gpu_indices"] is None
    finally:
        if launcher.load(LocalHost(), name) is not None:
            launcher.stop(LocalHost(), name, timeout=5)


def test_the_plan_shown_before_confirmation_is_the_one_serve_makes(
    cpu_engine_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP summary (``serve_plan``) and ``prepare`` agree on the CPU plan: its hash is
    the approved one, so a confirmed serve does not fail with plan_changed."""
    for key in ("INSTINCT_VLLM_COMMAND", "INSTINCT_ALLOW_CPU_ENGINE"):
        monkeypatch.setenv(key, cpu_engine_env[key])
    opts = PlanOptions(model=str(smol_dir(tmp_path)), engine="native", port=free_port())
    summary = serve_plan(LocalHost(), opts, engine="native")
    assert summary.hardware_source == "cpu" and "HIP_VISIBLE_DEVICES" not in summary.plan.env
    events: list[ServeEvent] = []
    prepared = prepare(
        LocalHost(), opts, engine="native", sink=events.append, approved_hash=summary.plan.plan_hash
    )
    assert prepared.result.plan.plan_hash == summary.plan.plan_hash
    assert prepared.gfx is None  # no gfx for diagnose to sharpen fixes with
