"""``instinct serve --server sglang`` through the real dockerd, against the SGLang test double
(``tests/infra/sglang_double.py``, held to the real SGLang 0.5.23) in an image laid out as
``lmsysorg/sglang``'s: no entrypoint, ``python3 -m sglang.launch_server ...`` as the command.

The plan is AMD's own: DeepSeek-R1-0528 on 8 MI300X follows ``dsr1-fp8-mi300x-sglang`` (TP 8,
aiter, fp8 KV cache, ...); only ``--image`` is the test's. Then the same ps, logs, stop and
``top`` as a vLLM endpoint gets, and the fingerprint (asked as SGLang answers it: ``echo``
with ``logprobs``): nothing in serve's path forks on the server.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.infra.docker import TestImage
from tests.infra.ports import free_port
from tests.infra.sglang_infra import sglang_test_image
from tests.serve.conftest import Serve, inspect, run_cli

pytestmark = pytest.mark.docker

DSR1 = "deepseek-ai/DeepSeek-R1-0528"  # AMD runs it on SGLang (dsr1-fp8-mi300x-sglang)
READY = "The server is fired up and ready to roll!"


@pytest.fixture
def sglang_image(serve: Serve, vllm_test_image: TestImage) -> str:
    return sglang_test_image(vllm_test_image, {"SGLANG_DOUBLE_LOAD_S": "1.0"})


def test_serve_sglang_in_docker_then_ps_logs_top_and_stop(serve: Serve, sglang_image: str) -> None:
    port, name = free_port(), serve.name("sglang")
    extra = ("--server", "sglang", "--gpu-count", "8", "--wait")
    run = serve(*extra, model=DSR1, image=sglang_image, port=port, name=name)
    assert run.returncode == 0, run.explain()
    phases = run.phases
    expected_phases = ("launching", "loading_weights", "ready", "warming_up", "coherence_probe")
    for expected in (*expected_phases, "fingerprint"):
        assert expected in phases, phases
    assert phases.index("loading_weights") < phases.index("ready") < phases.index("warming_up")
    # ready by SGLang's own line (the kind's tracker), then /health and the proof
    ready = [e["message"] for e in run.of("phase") if e["phase"] == "ready"]
    assert ready == ["SGLang ready"], ready
    kv = [e for e in run.of("phase") if e["figures"].get("kv_cache_tokens") == 8192]
    assert kv, "SGLang's 'KV Cache is allocated ... #tokens: 8192' is read"

    result = run.result
    assert result["ok"] is True and result["status"] == "ready", result
    endpoint = result["endpoint"]
    assert endpoint["model"] == DSR1 and endpoint["tp"] == 8
    assert endpoint["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert endpoint["coherence"]["verdict"] == "coherent"
    assert endpoint["warmup_latency_s"] is not None
    assert endpoint["coherence"]["text"] == "Paris"
    # the fingerprint, asked as SGLang gives it (echo + logprobs), first of its checkpoint
    assert endpoint["fingerprint"]["ok"] is True and endpoint["fingerprint"]["cost_tokens"] > 0

    info = inspect(name)
    assert info is not None
    command = info["Config"]["Cmd"]
    assert command[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", DSR1]
    assert info["Config"]["Entrypoint"] in (None, [])
    assert "--enable-metrics" in command and "--attention-backend" in command
    assert info["Config"]["Labels"]["instinct-serve.managed"] == "true"

    # SGLang's own answers on the published port: /health's empty 200, the model served
    health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
    assert health.status_code == 200 and health.content == b""
    models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
    assert models["data"][0]["id"] == DSR1 and models["data"][0]["owned_by"] == "sglang"

    ps = run_cli(["ps", "--json"])
    assert ps.returncode == 0, ps.explain()
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    assert rows[name]["health"] == "healthy" and rows[name]["port"] == port
    assert rows[name]["model"] == DSR1 and rows[name]["status"] == "running"

    logs = run_cli(["logs", name, "--tail", "400"])
    assert logs.returncode == 0 and READY in logs.stdout
    assert "Load weight begin" in logs.stdout

    top = run_cli(["top", name, "--once", "--interval", "1", "--json"])
    assert top.returncode == 0, top.explain()
    (ep,) = json.loads(top.stdout)["endpoints"]
    assert ep["name"] == name and ep["status"] == "ok", ep
    metrics = ep["metrics"]
    assert metrics["metric_names"]["ttft"] == "sglang:time_to_first_token_seconds"
    assert metrics["requests_running"] == 0 and metrics["kv_cache_usage_pct"] == 0.0
    # the double's own counts: serve's warm-up, its coherence probe and the fingerprint's 3
    assert metrics["requests_finished_total"] == 5 and metrics["generation_tokens_total"] > 0

    human = serve(
        "--server",
        "sglang",
        "--gpu-count",
        "8",
        "--wait",
        json_lines=False,
        model=DSR1,
        image=sglang_image,
        port=port,
        name=name,
    )
    assert human.returncode == 0, human.explain()
    assert "vLLM" not in human.stdout + human.stderr, human.explain()
    assert "Endpoint already running" in human.stdout  # the same plan: reused

    stop = run_cli(["stop", "--yes", name, "--json"])
    assert stop.returncode == 0, stop.explain()
    assert json.loads(stop.stdout)["stopped"][0]["name"] == name
    assert inspect(name) is None
