"""GPU kernels and AITER: a kernel crash (the generic one, and the ones a crash names: the
gfx942 FP4 batched GEMM, AITER's sampler, fused MoE, rmsnorm, MLA, the DeepSeek-V4 warm-up),
and AITER kernels that refuse a shape."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from instinct_serve.diagnose.logline import split_message
from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules import sglang
from instinct_serve.diagnose.rules.common import INSTINCT_GFX, at_hit, gfx_of, message_block, older
from instinct_serve.diagnose.rules.crash import CRASH, CRASH_GENERAL, named_crash, named_crashes
from instinct_serve.diagnose.scan import Scan, exc
from instinct_serve.diagnose.shell import issue_search

_FP4_NOT_GFX942 = exc(r"MXFP4 quantization is not supported on gfx94\d")
_FP4_EVIDENCE = re.compile(r"fp4bmm|fp4_bmm|a16wfp4|afp4wfp4|batched_gemm_a\w*fp4", re.IGNORECASE)
FP4BMM_DEFAULT_ON_SINCE = "0.15.0"  # vllm-project/vllm#34641: default on since v0.15.0
_FP4BMM_OFF = re.compile(r"VLLM_ROCM_USE_AITER_FP4BMM['\"]?\s*[=:]\s*['\"]?(?:0|False)\b")


def build_fp4bmm_gfx942(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="fp4bmm_gfx942",
        title="AITER FP4 batched-GEMM crash on gfx942",
        cause="On gfx942 (MI300X/MI325X) the AITER FP4 batched-GEMM kernels use instructions "
        "only gfx950 has; vLLM versions that turn VLLM_ROCM_USE_AITER_FP4BMM on by default "
        "crash with a segfault or illegal instruction at warm-up (vllm-project/vllm#34641).",
        fix="Relaunch with VLLM_ROCM_USE_AITER_FP4BMM=0 (the other AITER kernels stay on).",
        retry={"set_env": {"VLLM_ROCM_USE_AITER_FP4BMM": "0"}},
        auto_retry=True,
        **at,
    )


def build_gpu_kernel_crash(ctx: DiagnoseContext, **at: Any) -> Finding:
    options: list[RetryHint] = []
    if gfx_of(ctx) in ("", "gfx942"):
        options.append({"set_env": {"VLLM_ROCM_USE_AITER_FP4BMM": "0"}})
    options.append({"add_args": ["--enforce-eager"]})
    options.append({"set_env": {"VLLM_ROCM_USE_AITER": "0"}})
    line = at.get("line")
    message = split_message(line)[0].strip() if isinstance(line, str) else None
    if ctx.sglang:
        return sglang.gpu_kernel_crash(ctx, message, **at)
    return Finding(
        id="gpu_kernel_crash",
        title="A GPU kernel crashed the engine",
        cause="A segfault, illegal instruction or GPU memory-access fault killed the process: "
        "usually a kernel that does not support this GPU, model shape or quantization in "
        "this image version.",
        fix="Try, in order: VLLM_ROCM_USE_AITER_FP4BMM=0 on gfx942, --enforce-eager (graph "
        "replay bugs), VLLM_ROCM_USE_AITER=0 (to confirm an AITER kernel), a newer image; and "
        "search upstream issues for the crash line.",
        retry=options[0],
        alternatives=tuple(options[1:]),
        commands=(issue_search(message, "ROCm segmentation fault illegal instruction"),),
        **at,
    )


def _fp4bmm(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    direct, count = scan.first(_FP4_NOT_GFX942)
    if direct is not None:
        return build_fp4bmm_gfx942(ctx, **at_hit(direct, count))
    crash, count = scan.first(CRASH)
    if crash is None:
        return None
    if (
        ctx.env.get("VLLM_ROCM_USE_AITER") == "0"
        or ctx.env.get("VLLM_ROCM_USE_AITER_FP4BMM") == "0"
    ):
        return None
    if scan.contains(_FP4BMM_OFF):
        return None
    gfx = gfx_of(ctx)
    evidence = scan.contains(_FP4_EVIDENCE)
    if evidence and gfx in ("", "gfx942"):
        return build_fp4bmm_gfx942(ctx, **at_hit(crash, count))
    if (
        gfx == "gfx942"
        and not older(ctx.vllm_version, FP4BMM_DEFAULT_ON_SINCE)
        and not named_crashes(scan)
    ):
        # No FP4 frame in the log and no other kernel named, but a gfx942 crash with a vLLM
        # that turns FP4BMM on by default (or an unknown version): the most frequent cause,
        # ranked lower, and a guess: serve does not relaunch on it by itself.
        guess = build_fp4bmm_gfx942(ctx, **at_hit(crash, count))
        return replace(guess, rank=85, auto_retry=False, details={"evidence": "gfx942 only"})
    return None


def _kernel_crash(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(CRASH)
    return build_gpu_kernel_crash(ctx, **at_hit(hit, count)) if hit else None


def build_aiter_sampler_segfault(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="aiter_sampler_segfault",
        title="AITER's top-k/top-p sampler crashed",
        cause="The crash is in AITER's top_k_top_p_sampling_from_probs, which vLLM on ROCm uses "
        "for top-k/top-p sampling when AITER is on; it segfaults on the host while the sampler "
        "warms up, on gfx942 (ROCm/aiter#4830). Graph mode and FP4BMM play no part: "
        "--enforce-eager does not avoid it.",
        fix="Relaunch with VLLM_ROCM_USE_AITER_SAMPLER=0 (PyTorch's sampler; the other AITER "
        "kernels stay on; vLLM with vllm-project/vllm#43331), or a vLLM that skips the AITER "
        "sampler on gfx942 (vllm-project/vllm#57162); older images: VLLM_ROCM_USE_AITER=0.",
        retry={"set_env": {"VLLM_ROCM_USE_AITER_SAMPLER": "0"}},
        alternatives=({"set_env": {"VLLM_ROCM_USE_AITER": "0"}},),
        auto_retry=True,
        **at,
    )


def _aiter_sampler(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = named_crash(scan, "aiter_sampler_segfault")
    return build_aiter_sampler_segfault(ctx, **at) if at is not None else None


def build_aiter_moe_kernel_fault(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="aiter_moe_kernel_fault",
        title="An AITER fused-MoE kernel faulted",
        cause="The GPU fault comes right where an AITER fused-MoE kernel (fmoe/ck_moe) was "
        "loaded or running: some of these kernels write out of bounds at particular batch "
        "shapes (ROCm/aiter#3471, MiniMax-M2.5 at 8k tokens on gfx950), first hit by the "
        "--max-num-batched-tokens dummy run of the memory profile.",
        fix="Relaunch with VLLM_ROCM_USE_AITER_MOE=0 (Triton MoE kernels), or keep AITER MoE "
        "and avoid the shape with a smaller --max-num-batched-tokens (e.g. 4096).",
        retry={"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}},
        alternatives=({"add_args": ["--max-num-batched-tokens", "4096"]},),
        auto_retry=True,
        **at,
    )


def _aiter_moe_fault(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = named_crash(scan, "aiter_moe_kernel_fault")
    return build_aiter_moe_kernel_fault(ctx, **at) if at is not None else None


_NO_MOE_GEMM = exc(r".{0,300}device_gemm does not support this GEMM problem")
_MOE_WORDS = re.compile(r"ck_moe|fmoe|fused_moe|\bmoe\b", re.IGNORECASE)


def build_aiter_moe_no_kernel_for_shape(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="aiter_moe_no_kernel_for_shape",
        title="AITER MoE has no kernel for this shape",
        cause="AITER's MoE path has no tuned config for this model's expert shape and its "
        "composable-kernel fallback (ck_moe_stage1/2) has no GEMM instance for it: 'device_gemm "
        "does not support this GEMM problem' (ROCm/aiter#3202). Online tuning does not help.",
        fix="Relaunch with VLLM_ROCM_USE_AITER_MOE=0 (Triton MoE kernels; the other AITER "
        "kernels stay on), or an AITER build with a config for this shape.",
        retry={"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}},
        auto_retry=True,
        **at,
    )


def _aiter_moe_shape(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hits = [
        hit
        for hit in scan.hits(_NO_MOE_GEMM)
        if any(_MOE_WORDS.search(line.text) for line in scan.window(hit.index, 5, 0))
    ]
    return build_aiter_moe_no_kernel_for_shape(ctx, **at_hit(hits[0], len(hits))) if hits else None


def build_aiter_rmsnorm_unsupported_arch(ctx: DiagnoseContext, **at: Any) -> Finding:
    gfx = gfx_of(ctx)
    consumer = bool(gfx) and gfx not in INSTINCT_GFX
    off_all: RetryHint = {"set_env": {"VLLM_ROCM_USE_AITER": "0"}}
    off_norm: RetryHint = {"set_env": {"VLLM_ROCM_USE_AITER_RMSNORM": "0"}}
    return Finding(
        id="aiter_rmsnorm_unsupported_arch",
        title="AITER's CK-tile rmsnorm kernel crashed",
        cause="The crash stack is AITER's composable-kernel rmsnorm (ck_tile::Rmsnorm2dFwd), "
        "whose tile sizes are made for CDNA Instinct GPUs; on other architectures (RDNA4 "
        f"gfx1201 in ROCm/aiter#4302{f', this GPU: {gfx}' if gfx else ''}) it segfaults on "
        "the first forward pass.",
        fix="Relaunch with VLLM_ROCM_USE_AITER_RMSNORM=0 (vLLM's own rmsnorm), or "
        "VLLM_ROCM_USE_AITER=0: AITER targets Instinct GPUs (gfx942/gfx950).",
        retry=off_all if consumer else off_norm,
        alternatives=(off_norm,) if consumer else (off_all,),
        auto_retry=True,
        details={"gfx": gfx or None},
        **at,
    )


def _aiter_rmsnorm(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = named_crash(scan, "aiter_rmsnorm_unsupported_arch")
    return build_aiter_rmsnorm_unsupported_arch(ctx, **at) if at is not None else None


def build_dsv4_sparse_mla_warmup_segfault(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="dsv4_sparse_mla_warmup_segfault",
        title="DeepSeek-V4 sparse-MLA warm-up crashed",
        cause="The segfault follows vLLM's DeepSeek-V4 sparse-MLA attention warm-up, which runs "
        "after the KV cache is sized: a known intermittent crash on ROCm "
        "(vllm-project/vllm#57354, about 4 starts in 5).",
        fix="Use an image with vllm-project/vllm#57328 (the fix; a newer vllm/vllm-openai-rocm). "
        "The same image may start on another try, but will crash again.",
        **at,
    )


def _dsv4_warmup(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = named_crash(scan, "dsv4_sparse_mla_warmup_segfault")
    return build_dsv4_sparse_mla_warmup_segfault(ctx, **at) if at is not None else None


_MLA_HEADS = (
    exc(r"Aiter MLA only supports 16 or 128 number of heads"),
    exc(r"nhead=(\d+) not supported"),
)
_MLA_FRAMES = re.compile(r"\bmla\b|_mla\b|mla_decode", re.IGNORECASE)
_PROVIDED_HEADS = re.compile(r"Provided (\d+) number of heads")
MLA_HEADS = (16, 128)


def build_aiter_mla_unsupported_heads(
    ctx: DiagnoseContext, heads: int | None = None, **at: Any
) -> Finding:
    tp = ctx.tensor_parallel_size
    total = heads * tp if heads and tp else None
    fitting = [total // h for h in MLA_HEADS if total and total % h == 0 and total // h >= 1]
    limit = ctx.gpu_count
    usable = [t for t in fitting if limit is None or t <= limit]
    where = f"{heads} heads per GPU" if heads else "this many heads per GPU"
    tp_words = (
        f"--tensor-parallel-size {' or '.join(map(str, usable))}"
        if usable
        else "a tensor-parallel size that gives 16 or 128 heads per GPU (TP8 for "
        "DeepSeek-V3/R1's 128 heads)"
    )
    alternatives: tuple[RetryHint, ...] = (
        ({"tensor_parallel_size": usable[0]},) if usable and usable[0] != tp else ()
    )
    return Finding(
        id="aiter_mla_unsupported_heads",
        title="AITER MLA does not support this many heads per GPU",
        cause=f"AITER's MLA decode kernel supports 16 or 128 attention heads per GPU; the "
        f"tensor-parallel split gives {where} (ROCm/aiter#548).",
        fix=f"Use {tp_words}, or VLLM_ROCM_USE_AITER_MLA=0 (Triton MLA: starts at this size, "
        "slower decoding).",
        retry={"set_env": {"VLLM_ROCM_USE_AITER_MLA": "0"}},
        alternatives=alternatives,
        auto_retry=True,
        details={"heads_per_gpu": heads, "tensor_parallel_size": tp, "fitting_tp": fitting},
        **at,
    )


def _aiter_mla_heads(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    for hit in scan.hits(*_MLA_HEADS):
        heads: int | None
        if hit.match.re is _MLA_HEADS[1]:
            frames = " ".join(line.text for line in scan.traceback_before(hit.index))
            if not _MLA_FRAMES.search(frames):
                continue
            heads = int(hit.match.group(1))
        else:
            provided = next(
                (
                    m
                    for line in message_block(scan, hit.index)
                    if (m := _PROVIDED_HEADS.search(line.text))
                ),
                None,
            )
            heads = int(provided.group(1)) if provided else None
        return build_aiter_mla_unsupported_heads(ctx, heads, **at_hit(hit))
    return None


def _gfx942_crash(ctx: DiagnoseContext) -> str | None:
    """A crash pasted from gfx942 is the FP4 batched-GEMM one more often than not."""
    return "fp4bmm_gfx942" if (ctx.gfx or "").startswith("gfx942") else None


RULES = (
    Rule(
        "fp4bmm_gfx942",
        98,
        build_fp4bmm_gfx942,
        _fp4bmm,
        words(
            r"fp4.?bmm|(?:segfault|segmentation|illegal instruction).*"
            r"(?:gfx942|mi300|mi325)|(?:gfx942|mi300|mi325).*(?:segfault|"
            r"segmentation|illegal instruction)"
        ),
        supersedes=("gpu_kernel_crash",),  # the same crash, explained better
    ),
    Rule(
        "gpu_kernel_crash",
        45,
        build_gpu_kernel_crash,
        _kernel_crash,
        words(
            r"segfault|segmentation fault|illegal instruction|"
            r"memory access fault|illegal memory access|core dumped",
            instead=_gfx942_crash,
        ),
    ),
    Rule(
        "aiter_sampler_segfault",
        97,
        build_aiter_sampler_segfault,
        _aiter_sampler,
        words(
            r"top_k_top_p_sampling|aiter.{0,40}sampl|sampl.{0,40}aiter",
            r"segfault|segmentation|crash|sigsegv",
        ),
        supersedes=CRASH_GENERAL,
    ),
    Rule(
        "aiter_moe_kernel_fault",
        96,
        build_aiter_moe_kernel_fault,
        _aiter_moe_fault,
        words(
            r"fmoe|ck_moe|aiter.{0,40}moe|moe.{0,40}aiter",
            r"memory access fault|segfault|segmentation|crash|out.of.bounds|illegal",
        ),
        supersedes=CRASH_GENERAL,
    ),
    Rule(
        "aiter_moe_no_kernel_for_shape",
        96,
        build_aiter_moe_no_kernel_for_shape,
        _aiter_moe_shape,
        words(r"device_gemm does not support|does not support this gemm problem"),
    ),
    Rule(
        "aiter_rmsnorm_unsupported_arch",
        96,
        build_aiter_rmsnorm_unsupported_arch,
        _aiter_rmsnorm,
        words(r"rmsnorm", r"segfault|segmentation|crash|ck_tile"),
        supersedes=CRASH_GENERAL,
    ),
    Rule(
        "dsv4_sparse_mla_warmup_segfault",
        96,
        build_dsv4_sparse_mla_warmup_segfault,
        _dsv4_warmup,
        words(r"deepseek.?v4|sparse.?mla", r"segfault|segmentation|crash"),
        supersedes=CRASH_GENERAL,
    ),
    Rule(
        "aiter_mla_unsupported_heads",
        96,
        build_aiter_mla_unsupported_heads,
        _aiter_mla_heads,
        words(r"mla", r"16 or 128|nhead=\d+ not supported|number of heads"),
    ),
)
