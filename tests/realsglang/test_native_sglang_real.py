"""The SGLang server kind held to a REAL SGLang (sglang 0.5.23 on a CPU torch, SmolLM2-135M),
launched natively with the command ``servers.sglang`` writes for a plan: its start-up log
read by the kind's tracker reaches ``ready`` on SGLang's own line, ``/health`` answers 200
with an empty body, ``/health_generate`` runs a generation, a completion answers, and
``top``'s snapshot reads the ``sglang:`` families.

Set up once with ``bash tests/infra/setup_real_sglang.sh`` (cached); run with
``.venv/bin/pytest -m realsglang tests/realsglang -n 0``. Without the setup the test skips
with the reason; with ``INSTINCT_TEST_REQUIRE`` containing ``realsglang`` it fails instead.
SGLang's own CPU kernels are not exercised (the setup's ``sgl_kernel`` placeholder raises on
any call; a Llama on a CPU without AMX takes torch's path)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from instinct_serve import servers
from instinct_serve.errors import InstinctError
from instinct_serve.observe import fingerprint as fp
from instinct_serve.observe.vllm import snapshot
from instinct_serve.runtime.fingerprint import Budget, take
from instinct_serve.runtime.health import probe_health
from instinct_serve.servers import Routes
from tests.infra.ports import free_port
from tests.infra.realsglang import READY_S, SERVED, Setup, cpu_plan, start_server

pytestmark = pytest.mark.realsglang


class Server:
    def __init__(self, port: int, log: Path, events: list[str]):
        self.port, self.log, self.events = port, log, events
        self.base = f"http://127.0.0.1:{port}"
        self.ready_after_s: float | None = None


@pytest.fixture(scope="module")
def real_sglang(
    real_sglang_setup: Setup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    port = free_port()
    log = tmp_path_factory.mktemp("sglang") / "server.log"
    real = start_server(real_sglang_setup, cpu_plan(real_sglang_setup, port), log)
    server = Server(port, log, [])
    tracker = servers.get("sglang").tracker()
    seen = 0
    try:
        while time.monotonic() - real.started < READY_S and real.proc.poll() is None:
            lines = real.text().splitlines()
            for line in lines[seen:]:
                event = tracker.feed(line)
                if event is not None:
                    server.events.append(event.phase)
            seen = len(lines)
            if tracker.phase in ("ready", "failed"):
                break
            time.sleep(0.5)
        server.ready_after_s = time.monotonic() - real.started
        assert tracker.phase == "ready", real.text()[-3000:]
        yield server
    finally:
        real.stop()
        keep = os.environ.get("INSTINCT_REALSGLANG_KEEP")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            Path(keep, "server.log").write_text(real.text(), encoding="utf-8")


def test_the_tracker_reads_the_real_start_up_to_ready(real_sglang: Server) -> None:
    phases = real_sglang.events
    assert phases[-1] == "ready" and "loading_weights" in phases
    assert phases.index("loading_weights") < phases.index("ready")
    text = real_sglang.log.read_text(encoding="utf-8")
    assert "The server is fired up and ready to roll!" in text


def test_health_and_health_generate(real_sglang: Server) -> None:
    sample = probe_health(real_sglang.base, timeout=10, routes=servers.get("sglang").routes)
    assert sample.ok
    health = httpx.get(real_sglang.base + "/health", timeout=10, trust_env=False)
    assert health.status_code == 200 and health.content == b""
    generated = httpx.get(real_sglang.base + "/health_generate", timeout=60, trust_env=False)
    assert generated.status_code == 200


def test_a_completion_then_the_sglang_families(real_sglang: Server) -> None:
    base = real_sglang.base
    answer = httpx.post(
        base + "/v1/completions",
        json={
            "model": SERVED,
            "prompt": "The capital of France is",
            "max_tokens": 8,
            "temperature": 0,
        },
        timeout=120,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text
    assert "Paris" in answer.json()["choices"][0]["text"]
    text = httpx.get(base + "/metrics", timeout=10, trust_env=False).text
    keep = os.environ.get("INSTINCT_REALSGLANG_KEEP")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        Path(keep, "metrics.txt").write_text(text, encoding="utf-8")
    now = snapshot(text, time.monotonic(), servers.get("sglang").metric_names)
    assert now.is_vllm and now.prefix == "sglang:"  # the server's own families
    assert now.gauges["running"] is not None and now.gauges["waiting"] is not None
    assert now.gauges["kv_cache_usage"] is not None
    assert (now.counters["generation_tokens"] or 0) >= 8
    ttft = now.histograms["ttft"]
    assert ttft is not None
    missing = [c for c in servers.get("sglang").metric_names if c not in now.names]
    assert missing == [], missing


def test_the_fingerprint_is_taken_from_the_real_server(real_sglang: Server) -> None:
    """SGLang's ``Routes.scoring`` (``echo`` + ``logprobs``) gives the prompt's
    log-probabilities on the real server: the short and long probes scored, the greedy run
    finite, and the first fingerprint of the checkpoint judged sound; vLLM's parameters
    (``prompt_logprobs``) are ignored by SGLang: no scores, said as such."""
    routes = servers.get("sglang").routes
    start = time.monotonic()
    taken = take(real_sglang.base, SERVED, Budget(long_tokens=512, seconds=240), routes=routes)
    took = time.monotonic() - start
    assert [s.name for s in taken.scores] == ["short", "long"]
    short = taken.scores[0]
    assert short.tokens > 20 and short.nonfinite == 0 and short.mean < 0
    assert taken.greedy is not None and taken.greedy.nonfinite == 0
    verdict = fp.check(taken, None, platform="cpu", need_long=True)
    assert verdict.ok, verdict.reasons
    print(
        f"real SGLang fingerprint: {took:.1f} s, {taken.cost_tokens} tokens, short mean "
        f"{short.mean:.3f}, long copy gain {taken.scores[1].copy_gain}"
    )
    with pytest.raises(InstinctError) as caught:
        take(real_sglang.base, SERVED, Budget(long_tokens=0, seconds=120), routes=Routes())
    assert caught.value.id == "fingerprint_failed"
