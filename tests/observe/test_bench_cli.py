"""``instinct bench`` end to end with a fake ``vllm`` that replays the REAL ``vllm bench serve``
result recorded from vLLM 0.32 (``real-vllm-cpu/bench/``): the step argv, the result files,
the store under the plan hash, ``bench list`` and ``bench compare``. The measured figures
against the double are the ``realvllm`` tier's (``tests/realvllm/test_bench_real.py``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.infra import tables
from tests.infra.paths import LOGS
from tests.observe.conftest import Endpoint

RESULT = LOGS / "real-vllm-cpu" / "bench" / "bench_serve_result.json"
OUTPUT = LOGS / "real-vllm-cpu" / "bench" / "bench_serve_stdout.txt"

FAKE = r"""
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_BENCH_LOG"], "a") as log:
    log.write(json.dumps({"argv": argv, "offline": os.environ.get("HF_HUB_OFFLINE"),
                          "key": os.environ.get("OPENAI_API_KEY")}) + "\n")
def arg(flag):
    return argv[argv.index(flag) + 1]
level = int(arg("--max-concurrency"))
if os.environ.get("FAKE_BENCH_FAIL_AT") == str(level):
    sys.stderr.write("Traceback (most recent call last):\n  File \"x\", line 1\n"
                     "OSError: We couldn't connect to 'https://huggingface.co' to load the files\n")
    sys.exit(1)
doc = json.load(open(os.environ["FAKE_BENCH_RESULT"]))
doc["max_concurrency"] = level
doc["num_prompts"] = int(arg("--num-prompts"))
doc["output_throughput"] = doc["output_throughput"] * level  # scales with concurrency
with open(os.path.join(arg("--result-dir"), arg("--result-filename")), "w") as out:
    json.dump(doc, out)
sys.stdout.write(open(os.environ["FAKE_BENCH_OUTPUT"]).read())
"""


@pytest.fixture
def fake_vllm(tmp_path: Path) -> tuple[Path, Path]:
    exe = tmp_path / "bench-bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f"#!{sys.executable}\n{FAKE}")
    exe.chmod(0o755)
    return exe, tmp_path / "calls.jsonl"


def _env(log: Path, **extra: str) -> dict[str, str]:
    return {
        "FAKE_BENCH_LOG": str(log),
        "FAKE_BENCH_RESULT": str(RESULT),
        "FAKE_BENCH_OUTPUT": str(OUTPUT),
        **extra,
    }


def _calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_sweep_is_run_stored_listed_and_compared(
    endpoint: Endpoint, fake_vllm: tuple[Path, Path]
) -> None:
    exe, log = fake_vllm
    args = ["bench", endpoint.name, "--concurrency", "4,1", "--requests", "8"]
    args += ["--input-len", "32", "--output-len", "16", "--vllm", str(exe), "--json"]
    code, doc = endpoint.json(*args, **_env(log, SECRET_FOR_BENCH="s3cret"))
    assert code == 0, doc
    assert isinstance(doc, dict)
    assert doc["plan_hash"] == endpoint.plan_hash and doc["endpoint"] == endpoint.name
    assert doc["errors"] == [] and doc["command"] == [str(exe)]
    assert doc["client"] == "vllm bench serve"  # --vllm: vLLM's client, whatever the server
    assert [p["concurrency"] for p in doc["points"]] == [1, 4]
    one, four = doc["points"]
    assert one["requests"] == four["requests"] == 8 and one["completed"] == 8
    assert four["output_throughput"] == pytest.approx(4 * one["output_throughput"])
    assert one["latency_ms"]["ttft"]["p50"] == pytest.approx(301.0847155001102)
    stored = Path(doc["path"])
    assert stored.parent == endpoint.data / "bench" / endpoint.plan_hash
    assert json.loads(stored.read_text())["points"] == doc["points"]

    calls = _calls(log)
    assert [c["argv"][c["argv"].index("--max-concurrency") + 1] for c in calls] == ["1", "4"]
    first = calls[0]["argv"]
    assert first[:2] == ["bench", "serve"]
    assert first[first.index("--base-url") + 1] == f"http://127.0.0.1:{endpoint.port}"
    assert first[first.index("--model") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert first[first.index("--tokenizer") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "--ignore-eos" in first and first[first.index("--random-input-len") + 1] == "32"
    assert all(c["offline"] == "1" and c["key"] is None for c in calls)
    result_dir = Path(first[first.index("--result-dir") + 1])
    assert not result_dir.exists()  # the temporary directory is removed

    code, listed = endpoint.json("bench", "list", "--json")
    assert code == 0 and isinstance(listed, dict)
    assert [r["path"] for r in listed["runs"]] == [doc["path"]]
    piped = endpoint.cli("bench", "list", COLUMNS="80").stdout
    tables.one_line(piped, endpoint.plan_hash, endpoint.name, "meta-llama/Llama-3.1-8B", "1,4")
    shown = endpoint.cli("bench", "list", COLUMNS="80", TTY_COMPATIBLE="1").stdout
    tables.fits(shown, endpoint.plan_hash, endpoint.name)

    # compare the stored run (by plan hash prefix) with the raw real result file
    code, cmp = endpoint.json("bench", "compare", endpoint.plan_hash[:6], str(RESULT), "--json")
    assert code == 0 and isinstance(cmp, dict)
    rows = {r["concurrency"]: r for r in cmp["steps"]}
    assert sorted(rows) == [1, 2, 4]
    assert rows[2]["output_throughput"]["a"] is None
    assert rows[1]["ttft_p50_ms"]["b"] is None and rows[1]["ttft_p50_ms"]["a"] is not None
    human = endpoint.cli("bench", "compare", endpoint.plan_hash, doc["path"], COLUMNS="100")
    assert human.returncode == 0, human.explain()
    assert "output tok/s" in human.stdout and "+0.0%" in human.stdout
    row = tables.one_line(human.stdout, "   4   95.1 ")  # A, its bar, B, its bar, B vs A
    assert row.count("95.1") == 2 and row.count("█") == 48 and row.endswith("+0.0%"), row
    assert all("█" in line for line in human.stdout.splitlines() if line.endswith("+0.0%"))
    tty = {"COLUMNS": "80", "TTY_COMPATIBLE": "1"}
    shown = endpoint.cli("bench", "compare", endpoint.plan_hash, doc["path"], **tty).stdout
    tables.fits(shown, "+0.0%")


def test_the_api_key_travels_in_the_environment_only(
    endpoint: Endpoint, fake_vllm: tuple[Path, Path]
) -> None:
    exe, log = fake_vllm
    args = ["bench", endpoint.name, "--concurrency", "1", "--requests", "2", "--vllm", str(exe)]
    run = endpoint.cli(*args, "--api-key-env", "MY_KEY", "--no-save", **_env(log, MY_KEY="k3y"))
    assert run.returncode == 0, run.explain()
    (call,) = _calls(log)
    assert call["key"] == "k3y" and "k3y" not in " ".join(call["argv"])
    assert "stored:" not in run.stdout and "concurrency 1:" in run.stderr
    assert "by vllm bench serve" in run.stdout  # which client ran
    missing = endpoint.cli(*args, "--api-key-env", "UNSET_KEY_NAME", "--json", **_env(log))
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["error"]["id"] == "bad_api_key_env"


def test_a_failed_step_stops_the_sweep(endpoint: Endpoint, fake_vllm: tuple[Path, Path]) -> None:
    exe, log = fake_vllm
    args = ["bench", endpoint.name, "--concurrency", "1,2,8", "--requests", "2"]
    args += ["--vllm", str(exe), "--json"]
    code, doc = endpoint.json(*args, **_env(log, FAKE_BENCH_FAIL_AT="2"))
    assert code == 1 and isinstance(doc, dict)
    assert [p["concurrency"] for p in doc["points"]] == [1]
    failed, skipped = doc["errors"]
    assert failed["concurrency"] == 2 and failed["exit_code"] == 1
    assert failed["message"].startswith("vllm bench serve exited with 1: OSError: We couldn't")
    assert skipped == {"concurrency": [8], "message": "skipped after the failed step"}
    assert len(_calls(log)) == 2


def test_bad_input(endpoint: Endpoint, fake_vllm: tuple[Path, Path]) -> None:
    exe, log = fake_vllm
    code, doc = endpoint.json("bench", endpoint.name, "--concurrency", "0", "--json")
    assert code == 2 and isinstance(doc, dict) and doc["error"]["id"] == "bad_concurrency"
    code, doc = endpoint.json("bench", "nope", "--vllm", str(exe), "--json", **_env(log))
    assert code == 1 and isinstance(doc, dict) and doc["error"]["id"] == "not_found"
    code, doc = endpoint.json("bench", "compare", "ffffffff", "eeeeeeee", "--json")
    assert code == 2 and isinstance(doc, dict) and doc["error"]["id"] == "bench_not_found"
    missing = str(endpoint.data / "no-such-vllm")
    code, doc = endpoint.json("bench", endpoint.name, "--vllm", missing, "--json")
    assert code == 1 and isinstance(doc, dict)
    assert doc["errors"][0]["message"] == f"{missing} not found on local"


def test_progress_per_step(endpoint: Endpoint, fake_vllm: tuple[Path, Path]) -> None:
    """--json: one step event per step on stdout, then the result line; the human view:
    a line per step on stderr as it ends ([i/n]), so a long sweep is not silent."""
    exe, log = fake_vllm
    args = ["bench", endpoint.name, "--concurrency", "1,2,8", "--requests", "2"]
    args += ["--vllm", str(exe), "--no-save"]
    run = endpoint.cli(*args, "--json", **_env(log, FAKE_BENCH_FAIL_AT="8"))
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert [e["event"] for e in lines] == ["step", "step", "step", "result"], run.stdout
    steps = lines[:3]
    assert [(e["step"], e["steps"], e["concurrency"]) for e in steps] == [
        (1, 3, 1),
        (2, 3, 2),
        (3, 3, 8),
    ]
    assert [e["ok"] for e in steps] == [True, True, False]
    assert steps[0]["point"]["concurrency"] == 1 and steps[2]["error"]["exit_code"] == 1
    assert "benchmarking" not in run.stderr  # JSON asked: no human lines

    human = endpoint.cli(*args, **_env(log))
    assert human.returncode == 0, human.explain()
    ends = [line for line in human.stderr.splitlines() if line.startswith("[")]
    assert [line.split("]")[0] for line in ends] == ["[1/3", "[2/3", "[3/3"], human.stderr
    assert "output tok/s" in ends[0]
    tables.one_line(human.stdout, "CONC", "OUTPUT TOK/S", "REQ/S", "TTFT p50/p99", "OK")
