"""Communication between the GPUs and nodes: NCCL/RCCL failing to set up or run a
collective, and NCCL's proxy thread crashing."""

from __future__ import annotations

from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.common import at_hit, older
from instinct_serve.diagnose.rules.crash import CRASH_GENERAL, named_crash
from instinct_serve.diagnose.scan import Scan, exc
from instinct_serve.diagnose.shell import issue_search

V0_REMOVED_IN = "0.11.0"  # the last vLLM with the V0 engine (VLLM_USE_V1=0) is 0.10.x


def build_nccl_proxy_segfault(ctx: DiagnoseContext, **at: Any) -> Finding:
    v0 = older(ctx.vllm_version, V0_REMOVED_IN)
    retry: RetryHint | None = {"set_env": {"VLLM_USE_V1": "0"}} if v0 else None
    return Finding(
        id="nccl_proxy_segfault",
        title="NCCL/RCCL crashed in its proxy thread",
        cause="A worker segfaulted inside NCCL's proxy (addProxyOpIfNeeded; RCCL on ROCm keeps "
        "the names) while the workers ran a collective: reported for multi-node Ray runs of "
        "the V1 engine in vLLM 0.8.4, during graph capture (vllm-project/vllm#17770, #17242). "
        "Not a model kernel: AITER and eager switches do not address it.",
        fix="Use a newer image (its NCCL/RCCL and vLLM); on vLLM 0.8-0.10 the V0 engine "
        "(VLLM_USE_V1=0) starts; rerun with NCCL_DEBUG=INFO to see the transport; check that "
        "all nodes run the same image.",
        retry=retry,
        commands=(issue_search("addProxyOpIfNeeded SIGSEGV", "NCCL segfault"),),
        **at,
    )


def _nccl_proxy(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = named_crash(scan, "nccl_proxy_segfault")
    return build_nccl_proxy_segfault(ctx, **at) if at is not None else None


_RCCL = (
    exc(r".{0,200}(?:NCCL|RCCL) error.{0,200}unhandled (?:system|cuda) error"),
    exc(r".{0,200}(?:ncclSystemError|ncclUnhandledCudaError|ncclInternalError)"),
)


def build_rccl_error(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="rccl_error",
        title="Collective communication (RCCL) failed",
        cause="RCCL, which connects the tensor-parallel GPUs, failed to set up or to run a "
        "collective: most often too little /dev/shm in the container, sometimes a "
        "peer-to-peer or IOMMU/ACS setting of the host.",
        fix="Run the container with --ipc=host (or --shm-size 16g); rerun with NCCL_DEBUG=INFO "
        "to see which transport failed; as a test, --tensor-parallel-size 1 avoids RCCL.",
        retry={"set_env": {"NCCL_DEBUG": "INFO"}},
        **at,
    )


def _rccl(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_RCCL)
    return build_rccl_error(ctx, **at_hit(hit, count)) if hit else None


RULES = (
    Rule(
        "nccl_proxy_segfault",
        95,
        build_nccl_proxy_segfault,
        _nccl_proxy,
        words(
            r"addProxyOpIfNeeded|[nr]ccl.{0,40}(?:segfault|sigsegv|segmentation)|"
            r"(?:segfault|sigsegv|segmentation).{0,40}[nr]ccl"
        ),
        supersedes=CRASH_GENERAL,
    ),
    Rule("rccl_error", 55, build_rccl_error, _rccl, words(r"[nr]ccl")),
)
