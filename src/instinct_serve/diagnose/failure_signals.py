"""The lines that mean a vLLM (or SGLang) start-up has failed, whatever came before them.

One table for the two readers of a log: the startup-phase tracker (a strong signal ends
the start-up: phase ``failed``) and ``diagnose`` (the last such line, or the last
exception, is the "last error" shown when no rule matches). Each entry says which program
prints the line and which finding explains it; a pattern is searched in the message of an
error-capable line (``LogLine.errorish``: ERROR, CRITICAL or unlevelled), so the same
words in a WARNING do not count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FailureSignal:
    """One wording of a fatal failure."""

    pattern: str  # a regular expression, searched in the message
    source: str  # what prints it
    finding: str | None  # the finding the line alone gives; None: earlier lines explain it
    example: str  # a real line of this kind, as it appears in a log


VLLM_FAILURE_SIGNALS: tuple[FailureSignal, ...] = (
    FailureSignal(
        r"Engine core initialization failed",
        "vLLM V1 API server: the engine core process did not come up (core_client.py)",
        "engine_core_init_failed",
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
    ),
    FailureSignal(
        r"EngineCore failed to start",
        "vLLM V1 engine core process, after its own traceback (v1/engine/core.py)",
        "engine_core_init_failed",
        "(EngineCore_DP0 pid=6880) ERROR 10-31 15:07:50 [core.py:708] EngineCore failed to start.",
    ),
    FailureSignal(
        r"Engine process failed to start",
        "vLLM V0 API server: the multiprocessing engine did not come up",
        "engine_core_init_failed",
        "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
    ),
    FailureSignal(
        r"died unexpectedly",
        "vLLM multiprocessing executor: a worker process is gone",
        "worker_died",
        "(VllmWorker rank=1 pid=2445156) ERROR 05-10 16:00:15 [multiproc_executor.py:140] "
        "Worker proc VllmWorker-1 died unexpectedly, shutting down executor.",
    ),
    FailureSignal(
        r"Got fatal signal from worker processes",
        "vLLM multiprocessing executor: a worker was killed by a signal",
        "worker_died",
        "ERROR 05-10 16:00:15 [multiproc_executor.py:140] Got fatal signal from worker "
        "processes, shutting down. See stack trace above for root cause issue.",
    ),
    FailureSignal(
        r"EngineDeadError",
        "vLLM V1 API server: the engine core died after start-up",
        None,
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
    ),
    FailureSignal(
        r"Segmentation fault",
        "CPython's faulthandler or the shell: SIGSEGV",
        "gpu_kernel_crash",
        "Fatal Python error: Segmentation fault",
    ),
    FailureSignal(
        r"Segfault encountered",
        "the ROCm PyTorch segfault handler",
        "gpu_kernel_crash",
        "!!!!!!! Segfault encountered !!!!!!!",
    ),
    FailureSignal(
        r"Fatal Python error",
        "CPython's faulthandler: the interpreter died on a signal",
        "gpu_kernel_crash",
        "Fatal Python error: Aborted",
    ),
    FailureSignal(
        r"Illegal instruction",
        "the shell: SIGILL (code built for another CPU or GPU)",
        "gpu_kernel_crash",
        "Illegal instruction (core dumped)",
    ),
    FailureSignal(
        r"\*\*\* SIGSEGV received",
        "Ray's (abseil's) fatal-signal handler in a Ray worker: SIGSEGV",
        "gpu_kernel_crash",
        "(RayWorkerWrapper pid=2191173, ip=10.52.51.232) *** SIGSEGV received at time=1746566409 "
        "on cpu 131 ***",
    ),
    FailureSignal(
        r"Queue 0x[0-9a-fA-F]+ aborting with error",
        "the ROCm runtime (rocdevice.cpp): a GPU queue was torn down after a fault",
        "gpu_kernel_crash",
        ":0:rocdevice.cpp            :3018: 183469315192d us:  Callback: Queue 0x7fb378200000 "
        "aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted "
        "to access memory beyond the largest legal address. code: 0x29",
    ),
    FailureSignal(
        r"WorkerProc hit an exception",
        "vLLM V1 multiprocessing worker: the method it ran raised (its traceback follows)",
        None,
        "(VllmWorker PP0_TP0 pid=4797) ERROR 09-29 05:54:49 [multiproc_executor.py:596] "
        "WorkerProc hit an exception.",
    ),
    FailureSignal(
        r"Aborted \(core dumped\)",
        "the shell: SIGABRT (an assertion in native code)",
        None,
        "Aborted (core dumped)",
    ),
    FailureSignal(r"Bus error", "the shell: SIGBUS", None, "Bus error (core dumped)"),
    FailureSignal(
        r"Memory access fault by GPU",
        "the ROCm runtime: a GPU page fault",
        "gpu_kernel_crash",
        "Memory access fault by GPU node-5 (Agent handle: 0x460e3a50) on address "
        "0x7ec4dfe0e000. Reason: Write access to a read-only page.",
    ),
    FailureSignal(
        r"error while attempting to bind",
        "uvicorn/asyncio: the API server's port is taken",
        "port_in_use",
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
        "address already in use",
    ),
)

# SGLang's own (``sglang/srt``): the SGLang kind's tracker reads them first
# (``diagnose.sglang_phases``); in the one table, so that ``diagnose`` reads an SGLang log's too.
SGLANG_FAILURE_SIGNALS: tuple[FailureSignal, ...] = (
    FailureSignal(
        r"Scheduler hit an exception",
        "SGLang scheduler process, after its traceback (managers/scheduler.py)",
        None,
        "[2025-03-10 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    ),
    FailureSignal(
        r"Received sigquit from a child process",
        "SGLang launcher: a scheduler or detokenizer process died (entrypoints/engine.py)",
        None,
        "[2025-03-10 10:00:01] Received sigquit from a child process. It usually means the "
        "child failed.",
    ),
    FailureSignal(
        r"TokenizerManager hit an exception",
        "SGLang tokenizer manager (managers/tokenizer_manager.py)",
        None,
        "[2025-03-10 10:00:00] TokenizerManager hit an exception: Traceback (most recent call "
        "last):",
    ),
    FailureSignal(
        r"Not enough memory\. Please try to (?:increase|decrease) --mem-fraction-static",
        "SGLang model runner: the KV pool has no room left (model_runner.py)",
        None,
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),
    FailureSignal(
        r"Initialization failed\. warmup error",
        "SGLang HTTP server: its warm-up request failed (entrypoints/http_server.py)",
        None,
        "[2025-03-10 10:00:00] Initialization failed. warmup error: ...",
    ),
)

FAILURE_SIGNALS: tuple[FailureSignal, ...] = (*VLLM_FAILURE_SIGNALS, *SGLANG_FAILURE_SIGNALS)

STRONG_FAILURE = re.compile("|".join(f"(?:{signal.pattern})" for signal in FAILURE_SIGNALS))
