"""``instinct bench`` next to AMD's published points (``observe.reference_points``): the
double serving openai/gpt-oss-120b on one MI300X, benchmarked at 1k/1k, is placed against
InferenceX PR #1061's point at concurrency 64, and "no reference" elsewhere. The measured
figures are the double's replay of the recorded vLLM result, as they are set."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from instinct_serve.catalog.overrides import data_text
from instinct_serve.observe import reference_points as ref
from instinct_serve.observe.bench import BenchRun, Settings, parse_result
from tests.infra.paths import LOGS
from tests.observe.conftest import Endpoint, serve_double, stop
from tests.observe.test_bench_cli import _env, fake_vllm  # noqa: F401 (fixture)
from tests.serve.conftest import free_port

RESULT = LOGS / "real-vllm-cpu" / "bench" / "bench_serve_result.json"
GPT_OSS = "openai/gpt-oss-120b"


def points() -> list[ref.ReferencePoint]:
    return ref.points_from_doc(json.loads(data_text("reference_points.json")))


def recorded_run(model: str, concurrency: tuple[int, ...]) -> BenchRun:
    doc = json.loads(RESULT.read_text())
    return BenchRun(
        plan_hash="p",
        endpoint="e",
        model=model,
        engine="native",
        host="local",
        started_at="t",
        settings=Settings(concurrency=concurrency, input_len=1024, output_len=1024),
        points=[parse_result(doc, c) for c in concurrency],
    )


def test_same_model_gpu_lengths_and_concurrency_only() -> None:
    run = recorded_run(GPT_OSS, (64, 32))
    at64, at32 = ref.against(run, "mi300x", 1, points())
    assert at64["reference"]["value"] == 4016
    assert at64["reference"]["source"] == "InferenceX PR #1061 (1xMI300X, TP 1, vLLM)"
    total = json.loads(RESULT.read_text())["total_token_throughput"]
    assert at64["measured"] == pytest.approx(total)  # total tok/s, as the point states
    assert at64["delta_pct"] == pytest.approx(100 * (total - 4016) / 4016, abs=0.1)
    assert at32["reference"] is None
    assert ref.describe(at32) == "concurrency 32: no reference"
    # another GPU model or count, or other lengths: not the same setup
    assert ref.against(run, "mi325x", 1, points())[0]["reference"] is None
    assert ref.against(run, "mi300x", 8, points())[0]["reference"] is None
    assert ref.against(recorded_run("Qwen/Qwen3.5-9B", (64,)), "mi300x", 1, points()) == [
        {"concurrency": 64, "reference": None}
    ]


def test_per_gpu_metric_divides_by_the_gpus() -> None:
    run = recorded_run("MiniMaxAI/MiniMax-M3-MXFP8", (64,))
    row = ref.against(run, "mi300x", 8, points())[0]
    total = json.loads(RESULT.read_text())["total_token_throughput"]
    assert row["reference"]["value"] == 429
    assert row["measured"] == pytest.approx(total / 8)


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    served = serve_double(tmp_path_factory.mktemp("bench-ref"), f"ref-{free_port()}", {}, GPT_OSS)
    try:
        yield served
    finally:
        stop(served)


def test_bench_prints_the_reference_point(
    gpt_oss: Endpoint,
    fake_vllm: tuple[Path, Path],  # noqa: F811
) -> None:
    exe, log = fake_vllm
    args = ["bench", gpt_oss.name, "--concurrency", "64,2", "--requests", "8"]
    args += ["--input-len", "1024", "--output-len", "1024", "--vllm", str(exe)]
    code, doc = gpt_oss.json(*args, "--json", **_env(log))
    assert code == 0, doc
    assert isinstance(doc, dict)
    reference = doc["reference"]
    assert (reference["gpu"], reference["gpus"]) == ("mi300x", 1)  # from the endpoint's plan
    two, sixty_four = reference["points"]
    assert two == {"concurrency": 2, "reference": None}
    assert sixty_four["reference"]["value"] == 4016
    human = gpt_oss.cli(*args, **_env(log))
    assert human.returncode == 0, human.explain()
    text = " ".join(human.stdout.split())
    assert "against AMD's published numbers (1x MI300X;" in text
    assert "concurrency 2: no reference" in text
    assert "vs AMD 4,016" in text and "[source: InferenceX PR #1061" in text
