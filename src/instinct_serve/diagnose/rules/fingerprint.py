"""A healthy endpoint whose fingerprint failed (``observe.fingerprint``): it computes
something else than a healthy kernel would. Serve and watch observe it and pass the
failure's name as a signal (``fingerprint_<failure>``); this family names the known
kernel fallback for it: a matching row of the validated-stack table first (its fix, its
public source), else the AITER switch, then eager mode, one relaunch at a time."""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.stacks import known_bad_rows, retry_of
from instinct_serve.diagnose.scan import Scan

PREFIX = "fingerprint_"
KINDS = {
    "nan": "NaN or infinite log-probabilities after the first tokens (vllm#51580)",
    "repetition": "a stream of one repeated token in greedy decoding",
    "long_context": "scores that diverge only on the long prompt (vllm#40018, vllm#46856)",
    "drift": "scores that moved beyond the platform's tolerance (aiter#1455)",
}
# the validated-stack rows about wrong numbers (not crashes, hangs or speed)
WRONG_NUMBERS = re.compile(
    r"\bNaN\b|garbage|gibberish|word salad|wrong (?:output|answers|results)|accuracy|"
    r"incoherent|repeat",
    re.IGNORECASE,
)
# the generic kernel fallbacks, most likely first: every AITER kernel off, then no graphs
AITER_OFF: RetryHint = {"set_env": {"VLLM_ROCM_USE_AITER": "0"}}
EAGER: RetryHint = {"add_args": ["--enforce-eager"]}
# SGLang's switches for the same (diagnose.rules.sglang's crash finding names them too)
SGLANG_AITER_OFF: RetryHint = {"set_env": {"SGLANG_USE_AITER": "0"}}
SGLANG_NO_GRAPHS: RetryHint = {"add_args": ["--disable-cuda-graph"]}


def kernel_fallbacks(server: str | None) -> tuple[RetryHint, RetryHint]:
    """The server's switches for a kernel that computes wrong numbers: AITER off, no graphs."""
    return (SGLANG_AITER_OFF, SGLANG_NO_GRAPHS) if server == "sglang" else (AITER_OFF, EAGER)


def fallback_words(server: str | None) -> str:
    """``SGLANG_USE_AITER=0 or --disable-cuda-graph`` (vLLM: ``VLLM_ROCM_USE_AITER=0 or
    --enforce-eager``): the words of ``kernel_fallbacks``."""
    return " or ".join(_words(hint) for hint in kernel_fallbacks(server))


def failure_of(ctx: DiagnoseContext) -> str | None:
    """The fingerprint failure serve signalled, if any."""
    for signal in ctx.signals:
        if signal.startswith(PREFIX):
            return signal.removeprefix(PREFIX)
    return None


def _words(hint: RetryHint) -> str:
    env = (f"{k}={v}" for k, v in hint.get("set_env", {}).items())
    return " ".join([*hint.get("add_args", []), *env])


def build_wrong_output(ctx: DiagnoseContext, **at: Any) -> Finding:
    kind = failure_of(ctx) or "drift"
    rows = [r for r in known_bad_rows(ctx) if WRONG_NUMBERS.search(r.symptom)]
    options: list[RetryHint] = []
    cited = ""
    for row in rows:
        hint = retry_of(row)
        if hint is not None and hint not in options:
            options.append(hint)
    if rows:
        cited = " Known-bad stack rows that hold for this launch: " + "; ".join(
            f"{r.id}: {r.symptom} ({r.source})" for r in rows
        )
    aiter_off, no_graphs = kernel_fallbacks(ctx.server)
    if any(ctx.env.get(k) != v for k, v in aiter_off.get("set_env", {}).items()):
        options.append(aiter_off)
    if not all(ctx.has_flag(flag) for flag in no_graphs.get("add_args", [])):
        options.append(no_graphs)
    steps = "; then ".join(_words(o) for o in options) or "an earlier image (`instinct rollback`)"
    return Finding(
        id="wrong_output",
        title=f"The endpoint computes wrong numbers: {kind}",
        cause=f"The server is healthy, but its fingerprint shows {KINDS.get(kind, kind)}. A "
        "kernel computes wrong results for this model on this GPU and image." + cited,
        fix=f"Relaunch with, one at a time until the fingerprint passes: {steps}; or go back "
        "to the previous image (`instinct rollback NAME`).",
        retry=options[0] if options else None,
        alternatives=tuple(options[1:]),
        auto_retry=bool(options),
        details={"failure": kind, "stacks": [r.id for r in rows]},
        **at,
    )


def _wrong_output(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    if failure_of(ctx) is None:
        return None
    return build_wrong_output(ctx)


RULES = (
    Rule(
        "wrong_output",
        99,
        build_wrong_output,
        _wrong_output,
        words(
            r"nan|inf(?:inite)?|wrong (?:answers|numbers|output)|logprob|accuracy|drift|"
            r"diverg|long context|repeat"
        ),
    ),
)
