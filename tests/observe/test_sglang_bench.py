"""``bench``'s SGLang client (``observe.sglang_bench``): its argv for one step, held to the one
the real ``sglang.bench_serving`` 0.5.23 ran and understood (``sglang/bench/``, captured
against a real SGLang by ``tests/infra/capture_real_sglang_bench.py``), and its result read
into the same step as vLLM's client's (``real-vllm-cpu/bench/``), figure for figure as the
client printed them. How the runner picks the client of an endpoint's server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from instinct_serve import servers
from instinct_serve.errors import UsageError
from instinct_serve.hosts import LocalHost
from instinct_serve.observe.bench import (
    LATENCIES,
    VLLM_CLIENT,
    BenchRun,
    Settings,
    bench_args,
    parse_result,
)
from instinct_serve.observe.sglang_bench import (
    FIXED,
    OPTIONS,
    SGLANG_CLIENT,
    parse_sglang_result,
    sglang_args,
)
from instinct_serve.runtime import bench as runtime_bench
from instinct_serve.runtime.observe import Endpoint
from tests.infra.paths import FIXTURES, LOGS

BENCH = FIXTURES / "sglang" / "bench"
RESULT = BENCH / "bench_serving_result.jsonl"
STDOUT = BENCH / "bench_serving_stdout.txt"
CAPTURE = BENCH / "capture.json"
VLLM_RESULT = LOGS / "real-vllm-cpu" / "bench" / "bench_serve_result.json"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _step(**overrides: object) -> dict[str, object]:
    step: dict[str, object] = {
        "base_url": "http://127.0.0.1:30000",
        "model": "Qwen/Qwen3-8B",
        "served_model_name": "qwen",
        "tokenizer": "/models/qwen3-8b",
        "concurrency": 4,
        "settings": Settings(requests=12, input_len=256, output_len=64, seed=7),
        "result_dir": "/tmp/run",
        "result_file": "c4.jsonl",
    }
    step.update(overrides)
    return step


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_each_setting_reaches_both_clients_with_the_same_value() -> None:
    """The table: every setting vLLM's client is given, SGLang's is given too, equal."""
    step = _step()
    vllm, sglang = bench_args(**step), sglang_args(**step)  # type: ignore[arg-type]
    for key, vllm_flag, sglang_flag in OPTIONS:
        if key == "result_path":
            assert _flag(sglang, sglang_flag) == "/tmp/run/c4.jsonl"
            continue
        assert _flag(sglang, sglang_flag) == _flag(vllm, vllm_flag) is not None, key
    assert sglang[:2] == ["-m", "sglang.bench_serving"]
    assert _flag(sglang, "--dataset-name") == "random-ids"  # random ids, offline
    assert _flag(sglang, "--random-range-ratio") == "1"  # fixed lengths
    assert _flag(sglang, "--warmup-requests") == "0"
    assert "--disable-ignore-eos" not in sglang  # ignore_eos is sent: every output is full
    same = _step(served_model_name="Qwen/Qwen3-8B", tokenizer=None)
    argv = sglang_args(**same)  # type: ignore[arg-type]
    assert "--served-model-name" not in argv and "--tokenizer" not in argv
    assert _flag(sglang_args(**_step(settings=Settings())), "--num-prompts") == "16"  # type: ignore[arg-type]


def test_the_step_argv_is_the_one_the_real_client_ran_and_understood() -> None:
    recorded = json.loads(CAPTURE.read_text())["argv"]
    argv = sglang_args(
        base_url=_flag(recorded, "--base-url"),
        model=MODEL,
        served_model_name=MODEL,
        tokenizer="$CACHE/real-vllm/models/SmolLM2-135M-Instruct",
        concurrency=2,
        settings=Settings(concurrency=(2,), requests=6, input_len=32, output_len=16),
        result_dir="$TMP",
        result_file=SGLANG_CLIENT.result_file(2),
    )
    assert argv == recorded[1:]
    # what its argparse made of it (the Namespace it printed)
    (parsed,) = re.findall(r"^benchmark_args=Namespace\((.*)\)$", STDOUT.read_text(), re.M)
    for field in (
        "backend='sglang-oai'",
        "dataset_name='random-ids'",
        "random_range_ratio=1.0",
        "request_rate=inf",
        "warmup_requests=0",
        "num_prompts=6",
        "max_concurrency=2",
        "random_input_len=32",
        "random_output_len=16",
        "disable_ignore_eos=False",
        "disable_stream=False",
        "output_file='$TMP/c2.jsonl'",
    ):
        assert f" {field}," in f" {parsed},", field
    assert len(FIXED) % 2 == 1 and FIXED[-1] == "--disable-tqdm"


def _printed(label: str) -> float:
    (value,) = re.findall(rf"^{re.escape(label)}:\s+([0-9.]+)", STDOUT.read_text(), re.M)
    return float(value)


def test_the_real_result_reads_as_the_client_printed_it() -> None:
    point = parse_sglang_result(RESULT.read_text(), 2, 6)
    assert (point.concurrency, point.requests, point.completed, point.failed) == (2, 6, 6, 0)
    assert point.duration_s == pytest.approx(_printed("Benchmark duration (s)"), abs=0.005)
    for value, label in (
        (point.request_throughput, "Request throughput (req/s)"),
        (point.output_throughput, "Output token throughput (tok/s)"),
        (point.total_token_throughput, "Total token throughput (tok/s)"),
    ):
        assert value == pytest.approx(_printed(label), abs=0.005), label
    names = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E Latency"}
    for metric, name in names.items():
        stats = point.latency_ms[metric]
        for stat, label in (("mean", "Mean"), ("p50", "Median"), ("p90", "P90"), ("p99", "P99")):
            printed = _printed(f"{label} {name} (ms)")
            assert stats[stat] == pytest.approx(printed, abs=0.005), (metric, stat)
    # 96 output tokens in the step's duration
    assert point.output_throughput * point.duration_s == pytest.approx(6 * 16)


def test_a_step_has_the_shape_of_vllms() -> None:
    """The same document, whichever client ran: ``--json``, the store and ``compare``."""
    sglang = parse_sglang_result(RESULT.read_text(), 2, 6).to_dict()
    vllm = parse_result(json.loads(VLLM_RESULT.read_text()), 2).to_dict()
    assert sglang.keys() == vllm.keys()
    assert sglang["latency_ms"].keys() == vllm["latency_ms"].keys() == set(LATENCIES)
    for metric in LATENCIES:
        assert sglang["latency_ms"][metric].keys() == vllm["latency_ms"][metric].keys()
        assert all(v is not None for v in sglang["latency_ms"][metric].values()), metric
    assert all(sglang[k] is not None for k in sglang)


def test_failed_requests_are_those_sent_and_not_completed() -> None:
    doc = json.loads(RESULT.read_text())
    doc["completed"] = 4
    two_runs = RESULT.read_text() + json.dumps(doc) + "\n"  # appended: the last line counts
    point = parse_sglang_result(two_runs, 2, 6)
    assert (point.completed, point.failed) == (4, 2)


@pytest.mark.parametrize("text", ["", "\n", '{"hello": 1}\n', json.dumps({"completed": 1})])
def test_not_a_result(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_sglang_result(text, 1, 1)
    assert err.value.id == "bad_bench_result"
    with pytest.raises(ValueError):
        parse_sglang_result("{not json", 1, 1)


def test_the_run_says_which_client_ran() -> None:
    run = BenchRun(None, None, None, None, None, "t", Settings(), client=SGLANG_CLIENT.title)
    again = BenchRun.from_dict(json.loads(json.dumps(run.to_dict())))
    assert again.client == "sglang.bench_serving" == run.to_dict()["client"]
    assert BenchRun.from_dict({"points": []}).client is None  # runs stored before


def _endpoint(**fields: object) -> Endpoint:
    base: dict[str, object] = {
        "name": "ep",
        "engine": "docker",
        "model": MODEL,
        "port": 30000,
        "running": True,
        "status": "running",
    }
    return Endpoint(**(base | fields))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("server", "entrypoint", "executable", "client"),
    [
        ("sglang", None, "python3", SGLANG_CLIENT),  # lmsysorg/sglang: no entrypoint
        ("vllm", ["/usr/local/bin/vllm", "serve"], "/usr/local/bin/vllm", VLLM_CLIENT),
        ("vllm", None, "vllm", VLLM_CLIENT),
    ],
)
def test_a_docker_endpoint_is_benched_by_its_servers_client_from_its_image(
    server: str, entrypoint: list[str] | None, executable: str, client: object
) -> None:
    endpoint = _endpoint(server=server, image="img:1", entrypoint=entrypoint)
    how = runtime_bench.runner(LocalHost(), endpoint)
    try:
        assert how.client is client is servers.get(server).bench_client
        assert how.prefix[how.prefix.index("--entrypoint") + 1] == executable
        assert how.prefix[-1] == "img:1" and how.prefix[:3] == ["docker", "run", "--rm"]
    finally:
        Path(how.result_dir).rmdir()


def test_vllm_given_runs_vllms_client_whatever_the_server(tmp_path: Path) -> None:
    endpoint = _endpoint(server="sglang", image="img:1")
    how = runtime_bench.runner(LocalHost(), endpoint, vllm=str(tmp_path / "vllm"))
    try:
        assert how.client is VLLM_CLIENT and how.prefix == [str(tmp_path / "vllm")]
    finally:
        Path(how.result_dir).rmdir()


@pytest.mark.parametrize("python", ["/opt/sglang/bin/python3", "/opt/sglang/bin/python"])
def test_a_native_endpoint_runs_the_client_with_the_interpreter_it_was_launched_by(
    python: str,
) -> None:
    """Discovery launches SGLang with the interpreter it found (a venv's ``python`` as often
    as ``python3``): the client runs with it, where sglang is installed."""
    command = [python, "-m", "sglang.launch_server", "--model-path", MODEL]
    endpoint = _endpoint(engine="native", server="sglang", command=command)
    how = runtime_bench.runner(LocalHost(), endpoint)
    try:
        assert how.client is SGLANG_CLIENT and how.prefix == [python]
    finally:
        Path(how.result_dir).rmdir()


def test_a_native_endpoint_without_its_command_finds_the_clients_executable_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No recorded command: the client's executable on PATH (the managed engine provides
    vLLM's only); none there is a NotReadyError that says how to go on."""
    import shutil

    from instinct_serve.errors import NotReadyError

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mktemp = shutil.which("mktemp")
    assert mktemp is not None
    (bin_dir / "mktemp").symlink_to(mktemp)
    monkeypatch.setenv("PATH", str(bin_dir))
    endpoint = _endpoint(engine="native", server="sglang")
    with pytest.raises(NotReadyError) as missing:
        runtime_bench.runner(LocalHost(), endpoint)
    assert "no python3 to run sglang.bench_serving" in missing.value.message
    assert "--vllm" in (missing.value.fix or "")
    python = bin_dir / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    how = runtime_bench.runner(LocalHost(), endpoint)
    try:
        assert how.client is SGLANG_CLIENT and how.prefix == [str(python)]
    finally:
        Path(how.result_dir).rmdir()
