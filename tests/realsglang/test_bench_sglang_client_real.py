"""``instinct bench`` on a REAL SGLang endpoint with SGLang's own client, no ``--vllm``: the
endpoint is served by docker from the image the tier builds (``tests/infra/realsglang.
build_image``, laid out as ``lmsysorg/sglang``: no entrypoint, no vLLM), and bench runs
``python3 -m sglang.bench_serving`` from that same image (``docker run --entrypoint python3
IMAGE -m sglang.bench_serving ...``, the endpoint's Hugging Face cache, offline), the way it
would on an MI300X. Docker rather than natively: the image is what a user's SGLang endpoint
runs, and the client must come from it (a native run would only prove the host's venv).

Serve skips the coherence probe and the fingerprint (``--no-coherence --no-fingerprint``;
held by ``test_docker_serve_sglang_real.py``): this module is about bench alone. One step of
4 requests of 32 prompt tokens and 16 output tokens at concurrency 2; SGLang's own counters
(``sglang:`` families, read as ``top`` reads them) grow by exactly the requests and output
tokens the client reports.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.infra.docker import DockerDaemon
from tests.infra.realsglang import Setup, build_image
from tests.realsglang.docker_served import Served, served_by_docker
from tests.serve.conftest import run_cli

pytestmark = [pytest.mark.realsglang, pytest.mark.docker]

SERVE_TIMEOUT_S = 300  # the CLI's own --timeout for /health (about 45-60 s on 2 cores)
CLI_TIMEOUT_S = 420.0
BENCH_N, BENCH_IN, BENCH_OUT, BENCH_CONC = 4, 32, 16, 2


@pytest.fixture(scope="module")
def served(
    real_sglang_setup: Setup,
    docker_daemon: DockerDaemon,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    try:
        image, _seconds, _reused = build_image(real_sglang_setup)
    except (RuntimeError, OSError) as exc:
        pytest.fail(f"could not build the real SGLang image: {exc}")
    with served_by_docker(
        real_sglang_setup,
        image,
        tmp_path_factory.mktemp("rs-bench"),
        "rs-bench",
        serve_timeout_s=SERVE_TIMEOUT_S,
        cli_timeout_s=CLI_TIMEOUT_S,
        extra=("--no-coherence", "--no-fingerprint"),
    ) as served:
        yield served


def _counters(base: str) -> dict[str, float | None]:
    from instinct_serve import servers
    from instinct_serve.observe.vllm import snapshot

    text = httpx.get(base + "/metrics", timeout=10, trust_env=False).text
    return snapshot(text, time.monotonic(), servers.get("sglang").metric_names).counters


def test_bench_runs_sglangs_own_client_from_the_image_and_sglang_counts_it(
    served: Served,
) -> None:
    assert served.run.returncode == 0, served.run.explain()
    assert served.run.result["status"] == "ready", served.run.result.get("failure")
    before = _counters(served.base)
    args = ["bench", "run", served.name, "--concurrency", str(BENCH_CONC)]
    args += ["--requests", str(BENCH_N), "--input-len", str(BENCH_IN)]
    args += ["--output-len", str(BENCH_OUT), "--step-timeout", "300", "--json"]
    start = time.monotonic()
    bench = run_cli(args, env=served.env, timeout=420)
    took = time.monotonic() - start
    assert bench.returncode == 0, bench.explain()
    step, result = (json.loads(line) for line in bench.stdout.strip().splitlines())
    assert step["event"] == "step" and step["ok"] is True and step["error"] is None, step
    assert result["event"] == "result" and result["errors"] == [], result["errors"]
    # SGLang's client, from the endpoint's own image (its Python: the image has no entrypoint)
    assert result["client"] == "sglang.bench_serving"
    command = result["command"]
    assert command[:3] == ["docker", "run", "--rm"] and command[-1] == served.image
    assert command[command.index("--entrypoint") + 1] == "python3"
    assert command[command.index("--volumes-from") + 1] == served.name
    (point,) = result["points"]
    assert point == step["point"]
    assert (point["concurrency"], point["requests"]) == (BENCH_CONC, BENCH_N), point
    assert (point["completed"], point["failed"]) == (BENCH_N, 0), point
    for metric in ("ttft", "tpot", "itl", "e2el"):
        stats = point["latency_ms"][metric]
        assert set(stats) == {"mean", "p50", "p90", "p99"} and stats["mean"] > 0, metric
    assert point["output_throughput"] > 0 and point["total_token_throughput"] > 0
    with open(result["path"], encoding="utf-8") as stored:
        assert json.load(stored)["client"] == "sglang.bench_serving"
    after = _counters(served.base)
    finished = (after["requests_finished"] or 0) - (before["requests_finished"] or 0)
    generated = (after["generation_tokens"] or 0) - (before["generation_tokens"] or 0)
    reported = point["output_throughput"] * point["duration_s"]
    # no warm-up request (--warmup-requests 0): the server served the step's requests only
    assert finished == BENCH_N, (before, after)
    assert generated == BENCH_N * BENCH_OUT and abs(reported - generated) < 1, (generated, point)
    print(
        f"serve (no coherence, no fingerprint) {served.seconds:.1f} s; bench with SGLang's "
        f"client in its image: {took:.1f} s, {point['output_throughput']:.1f} tok/s, "
        f"TTFT mean {point['latency_ms']['ttft']['mean']:.0f} ms"
    )
