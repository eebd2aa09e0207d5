#!/usr/bin/env python3
"""Capture what ``instinct bench`` reads from SGLang's own client, from a REAL SGLang (issue 32).

Run once after ``bash tests/infra/setup_real_sglang.sh``::

    .venv/bin/python -m tests.infra.capture_real_sglang_bench [--out DIR]

It starts the real SGLang of the ``realsglang`` tier natively (sglang 0.5.23 on a CPU torch,
SmolLM2-135M-Instruct, ``tests.infra.realsglang.cpu_plan``), runs its client with the argv
``instinct bench`` writes for one step (``observe.sglang_bench.SGLANG_CLIENT``, run by the
tier's interpreter: ``python -m sglang.bench_serving ...``; 6 prompts of 32 tokens, 16 output
tokens, at most 2 in flight) and records, into ``tests/fixtures/sglang/bench/``:

``bench_serving_result.jsonl``
    the client's ``--output-file`` (one JSON line per run; this run's only).
``bench_serving_stdout.txt``
    its console output (stdout, then stderr), the host's paths written ``$CACHE`` / ``$TMP``.
``capture.json``
    the argv (paths as above), seconds to healthy and of the step, its exit code, and the
    server's own counters (``sglang:`` families) before and after the step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from instinct_serve import servers
from instinct_serve.observe.bench import Settings
from instinct_serve.observe.sglang_bench import SGLANG_CLIENT
from instinct_serve.observe.vllm import snapshot
from tests.infra.paths import REPO
from tests.infra.ports import free_port
from tests.infra.realsglang import READY_S, SERVED, cpu_plan, load_setup, server_env, start_server

OUT = REPO / "tests" / "fixtures" / "sglang" / "bench"
SETTINGS = Settings(concurrency=(2,), requests=6, input_len=32, output_len=16)
STEP_TIMEOUT_S = 600


def counters(base: str) -> dict[str, float | None]:
    text = httpx.get(base + "/metrics", timeout=10, trust_env=False).text
    return snapshot(text, time.monotonic(), servers.get("sglang").metric_names).counters


def step_argv(python: str, base: str, tokenizer: str, result_dir: str) -> list[str]:
    args = SGLANG_CLIENT.argv(
        base_url=base,
        model=SERVED,
        served_model_name=SERVED,
        tokenizer=tokenizer,
        concurrency=SETTINGS.concurrency[0],
        settings=SETTINGS,
        result_dir=result_dir,
        result_file=SGLANG_CLIENT.result_file(SETTINGS.concurrency[0]),
    )
    return [python, *args]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    opts = parser.parse_args(argv)
    setup = load_setup()
    if setup is None:
        print("no setup.json: run bash tests/infra/setup_real_sglang.sh", file=sys.stderr)
        return 1
    opts.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sglang-bench-") as tmp:
        plan = cpu_plan(setup, free_port())
        server = start_server(setup, plan, Path(tmp) / "server.log")
        try:
            healthy_s = server.wait_healthy(READY_S)
            print(f"healthy after {healthy_s:.1f} s", flush=True)
            before = counters(server.base_url)
            cmd = step_argv(str(setup.python), server.base_url, str(setup.model_dir), tmp)
            start = time.monotonic()
            done = subprocess.run(
                cmd,
                env=server_env(setup),
                capture_output=True,
                text=True,
                timeout=STEP_TIMEOUT_S,
            )
            step_s = time.monotonic() - start
            after = counters(server.base_url)
        finally:
            server.stop()
        result = Path(tmp) / SGLANG_CLIENT.result_file(SETTINGS.concurrency[0])
        print(f"exit {done.returncode} after {step_s:.1f} s", flush=True)
        if done.returncode != 0 or not result.exists():
            print((done.stdout + done.stderr)[-4000:], file=sys.stderr)
            return 1

        def scrub(text: str) -> str:
            return text.replace(str(setup.root.parent), "$CACHE").replace(tmp, "$TMP")

        (opts.out / "bench_serving_result.jsonl").write_text(
            scrub(result.read_text(encoding="utf-8")), encoding="utf-8"
        )
        (opts.out / "bench_serving_stdout.txt").write_text(
            scrub(done.stdout + done.stderr), encoding="utf-8"
        )
        doc: dict[str, Any] = {
            "sglang": setup.versions,
            "argv": [scrub(a) for a in cmd],
            "healthy_s": round(healthy_s, 1),
            "step_s": round(step_s, 1),
            "exit_code": done.returncode,
            "requests": SETTINGS.requests,
            "output_len": SETTINGS.output_len,
            "counters_before": before,
            "counters_after": after,
        }
        (opts.out / "capture.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
