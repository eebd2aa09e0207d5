"""What serve observed itself, not a log line (``DiagnoseContext.signals``): a graph
capture that hangs, and an endpoint that answers with garbage."""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.registry import Rule, words
from instinct_serve.diagnose.rules.common import at_hit
from instinct_serve.diagnose.scan import Hit, Scan

_MOE_MODEL = re.compile(
    r"gpt-oss|mixtral|moe|-a\d+(?:\.\d+)?b\b|deepseek-(?:v[23]|r1)|kimi-k|minimax-m|"
    r"glm-4\.[5-9]|glm-5|llama-4|dbrx|jamba|qwen\d*(?:\.\d+)?-(?:next|\d+b-a\d+b)",
    re.IGNORECASE,
)
_MXFP4_MODEL = re.compile(r"mxfp4|gpt-oss", re.IGNORECASE)


def build_graph_capture_hang(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="graph_capture_hang",
        title="Graph capture hangs",
        cause="No new log line arrived for a long time while vLLM was capturing HIP graphs: "
        "graph capture and replay hangs are known on gfx94x with some vLLM/ROCm versions.",
        fix="Relaunch with --enforce-eager (instinct serve does this once by itself).",
        retry={"add_args": ["--enforce-eager"]},
        auto_retry=True,
        **at,
    )


def build_incoherent_output(ctx: DiagnoseContext, **at: Any) -> Finding:
    model = ctx.model or ""
    moe = ctx.is_moe if ctx.is_moe is not None else bool(_MOE_MODEL.search(model))
    quant = (ctx.arg("--quantization", "-q") or "").lower()
    mxfp4 = quant == "mxfp4" or bool(_MXFP4_MODEL.search(model))
    tp = ctx.tensor_parallel_size
    options: list[RetryHint] = []
    causes: list[str] = []
    if moe or mxfp4 or not model:
        options.append({"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}})
        causes.append("the AITER fused-MoE kernels (MoE and MXFP4 models, e.g. gpt-oss on gfx950)")
    if tp is None or tp > 1:
        options.append({"add_args": ["--disable-custom-all-reduce"]})
        causes.append("the custom all-reduce kernel (tensor parallelism > 1)")
    options.append({"set_env": {"VLLM_ROCM_USE_AITER": "0"}})
    causes.append("another AITER kernel (VLLM_ROCM_USE_AITER=0 turns them all off: slower)")
    steps = "; then ".join(
        " ".join([*o.get("add_args", []), *(f"{k}={v}" for k, v in o.get("set_env", {}).items())])
        for o in options
    )
    return Finding(
        id="incoherent_output",
        title="The endpoint answers with garbage",
        cause="The server is healthy but a greedy probe with a known answer returned word salad, "
        "empty or unprintable text. On Instinct GPUs this is a kernel computing wrong results "
        "for this model on this gfx/vLLM version; suspects, most likely first: "
        f"{'; '.join(causes)}.",
        fix=f"Relaunch with, one at a time until the probe passes: {steps}.",
        retry=options[0],
        alternatives=tuple(options[1:]),
        auto_retry=True,
        details={"moe": moe, "mxfp4": mxfp4, "tensor_parallel_size": tp},
        **at,
    )


_CAPTURE_LINE = re.compile(r"^Capturing (?:CUDA graph|cudagraphs|the model for CUDA graphs)")


def _capture_hang(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    if "graph_capture_hang" not in ctx.signals:
        return None
    last: Hit | None = None
    for hit in scan.hits(_CAPTURE_LINE, errorish=False):
        last = hit
    return build_graph_capture_hang(ctx, **at_hit(last))


def _incoherent(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    if "incoherent_output" not in ctx.signals:
        return None
    return build_incoherent_output(ctx)


RULES = (
    Rule(
        "graph_capture_hang",
        99,
        build_graph_capture_hang,
        _capture_hang,
        words(
            r"hang|hung|stuck|freez|frozen|stall|no progress|no output|"
            r"no new (?:log )?line",
            r"graph|captur",
        ),
    ),
    Rule(
        "incoherent_output",
        99,
        build_incoherent_output,
        _incoherent,
        words(
            r"garbage|gibberish|word salad|nonsense|incoherent|garbled|"
            r"!!!!|random (?:characters|tokens|words)|junk|repeat(?:s|ing)? "
            r"(?:the same|itself)|mojibake"
        ),
    ),
)
