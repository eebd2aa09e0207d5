"""``instinct serve`` against the real dockerd with the vLLM test double, plus ps/logs/stop."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time

import httpx
import pytest

from tests.infra.docker import DockerDaemon
from tests.infra.ports import free_port
from tests.serve.conftest import (
    CLI,
    MODEL,
    Serve,
    docker,
    inspect,
    parse_lines,
    processes_mentioning,
    run_cli,
)

pytestmark = pytest.mark.docker


def test_whole_path_phases_connection_and_idempotent_reuse(serve: Serve) -> None:
    port = free_port()
    name = serve.name()
    run = serve(port=port, name=name)
    assert run.returncode == 0, run.explain()
    phases = run.phases
    for expected in (
        "checking",
        "planning",
        "launching",
        "loading_weights",
        "profiling",
        "capturing_graphs",
        "ready",
        "warming_up",
        "coherence_probe",
    ):
        assert expected in phases, phases
    assert phases.index("loading_weights") < phases.index("capturing_graphs")
    assert phases.index("ready") < phases.index("warming_up")
    assert run.of("healthy") and run.of("launched")[0]["container"] == name
    kv = [
        e
        for e in run.of("phase")
        if "GPU KV cache size" in json.dumps(e) or "tokens" in e["message"]
    ]
    assert kv, "the KV cache sizing figures are reported"

    result = run.result
    assert result["ok"] is True and result["status"] == "ready"
    endpoint = result["endpoint"]
    assert endpoint["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert endpoint["model"] == MODEL and endpoint["container"] == name
    assert endpoint["tp"] == 1 and endpoint["max_model_len"] == 131072
    assert endpoint["image"].startswith("instinct-serve-test/")
    assert (
        endpoint["warmup_latency_s"] is not None and endpoint["coherence"]["verdict"] == "coherent"
    )
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in endpoint["curl"]

    # the curl's exact values work
    body = json.loads(endpoint["curl"].split(" -d ", 1)[1].strip("'"))
    answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=10)
    assert answer.status_code == 200 and answer.json()["model"] == MODEL

    info = inspect(name)
    assert info is not None and info["Config"]["Labels"]["instinct-serve.managed"] == "true"
    started = info["State"]["StartedAt"]

    # idempotent: same plan again -> reused, not relaunched
    again = serve(port=port, name=name)
    assert again.returncode == 0, again.explain()
    assert again.result["status"] == "reused" and not again.of("launched")
    info = inspect(name)
    assert info is not None and info["State"]["StartedAt"] == started

    # ps / logs / stop
    ps = run_cli(["ps", "--json"])
    assert ps.returncode == 0, ps.explain()
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    assert rows[name]["health"] == "healthy" and rows[name]["port"] == port
    assert rows[name]["model"] == MODEL and rows[name]["status"] == "running"
    logs = run_cli(["logs", name, "--tail", "50"])
    assert logs.returncode == 0 and "Application startup complete" in logs.stdout
    follow = subprocess.Popen(
        [*CLI, "logs", name, "-f", "--tail", "5"], stdout=subprocess.PIPE, text=True
    )
    assert follow.stdout is not None and follow.stdout.readline()
    follow.send_signal(signal.SIGINT)
    assert follow.wait(timeout=20) == 130
    assert processes_mentioning(f"logs -f --tail 5 {name}") == []
    stop = run_cli(["stop", "--yes", name, "--json"])
    assert stop.returncode == 0, stop.explain()
    assert json.loads(stop.stdout)["stopped"][0]["name"] == name
    assert inspect(name) is None


def test_human_output(serve: Serve) -> None:
    port = free_port()
    run = run_cli(serve.args(port=port, json_lines=False))
    assert run.returncode == 0, run.explain()
    assert "Endpoint ready" in run.stdout and f"http://127.0.0.1:{port}/v1" in run.stdout
    assert "curl -sS" in run.stdout and MODEL in run.stdout
    assert re.search(rf"^Base URL +http://127\.0\.0\.1:{port}/v1$", run.stdout, re.M), run.stdout
    # one line per phase, no word twice ("loading_weights loading weights" reads "loading
    # weights: ...")
    for words in ("loading", "capturing graphs", "warming up first request", "launching serve-"):
        assert words in run.stderr, words
    phase_lines = [line for line in run.stderr.splitlines() if line.startswith("· ")]
    assert len(phase_lines) >= 5, run.stderr
    assert not any("_" in line.split()[1] for line in phase_lines), run.stderr  # words, no ids
    for line in phase_lines:
        assert not re.search(r"\b([a-z]+(?: [a-z]+)*)[\s:]+\1\b", line.replace("_", " "), re.I)
    assert "Traceback" not in run.stderr


def test_a_base_model_without_chat_template_uses_completions(serve: Serve) -> None:
    port = free_port()
    run = serve(image=serve.double(VLLM_DOUBLE_NO_CHAT_TEMPLATE="1"), port=port)
    assert run.returncode == 0, run.explain()
    endpoint = run.result["endpoint"]
    assert endpoint["api"] == "completions" and endpoint["coherence"]["verdict"] == "coherent"
    assert f"http://127.0.0.1:{port}/v1/completions " in endpoint["curl"]
    assert any("chat template" in n["message"] for n in run.of("note"))


def test_oom_in_graph_capture_relaunches_with_enforce_eager(serve: Serve) -> None:
    name = serve.name()
    run = serve(image=serve.double("oom_graph_capture"), name=name)
    assert run.returncode == 0, run.explain()
    [relaunch] = run.of("relaunch")
    assert relaunch["finding"] == "oom_graph_capture"
    assert relaunch["changes"] == ["--enforce-eager"]
    result = run.result
    assert result["status"] == "ready"
    assert result["relaunches"] == [
        {"finding": "oom_graph_capture", "title": relaunch["title"], "changes": ["--enforce-eager"]}
    ]
    info = inspect(name)
    assert info is not None and "--enforce-eager" in info["Args"]
    assert info["Config"]["Labels"]["instinct-serve.fixes"] == "oom_graph_capture"
    # the second attempt replaced the first: one container of that name, no leftovers
    assert len(run.of("launched")) == 2


def test_graph_capture_stall_is_detected_and_relaunched_eager(serve: Serve) -> None:
    name = serve.name()
    start = time.monotonic()
    run = serve("--stall-timeout", "2", image=serve.double("hang_in_graph_capture"), name=name)
    assert time.monotonic() - start < 60
    [stalled] = run.of("stalled")
    assert stalled["phase"] == "capturing_graphs"
    [relaunch] = run.of("relaunch")
    assert relaunch["finding"] == "graph_capture_hang" and relaunch["changes"] == [
        "--enforce-eager"
    ]
    assert run.returncode == 0, run.explain()
    assert run.result["status"] == "ready"
    assert [r["finding"] for r in run.result["relaunches"]] == ["graph_capture_hang"]
    info = inspect(name)
    assert info is not None and info["State"]["Running"] and "--enforce-eager" in info["Args"]


def test_a_second_graph_capture_stall_is_reported_not_retried(serve: Serve) -> None:
    name = serve.name()
    image = serve.double("hang_in_graph_capture", VLLM_DOUBLE_HANG_EAGER="1")
    run = serve("--stall-timeout", "2", image=image, name=name)
    assert len(run.of("relaunch")) == 1
    # Hanging even with --enforce-eager: the second hang is reported, not retried again,
    # and the hung container is stopped and kept for its logs.
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert failure["id"] == "graph_capture_hang" and "did not help" in failure["title"]
    assert failure["left"].startswith("stopped")
    info = inspect(name)
    assert info is not None and not info["State"]["Running"] and "--enforce-eager" in info["Args"]


def test_incoherent_output_is_reported_and_retried_with_the_env_fix(serve: Serve) -> None:
    name = serve.name()
    run = serve(image=serve.double("incoherent"), name=name)
    assert run.returncode == 1, run.explain()
    [relaunch] = run.of("relaunch")
    assert relaunch["finding"] == "incoherent_output"
    assert relaunch["changes"] == ["VLLM_ROCM_USE_AITER=0"]  # dense model at TP 1
    verdicts = [e["verdict"] for e in run.of("coherence")]
    assert verdicts == ["incoherent_output", "incoherent_output"]
    failure = run.result["failure"]
    assert failure["id"] == "incoherent_output"
    assert "VLLM_ROCM_USE_AITER=0" in failure["fix"]
    info = inspect(name)
    assert info is not None and "VLLM_ROCM_USE_AITER=0" in info["Config"]["Env"]


def test_a_server_that_dies_is_diagnosed_at_once(serve: Serve) -> None:
    name = serve.name()
    start = time.monotonic()
    image = serve.double(
        "die",
        VLLM_DOUBLE_EXIT_CODE="3",
        VLLM_DOUBLE_REPLAY="03_gated_repo_401.log",
    )
    run = serve(image=image, name=name)
    assert run.returncode == 1, run.explain()
    assert time.monotonic() - start < 30  # not the 60 s timeout
    failure = run.result["failure"]
    assert failure["exit_code"] == 3 and failure["id"] == "gated_repo"
    assert "exited with code 3" in failure["cause"] and failure["fix"]
    assert failure["log_tail"] and not run.of("relaunch")  # not a safe automatic retry
    assert failure["left"] == "stopped, kept for its log"
    assert f"instinct diagnose --container {name}" in failure["commands"]


def test_a_finding_with_a_safe_retry_is_applied_once(serve: Serve) -> None:
    # A JIT kernel build failure (real log 01): its retry hint is applied on a relaunch,
    # which dies the same way; the second failure is reported, not retried again.
    run = serve(image=serve.double("die"))
    assert run.returncode == 1, run.explain()
    [relaunch] = run.of("relaunch")
    assert relaunch["finding"] == "jit_build_failed" and relaunch["changes"]
    assert len(run.of("launched")) == 2
    failure = run.result["failure"]
    assert failure["id"] == "jit_build_failed" and "did not help" in failure["title"]


def test_a_named_kernel_crash_is_retried_with_its_own_fix(serve: Serve) -> None:
    # The AITER sampler segfault (public log 01) on an MI300X plan: the relaunch turns the
    # AITER sampler off (not FP4BMM, not --enforce-eager); dying again, it is reported.
    name = serve.name()
    image = serve.double(
        "die", VLLM_DOUBLE_REPLAY="public/01_aiter_sampler_segfault_mi300x_warmup.log"
    )
    run = serve(image=image, name=name)
    assert run.returncode == 1, run.explain()
    [relaunch] = run.of("relaunch")
    assert relaunch["finding"] == "aiter_sampler_segfault"
    assert relaunch["changes"] == ["VLLM_ROCM_USE_AITER_SAMPLER=0"]
    failure = run.result["failure"]
    assert failure["id"] == "aiter_sampler_segfault" and "did not help" in failure["title"]
    info = inspect(name)
    assert info is not None and "VLLM_ROCM_USE_AITER_SAMPLER=0" in info["Config"]["Env"]


def test_a_crash_that_names_no_kernel_is_diagnosed_not_retried(serve: Serve) -> None:
    # Public log 14: a GPU fault with no kernel named; no fix is known to address it.
    image = serve.double(
        "die", VLLM_DOUBLE_REPLAY="public/14_hsa_memory_aperture_violation_mi300x_v1_runtime.log"
    )
    run = serve(image=image)
    assert run.returncode == 1, run.explain()
    assert not run.of("relaunch") and len(run.of("launched")) == 1
    assert run.result["failure"]["id"] == "gpu_kernel_crash"


def test_port_held_by_a_foreign_listener(serve: Serve) -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        name = serve.name()
        run = serve(port=port, name=name)
        assert run.returncode == 3, run.explain()
        error = run.result["error"]
        assert error["id"] == "port_in_use"
        assert f"pid {os.getpid()}" in error["message"] and "--port" in error["fix"]
        assert inspect(name) is None
        # the listener is untouched
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            conn, _ = listener.accept()
            conn.close()


def test_a_foreign_container_with_the_same_name_is_left_alone(
    serve: Serve, docker_daemon: DockerDaemon
) -> None:
    name = serve.name("foreign")
    image = serve.double(load_s=0.1)
    made = docker("run", "-d", "--name", name, *docker_daemon.label_args(), image, "--model", "x")
    assert made.returncode == 0, made.stderr
    run = serve(name=name)
    assert run.returncode == 3, run.explain()
    error = run.result["error"]
    assert error["id"] == "container_name_conflict" and "--name" in error["fix"]
    info = inspect(name)
    assert info is not None and info["State"]["Running"]
    # and stop refuses it too
    stop = run_cli(["stop", "--yes", name])
    assert stop.returncode == 1 and "did not create it" in stop.stderr
    info = inspect(name)
    assert info is not None and info["State"]["Running"]


def test_same_model_on_the_port_needs_replace(serve: Serve) -> None:
    port = free_port()
    name = serve.name()
    first = serve(port=port, name=name)
    assert first.returncode == 0, first.explain()
    other = serve.name()  # same model and port, another plan
    refused = serve("--max-model-len", "8192", port=port, name=other)
    assert refused.returncode == 1, refused.explain()
    assert refused.result["error"]["id"] == "endpoint_exists"
    assert "--replace" in refused.result["error"]["fix"]
    replaced = serve("--max-model-len", "8192", "--replace", port=port, name=other)
    assert replaced.returncode == 0, replaced.explain()
    assert replaced.result["replaced"] == [name] and inspect(name) is None


def test_non_interactive_without_yes_refuses(serve: Serve) -> None:
    name = serve.name()
    run = run_cli(serve.args(name=name, yes=False))
    assert run.returncode == 2, run.explain()
    assert run.result["error"]["id"] == "confirmation_required"
    assert "--yes" in run.result["error"]["fix"]
    assert inspect(name) is None


def test_detach_returns_once_loading_and_a_second_serve_attaches(serve: Serve) -> None:
    name, port = serve.name(), free_port()
    # still loading when the second serve looks, even on a busy machine (xdist workers): at
    # 5 s, and at 15 s under a load of 13 on 2 cores, a second serve started late found it
    # ready and reused it instead of attaching
    image = serve.double(load_s=30)
    run = serve("--detach", image=image, name=name, port=port)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["status"] == "loading" and result["phase"] in (
        "downloading_weights",
        "loading_weights",
    )
    assert any(f"instinct logs -f {name}" in n for n in result["notes"])
    info = inspect(name)
    assert info is not None and info["State"]["Running"]  # left loading on purpose
    # the same plan again: no second launch, it follows the loading one to the end
    attached = serve(image=image, name=name, port=port)
    assert attached.returncode == 0, attached.explain()
    assert attached.of("attached") and not attached.of("launched")
    assert attached.result["status"] == "ready"


def test_timeout_leaves_a_slow_start_running(serve: Serve) -> None:
    name = serve.name()
    args = serve.args(image=serve.double(load_s=60), name=name)
    args[args.index("--timeout") + 1] = "3"
    run = run_cli(args)
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert run.result["status"] == "timeout" and failure["id"] == "startup_timeout"
    assert failure["left"] == "running" and f"instinct logs -f {name}" in failure["fix"]
    info = inspect(name)
    assert info is not None and info["State"]["Running"]


def test_the_token_reaches_the_container_by_name_only(serve: Serve) -> None:
    secret = "hf_test_" + os.urandom(8).hex()
    name = serve.name()
    run = serve(name=name, env={**os.environ, "HF_TOKEN": secret})
    assert run.returncode == 0, run.explain()
    assert secret not in run.stdout + run.stderr
    info = inspect(name)
    assert info is not None and f"HF_TOKEN={secret}" in info["Config"]["Env"]
    assert secret not in json.dumps(info["Args"]) and secret not in json.dumps(info["Path"])


def test_image_pull_failure(serve: Serve) -> None:
    name = serve.name()
    run = serve(image="instinct-serve-test/does-not-exist:nope", name=name)
    assert run.returncode == 1, run.explain()
    assert "pulling_image" in run.phases
    error = run.result["error"]
    assert error["id"] == "image_pull_failed" and "docker save" in error["fix"]
    assert inspect(name) is None


def test_interactive_confirmation(serve: Serve) -> None:
    import pty

    name = serve.name()
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*CLI, *serve.args(name=name, yes=False, json_lines=False)],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
        )
        seen = b""
        deadline = time.monotonic() + 60
        while b"Launch it?" not in seen and time.monotonic() < deadline:
            seen += os.read(master, 4096)
        assert b"Launch plan" in seen and b"Tensor parallel" in seen  # the table came first
        os.write(master, b"n\n")
        proc.communicate(timeout=60)
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 1
    assert inspect(name) is None


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_during_the_wait(serve: Serve, sig: signal.Signals, code: int) -> None:
    name = serve.name()
    argv = [*CLI, *serve.args(image=serve.double(load_s=60), name=name)]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if '"phase": "starting"' in line:  # the container's first line arrived
            break
    assert inspect(name) is not None, "".join(lines)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    result = parse_lines(out)[-1]
    assert result["status"] == "interrupted"
    assert any(f"removed {name}" in n for n in result["notes"])
    assert inspect(name) is None
    assert processes_mentioning(name) == []  # no `docker logs -f` left behind


def test_logs_and_stop_of_unknown_names() -> None:
    missing = run_cli(["logs", "no-such-endpoint-xyz"])
    assert missing.returncode == 1 and "instinct ps" in missing.stderr
    stop = run_cli(["stop"])
    assert stop.returncode == 2
