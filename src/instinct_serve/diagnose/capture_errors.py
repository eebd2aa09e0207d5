"""The errors HIP returns for work that a stream capture does not allow: one table, read by
the phase tracker (such an error proves a graph was being captured) and by the graph-capture
rule (``rules.graphs``: the capture failed, and why).

The names and messages are HIP's own (``ihipGetErrorString`` in ROCm/clr
``hipamd/src/hip_error.cpp`` @ 0bf2a9834c56f4f1bb3641f5558045225b2c95bf), the same words as
CUDA's; PyTorch prints them as ``HIP error: <message>`` (``CUDA error: <message>`` in some
ROCm builds) followed by ``Search for `<name>' in ...``. Since ROCm 7.0 HIP returns them
where CUDA does (ROCm/hip#3821, "Add compatibility changes for 7.0": ``hipEventQuery`` and
``hipStreamAddCallback`` during capture), so work that ROCm 6 let through now aborts the
capture (ROCm/rccl#2022, the RCCL maintainer: "ROCm 7.0 behavior change to match CUDA").
Where the line is PyTorch's NCCL/RCCL watchdog ("Process group watchdog thread terminated
with exception"), the watchdog's event query broke another thread's capture: on ROCm up to
7.2.0 ``hipEventQuery`` ignored the thread-local capture mode (pytorch/pytorch#177309,
workaround #176251; HIP's fix ROCm/rocm-systems#3176, in ROCm 7.2.1). Calibration logs:
tests/fixtures/logs/public ``18``, ``19`` (vLLM) and ``41`` (SGLang). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from instinct_serve.diagnose.scan import Hit, Scan


@dataclass(frozen=True)
class CaptureError:
    """One HIP stream-capture error: its name and ``hipGetErrorString``'s message."""

    name: str
    message: str


CAPTURE_ERRORS: tuple[CaptureError, ...] = (
    CaptureError(
        "hipErrorStreamCaptureUnsupported",
        "operation not permitted when stream is capturing",
    ),
    CaptureError(
        "hipErrorStreamCaptureInvalidated",
        "operation failed due to a previous error during capture",
    ),
    CaptureError(
        "hipErrorStreamCaptureMerge",
        "operation would result in a merge of separate capture sequences",
    ),
    CaptureError(
        "hipErrorStreamCaptureUnmatched",
        "capture was not ended in the same stream as it began",
    ),
    CaptureError(
        "hipErrorStreamCaptureUnjoined",
        "capturing stream has unjoined work",
    ),
    CaptureError(
        "hipErrorStreamCaptureIsolation",
        "dependency created on uncaptured work in another stream",
    ),
    CaptureError(
        "hipErrorStreamCaptureImplicit",
        "operation would make the legacy stream depend on a capturing blocking stream",
    ),
    CaptureError(
        "hipErrorCapturedEvent",
        "operation not permitted on an event last recorded in a capturing stream",
    ),
    CaptureError(
        "hipErrorStreamCaptureWrongThread",
        "attempt to terminate a thread-local capture sequence from another thread",
    ),
)
BY_NAME = {error.name: error for error in CAPTURE_ERRORS}
INVALIDATED = "hipErrorStreamCaptureInvalidated"

# The error's message, however it is wrapped (PyTorch's "HIP error: <message>", "CUDA error:
# <message>" in some ROCm builds, hipBLASLt's "Hip error: '<message>'(900) at hipblaslt.cpp:147"
# in ROCm/ATOM#1506), or its name (PyTorch's "Search for `<name>'", CUDA's spelling of it).
_MESSAGE = re.compile("(" + "|".join(re.escape(e.message) for e in CAPTURE_ERRORS) + ")")
_NAME = re.compile(r"\b(?:hip|cuda)Error(StreamCapture(?:[A-Z][a-z]+)+|CapturedEvent)\b")
# PyTorch's c10d (ProcessGroupNCCL) watchdog thread: RCCL on ROCm keeps NCCL's names
_WATCHDOG = re.compile(r"watchdog thread terminated with exception")
_ANY = re.compile(_MESSAGE.pattern + "|" + _NAME.pattern)


def capture_error_in(text: str) -> CaptureError | None:
    """The capture error a line names (by its message or its name), if any."""
    m = _MESSAGE.search(text)
    if m:
        return next(e for e in CAPTURE_ERRORS if e.message == m.group(1))
    m = _NAME.search(text)
    if m:
        return BY_NAME.get("hipError" + m.group(1))
    return None


@dataclass(frozen=True)
class CaptureEvidence:
    """The first line with a capture error, how many lines name one, the first line's error,
    and whether PyTorch's NCCL/RCCL watchdog raised it (its words on an error's line)."""

    hit: Hit
    count: int
    error: CaptureError
    watchdog: bool


def capture_evidence(scan: Scan) -> CaptureEvidence | None:
    """The log's capture errors (error-capable lines only), or None."""
    hits = [(hit, capture_error_in(hit.line.text)) for hit in scan.hits(_ANY, search=True)]
    found = [(hit, error) for hit, error in hits if error is not None]
    if not found:
        return None
    first, error = found[0]
    watchdog = any(_WATCHDOG.search(hit.line.text) for hit, _ in found)
    return CaptureEvidence(first, len({hit.line.no for hit, _ in found}), error, watchdog)


# --------------------------------------------------------------------------- the words
# Server-agnostic: each server's finding adds its own flag to start without graphs.
FIXED_IN_ROCM = "7.2.1"  # HIP's fix of the watchdog's event query (ROCm/rocm-systems#3176)


def cause_words(error: CaptureError, watchdog: bool) -> str:
    """Why HIP refused the capture, from the error and where it was raised."""
    said = f"HIP returned {error.name} ('{error.message}')"
    if watchdog:
        return (
            f"{said} to PyTorch's NCCL/RCCL watchdog thread, which queries its collectives' "
            "events while another thread captures the graph: on ROCm up to 7.2.0 that query "
            "breaks the capture (pytorch/pytorch#177309; HIP's fix ROCm/rocm-systems#3176 is "
            f"in ROCm {FIXED_IN_ROCM}), and the watchdog's exception aborts the process."
        )
    return (
        f"{said} during the capture: since ROCm 7.0 HIP refuses, as CUDA does, calls that are "
        "not allowed while a stream captures (ROCm/rccl#2022), such as an event query or a "
        "library handle (hipBLAS/hipBLASLt) first created on a capture stream that never ran "
        "the warm-up (ROCm/TransformerEngine#644, vllm-project/vllm#53818)."
    )


def fix_words(watchdog: bool) -> str:
    """What keeps the graphs, and how to see the offending call."""
    keep = f"An image on ROCm {FIXED_IN_ROCM} or later keeps the graphs (the HIP fix). "
    return (keep if watchdog else "") + (
        "Rerun with AMD_LOG_LEVEL=4 and grep hipError to see the call that broke the capture."
    )
