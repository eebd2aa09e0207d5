"""``vllm bench serve`` results (a real one recorded from vLLM 0.32), the step argv, runs and
their comparison."""

from __future__ import annotations

import json

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.observe.bench import (
    BenchRun,
    Settings,
    bar,
    bench_args,
    compare,
    from_bench_result,
    parse_concurrency,
    parse_result,
)
from tests.infra.paths import LOGS

RESULT = LOGS / "real-vllm-cpu" / "bench" / "bench_serve_result.json"
CAPTURE = LOGS / "real-vllm-cpu" / "bench" / "capture.json"


def test_the_real_result_file() -> None:
    doc = json.loads(RESULT.read_text())
    point = parse_result(doc)
    assert point.concurrency == 2 and point.requests == 8
    assert point.completed == 8 and point.failed == 0
    assert point.duration_s == pytest.approx(5.3823921409994)
    assert point.output_throughput == pytest.approx(23.781247565554192)
    assert point.request_throughput == pytest.approx(1.486327972847137)
    assert point.total_token_throughput == pytest.approx(71.34374269666257)
    assert point.latency_ms["ttft"] == {
        "mean": pytest.approx(330.6783542500398),
        "p50": pytest.approx(301.0847155001102),
        "p90": pytest.approx(554.871591400206),
        "p99": pytest.approx(574.1049987396855),
    }
    assert point.latency_ms["itl"]["p99"] == pytest.approx(201.86383721958015)
    assert point.latency_ms["e2el"]["p50"] == pytest.approx(1209.2724814997382)
    assert point.value("ttft_p50_ms") == pytest.approx(301.0847155001102)
    assert point.value("output_throughput") == pytest.approx(23.781247565554192)
    assert point.value("nothing_p50_ms") is None


def test_a_result_without_our_percentiles_falls_back_to_the_median() -> None:
    doc = json.loads(RESULT.read_text())
    for key in [k for k in doc if k.startswith(("p50_", "p90_"))]:
        del doc[key]
    point = parse_result(doc, concurrency=7)
    assert point.concurrency == 7
    assert point.latency_ms["ttft"]["p50"] == pytest.approx(doc["median_ttft_ms"])
    assert point.latency_ms["ttft"]["p90"] is None


def test_not_a_result() -> None:
    with pytest.raises(UsageError) as err:
        parse_result({"hello": 1})
    assert err.value.id == "bad_bench_result"
    with pytest.raises(UsageError):
        BenchRun.from_dict({"hello": 1})


def test_the_step_argv_is_the_one_recorded_against_the_real_vllm() -> None:
    """The capture ran the same options (bench/capture.json) and the real CLI took them."""
    recorded = json.loads(CAPTURE.read_text())["bench"]["argv"]
    settings = Settings(concurrency=(2,), requests=8, input_len=32, output_len=16)
    argv = bench_args(
        base_url=recorded[recorded.index("--base-url") + 1],
        model="$CACHE/models/SmolLM2-135M-Instruct",
        served_model_name=None,
        tokenizer="$CACHE/models/SmolLM2-135M-Instruct",
        concurrency=2,
        settings=settings,
        result_dir=recorded[recorded.index("--result-dir") + 1],
        result_file="bench_serve_result.json",
    )
    assert argv == recorded


def test_served_name_and_default_request_counts() -> None:
    settings = Settings()
    argv = bench_args(
        base_url="http://127.0.0.1:8000",
        model="Qwen/Qwen3-8B",
        served_model_name="qwen",
        tokenizer=None,
        concurrency=16,
        settings=settings,
        result_dir="/tmp/x",
        result_file="c16.json",
    )
    assert argv[argv.index("--served-model-name") + 1] == "qwen"
    assert "--tokenizer" not in argv
    assert argv[argv.index("--num-prompts") + 1] == "64"
    assert settings.requests_for(1) == 16


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1,4,16", [1, 4, 16]), ("16, 4,4,1", [1, 4, 16]), ("8", [8])],
)
def test_concurrency_lists(text: str, expected: list[int]) -> None:
    assert parse_concurrency(text) == expected


@pytest.mark.parametrize(
    "text", ["", "0", "1,x", "-1", "5000", ",".join(str(i) for i in range(1, 18))]
)
def test_bad_concurrency_lists(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_concurrency(text)
    assert err.value.id == "bad_concurrency"


def test_compare_pairs_steps_by_concurrency() -> None:
    doc = json.loads(RESULT.read_text())
    a = from_bench_result(doc, "a.json")
    faster = dict(doc, output_throughput=doc["output_throughput"] * 1.5, p50_ttft_ms=150.0)
    b = from_bench_result(faster, "b.json")
    other = dict(doc, max_concurrency=8)
    b.points.append(parse_result(other))
    out = compare(a, b)
    rows = {row["concurrency"]: row for row in out["steps"]}
    assert sorted(rows) == [2, 8]
    assert rows[2]["output_throughput"]["delta_pct"] == 50.0
    assert rows[2]["ttft_p50_ms"]["b"] == 150.0
    assert rows[2]["ttft_p50_ms"]["delta_pct"] == pytest.approx(-50.2, abs=0.1)
    assert rows[8]["output_throughput"]["a"] is None
    assert rows[8]["output_throughput"]["delta_pct"] is None
    assert out["a"]["path"] == "a.json"
    # a run survives its JSON round trip
    again = BenchRun.from_dict(json.loads(json.dumps(b.to_dict())), "b.json")
    assert again.to_dict() == b.to_dict()


def test_bars() -> None:
    assert bar(10, 10, 4) == "████"
    assert bar(5, 10, 4) == "██  "
    assert bar(1, 16, 2) == "▏ "
    assert bar(None, 10) == "" and bar(3, None) == "" and bar(0, 10) == ""
