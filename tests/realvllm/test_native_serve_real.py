"""``instinct serve <model dir> --engine native`` end to end against the REAL vLLM: plan,
launch, the real start-up phases, /health, warm-up, the coherence probe judged on text the
model generated, the connection table, a second serve that reuses it, ``ps``/``logs``/
``stop``. One server for the module (eager: about 40 s to start on 2 cores); the tests run
in file order and the last one stops it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from instinct_serve.engine import launcher
from instinct_serve.engine.launcher import vllm_temp_files
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.realvllm import Setup
from tests.realvllm.conftest import cli, serve_args, tier_env
from tests.serve.conftest import Run, processes_mentioning

pytestmark = pytest.mark.realvllm


@dataclass
class Served:
    run: Run
    env: dict[str, str]
    port: int
    name: str
    model: str
    data: Path
    seconds: float

    def state(self) -> dict[str, Any]:
        path = self.data / "data" / "native" / self.name / "state.json"
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc

    def state_file(self, name: str) -> Path:
        return self.data / "data" / "native" / self.name / name


def stop_if_running(data: Path, name: str) -> None:
    """Teardown of last resort: the launcher's own stop (it signals only the process group it
    recorded, checked by pid, start time and marker), with the tier's state directory."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSTINCT_DATA_DIR", str(data / "data"))
        if launcher.load(LocalHost(), name) is not None:
            launcher.stop(LocalHost(), name)


@pytest.fixture(scope="module")
def served(real_vllm: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("rv-native")
    env = tier_env(real_vllm, data)
    port = free_port()
    name = f"rv-native-{port}"
    model = str(real_vllm.model_dir)
    start = time.monotonic()
    run = cli(serve_args(model, port=port, name=name), env)
    result = Served(run, env, port, name, model, data, time.monotonic() - start)
    try:
        yield result
    finally:
        stop_if_running(data, name)


def test_serve_plans_launches_follows_and_proves_the_real_engine(served: Served) -> None:
    run = served.run
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "ready" and result["engine"] == "native", result.get("failure")
    endpoint = result["endpoint"]
    assert endpoint["model"] == served.model and endpoint["api"] == "chat"
    assert endpoint["base_url"] == f"http://127.0.0.1:{served.port}/v1"
    assert endpoint["max_model_len"] == 2048  # what the real /v1/models says
    assert endpoint["warmup_latency_s"] > 0
    coherence = endpoint["coherence"]
    # a greedy answer of the real model to "What is the capital of France? ..."
    assert coherence["verdict"] == "coherent", coherence
    assert "paris" in coherence["text"].lower()
    for phase in (
        "checking",
        "planning",
        "launching",
        "loading_weights",
        "starting_server",
        "ready",
        "warming_up",
        "coherence_probe",
    ):
        assert phase in run.phases, run.phases
    figures = result["figures"]
    assert figures["vllm_version"] == "0.32.0" and figures["max_model_len"] == 2048
    assert figures["weights_load_s"] > 0
    warnings = [e["message"] for e in run.of("warning")]
    assert any(w.startswith("CPU-only engine: vLLM 0.32.0+cpu") for w in warnings), warnings
    assert served.seconds < 300


def test_the_kv_cache_and_server_address_phases_are_read(served: Served) -> None:
    result = served.run.result
    assert "profiling" in served.run.phases
    assert result["figures"]["kv_cache_tokens"] == 46592
    assert result["figures"]["max_concurrency"] == 22.75
    assert result["figures"]["api_url"] == f"http://127.0.0.1:{served.port}"


def test_it_was_planned_for_the_cpu_backend(served: Served) -> None:
    """No --gpu, no GPU root: the CPU-only engine's plan has no GPU setting, and its KV
    figure is the one vLLM reports (tests/plan/test_cpu.py: 46,592 tokens at 1 GiB)."""
    warnings = [e["message"] for e in served.run.of("warning")]
    assert "the vLLM on this machine is CPU-only: planned for its CPU backend, not a GPU" in (
        warnings
    )
    state = served.state()
    # the plan's own: its name and run token (every child inherits them: the launcher finds
    # the processes of the launch by them), the compile cache kept across restarts (issue
    # 15), the KV space
    expected = [
        "INSTINCT_NATIVE_NAME",
        "INSTINCT_NATIVE_RUN",
        "TORCHDYNAMO_DISABLE",  # eager on the CPU backend: no C++ compiler needed at all
        "VLLM_CACHE_ROOT",
        "VLLM_CPU_KVCACHE_SPACE",
    ]
    assert sorted(state["env_names"]) == expected
    assert state["meta"]["gpu_indices"] is None
    assert "--gpu-memory-utilization" not in state["argv"]
    assert served.run.result["figures"]["kv_cache_tokens"] == 46592


def test_it_listens_on_loopback_only(served: Served) -> None:
    argv = served.state()["argv"]
    assert argv[:3] == [served.env["INSTINCT_VLLM_COMMAND"], "serve", served.model]
    assert argv[3:5] == ["--host", "127.0.0.1"]
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port = local.rsplit(":", 1)
            if state == "0A" and int(port, 16) == served.port:
                listening.add(address)
    assert listening == {"0100007F"}, listening  # 127.0.0.1 only, not 0.0.0.0 or ::


def test_the_endpoint_answers_the_printed_request(served: Served) -> None:
    endpoint = served.run.result["endpoint"]
    assert f"http://127.0.0.1:{served.port}/v1/chat/completions" in endpoint["curl"]
    body = {
        "model": served.model,
        "messages": [{"role": "user", "content": "Name a primary colour."}],
        "max_tokens": 12,
        "temperature": 0,
    }
    url = f"http://127.0.0.1:{served.port}/v1/chat/completions"
    answer = httpx.post(url, json=body, timeout=120, trust_env=False)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"].strip()
    assert answer.json()["usage"]["completion_tokens"] > 0


def test_a_second_serve_reuses_it_and_prints_the_connection_table(served: Served) -> None:
    pid = served.state()["pid"]
    args = serve_args(served.model, port=served.port, name=served.name, json_lines=False)
    human = cli(args, served.env, timeout=180)
    assert human.returncode == 0, human.explain()
    table = human.stdout
    for text in (
        "Endpoint already running",
        "Base URL",
        f"http://127.0.0.1:{served.port}/v1",
        "Process",
        served.name,
        "Max context",
        "2,048 tokens",
        "curl -sS",
    ):
        assert text in table, table
    args = serve_args(served.model, port=served.port, name=served.name)
    again = cli(args, served.env, timeout=180)
    assert again.returncode == 0, again.explain()
    assert again.result["status"] == "reused"
    assert "launching" not in again.phases
    assert served.state()["pid"] == pid  # the same process: nothing was relaunched


def test_ps_and_logs_show_the_running_engine(served: Served) -> None:
    ps = cli(["ps", "--json"], served.env, timeout=60)
    assert ps.returncode == 0, ps.explain()
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    row = rows[served.name]
    assert (row["engine"], row["status"], row["health"], row["port"]) == (
        "native",
        "running",
        "healthy",
        served.port,
    )
    logs = cli(["logs", served.name, "--tail", "400"], served.env, timeout=60)
    assert logs.returncode == 0, logs.explain()
    assert f"Starting vLLM server on http://127.0.0.1:{served.port}" in logs.stdout
    assert "Application startup complete." in logs.stdout


def test_stop_ends_every_process_and_leaves_nothing_behind(served: Served) -> None:
    log = served.state_file("log").read_text(errors="replace")
    temp_files = vllm_temp_files(log)
    assert len(temp_files) == 1 and Path(temp_files[0]).exists()
    stop = cli(["stop", "--yes", served.name, "--json"], served.env, timeout=120)
    assert stop.returncode == 0, stop.explain()
    deadline = time.monotonic() + 15
    while processes_mentioning(f"--port {served.port}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(f"--port {served.port}") == []
    # the wrapper survived the group's SIGTERM long enough to record how vLLM ended
    assert served.state_file("exit").read_text().strip() == "0"
    assert served.state_file("stopped").is_file()
    assert not Path(temp_files[0]).exists()  # vLLM's rendezvous file, removed by stop
    after = served.state_file("log").read_text(errors="replace")
    assert "[shutdown] API server: shutdown triggered" in after


def test_ps_after_stop_says_it_was_stopped(served: Served) -> None:
    ps = cli(["ps", "--json"], served.env, timeout=60)
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    assert rows[served.name]["status"] == "stopped (exit 0)"
