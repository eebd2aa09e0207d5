"""The vLLM test double itself: its command line, its real log lines, its modes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from instinct_serve.runtime.health import probe_health
from tests.infra import vllm_double
from tests.infra.docker import LocalDouble
from tests.infra.paths import LOGS
from tests.infra.ports import free_port

StartDouble = Callable[..., LocalDouble]


def test_parse_args_accepts_the_real_vllm_serve_command_line() -> None:
    args = vllm_double.parse_args(
        [
            "serve",
            "meta-llama/Llama-3.1-8B-Instruct",
            "--tensor-parallel-size",
            "8",
            "--max-model-len=32768",
            "--enforce-eager",
            "--served-model-name",
            "llama",
            "llama-8b",
            "--port",
            "8123",
            "--kv-cache-dtype",
            "fp8",
            "--trust-remote-code",
            "--no-enable-prefix-caching",
        ]
    )
    assert args.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert args.port == 8123
    assert args.max_model_len == 32768
    assert args.enforce_eager is True
    assert args.names == ["llama", "llama-8b"]
    assert "--kv-cache-dtype=fp8" in args.ignored
    assert "--tensor-parallel-size=8" in args.ignored


def test_parse_args_takes_the_model_from_the_option_form_too() -> None:
    args = vllm_double.parse_args(["--model", "Qwen/Qwen3-0.6B", "--port", "9000"])
    assert (args.model, args.port, args.names, args.enforce_eager) == (
        "Qwen/Qwen3-0.6B",
        9000,
        ["Qwen/Qwen3-0.6B"],
        False,
    )


def _fixture_lines() -> set[str]:
    lines: set[str] = set()
    for log in LOGS.glob("*.log"):
        lines.update(s.rstrip() for s in log.read_text(encoding="utf-8").splitlines())
    return lines


def test_healthy_startup_prints_only_real_vllm_lines(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local("meta-llama/Llama-3.1-8B-Instruct")
    double.healthy_at()
    real = _fixture_lines()
    startup = [
        line
        for _, line in double.lines
        if not line.startswith("vllm-double:")
        and "[entry.py" not in line
        and "[launcher.py" not in line
        and not line.startswith("INFO:     ")
    ]
    assert len(startup) > 50
    assert [s for s in startup if s not in real] == []
    text = double.output()
    for phase_line in (
        "Automatically detected platform rocm.",
        "Loading safetensors checkpoint shards: 100% Completed",
        "Model loading took 15.3047 GiB",
        "GPU KV cache size: 42,656 tokens",
        "Capturing CUDA graph shapes: 100%",
        "Graph capturing finished in 35 secs",
        "Starting vLLM server on http://127.0.0.1:",
        "Application startup complete.",
    ):
        assert phase_line in text
    assert vllm_double.BANNER in double.lines[0][1]


def test_oom_during_graph_capture_exits_1_with_the_real_trace(
    vllm_double_local: StartDouble,
) -> None:
    double = vllm_double_local(mode="oom_graph_capture")
    assert double.proc.wait(timeout=20) == 1
    double.wait_for("RuntimeError: CUDA error: out of memory")
    text = double.output()
    assert "Capturing CUDA graph shapes:   9%" in text
    assert "healthy at" not in text


def test_oom_mode_comes_up_healthy_with_enforce_eager(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(mode="oom_graph_capture", args=["--enforce-eager"])
    double.healthy_at()
    assert "Capturing CUDA graph shapes" not in double.output()
    assert double.proc.poll() is None


def test_hang_stops_logging_in_graph_capture_and_stays_unhealthy(
    vllm_double_local: StartDouble,
) -> None:
    double = vllm_double_local(mode="hang_in_graph_capture")
    double.wait_for("Capturing CUDA graph shapes:  40%")
    count = len(double.lines)
    time.sleep(1.0)
    assert len(double.lines) == count  # silence: the stall serve must notice
    assert httpx.get(double.base_url + "/health", timeout=5).status_code == 503
    assert double.proc.poll() is None


def test_die_replays_a_failure_log_and_exits_with_the_given_code(
    vllm_double_local: StartDouble,
) -> None:
    double = vllm_double_local(
        mode="die",
        env={"VLLM_DOUBLE_EXIT_CODE": "7", "VLLM_DOUBLE_REPLAY": "03_gated_repo_401.log"},
    )
    assert double.proc.wait(timeout=20) == 7
    double.wait_for("Cannot access gated repo for url")


def test_die_after_requests_answers_n_then_exits_with_the_given_code(
    vllm_double_local: StartDouble,
) -> None:
    double = vllm_double_local(
        env={"VLLM_DOUBLE_DIE_AFTER_REQUESTS": "2", "VLLM_DOUBLE_EXIT_CODE": "5"}
    )
    double.healthy_at()
    body = {"model": double.model, "prompt": "The capital of France is", "max_tokens": 4}
    with httpx.Client(base_url=double.base_url, timeout=5) as http:
        assert http.get("/health").status_code == 200  # not a completion: not counted
        assert http.post("/v1/completions", json=body).status_code == 200
        assert double.proc.poll() is None
        second = http.post("/v1/completions", json=body)
        assert second.status_code == 200 and second.json()["choices"][0]["text"]
    assert double.proc.wait(timeout=10) == 5
    double.wait_for("dying after 2 requests")


def test_health_is_503_while_loading_then_200(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(env={"VLLM_DOUBLE_LOAD_S": "3"})
    double.wait_for("Automatically detected platform")
    with httpx.Client(timeout=5) as http:
        for _ in range(50):  # the server binds early; bounded wait for the socket
            try:
                first = http.get(double.base_url + "/health").status_code
                break
            except httpx.ConnectError:
                time.sleep(0.05)
        assert first == 503
        assert http.get(double.base_url + "/v1/models").status_code == 503
        double.healthy_at()
        assert http.get(double.base_url + "/health").status_code == 200


def test_openai_shapes(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local("org/base", args=["--served-model-name", "served"])
    double.healthy_at()
    with httpx.Client(base_url=double.base_url, timeout=5) as http:
        models = http.get("/v1/models").json()
        assert models["object"] == "list"
        assert [(m["id"], m["root"], m["owned_by"]) for m in models["data"]] == [
            ("served", "org/base", "vllm")
        ]
        chat = http.post(
            "/v1/chat/completions",
            json={
                "model": "served",
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
                "max_tokens": 4,
            },
        ).json()
        assert chat["object"] == "chat.completion"
        assert chat["choices"][0]["message"]["role"] == "assistant"
        assert chat["choices"][0]["finish_reason"] == "length"
        assert chat["usage"]["completion_tokens"] == 4
        comp = http.post(
            "/v1/completions",
            json={"model": "served", "prompt": "The capital of France is", "max_tokens": 32},
        ).json()
        assert comp["object"] == "text_completion"
        assert comp["choices"][0]["text"].startswith(" Paris")
        missing = http.post("/v1/completions", json={"model": "org/base", "prompt": "x"})
        assert missing.status_code == 404
        assert missing.json()["error"]["message"] == (
            "The model `org/base` does not exist. Valid aliases: served."
        )


def test_sigterm_ends_it_promptly(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local()
    double.healthy_at()
    start = time.monotonic()
    double.proc.send_signal(signal.SIGTERM)
    assert double.proc.wait(timeout=5) == 0
    assert time.monotonic() - start < 2


def test_unknown_mode_is_refused(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(mode="sideways")
    assert double.proc.wait(timeout=10) == 2
    double.wait_for("unknown VLLM_DOUBLE_MODE 'sideways'")


def test_installs_as_a_fake_vllm_executable(tmp_path: Path) -> None:
    exe = vllm_double.install_fake_vllm(tmp_path / "bin")
    port = free_port()
    env = dict(os.environ, PATH=f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    env["VLLM_DOUBLE_LOAD_S"] = "0.2"
    proc = subprocess.Popen(
        ["vllm", "serve", "org/native", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline and status != 200:
            with contextlib.suppress(httpx.ConnectError):
                status = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code
            time.sleep(0.1)
        assert status == 200
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).json()
        assert models["data"][0]["id"] == "org/native"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    banner = out.splitlines()[0]
    assert "TEST DOUBLE" in banner
    assert json.loads(banner.split("argv=", 1)[1])[:2] == ["serve", "org/native"]


def test_hang_after_requests_stays_up_and_stops_answering(vllm_double_local: StartDouble) -> None:
    double = vllm_double_local(env={"VLLM_DOUBLE_HANG_AFTER_REQUESTS": "1"})
    double.healthy_at()
    body = {"model": double.model, "prompt": "The capital of France is", "max_tokens": 4}
    with httpx.Client(base_url=double.base_url, timeout=2) as http:
        assert http.post("/v1/completions", json=body).status_code == 200
        double.wait_for("hanging after 1 requests")
        try:
            http.get("/health")
        except httpx.TimeoutException:
            pass
        else:
            raise AssertionError("a hung server answered /health")
    assert double.proc.poll() is None


# --------------------------------------------------------------------------- multi-node


def _ranks(master_port: int, nnodes: int = 2) -> list[str]:
    return [
        "--nnodes",
        str(nnodes),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(master_port),
    ]


def test_rank_0_is_healthy_only_after_every_rank_joined(vllm_double_local: StartDouble) -> None:
    master = free_port()
    head = vllm_double_local(args=[*_ranks(master), "--node-rank", "0"])
    head.wait_for("rank 0 listening on 0.0.0.0:")
    time.sleep(0.8)  # longer than its whole load: without rank 1 it must not come up
    assert probe_health(head.base_url, timeout=1.0).status_code is None
    worker = vllm_double_local(args=[*_ranks(master), "--node-rank", "1", "--headless"])
    worker.wait_for("rendezvous: rank 1 joined 127.0.0.1:")
    joined_at, _ = head.wait_for("all 2 ranks joined")
    assert head.healthy_at() > joined_at - 1.0
    assert probe_health(head.base_url).ok
    # a probe that connects and says nothing is not a rank
    with socket.create_connection(("127.0.0.1", master), timeout=2):
        pass
    # the head going away ends the headless rank, which serves no HTTP of its own
    assert head.stop() == 0
    worker.wait_for("rank 0 went away")
    assert worker.proc.wait(timeout=10) == 1


def test_a_failing_rank_breaks_the_group(vllm_double_local: StartDouble) -> None:
    master = free_port()
    env = {"VLLM_DOUBLE_FAIL_RANKS": "1"}
    head = vllm_double_local(args=[*_ranks(master), "--node-rank", "0"], env=env)
    head.wait_for("rank 0 listening")
    worker = vllm_double_local(args=[*_ranks(master), "--node-rank", "1", "--headless"], env=env)
    assert worker.proc.wait(timeout=20) == 1
    assert "Engine core initialization failed" in worker.output()
    assert head.proc.wait(timeout=20) == 1
    head.wait_for("rendezvous: rank 1 closed its connection")


def test_a_rank_that_cannot_reach_rank_0_gives_up(vllm_double_local: StartDouble) -> None:
    env = {"VLLM_DOUBLE_RENDEZVOUS_S": "1"}
    worker = vllm_double_local(args=[*_ranks(free_port()), "--node-rank", "1"], env=env)
    assert worker.proc.wait(timeout=20) == 1
    worker.wait_for("rendezvous: rank 1 could not reach 127.0.0.1:")
