"""HIP/CUDA graphs: a crash in the replay of a captured graph, a fault while capturing FULL
graphs, and a capture that failed: for a reason HIP names (a stream-capture error,
``diagnose.capture_errors``) or for one the log does not show."""

from __future__ import annotations

import json
from typing import Any

from instinct_serve.diagnose.capture_errors import (
    BY_NAME,
    INVALIDATED,
    capture_evidence,
    cause_words,
    fix_words,
)
from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.phase_lines import FRAME_IN
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules import sglang
from instinct_serve.diagnose.rules.common import at_hit
from instinct_serve.diagnose.rules.crash import (
    CRASH_GENERAL,
    FULL_CAPTURE,
    FULL_CAPTURE_LINE,
    named_crash,
)
from instinct_serve.diagnose.scan import Scan


def build_graph_replay_crash(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="graph_replay_crash",
        title="The crash is in the replay of a captured graph",
        cause="The segfault stack runs through the launch of a captured HIP/CUDA graph "
        "(at::cuda::CUDAGraph::replay -> hipGraphLaunch): a kernel or buffer captured in the "
        "graph is not valid when the graph runs again (vllm-project/vllm#35293).",
        fix="Relaunch with --enforce-eager (no graphs, so no replay: slower decoding at small "
        "batch sizes), and look for a newer image that fixes the model's graph capture.",
        retry={"add_args": ["--enforce-eager"]},
        auto_retry=True,
        **at,
    )


def _graph_replay(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = named_crash(scan, "graph_replay_crash")
    return build_graph_replay_crash(ctx, **at) if at is not None else None


PIECEWISE = {"cudagraph_mode": "PIECEWISE"}


def _piecewise_hint(ctx: DiagnoseContext) -> RetryHint | None:
    """--compilation-config with cudagraph_mode PIECEWISE, merged into the plan's own (None
    when the plan's is not a JSON object: it cannot be merged safely)."""
    current = ctx.arg("--compilation-config")
    config: Any = {}
    if current:
        try:
            config = json.loads(current)
        except ValueError:
            return None
        if not isinstance(config, dict):
            return None
    merged = {**config, **PIECEWISE}
    return {"add_args": ["--compilation-config", json.dumps(merged, separators=(",", ":"))]}


def build_attn_full_graph_capture_fault(ctx: DiagnoseContext, **at: Any) -> Finding:
    piecewise = _piecewise_hint(ctx)
    eager: RetryHint = {"add_args": ["--enforce-eager"]}
    return Finding(
        id="attn_full_graph_capture_fault",
        title="A GPU fault while capturing FULL graphs",
        cause="The GPU faulted while vLLM captured FULL (decode) graphs, after the PIECEWISE "
        "ones: the attention backend's kernel is not safe to capture whole on ROCm (Triton "
        "attention's segment buffers in vllm-project/vllm#35169, ROCM_ATTN in #36180, "
        "ROCM_AITER_FA in #36042).",
        fix="Relaunch with piecewise graphs only: --compilation-config "
        '\'{"cudagraph_mode": "PIECEWISE"}\' (attention runs outside the graphs; most of '
        "the speed stays), or a vLLM with the backend's fix (#36374/#36376 for Triton "
        "attention). --enforce-eager also avoids it, at a larger cost.",
        retry=piecewise or eager,
        alternatives=(eager,) if piecewise else (),
        auto_retry=True,
        **at,
    )


def _attn_full_capture(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = named_crash(scan, FULL_CAPTURE)
    return build_attn_full_graph_capture_fault(ctx, **at) if at is not None else None


_CAPTURE_FUNCTIONS = frozenset({"capture_model", "_capture_cudagraphs"})


def build_graph_capture_failed(
    ctx: DiagnoseContext,
    full: bool = False,
    invalidated: bool = False,
    hip_error: str | None = None,
    watchdog: bool = False,
    **at: Any,
) -> Finding:
    error = BY_NAME.get(hip_error or "")
    if ctx.sglang:
        return sglang.graph_capture_failed(ctx, invalidated, error, watchdog, **at)
    eager: RetryHint = {"add_args": ["--enforce-eager"]}
    piecewise = _piecewise_hint(ctx) if full else None
    if error is not None:  # HIP says why: the capture was refused
        return Finding(
            id="graph_capture_failed",
            title="Graph capture failed: HIP refused an operation during the capture",
            cause="A worker failed while capturing graphs. " + cause_words(error, watchdog),
            fix="Start without graphs: --enforce-eager (slower decoding). " + fix_words(watchdog),
            retry=eager,
            auto_retry=True,  # HIP refused the capture: without graphs nothing is captured
            details={"full_graphs": full, "hip_error": error.name, "watchdog": watchdog},
            **at,
        )
    return Finding(
        id="graph_capture_failed",
        title="Graph capture failed",
        cause="A worker failed while capturing graphs (its traceback runs through "
        "capture_model), after the weights were loaded and the KV cache was sized; the log "
        "does not show a known cause"
        + (" (the FULL decode graphs were being captured)" if full else "")
        + ".",
        fix="Read the worker's exception above or below the capture_model frames. To start "
        + (
            'without FULL graphs: --compilation-config \'{"cudagraph_mode": "PIECEWISE"}\'; '
            if piecewise
            else ""
        )
        + "without graphs at all: --enforce-eager (slower decoding).",
        retry=piecewise or eager,
        alternatives=(eager,) if piecewise else (),
        details={"full_graphs": full},
        **at,
    )


def _graph_capture_failed(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    """The capture_model frames, else SGLang's own capture exception, else a HIP capture
    error (``capture_errors``): each proves the capture failed; HIP's error says why."""
    evidence = capture_evidence(scan)
    hip: dict[str, Any] = {}
    if evidence is not None:
        hip = {"hip_error": evidence.error.name, "watchdog": evidence.watchdog}
    frames = [hit for hit in scan.hits(FRAME_IN) if hit.match.group(1) in _CAPTURE_FUNCTIONS]
    if frames:
        first, count = frames[0], len({hit.line.no for hit in frames})
        full = any(FULL_CAPTURE_LINE.match(line.text) for line in scan.lines[: first.index])
        return build_graph_capture_failed(ctx, full, **hip, **at_hit(first, count))
    hit, count, error = sglang.capture_failed_hit(scan)  # SGLang's own exception
    if hit is not None:
        if error is not None:  # the error it wraps
            hip = {**hip, "hip_error": error.name}
        invalidated = hip.get("hip_error") == INVALIDATED
        return build_graph_capture_failed(ctx, False, invalidated, **hip, **at_hit(hit, count))
    if evidence is None:
        return None
    return build_graph_capture_failed(ctx, **hip, **at_hit(evidence.hit, evidence.count))


RULES = (
    Rule(
        "graph_replay_crash",
        94,
        build_graph_replay_crash,
        _graph_replay,
        words(r"graph ?launch|graph::replay|graph replay|replay(?:ing)? (?:the |a )?graph"),
        supersedes=CRASH_GENERAL,
    ),
    Rule(
        "attn_full_graph_capture_fault",
        90,
        build_attn_full_graph_capture_fault,
        _attn_full_capture,
        words(
            r"\bfull\b",
            r"graph|captur",
            r"memory access fault|illegal (?:memory )?(?:access|address)|segfault|"
            r"read-only page",
        ),
        supersedes=CRASH_GENERAL,
    ),
    Rule(
        "graph_capture_failed",
        50,
        build_graph_capture_failed,
        _graph_capture_failed,
        words(r"graph|captur", r"fail|error|exception"),
    ),
)
