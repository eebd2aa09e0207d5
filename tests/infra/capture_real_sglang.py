#!/usr/bin/env python3
"""Capture a REAL SGLang's answers for the SGLang test double to be held to.

Launches the real sglang 0.5.23 that ``tests/infra/setup_real_sglang.sh`` builds (CPU torch,
SmolLM2-135M-Instruct), with the command ``servers.sglang`` writes plus the CPU flags of
``../shared/notes/real-sglang.md``, waits for SGLang's ready line, then records each exchange
(request, status, content type, body) into ``tests/fixtures/sglang/responses.json``, the
whole start-up log into ``real_cpu_start_2.log`` and ``/metrics`` after the requests into
``real_cpu_metrics_2.txt`` (``--out`` another directory). Also two questions the fingerprint
asks: whether the OpenAI completions route gives prompt log-probabilities (``echo`` +
``logprobs``) and whether the native ``/generate`` does (``return_logprob`` +
``logprob_start_len``).

Run: ``.venv/bin/python -m tests.infra.capture_real_sglang`` (about 1-2 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.infra.capture_real_vllm import exchange
from tests.infra.ports import free_port
from tests.infra.realsglang import (
    READY_LINE,
    SERVED,
    Setup,
    cpu_plan,
    load_setup,
    native_argv,
    server_env,
)

CONTEXT = 8192  # --max-total-tokens; the model's own context is 8192 too
HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "fixtures" / "sglang"


def _argv(setup: Setup, port: int) -> list[str]:
    return native_argv(setup, cpu_plan(setup, port, max_total_tokens=CONTEXT))


def capture_responses(base: str) -> list[dict[str, Any]]:
    chat = {
        "model": SERVED,
        "messages": [
            {"role": "user", "content": "What is the capital of France? Answer with one word."}
        ],
        "max_tokens": 32,
        "temperature": 0,
    }
    completion = {
        "model": SERVED,
        "prompt": "The capital of France is",
        "max_tokens": 16,
        "temperature": 0,
    }
    usage = {"stream": True, "stream_options": {"include_usage": True}}
    long_prompt = " ".join(["word"] * (CONTEXT + 1000))
    out: list[dict[str, Any]] = []
    with httpx.Client(timeout=300.0, trust_env=False) as c:

        def ex(*a: Any, **kw: Any) -> None:
            out.append(exchange(c, base, *a, **kw))
            print(f"captured {out[-1]['name']}: {out[-1]['status']}", flush=True)

        ex("health", "GET", "/health")
        ex("health_generate", "GET", "/health_generate")
        ex("version", "GET", "/version")
        ex("models", "GET", "/v1/models")
        ex("chat_capital_of_france", "POST", "/v1/chat/completions", chat)
        ex("completion_capital_of_france", "POST", "/v1/completions", completion)
        ex("completion_stream", "POST", "/v1/completions", {**completion, **usage})
        ex("chat_stream", "POST", "/v1/chat/completions", {**chat, **usage})
        ex("chat_unknown_model", "POST", "/v1/chat/completions", {**chat, "model": "no-such"})
        ex("completion_unknown_model", "POST", "/v1/completions", {**completion, "model": "x"})
        ex(
            "completion_prompt_too_long",
            "POST",
            "/v1/completions",
            {**completion, "prompt": long_prompt},
        )
        ex(
            "chat_max_tokens_too_large",
            "POST",
            "/v1/chat/completions",
            {**chat, "max_tokens": 9000},
        )
        ex("chat_messages_missing", "POST", "/v1/chat/completions", {"model": SERVED})
        ex(
            "chat_invalid_json",
            "POST",
            "/v1/chat/completions",
            raw=b"{not json",
            headers={"content-type": "application/json"},
        )
        ex("unknown_route", "GET", "/v1/nothing-here")
        # the fingerprint's questions: prompt log-probabilities, OpenAI route and native route
        ex(
            "completion_echo_logprobs",
            "POST",
            "/v1/completions",
            {**completion, "max_tokens": 1, "echo": True, "logprobs": 1},
        )
        ex(
            "generate_prompt_logprobs",
            "POST",
            "/generate",
            {
                "text": "The capital of France is",
                "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                "return_logprob": True,
                "logprob_start_len": 0,
            },
        )
        ex("metrics", "GET", "/metrics")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    opts = parser.parse_args(argv)
    setup = load_setup()
    if setup is None:
        print("no setup.json: run bash tests/infra/setup_real_sglang.sh", file=sys.stderr)
        return 1
    port = free_port()
    env = server_env(setup)
    opts.out.mkdir(parents=True, exist_ok=True)
    log = opts.out / "real_cpu_start_2.log"
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as sink:
        proc = subprocess.Popen(_argv(setup, port), env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            while READY_LINE not in log.read_text(encoding="utf-8", errors="replace"):
                if proc.poll() is not None or time.monotonic() - start > 400:
                    print(log.read_text(encoding="utf-8")[-3000:], file=sys.stderr)
                    return 1
                time.sleep(0.5)
            ready_s = time.monotonic() - start
            print(f"ready after {ready_s:.1f} s", flush=True)
            exchanges = capture_responses(f"http://127.0.0.1:{port}")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    metrics = next(e for e in exchanges if e["name"] == "metrics")
    (opts.out / "real_cpu_metrics_2.txt").write_text(metrics["body"], encoding="utf-8")
    metrics["body"] = "(real_cpu_metrics_2.txt)"
    for item in exchanges:
        item["request"]["body"] = _short(item["request"]["body"])
    doc = {"sglang": setup.versions, "ready_s": round(ready_s, 1), "exchanges": exchanges}
    (opts.out / "responses.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def _short(body: Any) -> Any:
    """The over-long prompt is recorded by its recipe, not its 9,000 words."""
    if isinstance(body, dict) and isinstance(body.get("prompt"), str) and len(body["prompt"]) > 999:
        return {**body, "prompt": f"<'word' x {len(body['prompt'].split())}>"}
    return body


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
