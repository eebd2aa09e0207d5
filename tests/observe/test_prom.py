"""The Prometheus text parser on the real vLLM 0.32 capture and on the format's corners."""

from __future__ import annotations

import math

from instinct_serve.observe.histogram import Histogram, from_exposition
from instinct_serve.observe.prom import parse, parse_sample
from tests.infra.paths import LOGS

REAL = LOGS / "real-vllm-cpu" / "metrics.txt"


def test_the_real_capture_parses_whole() -> None:
    exp = parse(REAL.read_text(encoding="utf-8"))
    assert exp.skipped == 0
    assert len(exp.samples) == sum(
        1 for line in REAL.read_text().splitlines() if line and not line.startswith("#")
    )
    family = exp.families["vllm:time_to_first_token_seconds"]
    assert family.type == "histogram"
    assert family.help == "Histogram of time to first token in seconds."
    assert exp.family_of("vllm:time_to_first_token_seconds_bucket") is family
    assert exp.families["vllm:prompt_tokens_total"].type == "counter"
    success = exp.named("vllm:request_success_total")
    assert {s.labels["finished_reason"] for s in success} == {
        "stop",
        "length",
        "abort",
        "error",
        "repetition",
    }
    assert exp.total("vllm:request_success_total") == 3.0
    assert exp.total("vllm:request_success_total", {"finished_reason": "length"}) == 2.0
    # the info gauge with 37 labels, paths in values, "None" and "[]" strings
    info = exp.named("vllm:cache_config_info")[0]
    assert info.labels["kv_cache_size_tokens"] == "46592"
    assert info.labels["kv_cache_dtype_skip_layers"] == "[]"


def test_the_real_ttft_histogram() -> None:
    hist = from_exposition(parse(REAL.read_text()), "vllm:time_to_first_token_seconds")
    assert hist is not None
    assert hist.count == 3 and math.isclose(hist.sum, 0.5644094944000244)
    assert hist.bounds[0] == 0.001 and math.isinf(hist.bounds[-1]) and len(hist.bounds) == 23
    # buckets: 1 in (0.06, 0.08], 1 in (0.1, 0.25], 1 in (0.25, 0.5]
    assert hist.quantile(0.5) == 0.175  # the middle of (0.1, 0.25]
    p99 = hist.quantile(0.99)
    assert p99 is not None and 0.25 < p99 <= 0.5


def test_label_escapes_timestamps_exemplars_and_special_values() -> None:
    text = "\n".join(
        [
            "# HELP x_total A counter with \\\\ and \\n in its help.",
            "# TYPE x_total counter",
            'x_total{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb"} 3 1700000000000',
            'x_total{path="other"} 4 # {trace_id="abc"} 1.0 1700000000.0',
            "y NaN",
            "z +Inf",
            "w -Inf",
            "v 1e-3",
            "this is not a sample",
            'broken{a="unterminated} 1',
            "# EOF",
        ]
    )
    exp = parse(text)
    first = exp.named("x_total")[0]
    assert first.labels == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb"}
    assert first.value == 3.0
    assert exp.named("x_total")[1].value == 4.0
    assert exp.families["x_total"].help == "A counter with \\ and \n in its help."
    assert math.isnan(exp.named("y")[0].value)
    assert exp.named("z")[0].value == math.inf and exp.named("w")[0].value == -math.inf
    assert exp.named("v")[0].value == 0.001
    assert exp.skipped == 2
    assert exp.total("x_total") == 7.0 and exp.total("absent") is None


def test_a_sample_line_alone() -> None:
    sample = parse_sample('a{ l = "x}y" , m="z" ,} 2.5')
    assert sample is not None and sample.labels == {"l": "x}y", "m": "z"} and sample.value == 2.5
    assert parse_sample("a{} 1") is not None
    assert parse_sample("1abc 2") is None
    assert parse_sample("a") is None
    assert parse_sample("a notanumber") is None


def test_quantiles_and_deltas() -> None:
    earlier = Histogram((0.1, 0.5, math.inf), (1, 2, 2), 0.4, 2)
    later = Histogram((0.1, 0.5, math.inf), (1, 6, 7), 3.4, 7)
    window = later.minus(earlier)
    assert window.cumulative == (0, 4, 5) and window.count == 5 and math.isclose(window.sum, 3.0)
    assert window.quantile(0.5) == 0.1 + 0.4 * (2.5 / 4)
    assert window.quantile(0.99) == 0.5  # in +Inf: the largest finite bound
    assert window.mean == 0.6
    # a restarted server (counts went down): the later scrape stands alone
    assert earlier.minus(later) is earlier
    empty = Histogram((0.1, math.inf), (0, 0), 0.0, 0)
    assert empty.quantile(0.5) is None and empty.mean is None
    assert empty.summary(1000) == {"p50": None, "p90": None, "p99": None, "mean": None, "count": 0}
