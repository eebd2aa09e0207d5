"""``instinct serve --engine native --server sglang`` end to end against the REAL SGLang
(sglang 0.5.23 on a CPU torch, SmolLM2-135M served by its Hub id from the tier's Hugging
Face cache, offline), then ``watch`` bringing it back after a SIGKILL.

Found as a user's install is: ``INSTINCT_SGLANG_PYTHON`` names the tier's interpreter
(``engine.discovery``); it is CPU-only, allowed with ``INSTINCT_ALLOW_CPU_ENGINE=1``, so serve
plans for SGLang's CPU backend (``SGLANG_USE_CPU_ENGINE=1``, ``--device cpu
--attention-backend torch_native``: the plan's own, not the test's). The test's part: the
``sgl_kernel`` placeholder given with ``--env-literal PYTHONPATH=...`` (no CPU build of it on
PyPI; a real one ships its own), ``--max-total-tokens`` and a fixed ``--nccl-port`` after
``--`` (SGLang's rendezvous port, on all interfaces).

One server for the module, the tests in file order: ready, proven and fingerprinted by
serve; ``ps``, ``logs`` and a chat answer; the server SIGKILLed and ``watch`` relaunching and
proving it; then ``stop``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.realsglang import READY_LINE, SERVED, Setup, cli_env
from tests.serve.conftest import Run, parse_lines, processes_mentioning, run_cli

pytestmark = pytest.mark.realsglang

SERVE_TIMEOUT_S = 300  # the CLI's own --timeout for /health (about 45-80 s on 2 cores)
CLI_TIMEOUT_S = 480.0  # start, warm-up, coherence and the fingerprint, with margin
WATCH_TIMEOUT_S = 540.0  # a relaunch: a real start, warm-up and its proof


@dataclass
class Served:
    run: Run
    env: dict[str, str]
    port: int
    name: str
    data: Path
    setup: Setup
    seconds: float

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def state(self) -> dict[str, Any]:
        path = self.data / "data" / "native" / self.name / "state.json"
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc

    def servers(self) -> list[int]:
        """The pids of SGLang's main process on this port (not the launcher's wrapper)."""
        return [
            pid
            for pid, cmd in processes_mentioning(f"--port {self.port}")
            if cmd.startswith(str(self.setup.python)) and "sglang.launch_server" in cmd
        ]


def stop_if_running(data: Path, name: str) -> None:
    """Teardown of last resort: the launcher's own stop, with the module's state directory."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSTINCT_DATA_DIR", str(data / "data"))
        if launcher.load(LocalHost(), name) is not None:
            launcher.stop(LocalHost(), name)


@pytest.fixture(scope="module")
def served(real_sglang_setup: Setup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    setup = real_sglang_setup
    data = tmp_path_factory.mktemp("rs-native")
    env = cli_env(setup, data)
    port = free_port()
    name = f"rs-native-{port}"
    args = ["serve", SERVED, "--engine", "native", "--server", "sglang"]
    args += ["--port", str(port), "--name", name, "--timeout", str(SERVE_TIMEOUT_S), "--yes"]
    args += ["--env-literal", f"PYTHONPATH={setup.placeholder}"]
    # SGLang's --context-length: bounds the fingerprint's long probe (half the context)
    args += ["--max-model-len", "1024", "--json"]
    args += ["--", "--max-total-tokens", "8192", "--nccl-port", str(free_port())]
    start = time.monotonic()
    run = run_cli(args, env=env, timeout=CLI_TIMEOUT_S)
    result = Served(run, env, port, name, data, setup, time.monotonic() - start)
    try:
        yield result
    finally:
        stop_if_running(data, name)


def test_serve_finds_the_sglang_plans_its_cpu_backend_and_proves_it(served: Served) -> None:
    run = served.run
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "ready" and result["engine"] == "native", result.get("failure")
    warnings = [e["message"] for e in run.of("warning")]
    assert any(
        w.startswith("CPU-only engine: SGLang 0.5.23 with torch 2.13.0+cpu") for w in warnings
    ), warnings
    assert (
        "the SGLang on this machine is CPU-only: planned for its CPU backend, not a GPU" in warnings
    )
    for phase in ("checking", "planning", "launching", "loading_weights", "ready"):
        assert phase in run.phases, run.phases
    for phase in ("warming_up", "coherence_probe"):
        assert phase in run.phases, run.phases
    endpoint = result["endpoint"]
    assert endpoint["model"] == SERVED and endpoint["max_model_len"] == 1024
    assert endpoint["base_url"] == f"{served.base}/v1"
    assert endpoint["coherence"]["verdict"] == "coherent", endpoint["coherence"]
    assert "paris" in endpoint["coherence"]["text"].lower()
    fingerprint = endpoint["fingerprint"]  # asked as SGLang answers it: echo + logprobs
    assert fingerprint["ok"] is True and fingerprint["cost_tokens"] > 0, fingerprint
    # the discovered interpreter runs SGLang's module, planned for its CPU backend
    state = served.state()
    argv = state["argv"]
    assert argv[:5] == [
        str(served.setup.python),
        "-m",
        "sglang.launch_server",
        "--model-path",
        SERVED,
    ]
    assert argv[5:7] == ["--host", "127.0.0.1"]
    assert argv[7:11] == ["--device", "cpu", "--attention-backend", "torch_native"]
    assert argv[argv.index("--context-length") + 1] == "1024"
    assert {"SGLANG_USE_CPU_ENGINE", "PYTHONPATH"} <= set(state["env_names"])
    assert "HIP_VISIBLE_DEVICES" not in state["env_names"]
    assert state["meta"]["server"] == "sglang" and state["meta"]["gpu_indices"] is None
    events = run.of("phase")
    first = float(events[0]["ts"])
    at = {e["phase"]: round(float(e["ts"]) - first, 1) for e in reversed(events)}
    print(f"\nserve --engine native --server sglang: {served.seconds:.1f} s; phases at {at}")


def test_ps_and_logs_show_the_running_server(served: Served) -> None:
    assert served.run.returncode == 0, served.run.explain()
    ps = run_cli(["ps", "--json"], env=served.env, timeout=60)
    assert ps.returncode == 0, ps.stderr
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    row = rows[served.name]
    assert (row["engine"], row["status"], row["health"], row["port"]) == (
        "native",
        "running",
        "healthy",
        served.port,
    )
    logs = run_cli(["logs", served.name, "--tail", "400"], env=served.env, timeout=60)
    assert logs.returncode == 0 and READY_LINE in logs.stdout, logs.explain()


def chat(base: str) -> str:
    answer = httpx.post(
        base + "/v1/chat/completions",
        json={
            "model": SERVED,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16,
            "temperature": 0,
        },
        timeout=120,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["choices"][0]["message"]["content"])


def test_a_chat_answer(served: Served) -> None:
    assert served.run.returncode == 0, served.run.explain()
    assert "Paris" in chat(served.base)


def wait_ended(name: str, data: Path, timeout: float = 30.0) -> launcher.ProcessStatus:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSTINCT_DATA_DIR", str(data / "data"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = launcher.status(LocalHost(), name)
            if status is not None and not status.running:
                return status
            time.sleep(0.2)
    raise AssertionError(f"{name} still runs after its server was killed")


def of_run(run_id: str) -> list[int]:
    """Live processes of one launch: its run token is in every one's environment
    (``engine.launcher``; zombies nobody reaps in this sandbox are not alive)."""
    found = []
    for pid in (int(e) for e in os.listdir("/proc") if e.isdigit()):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if f"{launcher.RUN_ENV}={run_id}".encode() in environ and state not in ("Z", "X"):
            found.append(pid)
    return found


def test_watch_brings_back_a_killed_server_and_proves_it(served: Served) -> None:
    """SIGKILL SGLang's main process (as an OOM killer would): the launch ends; ``watch``
    sees it, ends what the kill left (SGLang's scheduler and detokenizer), relaunches it with
    the SGLang install of the recorded plan and proves it answers."""
    assert served.run.returncode == 0, served.run.explain()
    before = served.state()
    (pid,) = served.servers()
    os.kill(pid, signal.SIGKILL)
    ended = wait_ended(served.name, served.data)
    assert ended.exit_code == 137, ended
    with pytest.raises(httpx.TransportError):
        httpx.get(served.base + "/health", timeout=5, trust_env=False)
    watch = ["watch", served.name, "--interval", "1", "--backoff", "0", "--checks", "3"]
    watch += ["--canary", "0", "--timeout", str(SERVE_TIMEOUT_S), "--json"]
    start = time.monotonic()
    run = run_cli(watch, env=served.env, timeout=WATCH_TIMEOUT_S)
    took = time.monotonic() - start
    assert run.returncode == 0, run.explain()
    events = parse_lines(run.stdout)
    kinds = [e["kind"] for e in events]
    assert kinds[kinds.index("exited") :][:3] == ["exited", "restarted", "recovered"], kinds
    (exited,) = [e for e in events if e["kind"] == "exited"]
    assert exited["exit_code"] == 137, exited
    (restarted,) = [e for e in events if e["kind"] == "restarted"]
    assert (restarted["by"], restarted["status"], restarted["fixes"]) == ("watch", "ready", [])
    (recovered,) = [e for e in events if e["kind"] == "recovered"]
    assert recovered["coherence"] == "coherent" and recovered["restart_s"] > 0, recovered
    after = served.state()
    assert after["pid"] != before["pid"] and after["argv"] == before["argv"]
    assert after["run_id"] != before["run_id"]
    # what the kill left of the old launch (SGLang's scheduler, detokenizer) was ended
    assert of_run(before["run_id"]) == [] and of_run(after["run_id"]) != []
    (new,) = served.servers()
    assert new != pid
    health = httpx.get(served.base + "/health", timeout=10, trust_env=False)
    assert health.status_code == 200 and health.content == b""
    assert "Paris" in chat(served.base)
    ps = run_cli(["ps", "--json"], env=served.env, timeout=60)
    row = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}[served.name]
    assert (row["status"], row["health"]) == ("running", "healthy"), row
    print(f"\nwatch on the real SGLang: killed, relaunched and proven in {took:.1f} s; {kinds}")


def test_stop_ends_every_process(served: Served) -> None:
    assert served.run.returncode == 0, served.run.explain()
    stop = run_cli(["stop", "--yes", served.name, "--json"], env=served.env, timeout=120)
    assert stop.returncode == 0, stop.stderr
    deadline = time.monotonic() + 15
    while processes_mentioning(f"--port {served.port}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(f"--port {served.port}") == []
    ps = run_cli(["ps", "--json"], env=served.env, timeout=60)
    row = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}[served.name]
    assert row["status"].startswith("stopped"), row
