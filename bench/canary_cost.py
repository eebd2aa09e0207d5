"""What the fingerprint canary costs a busy endpoint, and how fast it sees each failure
(figures, not a test).

The endpoint is the vLLM TEST DOUBLE (``tests/infra/vllm_double.py``) on 127.0.0.1: its
tokens leave on a schedule (``VLLM_DOUBLE_TTFT_S``, ``VLLM_DOUBLE_ITL_S``) and it scores
prompts as vLLM does, so the figures are the canary's own cost in tokens and requests and
the double's throughput under a fixed load, not a GPU's speed.

1. cost: one check (``runtime.fingerprint.take``) at the context the default plan of
   Llama-3.1-8B on an MI300X affords (131072: the long probe's 4096-token bound), in tokens
   the endpoint processes and in seconds, idle and under load;
2. share: ``--clients`` concurrent requests (``--prompt-words`` in, ``--output`` tokens
   out, ignore_eos) for ``--seconds``, without the canary and then with it checking every
   ``--every`` seconds (compressed, so that a run is short); the share of the endpoint's
   processed tokens the canary takes at the default interval (300 s) follows from the
   measured tokens a check and the measured throughput;
3. detection: for each failure kind the double can show, the time from its onset to the
   first failing check: NaN after N tokens, garbage past a context length and a stream of
   one repeated token are there from the start (seen by the check at start-up: one check);
   a drift starts ``--drift-after`` seconds into service and is seen by the canary looping
   at ``--every`` seconds (detection within one interval is the target).

    .venv/bin/python bench/canary_cost.py [--clients 16] [--seconds 20] [--every 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

import httpx  # noqa: E402
from tests.infra.docker import LocalDouble, start_local_double  # noqa: E402

from instinct_serve.observe import fingerprint as fp  # noqa: E402
from instinct_serve.runtime.fingerprint import Budget, take  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CONTEXT = 131072  # the default plan's --max-model-len for this model on an MI300X
DEFAULT_INTERVAL_S = 300.0  # watch --canary's default
WORDS = ["the", "river", "runs", "past", "the", "market", "and", "on", "to", "the", "sea"]


def start(env: dict[str, str]) -> LocalDouble:
    double = start_local_double(MODEL, env=env, args=["--max-model-len", str(CONTEXT)])
    double.wait_for("healthy at", timeout=30)
    return double


class Load:
    """``clients`` threads sending completions back to back; tokens processed counted."""

    def __init__(self, url: str, clients: int, prompt_words: int, output: int) -> None:
        self.url, self.clients = url + "/v1/completions", clients
        prompt = " ".join(WORDS[i % len(WORDS)] for i in range(prompt_words))
        self.body = {
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": output,
            "ignore_eos": True,
            "temperature": 0.0,
        }
        self.tokens = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def _client(self) -> None:
        with httpx.Client(trust_env=False, timeout=60) as http:
            while not self.stop.is_set():
                usage = http.post(self.url, json=self.body).json()["usage"]
                with self.lock:
                    self.tokens += int(usage["total_tokens"])

    def run(self, seconds: float, during: Any = None) -> float:
        """Tokens processed a second over ``seconds`` (``during``: run meanwhile)."""
        threads = [threading.Thread(target=self._client, daemon=True) for _ in range(self.clients)]
        self.tokens, self.stop = 0, threading.Event()
        for t in threads:
            t.start()
        time.sleep(1.0)  # ramp up
        with self.lock:
            base = self.tokens
        begin = time.monotonic()
        if during is not None:
            during(begin + seconds)
        else:
            time.sleep(seconds)
        with self.lock:
            done = self.tokens - base
        elapsed = time.monotonic() - begin
        self.stop.set()
        for t in threads:
            t.join(timeout=70)
        return done / elapsed


def budget() -> Budget:
    return Budget.for_context(CONTEXT, seconds=60)


def cost(args: argparse.Namespace) -> tuple[int, float]:
    double = start({"VLLM_DOUBLE_TTFT_S": str(args.ttft), "VLLM_DOUBLE_ITL_S": str(args.itl)})
    try:
        idle = [take(double.base_url, MODEL, budget()) for _ in range(3)]
        tokens = idle[0].cost_tokens
        idle_s = statistics.median(f.cost_s for f in idle)
        print(f"one check: {tokens} tokens processed (3 requests), {idle_s:.3f} s idle")
        load = Load(double.base_url, args.clients, args.prompt_words, args.output)
        plain = load.run(args.seconds)
        checks: list[float] = []

        def canary(until: float) -> None:
            while time.monotonic() < until:
                checks.append(take(double.base_url, MODEL, budget()).cost_s)
                time.sleep(max(0.0, min(args.every, until - time.monotonic())))

        with_canary = load.run(args.seconds, canary)
        busy_s = statistics.median(checks) if checks else float("nan")
        share = tokens / DEFAULT_INTERVAL_S / plain
        print(
            f"busy endpoint ({args.clients} clients, {args.prompt_words}+{args.output} tokens, "
            f"TTFT {args.ttft} s, ITL {args.itl} s): {plain:.0f} tokens/s without the canary, "
            f"{with_canary:.0f} tokens/s with a check every {args.every:g} s "
            f"({len(checks)} checks, {busy_s:.3f} s each, median)"
        )
        print(
            f"share at the default interval ({DEFAULT_INTERVAL_S:g} s): {tokens} tokens / "
            f"{DEFAULT_INTERVAL_S:g} s / {plain:.0f} tokens/s = {100 * share:.3f} % "
            f"(at {args.every:g} s: {100 * tokens / args.every / plain:.2f} %)"
        )
        return tokens, busy_s
    finally:
        double.stop()


def detect_at_start(kind: str, env: dict[str, str]) -> None:
    double = start(env)
    try:
        begin = time.monotonic()
        verdict = fp.check(take(double.base_url, MODEL, budget()))
        took = time.monotonic() - begin
        print(
            f"{kind}: named {verdict.failure!r} by the start-up check, {took:.3f} s after healthy"
        )
    finally:
        double.stop()


def detect_drift(args: argparse.Namespace) -> None:
    double = start({"VLLM_DOUBLE_DRIFT_AFTER_S": str(args.drift_after)})
    try:
        healthy_at = time.monotonic()  # within a few ms of the double's own
        reference = take(double.base_url, MODEL, budget())
        onset = healthy_at + args.drift_after
        while True:
            verdict = fp.check(take(double.base_url, MODEL, budget()), reference)
            if not verdict.ok:
                late = time.monotonic() - onset
                print(
                    f"drift: named {verdict.failure!r} by the canary {late:.2f} s after its "
                    f"onset (interval {args.every:g} s: within one interval: {late <= args.every})"
                )
                return
            time.sleep(args.every)
    finally:
        double.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--prompt-words", type=int, default=512)
    parser.add_argument("--output", type=int, default=128)
    parser.add_argument("--ttft", type=float, default=0.05)
    parser.add_argument("--itl", type=float, default=0.02)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--drift-after", type=float, default=3.3)
    args = parser.parse_args()
    cost(args)
    detect_at_start("nan", {"VLLM_DOUBLE_NAN_AFTER": "3"})
    detect_at_start("long_context", {"VLLM_DOUBLE_GARBAGE_PAST": "2048"})
    detect_at_start("repetition", {"VLLM_DOUBLE_MODE": "incoherent", "VLLM_DOUBLE_SALAD": "repeat"})
    detect_drift(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
