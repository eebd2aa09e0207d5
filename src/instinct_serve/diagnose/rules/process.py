"""The wrapper errors: the engine that failed to start and the worker that died report a
failure whose cause is elsewhere in the log (ranked last, so the cause comes first)."""

from __future__ import annotations

from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.common import at_hit
from instinct_serve.diagnose.scan import Scan, exc

_ENGINE_WRAPPER = exc(
    r"Engine core initialization failed|EngineCore failed to start|"
    r"Engine process failed to start|EngineCore hit an exception"
)
_WORKER_DIED = exc(r"Worker proc \S+ died unexpectedly|Got fatal signal from worker processes")

COMMON_CAUSES = (
    "out of memory while loading, profiling or capturing graphs",
    "a KV cache too small for --max-model-len",
    "a gated, private or missing model",
    "a failed JIT kernel build",
    "an image not built for this GPU",
)


def build_engine_core_init_failed(
    ctx: DiagnoseContext, last_phase: str | None = None, **at: Any
) -> Finding:
    reached = (
        f" The start-up had reached: {last_phase}."
        if last_phase and last_phase != "starting"
        else ""
    )
    return Finding(
        id="engine_core_init_failed",
        title="The vLLM engine failed to start (wrapper error)",
        cause="The API server reports that the engine process died during initialisation. This "
        "line only wraps the real error, which the engine core or a worker printed earlier in "
        f"the log.{reached}",
        fix="Read the first error or traceback above this line (instinct diagnose recognises "
        "most of them). Common causes: " + "; ".join(COMMON_CAUSES) + ".",
        generic=True,
        details={"last_phase": last_phase, "common_causes": list(COMMON_CAUSES)},
        **at,
    )


def _engine_wrapper(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_ENGINE_WRAPPER)
    if hit is None:
        return None
    return build_engine_core_init_failed(ctx, scan.facts.get("phase_reached"), **at_hit(hit, count))


def build_worker_died(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="worker_died",
        title="A vLLM worker process died",
        cause="A GPU worker process exited; the engine shut down with it. The reason is printed "
        "earlier by that worker (an exception), or it was killed (segfault, host OOM killer).",
        fix="Look for the first error of the worker above this line; if there is none, check "
        "the host kernel log (dmesg) for the OOM killer or a GPU reset.",
        generic=True,
        **at,
    )


def _worker_died(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_WORKER_DIED)
    return build_worker_died(ctx, **at_hit(hit, count)) if hit else None


RULES = (
    Rule(
        "worker_died",
        12,
        build_worker_died,
        _worker_died,
        words(r"worker.{0,40}died|died unexpectedly"),
    ),
    Rule(
        "engine_core_init_failed",
        10,
        build_engine_core_init_failed,
        _engine_wrapper,
        words(r"engine ?core|engine process failed"),
    ),
)
