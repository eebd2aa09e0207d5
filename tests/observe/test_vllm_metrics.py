"""vLLM /metrics as version-agnostic readings: the real 0.32 captures (one scrape, and two
around a real ``vllm bench serve`` run), a real V0-engine scrape, and V1's older names."""

from __future__ import annotations

import json

import pytest

from instinct_serve.observe.vllm import NAMES, reading, snapshot
from tests.infra.fakebin import load_fixture
from tests.infra.paths import FIXTURES, LOGS

REAL = LOGS / "real-vllm-cpu"
BENCH = REAL / "bench"
V0 = FIXTURES / "metrics" / "vllm_v0_metrics_aibrix_runtime_doc_excerpt.txt"


def test_one_real_scrape() -> None:
    snap = snapshot((REAL / "metrics.txt").read_text(), at=100.0)
    assert snap.is_vllm
    assert snap.gauges["running"] == 0 and snap.gauges["waiting"] == 0
    assert snap.gauges["kv_cache_usage"] == 0.0 and snap.gauges["swapped"] is None
    assert snap.counters["prompt_tokens"] == 86 and snap.counters["generation_tokens"] == 40
    assert snap.counters["requests_finished"] == 3
    assert snap.counters["prefix_cache_queries"] == 86 and snap.counters["prefix_cache_hits"] == 0
    names = snap.names
    assert names["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert names["itl"] == "vllm:inter_token_latency_seconds"
    assert names["prefix_cache_queries"] == "vllm:prefix_cache_queries_total"
    doc = reading(snap).to_dict()
    assert doc["window_s"] is None and doc["latency_scope"] == "since_start"
    assert doc["requests_per_s"] is None and doc["generation_tokens_per_s"] is None
    assert doc["prefix_cache_hit_rate_pct"] == 0.0
    assert doc["ttft_ms"]["count"] == 3 and doc["ttft_ms"]["p50"] == 175.0
    assert doc["requests_finished_total"] == 3


def test_two_real_scrapes_around_a_real_benchmark() -> None:
    """8 requests of 32 prompt and 16 generated tokens (``bench/capture.json``) plus one
    streamed request of 5 + 8 tokens, between the two scrapes."""
    before = snapshot((BENCH / "metrics_before.txt").read_text(), at=10.0)
    after = snapshot((BENCH / "metrics_after.txt").read_text(), at=40.0)
    doc = reading(after, before).to_dict()
    assert doc["window_s"] == 30.0 and doc["latency_scope"] == "window"
    assert doc["prompt_tokens_per_s"] == round((8 * 32 + 5) / 30, 2)
    assert doc["generation_tokens_per_s"] == round((8 * 16 + 8) / 30, 2)
    assert doc["requests_per_s"] == round(9 / 30, 2)
    assert doc["ttft_ms"]["count"] == 9 and doc["itl_ms"]["count"] == 8 * 15 + 7
    # what the client measured (vllm bench serve) lies in the buckets the server's p50 is in
    client = json.loads((BENCH / "bench_serve_result.json").read_text())
    ttft_p50 = doc["ttft_ms"]["p50"]
    assert 250 <= client["median_ttft_ms"] <= 500 and 250 <= ttft_p50 <= 500
    itl_p50 = doc["itl_ms"]["p50"]
    assert 50 <= client["median_itl_ms"] <= 75 and 50 <= itl_p50 <= 75
    mean = doc["e2e_ms"]["mean"]
    assert mean is not None and mean > 0
    # the histograms were empty before: the window's are the later scrape's
    assert reading(after).to_dict()["ttft_ms"]["count"] == 9


def test_a_real_v0_engine_scrape() -> None:
    """vLLM ~0.7 V0: num_requests_swapped, gpu_cache_usage_perc, and a prefix-cache hit
    rate gauge of -1 (prefix caching off), no engine label, no histograms in the excerpt."""
    snap = snapshot(load_fixture(V0), at=0.0)
    assert snap.names["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert snap.names["swapped"] == "vllm:num_requests_swapped"
    assert snap.gauges["swapped"] == 0 and snap.gauges["kv_cache_usage"] == 0.0
    assert snap.counters["prompt_tokens"] == 148 and snap.counters["generation_tokens"] == 955
    assert snap.counters["requests_finished"] == 4
    doc = reading(snap).to_dict()
    assert doc["requests_swapped"] == 0
    assert doc["prefix_cache_hit_rate_pct"] is None  # -1: prefix caching is off
    assert doc["ttft_ms"] is None and doc["itl_ms"] is None


# V1 before the renames (vLLM 0.8-0.10): the names NAMES lists after the current ones.
RENAMES = {
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
    "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",
}


def _older(text: str) -> str:
    """The real 0.32 scrape under the V1 names before 0.9.2/0.11 (a derived sample: the
    renames changed names only, not values, labels or buckets, per loggers.py's comments)."""
    for new, old in RENAMES.items():
        text = text.replace(new + "{", old + "{").replace(new + "_", old + "_")
        text = text.replace(new + " ", old + " ")
    return text


def test_the_older_v1_names_read_the_same() -> None:
    before_text = (BENCH / "metrics_before.txt").read_text()
    after_text = (BENCH / "metrics_after.txt").read_text()
    assert "vllm:time_per_output_token_seconds_bucket" in _older(after_text)
    new = reading(snapshot(after_text, 20.0), snapshot(before_text, 10.0)).to_dict()
    old = reading(snapshot(_older(after_text), 20.0), snapshot(_older(before_text), 10.0))
    old_doc = old.to_dict()
    assert old_doc["metric_names"]["itl"] == "vllm:time_per_output_token_seconds"
    assert old_doc["metric_names"]["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert old_doc["metric_names"]["prefix_cache_hits"] == "vllm:gpu_prefix_cache_hits_total"
    for key in ("itl_ms", "ttft_ms", "generation_tokens_per_s", "kv_cache_usage_pct"):
        assert old_doc[key] == new[key], key


def test_when_both_names_are_served_the_current_one_wins() -> None:
    text = "\n".join(
        [
            'vllm:gpu_cache_usage_perc{model_name="m"} 0.25',  # 0.9.2-0.10 serve both
            'vllm:kv_cache_usage_perc{model_name="m"} 0.5',
        ]
    )
    snap = snapshot(text, 0.0)
    assert snap.gauges["kv_cache_usage"] == 0.5
    assert snap.names["kv_cache_usage"] == "vllm:kv_cache_usage_perc"


def test_engines_add_up_and_a_restart_gives_no_rate() -> None:
    def scrape(tokens0: float, tokens1: float) -> str:
        return "\n".join(
            [
                f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {tokens0}',
                f'vllm:generation_tokens_total{{engine="1",model_name="m"}} {tokens1}',
                'vllm:num_requests_running{engine="0",model_name="m"} 3',
                'vllm:num_requests_running{engine="1",model_name="m"} 2',
            ]
        )

    first, second = snapshot(scrape(100, 50), 0.0), snapshot(scrape(160, 90), 2.0)
    doc = reading(second, first).to_dict()
    assert doc["requests_running"] == 5 and doc["generation_tokens_per_s"] == 50.0
    restarted = snapshot(scrape(1, 1), 4.0)
    assert reading(restarted, second).to_dict()["generation_tokens_per_s"] is None


def test_a_page_without_vllm_metrics() -> None:
    snap = snapshot("# HELP up whatever\nup 1\n", 0.0)
    assert not snap.is_vllm and snap.names == {}


@pytest.mark.parametrize("concept", sorted(NAMES))
def test_every_name_has_its_versions(concept: str) -> None:
    for name in NAMES[concept]:
        assert name.name.startswith("vllm:") and name.versions
