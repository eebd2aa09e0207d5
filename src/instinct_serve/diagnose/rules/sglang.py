"""The known failures in SGLang's words: the same finding ids as vLLM's (a KV cache with no
room, out of memory in a step, a failed graph capture, an NCCL/RCCL set-up failure), with the
cause and the fix in SGLang's terms and flags (``--mem-fraction-static``, ``--cuda-graph-max-bs``,
``--disable-cuda-graph``, ``--chunked-prefill-size``, ``--context-length``, ``--tp``).

Each family's builder hands over here when the log is SGLang's (``DiagnoseContext.sglang``:
named by the caller, or read from the log, ``sglang_phases.is_sglang_log``), so one rule
registers each failure and only its words differ. The evidence only SGLang prints is read here
too: its KV-pool error and the pool it profiled (``model_runner.py``), and its graph-capture
exception (``cuda_graph_runner.py``), with the HIP capture error it wraps
(``diagnose.capture_errors``, which words why HIP refused the capture). Sources: the SGLang
logs of tests/fixtures/logs/public (``cases.json``, ``server: sglang``).
"""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.diagnose.capture_errors import (
    FIXED_IN_ROCM,
    CaptureError,
    capture_error_in,
    cause_words,
    fix_words,
)
from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.scan import Hit, Scan, exc
from instinct_serve.diagnose.shell import issue_search

_FRACTION = "--mem-fraction-static"
_TP = ("--tp", "--tp-size", "--tensor-parallel-size")

# model_runner.py: raised when the profiled KV pool is <= 0
NOT_ENOUGH_MEMORY = exc(r"Not enough memory\. Please try to increase --mem-fraction-static")
# logged just before that error when --max-total-tokens (or a DP-attention default) asks for
# more than the pool: a value <= 0 is a pool with no room
_PROFILED = re.compile(r"is larger than the profiled value (-\d+|0)\b")
# what SGLang prints once its pool exists: a non-positive profile that is followed by one was
# not fatal (a draft model's pool, a later re-profile)
_POOL_PROGRESS = re.compile(
    r"KV Cache is allocated|Capture (?:cuda|hip|npu) graph begin|The server is fired up"
)
# cuda_graph_runner.py: "Exception: Capture cuda graph failed: <the error>"
CAPTURE_FAILED = re.compile(r"^\s*(?:\w*Exception: )?Capture (?:cuda|hip|npu) graph failed: (.*)")


def no_pool_hit(scan: Scan) -> tuple[Hit | None, int]:
    """SGLang's evidence that its KV pool has no room: the error or, when the log stops
    before it, a non-positive profiled pool with no pool after it."""
    hit, count = scan.first(NOT_ENOUGH_MEMORY)
    if hit is not None:
        return hit, count
    profiled = list(scan.hits(_PROFILED, errorish=False, search=True))
    if not profiled:
        return None, 0
    after = scan.lines[profiled[0].index + 1 :]
    if any(_POOL_PROGRESS.search(line.text) for line in after):
        return None, 0
    return profiled[0], len({hit.line.no for hit in profiled})


def kv_cache_no_memory(ctx: DiagnoseContext, **at: Any) -> Finding:
    """SGLang's pool is what --mem-fraction-static leaves after the weights."""
    now = ctx.float_arg(_FRACTION)
    raised = 0.85 if now is None or now < 0.8 else min(0.95, round(now + 0.03, 2))
    retry: RetryHint | None = None
    if now is None or raised > now:
        retry = {"add_args": [_FRACTION, f"{raised:g}"]}
    at_now = f" ({_FRACTION} {now:g})" if now is not None else ""
    return Finding(
        id="kv_cache_no_memory",
        title="No memory left for SGLang's KV pool",
        cause=f"SGLang sizes its KV pool from {_FRACTION}, the share of each GPU's memory for "
        f"the weights and the pool together: after the weights, nothing of it{at_now} was "
        "left for the pool, so the profiled pool was empty (model_runner.py: 'Not enough "
        "memory').",
        fix=f"Raise {_FRACTION} (e.g. {raised:g}) if nothing else uses the GPU. If it is "
        "already about 0.9, the weights per GPU leave no room: more GPUs (--tp) or a quantized "
        "checkpoint; a smaller --context-length or --kv-cache-dtype fp8_e4m3 makes the pool "
        "smaller, not the weights.",
        retry=retry,
        details={"mem_fraction_static": now},
        **at,
    )


def _lower_fraction(ctx: DiagnoseContext) -> float:
    now = ctx.float_arg(_FRACTION)
    return round((now if now else 0.88) - 0.05, 2)


def oom(ctx: DiagnoseContext, stage: str | None, detail: str = "", **at: Any) -> Finding:
    """Out of memory in SGLang, by the step the log shows (``memory._oom_stage``)."""
    lower = _lower_fraction(ctx)
    if stage == "capture":
        return Finding(
            id="oom_graph_capture",
            title="Out of memory while capturing HIP/CUDA graphs",
            cause="SGLang captures its decode graphs (batch sizes up to --cuda-graph-max-bs) "
            f"after the KV pool is allocated; they live in the memory {_FRACTION} leaves "
            "outside the weights and the pool, and that was too small.",
            fix="Relaunch with a smaller --cuda-graph-max-bs (e.g. 16) or a lower "
            f"{_FRACTION} (e.g. {lower}); --disable-cuda-graph starts without graphs (slower "
            "decoding at small batch sizes).",
            retry={"add_args": ["--cuda-graph-max-bs", "16"]},
            alternatives=(
                {"add_args": [_FRACTION, f"{lower:g}"]},
                {"add_args": ["--disable-cuda-graph"]},
            ),
            auto_retry=True,
            **at,
        )
    if stage == "weights":
        tp = ctx.int_arg(*_TP) or 1
        return Finding(
            id="oom_weights",
            title="Out of memory while loading the weights",
            cause=f"The weights do not fit in the memory of each GPU at --tp {tp}{detail}.",
            fix=f"Spread them over more GPUs (--tp {tp * 2}) or serve a quantized checkpoint; "
            "check that no other process holds GPU memory (amd-smi process).",
            commands=("amd-smi process",),
            **at,
        )
    if stage == "profiling":
        return Finding(
            id="oom_profiling",
            title="Out of memory after SGLang allocated its KV pool",
            cause=f"What {_FRACTION} leaves outside the weights and the KV pool (a prefill "
            "chunk's activations, the attention backend's buffers) did not hold them.",
            fix=f"Lower {_FRACTION} (e.g. {lower}) for a smaller pool, or a smaller "
            "--chunked-prefill-size (e.g. 4096); a shorter --context-length shrinks the "
            "buffers some attention backends size by it (AITER's on ROCm).",
            retry={"add_args": [_FRACTION, f"{lower:g}"]},
            commands=("amd-smi process",),
            **at,
        )
    return Finding(
        id="out_of_memory",
        title="GPU out of memory",
        cause="The GPU ran out of memory; the log does not show in which step.",
        fix=f"Lower {_FRACTION} (e.g. {lower}): it leaves more memory outside the weights and "
        "the KV pool, for activations, the attention backend's buffers and graphs. While "
        "capturing graphs: a smaller --cuda-graph-max-bs or --disable-cuda-graph; while "
        "prefilling: a smaller --chunked-prefill-size; while loading: more GPUs (--tp) or a "
        "quantized checkpoint. Check for other processes with amd-smi process.",
        commands=("amd-smi process",),
        **at,
    )


def graph_capture_failed(
    ctx: DiagnoseContext,
    invalidated: bool = False,
    error: CaptureError | None = None,
    watchdog: bool = False,
    **at: Any,
) -> Finding:
    eager: RetryHint = {"add_args": ["--disable-cuda-graph"]}
    aiter_ar: RetryHint = {"set_env": {"SGLANG_USE_AITER_AR": "false"}}
    rocm = (
        " On ROCm, hipErrorStreamCaptureInvalidated means the capture was broken by work "
        "outside it: with AITER's custom all-reduce that is sgl-project/sglang#23580, and "
        "SGLANG_USE_AITER_AR=false (SGLang's default since #23581) keeps the graphs; the "
        "thread traced it further to ROCm 7.2.0's event query from the NCCL/RCCL watchdog "
        f"(pytorch/pytorch#177309), fixed in ROCm {FIXED_IN_ROCM}: an image on ROCm "
        f"{FIXED_IN_ROCM} or later keeps them too."
        if invalidated
        else ""
    )
    if error is not None and not invalidated:
        return Finding(
            id="graph_capture_failed",
            title="Graph capture failed: HIP refused an operation during the capture",
            cause="SGLang's graph capture failed (after the weights and the KV pool were in "
            "place). " + cause_words(error, watchdog),
            fix="Start without graphs with --disable-cuda-graph (slower decoding) to confirm "
            "the model runs. " + fix_words(watchdog),
            retry=eager,
            auto_retry=True,  # HIP refused the capture: without graphs nothing is captured
            details={"hip_error": error.name, "watchdog": watchdog},
            **at,
        )
    return Finding(
        id="graph_capture_failed",
        title="Graph capture failed",
        cause="SGLang's graph capture raised (cuda_graph_runner.py: 'Capture cuda graph "
        "failed'), after the weights and the KV pool were in place.",
        fix="Start without graphs with --disable-cuda-graph (slower decoding) to confirm the "
        "model runs, or capture fewer batch sizes (--cuda-graph-max-bs); --debug-cuda-graph "
        "shows the error underneath." + rocm,
        retry=eager,
        alternatives=(aiter_ar,) if invalidated else (),
        details={"capture_invalidated": invalidated},
        **at,
    )


def capture_failed_hit(scan: Scan) -> tuple[Hit | None, int, CaptureError | None]:
    """SGLang's capture exception (not an out-of-memory one, which ``memory`` reads), and
    the HIP capture error it wraps (on its line or the next three), if any."""
    hit, count = scan.first(CAPTURE_FAILED)
    if hit is None or "out of memory" in hit.match.group(1):
        return None, 0, None
    around = (capture_error_in(line.text) for line in scan.window(hit.index, 0, 3))
    return hit, count, next((error for error in around if error is not None), None)


REPO = "sgl-project/sglang"  # where ``issue_search`` looks for an SGLang error


def gpu_kernel_crash(ctx: DiagnoseContext, message: str | None = None, **at: Any) -> Finding:
    """A crash with no named kernel: SGLang's switches to narrow it down."""
    return Finding(
        id="gpu_kernel_crash",
        title="A GPU kernel crashed the server",
        cause="A segfault, abort or GPU memory-access fault killed an SGLang scheduler: usually "
        "a kernel that does not support this GPU, model shape or quantization in this SGLang "
        "build, or a graph capture or replay that went wrong.",
        fix="Try, in order: --disable-cuda-graph (capture and replay bugs), SGLANG_USE_AITER=0 "
        "(to confirm an AITER kernel), --attention-backend triton, a newer SGLang build; and "
        "search upstream issues for the crash line.",
        retry={"add_args": ["--disable-cuda-graph"]},
        alternatives=(
            {"set_env": {"SGLANG_USE_AITER": "0"}},
            {"add_args": ["--attention-backend", "triton"]},
        ),
        commands=(issue_search(message, "ROCm segmentation fault", REPO),),
        **at,
    )


def rccl_error(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="rccl_error",
        title="Collective communication (NCCL/RCCL) failed",
        cause="NCCL (RCCL on ROCm) failed to set up the communicator between SGLang's "
        "tensor-parallel ranks (ncclCommInitRank, in init_torch_distributed): most often too "
        "little /dev/shm in the container, or a network transport NCCL chose (InfiniBand/RoCE) "
        "that does not work between the GPUs.",
        fix="Run the container with --ipc=host (or --shm-size 16g); rerun with NCCL_DEBUG=INFO "
        "to see which transport failed (on one host, NCCL_IB_DISABLE=1 rules out "
        "InfiniBand/RoCE); as a test, --tp 1 needs no communicator.",
        retry={"set_env": {"NCCL_DEBUG": "INFO"}},
        **at,
    )
