"""A crash line, and the kernel it names: not a failure family but the evidence the kernel,
graph-capture and distributed families share (each reads which finding a crash proves)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from instinct_serve.diagnose.failure_signals import FAILURE_SIGNALS
from instinct_serve.diagnose.logline import LogLine
from instinct_serve.diagnose.rules.common import at_hit
from instinct_serve.diagnose.scan import Hit, Scan, exc

# A crash line: the failure signals that mean a crash (failure_signals, the one table), and
# the wordings of the exceptions a GPU fault raises.
CRASH = exc(
    r".{0,200}(?:"
    + "|".join(s.pattern for s in FAILURE_SIGNALS if s.finding == "gpu_kernel_crash")
    + r"|illegal instruction was encountered|hipErrorIllegalInstruction|"
    r"illegal memory access was encountered|hipErrorIllegalAddress|"
    r"HSA_STATUS_ERROR_(?:EXCEPTION|MEMORY_APERTURE_VIOLATION|ILLEGAL_INSTRUCTION))"
)


# --------------------------------------------------------------------------- named kernels
# A crash names its kernel in the stack printed right after the crash line (the segfault
# handler's frames, Ray's "PC: @ ... addProxyOpIfNeeded()") or in the lines just before it
# (the kernel loaded or the warm-up step announced). One table: each signature, where it is
# read, and the finding it proves. A crash that names a kernel is that kernel's finding, not
# the generic crash, and not the gfx942 FP4BMM guess.


@dataclass(frozen=True)
class KernelSignature:
    finding: str
    pattern: re.Pattern[str]
    where: tuple[Literal["stack", "before"], ...]  # read in the crash's stack, lines before


KERNEL_SIGNATURES: tuple[KernelSignature, ...] = (
    # ROCm/aiter#4830: AITER's top-k/top-p sampler (JIT module name with a hash suffix)
    KernelSignature(
        "aiter_sampler_segfault",
        re.compile(r"\btop_k_top_p_sampling_from_probs_[0-9a-f]{8,}|\baiter\W+\w*sampling"),
        ("stack",),
    ),
    # vllm#17770, #17242: NCCL's proxy (RCCL keeps the names)
    KernelSignature(
        "nccl_proxy_segfault",
        re.compile(r"\b(?:addProxyOpIfNeeded|ncclProxy\w+|proxyProgress\w*)\b"),
        ("stack",),
    ),
    # ROCm/aiter#4302: the CK-tile rmsnorm kernel
    KernelSignature(
        "aiter_rmsnorm_unsupported_arch",
        re.compile(r"ck_tile::Rmsnorm2dFwd|\brmsnorm2d_fwd"),
        ("stack",),
    ),
    # vllm#43605, ROCm/aiter#3471: an AITER fused-MoE kernel loaded (or running) at the fault
    KernelSignature(
        "aiter_moe_kernel_fault",
        re.compile(r"\bfmoe_\w+|\bck_moe_stage\d|\baiter\W+\w*fused_moe"),
        ("before", "stack"),
    ),
    # vllm#35293: the crash is in the replay of a captured graph (hipGraphLaunch on ROCm)
    KernelSignature(
        "graph_replay_crash",
        re.compile(r"CUDAGraph::replay|\b(?:hip|cuda|cu)GraphLaunch\b"),
        ("stack",),
    ),
    # vllm#57354: the DeepSeek-V4 sparse-MLA warm-up step
    KernelSignature(
        "dsv4_sparse_mla_warmup_segfault",
        re.compile(r"^Warming up DeepSeek[- ]?V4 sparse MLA"),
        ("before",),
    ),
)
_STACK_LINE = re.compile(
    r'^(?:\s|PC: @|@\s|File "|Thread 0x|Current thread 0x|Stack \(most recent call first\))'
    r"|logging\.cc:\d+: "
)
_BEFORE_LINES = 6
_STACK_LINES = 40
# Graph capture markers, latest first wins: a fault after a FULL marker and before the
# next PIECEWISE marker or the end of capture is a fault of FULL capture.
FULL_CAPTURE_LINE = re.compile(
    r"^Capturing CUDA graphs? \([^)]*\bFULL\)|^Capturing a cudagraph on \(FULL\b"
)
_NOT_FULL_CAPTURE = re.compile(
    r"^Capturing CUDA graphs? \([^)]*\bPIECEWISE\)|^Capturing a cudagraph on \(PIECEWISE\b"
    r"|^Graph capturing finished"
)
FULL_CAPTURE = "attn_full_graph_capture_fault"


def _stack_after(scan: Scan, index: int) -> list[LogLine]:
    stack = []
    for line in scan.lines[index + 1 : index + 1 + _STACK_LINES]:
        if not _STACK_LINE.search(line.text):
            break
        stack.append(line)
    return stack


def _in_full_capture(scan: Scan, index: int) -> bool:
    if scan.phase_at(index) != "capturing_graphs":
        return False
    for line in reversed(scan.lines[max(0, index - 400) : index]):
        if FULL_CAPTURE_LINE.match(line.text):
            return True
        if _NOT_FULL_CAPTURE.match(line.text):
            return False
    return False


def named_crashes(scan: Scan) -> dict[str, tuple[Hit, int]]:
    """Each finding a crash line's own evidence names (``KERNEL_SIGNATURES``, and FULL graph
    capture), with its first crash line and how many crash lines name it."""
    if "named_crashes" in scan.memo:
        named: dict[str, tuple[Hit, int]] = scan.memo["named_crashes"]
        return named
    named = {}
    for hit in scan.hits(CRASH):
        text = {
            "stack": [line.text for line in _stack_after(scan, hit.index)] + [hit.line.text],
            "before": [
                scan.lines[i].text
                for i in range(max(0, hit.index - _BEFORE_LINES), hit.index)
                if i not in scan.echo
            ],
        }
        found = {
            sig.finding
            for sig in KERNEL_SIGNATURES
            if any(sig.pattern.search(t) for where in sig.where for t in text[where])
        }
        if not found and _in_full_capture(scan, hit.index):
            found = {FULL_CAPTURE}
        for finding in found:
            first, count = named.get(finding, (hit, 0))
            named[finding] = (first, count + 1)
    scan.memo["named_crashes"] = named
    return named


def named_crash(scan: Scan, finding: str) -> dict[str, Any] | None:
    """The evidence fields of the crash lines that name ``finding``; None when none does."""
    found = named_crashes(scan).get(finding)
    return at_hit(*found) if found else None


# A crash a rule explains by its kernel: the generic crash, and "graph capture failed" when
# the kernel crashed in capture, are the same failure, explained better.
CRASH_GENERAL = ("gpu_kernel_crash", "graph_capture_failed")
