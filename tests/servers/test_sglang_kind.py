"""SGLang as a built-in server kind (``servers.sglang``): its routes, its start-up log read
into the same phases as vLLM's (ready at "The server is fired up and ready to roll!"), its
own failure lines, and its ``sglang:`` metric families read by ``top``'s snapshot.

The log lines are SGLang's own wording (``sglang/srt``: model_runner.py, cuda_graph_runner.py,
http_server.py, scheduler.py) with a real run's figures."""

from __future__ import annotations

from pathlib import Path

from instinct_serve import servers
from instinct_serve.diagnose.sglang_phases import READY_LINE
from instinct_serve.observe.vllm import reading, snapshot
from instinct_serve.servers.kind import ServerKind

START = [
    "[2026-12-05 17:20:01] server_args=ServerArgs(model_path='/m', tp_size=1, ...)",
    "[2026-12-05 17:20:24 TP0] Init torch distributed begin.",
    "[2026-12-05 17:20:25 TP0] Load weight begin. avail mem=180.72 GB",
    "[2026-12-05 17:20:49 TP0] Load weight end. elapsed=23.18 s, type=LlamaForCausalLM, "
    "avail mem=152.02 GB, mem usage=28.79 GB.",
    "[2026-12-05 17:20:50 TP0] KV Cache is allocated. #tokens: 383872, KV size: 19.36 GB",
    "[2026-12-05 17:20:51 TP0] Capture cuda graph begin. This can take up to several minutes. "
    "avail mem=132.66 GB",
    "[2026-12-05 17:21:00 TP0] Capture cuda graph end. Time elapsed: 8.04 s. mem usage=0.80 GB. "
    "avail mem=131.86 GB.",
    "[2026-12-05 17:21:02] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to "
    "quit)",
    '[2026-12-05 17:21:04] INFO:     127.0.0.1:58310 - "POST /generate HTTP/1.1" 200 OK',
    f"[2026-12-05 17:21:04] {READY_LINE}",
]


def test_sglang_is_built_in_beside_vllm() -> None:
    kind: ServerKind = servers.get("sglang")
    assert kind.name == "sglang" and kind.title == "SGLang" and kind.vocabulary == "sglang"
    assert servers.names()[:2] == ("vllm", "sglang")
    assert kind.routes.health == "/health" and kind.routes.metrics == "/metrics"
    assert kind.image_repository == "lmsysorg/sglang"


def test_the_start_up_log_reads_as_phases_up_to_ready() -> None:
    tracker = servers.get("sglang").tracker()
    phases = []
    for line in START:
        event = tracker.feed(line, now=0.0)
        if event is not None:
            phases.append(event.phase)
    assert phases == [
        "loading_weights",
        "loading_weights",
        "profiling",
        "capturing_graphs",
        "capturing_graphs",
        "starting_server",
        "ready",
    ]
    assert tracker.phase == "ready" and tracker.message == "SGLang ready"
    assert tracker.figures["kv_cache_tokens"] == 383872


def test_sglangs_own_errors_end_the_start_up() -> None:
    tracker = servers.get("sglang").tracker()
    for line in START[:4]:
        tracker.feed(line, now=0.0)
    event = tracker.feed(
        "[2026-12-05 17:20:50 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        now=1.0,
    )
    assert event is not None and event.phase == "failed"
    assert tracker.failed_for_good and "Scheduler hit an exception" in tracker.message
    assert tracker.feed(f"[2026-12-05 17:21:04] {READY_LINE}", now=2.0) is None
    assert tracker.phase == "failed"


def test_an_sglang_log_is_known_as_sglangs_and_ready_only_at_sglangs_line() -> None:
    """Read as vLLM's, uvicorn's start line (before SGLang's warm-up) would be ready: a log
    is told apart by what only SGLang prints, and read with SGLang's tracker."""
    from instinct_serve.diagnose.sglang_phases import is_sglang_log

    assert is_sglang_log("\n".join(START))
    tracker = servers.get("sglang").tracker()
    for line in START[:-1]:
        tracker.feed(line, now=0.0)
    assert tracker.phase != "ready"
    tracker.feed(START[-1], now=1.0)
    assert tracker.phase == "ready"


def test_sglangs_failure_lines_are_in_the_one_table_diagnose_reads() -> None:
    from instinct_serve.diagnose import diagnose

    signals = servers.get("sglang").failure_signals
    assert any("Scheduler hit an exception" in s.pattern for s in signals)
    assert any("Engine core initialization failed" in s.pattern for s in signals)
    died = (
        "[2026-12-05 17:20:51] Received sigquit from a child process. It usually means the "
        "child failed."
    )
    diagnosis = diagnose("\n".join([*START[:5], died]))
    assert diagnosis.last_error is not None and "Received sigquit" in diagnosis.last_error


METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m"} 3.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="m"} 1.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m"} 0.25
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 1200.0
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m"} 300.0
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 2.0
sglang:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 4.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4.0
sglang:time_to_first_token_seconds_sum{model_name="m"} 0.9
sglang:time_to_first_token_seconds_count{model_name="m"} 4.0
"""


def test_top_reads_the_sglang_families() -> None:
    names = servers.get("sglang").metric_names
    now = snapshot(METRICS, 10.0, names)
    assert now.is_vllm and now.prefix == "sglang:"  # the server's own families are there
    assert now.gauges["running"] == 3 and now.gauges["waiting"] == 1
    assert now.gauges["kv_cache_usage"] == 0.25
    assert now.counters["generation_tokens"] == 1200
    assert now.names["ttft"] == "sglang:time_to_first_token_seconds"
    doc = reading(now, None).to_dict()
    assert doc["kv_cache_usage_pct"] == 25.0 and doc["requests_running"] == 3
    assert doc["ttft_ms"]["count"] == 4 and doc["ttft_ms"]["mean"] == 225.0
    assert doc["metric_names"]["waiting"] == "sglang:num_queue_reqs"


def test_an_sglang_scrape_read_with_vllms_names_has_no_vllm_family() -> None:
    vllm = snapshot(METRICS, 10.0)
    assert not vllm.is_vllm and vllm.gauges["running"] is None


# ----------------------------------------------------------------- held to the real server

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"


def test_the_real_start_up_log_is_ready_only_at_its_ready_line() -> None:
    """A real SGLang's log (tests/fixtures/sglang, captured by the realsglang tier): uvicorn
    says "Application startup complete" before the warm-up; ready is SGLang's own line."""
    lines = (REAL / "real_cpu_start.log").read_text(encoding="utf-8").splitlines()
    tracker = servers.get("sglang").tracker()
    ready_at = None
    phases = []
    for no, line in enumerate(lines):
        event = tracker.feed(line, now=float(no))
        if event is not None:
            phases.append(event.phase)
            if event.phase == "ready" and ready_at is None:
                ready_at = no
    assert ready_at is not None and READY_LINE in lines[ready_at]
    assert phases == [
        "loading_weights",
        "loading_weights",
        "profiling",
        "starting_server",  # Application startup complete
        "starting_server",  # Uvicorn running on ...
        "ready",
        "ready",  # "Shutting down": the stop the capture ended with, noted
    ]
    assert tracker.shutting_down
    assert tracker.figures["kv_cache_tokens"] == 8192
    assert "Application startup complete" in "\n".join(lines[:ready_at])


def test_top_reads_every_concept_of_the_real_metrics() -> None:
    text = (REAL / "real_cpu_metrics.txt").read_text(encoding="utf-8")
    names = servers.get("sglang").metric_names
    now = snapshot(text, 0.0, names)
    assert sorted(now.names) == sorted(names)  # every concept's name is in a real scrape
    assert now.is_vllm and now.prefix == "sglang:"
    assert (now.counters["generation_tokens"] or 0) >= 8
