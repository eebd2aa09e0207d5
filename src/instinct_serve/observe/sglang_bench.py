"""``instinct bench`` with SGLang's own client: ``python3 -m sglang.bench_serving``, the one
an ``lmsysorg/sglang`` image has (it has no vLLM). The SGLang kind's ``bench_client``.

Read from sglang 0.5.23 (``sglang/benchmark/serving.py``; ``sglang.bench_serving`` is its
older name, kept there with a FutureWarning, and the only one in older images, so it is the
one run). One step is the same measurement as vLLM's client makes (``observe.bench``):

- the same route: ``--backend sglang-oai`` streams ``/v1/completions`` (vLLM's client:
  ``--backend openai``; AMD's InferenceX runs benchmark SGLang with ``--backend vllm``, the
  same request function and route in both clients);
- the same random prompts: ``--dataset-name random-ids``, consecutive token ids from a random
  offset, as vLLM's ``random`` dataset makes them (SGLang's ``random`` cuts and repeats
  ShareGPT conversations, downloaded from the Hub: offline, it fails), with
  ``--random-range-ratio 1``: every prompt and output exactly ``--random-input-len`` /
  ``--random-output-len`` tokens (SGLang draws each length from ``[len x ratio, len]``: its
  default 0.0 would draw them from 1..len; vLLM's default 0.0 is a fixed length);
- every output that long: SGLang's client sends ``ignore_eos`` unless
  ``--disable-ignore-eos`` (vLLM's needs ``--ignore-eos``);
- no warm-up request (``--warmup-requests 0``; SGLang's default sends 1, vLLM's none), so
  the server's own counters grow by exactly the step's requests;
- its result: one JSON line appended to ``--output-file`` (``run_benchmark``'s ``result``:
  ``completed``, ``duration``, ``request_throughput``, ``output_throughput``,
  ``total_throughput``, ``{mean,median,p90,p99}_{ttft,tpot,itl}_ms`` and
  ``..._e2e_latency_ms``). It has no ``failed`` nor ``num_prompts``: the step sent
  ``--num-prompts``, and what did not complete failed.

InferenceX (``benchmarks/benchmark_lib.sh: run_benchmark_serving``) runs its own copy of
vLLM's client for SGLang too, with ``10 x concurrency`` requests, ``2 x concurrency`` warm-up
requests and a ``--random-range-ratio`` from its workflow (0.8 in its multi-node scripts);
``bench`` keeps its own defaults (``observe.bench.Settings``) for both clients.
"""

from __future__ import annotations

import json
from typing import Any

from instinct_serve.errors import UsageError
from instinct_serve.observe.bench import BenchClient, Point, Settings, latencies, number

__all__ = ["FIXED", "MODULE", "OPTIONS", "SGLANG_CLIENT", "parse_sglang_result", "sglang_args"]

MODULE = ("-m", "sglang.bench_serving")  # after python3, as in the image

# instinct bench's settings of one step, as each client spells them:
# (the step's value, vLLM's flag (observe.bench.bench_args), SGLang's flag)
OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("base_url", "--base-url", "--base-url"),
    ("model", "--model", "--model"),
    ("served_model_name", "--served-model-name", "--served-model-name"),
    ("tokenizer", "--tokenizer", "--tokenizer"),
    ("input_len", "--random-input-len", "--random-input-len"),
    ("output_len", "--random-output-len", "--random-output-len"),
    ("requests", "--num-prompts", "--num-prompts"),
    ("concurrency", "--max-concurrency", "--max-concurrency"),
    ("seed", "--seed", "--seed"),
    ("result_path", "--result-dir + --result-filename", "--output-file"),
)

# the same for every step (see the module's text for why each differs from vLLM's)
FIXED: tuple[str, ...] = (
    *("--backend", "sglang-oai"),
    *("--dataset-name", "random-ids"),
    *("--random-range-ratio", "1"),
    *("--request-rate", "inf"),
    *("--warmup-requests", "0"),
    "--disable-tqdm",
)

# Point's latencies (observe.bench.LATENCIES) as SGLang's result names them
LATENCY_NAMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e_latency"}


def step_values(
    *,
    base_url: str,
    model: str,
    served_model_name: str | None,
    tokenizer: str | None,
    concurrency: int,
    settings: Settings,
    result_dir: str,
    result_file: str,
) -> dict[str, str | None]:
    """The value of each of ``OPTIONS`` for one step (None: the flag is left out)."""
    return {
        "base_url": base_url,
        "model": model,
        "served_model_name": served_model_name if served_model_name != model else None,
        "tokenizer": tokenizer or None,
        "input_len": str(settings.input_len),
        "output_len": str(settings.output_len),
        "requests": str(settings.requests_for(concurrency)),
        "concurrency": str(concurrency),
        "seed": str(settings.seed),
        "result_path": f"{result_dir.rstrip('/')}/{result_file}",
    }


def sglang_args(**step: Any) -> list[str]:
    """What follows ``python3`` for one step (called as ``observe.bench.bench_args`` is)."""
    values = step_values(**step)
    argv = [*MODULE, *FIXED]
    for key, _vllm, flag in OPTIONS:
        value = values[key]
        if value is not None:
            argv += [flag, value]
    return argv


def parse_sglang_result(text: str, concurrency: int, requests: int) -> Point:
    """A step from the last line of SGLang's ``--output-file`` (JSON Lines, appended to);
    ``requests``: what the step sent (``--num-prompts``)."""
    lines = [line for line in text.splitlines() if line.strip()]
    doc = json.loads(lines[-1]) if lines else None
    if not isinstance(doc, dict) or "completed" not in doc or "total_throughput" not in doc:
        raise UsageError(
            "not a sglang.bench_serving result (no 'completed' and 'total_throughput' fields)",
            fix="give a file written by `python3 -m sglang.bench_serving --output-file`",
            id="bad_bench_result",
        )
    completed = doc["completed"] if isinstance(doc["completed"], int) else None
    return Point(
        concurrency=concurrency,
        requests=requests,
        completed=completed,
        failed=None if completed is None else max(requests - completed, 0),
        duration_s=number(doc, "duration"),
        request_throughput=number(doc, "request_throughput"),
        output_throughput=number(doc, "output_throughput"),
        total_token_throughput=number(doc, "total_throughput"),
        latency_ms=latencies(doc, LATENCY_NAMES),
    )


SGLANG_CLIENT = BenchClient(
    "sglang.bench_serving", "python3", sglang_args, ".jsonl", parse_sglang_result
)
