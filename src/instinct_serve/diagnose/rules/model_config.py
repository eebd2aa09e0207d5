"""The model and its configuration against this vLLM: remote code, an architecture or
quantization this vLLM lacks, an image too old for the model, a rejected argument, and a
tensor-parallel size that does not divide the heads."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.common import (
    ROCM_IMAGE,
    at_hit,
    gfx_of,
    model_words,
    older,
    quant_suggestion,
)
from instinct_serve.diagnose.scan import Scan, exc

_TRUST = (
    exc(r".{0,300}requires you to execute the configuration file in that repo"),
    exc(r".{0,300}contains custom code which must be executed to correctly load the model"),
    exc(r".{0,300}Please pass the argument `trust_remote_code=True`"),
)


def build_trust_remote_code_required(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="trust_remote_code_required",
        title="The model needs --trust-remote-code",
        cause=f"The repository {model_words(ctx)}ships its own Python code (configuration or "
        "modelling), which vLLM runs only when told to trust it.",
        fix="Review the repository's .py files, then relaunch with --trust-remote-code.",
        retry={"add_args": ["--trust-remote-code"]},
        auto_retry=False,  # running someone's code is the user's decision
        **at,
    )


def _trust(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_TRUST)
    return build_trust_remote_code_required(ctx, **at_hit(hit, count)) if hit else None


_ARCH = (
    exc(r"Model architectures? \[([^\]]*)\] (?:are|is) not supported for now"),
    exc(r"Model architectures? \[([^\]]*)\] failed to be inspected"),
)


def _version_text(ctx: DiagnoseContext) -> str:
    return f"vLLM {ctx.vllm_version}" if ctx.vllm_version else "this vLLM"


def build_unsupported_architecture(
    ctx: DiagnoseContext, architectures: str | None = None, **at: Any
) -> Finding:
    arch = architectures or "the model's architecture"
    return Finding(
        id="unsupported_architecture",
        title="Model architecture not supported by this vLLM",
        cause=f"{_version_text(ctx)} has no implementation of {arch}.",
        fix=f"Use a newer {ROCM_IMAGE} image (the model's recipe names the minimum vLLM "
        "version). If the architecture exists in Transformers, --model-impl transformers may "
        "run it, more slowly.",
        details={"architectures": architectures},
        **at,
    )


def _arch(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_ARCH)
    if hit is None:
        return None
    return build_unsupported_architecture(ctx, hit.match.group(1), **at_hit(hit, count))


_TRANSFORMERS_OLD = exc(
    r"The checkpoint you are trying to load has model type `([^`]+)` but Transformers does not "
    r"recognize this architecture"
)
_UNRECOGNIZED_ARGS = re.compile(r"^[\w./\- ]{0,80}: error: unrecognized arguments: (.+)$")


def build_vllm_too_old(ctx: DiagnoseContext, reason: str | None = None, **at: Any) -> Finding:
    need = f" (the model needs vLLM >= {ctx.min_vllm_version})" if ctx.min_vllm_version else ""
    return Finding(
        id="vllm_too_old",
        title="The vLLM image is too old for this model",
        cause=f"{_version_text(ctx)}{need} predates this model"
        + (f": {reason}" if reason else "")
        + ".",
        fix=f"Use a newer image: {ROCM_IMAGE}:latest, or a tag at or above the recipe's minimum "
        "version (instinct recipes show MODEL names it).",
        details={"vllm_version": ctx.vllm_version, "min_vllm_version": ctx.min_vllm_version},
        **at,
    )


def _too_old(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_TRANSFORMERS_OLD)
    if hit is not None:
        reason = f"its bundled Transformers does not know the model type '{hit.match.group(1)}'"
        return build_vllm_too_old(ctx, reason, **at_hit(hit, count))
    if not older(ctx.vllm_version, ctx.min_vllm_version):
        return None
    hit, count = scan.first(*_ARCH, _UNKNOWN_QUANT, _UNRECOGNIZED_ARGS)
    if hit is not None:
        return build_vllm_too_old(ctx, None, **at_hit(hit, count))
    # Known too old but no evidence line: a plausible cause, ranked low by the caller.
    return replace(build_vllm_too_old(ctx), rank=20)


_UNKNOWN_QUANT = exc(r"Unknown quantization method: ?([^\s.]*)")
_QUANT_UNSUPPORTED = (
    exc(r"The quantization method (\S+) is not supported for the current GPU"),
    exc(r"(\S+) quantization is currently not supported in ROCm"),
)


def build_unknown_quantization(
    ctx: DiagnoseContext, method: str | None = None, **at: Any
) -> Finding:
    named = f"'{method}'" if method else "named in the model's config"
    return Finding(
        id="unknown_quantization",
        title="Unknown quantization method",
        cause=f"{_version_text(ctx)} does not know the quantization method {named}.",
        fix=f"Use a newer {ROCM_IMAGE} image, or a checkpoint quantized with a method this "
        "image supports (on ROCm: FP8 on gfx942/gfx950, MXFP4 on gfx950).",
        details={"method": method},
        **at,
    )


def _unknown_quant(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_UNKNOWN_QUANT)
    if hit is None:
        return None
    return build_unknown_quantization(ctx, hit.match.group(1) or None, **at_hit(hit, count))


def build_quantization_unsupported(
    ctx: DiagnoseContext, method: str | None = None, **at: Any
) -> Finding:
    return Finding(
        id="quantization_unsupported",
        title="Quantization not supported on this GPU",
        cause=f"{_version_text(ctx)} has no ROCm kernels for the quantization "
        f"{method or 'of this checkpoint'} on {gfx_of(ctx) or 'this GPU'}.",
        fix=f"Serve {quant_suggestion(ctx)} or the BF16 original instead.",
        details={"method": method},
        **at,
    )


def _quant_unsupported(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_QUANT_UNSUPPORTED)
    if hit is None:
        return None
    return build_quantization_unsupported(ctx, hit.match.group(1), **at_hit(hit, count))


def build_unknown_argument(
    ctx: DiagnoseContext, arguments: str | None = None, **at: Any
) -> Finding:
    return Finding(
        id="unknown_argument",
        title="vLLM rejected a command-line argument",
        cause=f"{_version_text(ctx)} does not accept {arguments or 'an argument'}: the flag is "
        "newer (or older) than this image, or misspelled.",
        fix="Check `vllm serve --help` in this image; use an image that has the flag, or drop it.",
        details={"arguments": arguments},
        **at,
    )


def _unknown_argument(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_UNRECOGNIZED_ARGS)
    if hit is None:
        return None
    return build_unknown_argument(ctx, hit.match.group(1).strip(), **at_hit(hit, count))


_HEADS_TP = exc(
    r"Total number of attention heads \((\d+)\) must be divisible by tensor parallel size \((\d+)\)"
)


def build_tp_not_divisible(
    ctx: DiagnoseContext, heads: int | None = None, tp: int | None = None, **at: Any
) -> Finding:
    valid: list[int] = []
    if heads:
        limit = ctx.gpu_count or 8
        valid = [d for d in (1, 2, 4, 8) if heads % d == 0 and d <= limit]
    pick = max((d for d in valid if tp is None or d < tp), default=None)
    return Finding(
        id="tp_not_divisible",
        title="Tensor-parallel size does not divide the attention heads",
        cause=f"The model has {heads or 'a number of'} attention heads, which cannot be split "
        f"evenly over {tp or 'that many'} GPUs.",
        fix=(
            f"Use --tensor-parallel-size {', '.join(map(str, valid))}"
            if valid
            else "Use a tensor-parallel size that divides the number of attention heads"
        )
        + " (or --pipeline-parallel-size, which splits by layers).",
        retry={"tensor_parallel_size": pick} if pick else None,
        details={"attention_heads": heads, "tensor_parallel_size": tp, "valid": valid},
        **at,
    )


def _tp_heads(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_HEADS_TP)
    if hit is None:
        return None
    return build_tp_not_divisible(
        ctx, int(hit.match.group(1)), int(hit.match.group(2)), **at_hit(hit, count)
    )


RULES = (
    Rule(
        "trust_remote_code_required",
        96,
        build_trust_remote_code_required,
        _trust,
        words(r"trust.?remote.?code|custom code"),
    ),
    Rule(
        "unsupported_architecture",
        90,
        build_unsupported_architecture,
        _arch,
        words(r"architecture", r"not supported|unsupported"),
    ),
    Rule(
        "vllm_too_old",
        97,
        build_vllm_too_old,
        _too_old,
        words(
            r"does not recognize this architecture|(?:vllm|image).{0,30}"
            r"(?:too old|outdated|old version)"
        ),
    ),
    Rule(
        "unknown_quantization",
        90,
        build_unknown_quantization,
        _unknown_quant,
        words(r"unknown quantization"),
    ),
    Rule(
        "quantization_unsupported",
        90,
        build_quantization_unsupported,
        _quant_unsupported,
        words(r"quantization", r"not supported|unsupported"),
    ),
    Rule(
        "unknown_argument",
        80,
        build_unknown_argument,
        _unknown_argument,
        words(r"unrecognized argument"),
    ),
    Rule(
        "tp_not_divisible",
        90,
        build_tp_not_divisible,
        _tp_heads,
        words(r"divisible by tensor parallel"),
    ),
)
