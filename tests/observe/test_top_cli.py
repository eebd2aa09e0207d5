"""``instinct top`` (and the MCP ``metrics`` tool) on a live endpoint: the test double's real
``/metrics`` over HTTP, a fake ``amd-smi`` replaying an 8x MI300X metric document."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from instinct_serve.agents import core
from instinct_serve.agents.inputs import MetricsInput
from tests.infra import tables
from tests.infra.fakebin import FakeBin, load_fixture
from tests.infra.paths import FIXTURES
from tests.observe.conftest import ITL_S, TTFT_S, Endpoint
from tests.serve.conftest import MODEL

SAMPLE = (
    Path(__file__).parent
    / "samples"
    / "amd-smi_metric_power_mem-usage_usage_MI300X_x8_gpu_data.json"
)
AMD_SMI_ARGS = "metric --power --mem-usage --usage --json"
GPU1_W, HOST_W = 652.0, 3311.0  # the sample's GPU 1 (the endpoint's --gpus 1), all eight


@pytest.fixture
def amd_smi(fakebin: FakeBin) -> FakeBin:
    fakebin.add("amd-smi", {AMD_SMI_ARGS: SAMPLE.read_text()})
    return fakebin


class Load:
    """Requests sent back to back from two threads until stopped (bounded)."""

    def __init__(self, endpoint: Endpoint, tokens: int = 10, limit: int = 200) -> None:
        self.url = f"http://127.0.0.1:{endpoint.port}/v1/completions"
        self.body = {"model": MODEL, "prompt": "hello", "max_tokens": tokens, "ignore_eos": True}
        self.stop = threading.Event()
        self.limit = limit
        self.sent = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(2)]

    def _run(self) -> None:
        with httpx.Client(timeout=30, trust_env=False) as client:
            while not self.stop.is_set() and self.sent < self.limit:
                self.sent += 1
                client.post(self.url, json=self.body)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


@pytest.fixture
def load(endpoint: Endpoint) -> Iterator[Load]:
    endpoint.in_process = False  # the figures under load come from a CLI process of its own
    try:
        with Load(endpoint) as running:
            yield running
    finally:
        endpoint.in_process = True


def _one(doc: Any) -> dict[str, Any]:
    assert isinstance(doc, dict) and len(doc["endpoints"]) == 1, doc
    ep: dict[str, Any] = doc["endpoints"][0]
    return ep


def test_top_once_reads_the_endpoint_and_the_gpus(
    endpoint: Endpoint, amd_smi: FakeBin, load: Load
) -> None:
    code, doc = endpoint.json("top", endpoint.name, "--once", "--interval", "1.5", "--json")
    assert code == 0, doc
    ep = _one(doc)
    assert ep["name"] == endpoint.name and ep["engine"] == "native" and ep["status"] == "ok"
    assert ep["plan_hash"] == endpoint.plan_hash and ep["gpu_indices"] == [1]
    m = ep["metrics"]
    assert m["latency_scope"] == "window" and 1.4 <= m["window_s"] <= 3.0
    assert m["metric_names"]["itl"] == "vllm:inter_token_latency_seconds"
    assert m["generation_tokens_per_s"] > 0 and m["requests_per_s"] > 0
    assert m["requests_running"] is not None and m["kv_cache_usage_pct"] == 0.0
    # the server-side percentiles fall in the buckets the fixed latencies are in
    assert 60 <= m["ttft_ms"]["p50"] <= 80 and 60 <= m["ttft_ms"]["p99"] <= 80
    assert 10 <= m["itl_ms"]["p50"] <= 25
    assert m["ttft_ms"]["mean"] == pytest.approx(TTFT_S * 1000, rel=0.2)
    assert m["itl_ms"]["mean"] == pytest.approx(ITL_S * 1000, rel=0.2)
    assert ep["power_w"] == GPU1_W
    assert ep["tokens_per_watt"] == round(m["generation_tokens_per_s"] / GPU1_W, 4)
    assert len(doc["gpus"]) == 8 and doc["gpu_problem"] is None
    assert doc["totals"]["power_w"] == HOST_W
    assert amd_smi.calls("amd-smi") == [AMD_SMI_ARGS.split()]


def test_top_streams_json_lines(endpoint: Endpoint, amd_smi: FakeBin, load: Load) -> None:
    run = endpoint.cli("top", endpoint.name, "--count", "3", "--interval", "0.4", "--json")
    assert run.returncode == 0, run.explain()
    docs = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(docs) == 3
    first, *rest = (_one(d)["metrics"] for d in docs)
    assert first["latency_scope"] == "since_start" and first["generation_tokens_per_s"] is None
    for m in rest:
        assert m["latency_scope"] == "window" and m["window_s"] < 1.5
        assert m["generation_tokens_per_s"] is not None


def test_the_human_view(endpoint: Endpoint, amd_smi: FakeBin) -> None:
    run = endpoint.cli("top", endpoint.name, "--once", "--interval", "0", COLUMNS="120")
    assert run.returncode == 0, run.explain()
    for text in (endpoint.name, "TTFT p50/99", "TOK/S/W", "GPUs (amd-smi)", "3311 W"):
        assert text in run.stdout, (text, run.stdout)
    assert "since start" in run.stdout

    piped = endpoint.cli("top", endpoint.name, "--once", "--interval", "0", COLUMNS="80")
    row = tables.one_line(piped.stdout, endpoint.name, "652")  # the row, one line
    # TTFT and ITL p50/p99 (measured, so load-dependent: their shape, not their values)
    assert len(re.findall(r"\b\d+\.\d/\d+\.\d\b", row)) == 2, row
    tables.one_line(piped.stdout, "NAME", "REQ/S", "TTFT p50/99", "ITL p50/99", "TOK/S/W")
    tty = {"COLUMNS": "80", "TTY_COMPATIBLE": "1"}
    shown = endpoint.cli("top", endpoint.name, "--once", "--interval", "0", **tty)
    tables.fits(shown.stdout, endpoint.name, "TTFT p50/99", "TOK/S/W")
    assert "HIT%" not in shown.stdout  # a narrow terminal lets the lowest value go first


def test_without_amd_smi(endpoint: Endpoint, fakebin: FakeBin) -> None:
    fakebin.missing("amd-smi")
    code, doc = endpoint.json("top", endpoint.name, "--once", "--interval", "0", "--json")
    assert code == 0
    assert (
        isinstance(doc, dict)
        and doc["gpus"] == []
        and "amd-smi is not installed" in str(doc["gpu_problem"])
    )
    assert _one(doc)["power_w"] is None and doc["totals"]["tokens_per_watt"] is None


def test_the_rocm_6_1_list_shape(endpoint: Endpoint, fakebin: FakeBin) -> None:
    """One GPU (index 0, 10 W) in amd-smi's old top-level list: not the endpoint's GPU 1."""
    old = FIXTURES / "metrics" / "amd-smi_metric_power_json_OLD-list_changelog_rocm6.1.txt"
    fakebin.add("amd-smi", {AMD_SMI_ARGS: load_fixture(old)})
    code, doc = endpoint.json("top", endpoint.name, "--once", "--interval", "0", "--json")
    assert code == 0 and isinstance(doc, dict)
    assert [g["index"] for g in doc["gpus"]] == [0] and doc["gpus"][0]["power_w"] == 10.0
    assert _one(doc)["power_w"] is None and doc["totals"]["power_w"] == 10.0


def test_a_failing_amd_smi(endpoint: Endpoint, fakebin: FakeBin) -> None:
    fakebin.add("amd-smi", {AMD_SMI_ARGS: ("", "ERROR:root:Unable to initialize amdsmi\n", 1)})
    code, doc = endpoint.json("top", endpoint.name, "--once", "--interval", "0", "--json")
    assert code == 0 and isinstance(doc, dict)
    assert "exit 1" in doc["gpu_problem"] and "Unable to initialize" in doc["gpu_problem"]


def test_unknown_and_stopped_endpoints(endpoint: Endpoint, amd_smi: FakeBin) -> None:
    code, doc = endpoint.json("top", "nope", "--once", "--json")
    assert code == 1 and isinstance(doc, dict) and doc["error"]["id"] == "not_found"
    code, doc = endpoint.json("top", "--once", "--interval", "-1", "--json")
    assert code == 2 and isinstance(doc, dict) and doc["error"]["id"] == "bad_usage"


def test_the_mcp_tool_returns_the_same_document(
    endpoint: Endpoint, amd_smi: FakeBin, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in endpoint.base_env.items():
        monkeypatch.setenv(key, value)
    outcome = core.metrics(MetricsInput(names=[endpoint.name], window_s=0))
    assert outcome.exit_code == 0
    _, doc = endpoint.json("top", endpoint.name, "--once", "--interval", "0", "--json")
    assert isinstance(doc, dict)
    assert set(outcome.doc) == set(doc)
    mine, cli = _one(outcome.doc), _one(doc)
    assert {k: v for k, v in mine.items() if k != "metrics"} == {
        k: v for k, v in cli.items() if k != "metrics"
    }
    assert set(mine["metrics"]) == set(cli["metrics"])
    with pytest.raises(ValueError):
        MetricsInput(window_s=11)
