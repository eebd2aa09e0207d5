"""``instinct serve --server sglang`` end to end against the REAL SGLang through docker: the
real sglang 0.5.23 (CPU torch) in an image built here without a registry
(``tests/infra/realsglang.build_image``: the venv, the ``sgl_kernel`` placeholder and the
host's python3.11, laid out as ``lmsysorg/sglang``'s: no entrypoint, ``python3 -m
sglang.launch_server``), the model served by its Hub id from the mounted Hugging Face cache,
offline. Serve plans for an MI300X (the GPU checks pass on a stand-in root, as in
tests/serve; the tool cannot know the image is a CPU build); the CPU specifics are the user's:
``--env-literal SGLANG_USE_CPU_ENGINE=1`` and ``-- --device cpu --attention-backend
torch_native``.

AMD publishes no SGLang config for SmolLM2-135M, so ``--server sglang --image TAG`` plans
SGLang's own defaults on the tier's image (``plan.sglang._defaults``, a warning says so), as
it would for any model AMD has not benchmarked (``tests/infra/realsglang.docker_serve``).

One server for the module: ready by SGLang's own line, ``/health``, the coherence probe and
the fingerprint (serve's own), one chat answer, one short ``bench`` step, ``top --once
--json`` on the ``sglang:`` families, then ``stop``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.infra.docker import DockerDaemon
from tests.infra.realsglang import (
    READY_LINE,
    SERVED,
    Setup,
    build_image,
    required,
)
from tests.realsglang.docker_served import Served, served_by_docker
from tests.serve.conftest import inspect, run_cli

pytestmark = [pytest.mark.realsglang, pytest.mark.docker]

SERVE_TIMEOUT_S = 300  # the CLI's own --timeout for /health (about 45-60 s on 2 cores)
CLI_TIMEOUT_S = 480.0  # start, warm-up, coherence and the fingerprint, with margin
BENCH_N, BENCH_OUT = 4, 16  # bench's one step: 4 requests of 16 tokens (--ignore-eos)


@pytest.fixture(scope="module")
def sglang_image(real_sglang_setup: Setup, docker_daemon: DockerDaemon) -> str:
    """The registry-free image of the real SGLang (the setup builds it; else here)."""
    try:
        tag, seconds, reused = build_image(real_sglang_setup)
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"could not build the real SGLang image: {exc}")
    print(f"real SGLang image {tag}: {'reused' if reused else f'built in {seconds:.1f} s'}")
    return tag


@pytest.fixture(scope="module")
def served(
    real_sglang_setup: Setup,
    sglang_image: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    with served_by_docker(
        real_sglang_setup,
        sglang_image,
        tmp_path_factory.mktemp("rs-docker"),
        "rs-docker",
        serve_timeout_s=SERVE_TIMEOUT_S,
        cli_timeout_s=CLI_TIMEOUT_S,
        extra=(),
    ) as served:
        yield served


def test_serve_sglang_by_docker_ready_proven_and_fingerprinted(served: Served) -> None:
    run = served.run
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "ready" and result["engine"] == "docker", result.get("failure")
    # ready on SGLang's own line (its kind's tracker) or on /health's first 200, whichever
    # serve sees first: SGLang prints the line as /health turns 200 (on a loaded host the
    # probe wins; the native module holds the tracker to the line itself)
    ready = [e["message"] for e in run.of("phase") if e["phase"] == "ready"]
    assert len(ready) == 1 and ready[0] in ("SGLang ready", "API server answers /health"), ready
    assert run.phases.index("loading_weights") < run.phases.index("ready"), run.phases
    kv = [e for e in run.of("phase") if e["figures"].get("kv_cache_tokens")]
    assert kv, "SGLang's 'KV Cache is allocated ... #tokens: N' is read"
    for phase in ("launching", "loading_weights", "ready", "warming_up", "coherence_probe"):
        assert phase in run.phases, run.phases
    endpoint = result["endpoint"]
    assert endpoint["model"] == SERVED and endpoint["image"] == served.image
    assert endpoint["coherence"]["verdict"] == "coherent", endpoint["coherence"]
    assert "paris" in endpoint["coherence"]["text"].lower()
    fingerprint = endpoint["fingerprint"]  # taken as SGLang answers it: echo + logprobs
    assert fingerprint["ok"] is True and fingerprint["cost_tokens"] > 0, fingerprint
    info = inspect(served.name)
    assert info is not None and info["State"]["Running"]
    command = info["Config"]["Cmd"]
    assert command[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", SERVED]
    assert "--enable-metrics" in command and info["Config"]["Entrypoint"] in (None, [])
    assert command[command.index("--context-length") + 1] == "1024"  # --max-model-len's
    assert "--max-model-len" not in command and endpoint["max_model_len"] == 1024
    assert "SGLANG_USE_CPU_ENGINE=1" in info["Config"]["Env"]
    logs = run_cli(["logs", served.name, "--tail", "400"], env=served.env, timeout=60)
    assert logs.returncode == 0 and READY_LINE in logs.stdout, logs.explain()
    events = run.of("phase")
    first = float(events[0]["ts"])
    at = {e["phase"]: round(float(e["ts"]) - first, 1) for e in reversed(events)}
    print(f"serve --server sglang by docker: done in {served.seconds:.1f} s; phases at {at}")


def test_health_and_a_chat_answer(served: Served) -> None:
    assert served.run.returncode == 0, served.run.explain()
    health = httpx.get(served.base + "/health", timeout=10, trust_env=False)
    assert health.status_code == 200 and health.content == b""
    answer = httpx.post(
        served.base + "/v1/chat/completions",
        json={
            "model": SERVED,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16,
            "temperature": 0,
        },
        timeout=120,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text
    assert "Paris" in answer.json()["choices"][0]["message"]["content"]


def _counters(base: str) -> dict[str, float | None]:
    from instinct_serve import servers
    from instinct_serve.observe.vllm import snapshot

    text = httpx.get(base + "/metrics", timeout=10, trust_env=False).text
    return snapshot(text, time.monotonic(), servers.get("sglang").metric_names).counters


def test_bench_with_vllms_client_counts_what_sglang_served(
    served: Served, real_sglang_setup: Setup
) -> None:
    """``instinct bench`` runs vLLM's own client (``vllm bench serve``, from the real-vLLM
    tier's venv: AMD benchmarks SGLang with it) against the real SGLang, one short bounded
    step; SGLang's own counters grow by exactly the requests and output tokens it sent."""
    assert served.run.returncode == 0, served.run.explain()
    from tests.infra import realvllm

    client = realvllm.load_setup()
    reason = realvllm.why_unavailable(client)
    if reason is not None or client is None:
        if required():
            pytest.fail(f"bench needs vLLM's client: {reason}")
        pytest.skip(f"bench needs vLLM's client: {reason}")
    before = _counters(served.base)
    args = ["bench", "run", served.name, "--concurrency", "1", "--requests", str(BENCH_N)]
    args += ["--input-len", "32", "--output-len", str(BENCH_OUT), "--step-timeout", "240"]
    args += ["--vllm", str(client.vllm), "--tokenizer", str(real_sglang_setup.model_dir)]
    start = time.monotonic()
    bench = run_cli([*args, "--json"], env=served.env, timeout=420)
    took = time.monotonic() - start
    assert bench.returncode == 0, bench.explain()
    (point,) = json.loads(bench.stdout.strip().splitlines()[-1])["points"]  # after the steps
    assert (point["completed"], point["failed"]) == (BENCH_N, 0), point
    assert point["latency_ms"]["ttft"]["mean"] > 0 and point["output_throughput"] > 0
    after = _counters(served.base)
    served_requests = (after["requests_finished"] or 0) - (before["requests_finished"] or 0)
    generated = (after["generation_tokens"] or 0) - (before["generation_tokens"] or 0)
    reported = point["output_throughput"] * point["duration_s"]
    # (vLLM's client skips its initial test request by default: --ready-check-timeout-sec 0)
    assert served_requests == BENCH_N, (before, after)
    assert generated == BENCH_N * BENCH_OUT and abs(reported - generated) < 1, (generated, point)
    print(
        f"bench against the real SGLang: {took:.1f} s, {point['output_throughput']:.1f} tok/s, "
        f"TTFT mean {point['latency_ms']['ttft']['mean']:.0f} ms"
    )


@pytest.mark.last  # it stops the module's endpoint
def test_top_reads_the_sglang_families_then_stop(served: Served) -> None:
    assert served.run.returncode == 0, served.run.explain()
    env = served.env
    top = run_cli(["top", served.name, "--once", "--interval", "1", "--json"], env=env, timeout=90)
    assert top.returncode == 0, top.explain()
    (ep,) = json.loads(top.stdout)["endpoints"]
    assert ep["name"] == served.name and ep["status"] == "ok", ep
    metrics = ep["metrics"]
    assert metrics["metric_names"]["ttft"] == "sglang:time_to_first_token_seconds"
    assert metrics["requests_running"] == 0
    assert metrics["requests_finished_total"] >= 3 and metrics["generation_tokens_total"] > 0
    stop = run_cli(["stop", "--yes", served.name, "--json"], env=env, timeout=120)
    assert stop.returncode == 0, stop.explain()
    assert json.loads(stop.stdout)["stopped"][0]["removed"] is True
    assert inspect(served.name) is None
