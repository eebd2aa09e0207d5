"""Communication between the GPUs and nodes: NCCL/RCCL failing to set up or run a
collective, and NCCL's proxy thread crashing."""

from __future__ import annotations

from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules import sglang
from instinct_serve.diagnose.rules.common import at_hit, older
from instinct_serve.diagnose.rules.crash import CRASH_GENERAL, named_crash
from instinct_serve.diagnose.scan import Scan, exc
from instinct_serve.diagnose.shell import issue_search
from instinct_serve.hardware.target import CPU_PP_COMPILATION

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
    if ctx.sglang:
        return sglang.rccl_error(ctx, **at)
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


# vllm/v1/worker/gpu_model_runner.py (0.32): sync_and_gather_intermediate_tensors asserts
# the buffers its _dummy_run made; the CPU runner's warming_up_model (the only _dummy_run of
# a CPU pipeline rank) returns at once when compilation_config.mode is NONE (--enforce-eager).
# The traceback quotes the assertion as source, then a bare AssertionError.
_BARE_ASSERTION = exc(r"AssertionError\s*$")
_PP_ASSERT = "assert self.intermediate_tensors is not None"


def build_cpu_pp_eager(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="pp_rank_without_warmup",
        title="A pipeline rank had no intermediate tensors: eager mode skipped the warm-up",
        cause="vLLM's CPU backend creates the tensors a pipeline rank above 0 receives only "
        "in its warm-up, which it skips in eager mode (--enforce-eager: compilation mode "
        "NONE; vllm/v1/worker/cpu_model_runner.py warming_up_model). The server reports "
        "healthy, then the first request kills the engine: rank 1 fails this assertion and "
        "rank 0 raises KeyError.",
        fix="Drop --enforce-eager and run a compiled mode that needs no compiler: "
        f"--compilation-config '{CPU_PP_COMPILATION}' (its warm-up takes seconds).",
        commands=(issue_search("intermediate_tensors is not None", "pipeline parallel cpu"),),
        **at,
    )


def _cpu_pp_eager(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    for hit in scan.hits(_BARE_ASSERTION):
        for quoted in scan.lines[max(hit.index - 3, 0) : hit.index]:  # the source, its carets
            if _PP_ASSERT in quoted.text:
                return build_cpu_pp_eager(ctx, line=quoted.raw, line_no=quoted.no, occurrences=1)
    return None


RULES = (
    Rule(
        "pp_rank_without_warmup",
        90,
        build_cpu_pp_eager,
        _cpu_pp_eager,
        words(r"intermediate_tensors"),
        supersedes=CRASH_GENERAL,
    ),
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
