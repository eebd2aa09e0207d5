"""What the failure families share: a finding's evidence fields, the GPU and the model in
words, a version comparison, and an exception's message block."""

from __future__ import annotations

import re
from typing import Any

from packaging.version import InvalidVersion, Version

from instinct_serve.diagnose.logline import EXCEPTION_START, LogLine
from instinct_serve.diagnose.model import DiagnoseContext
from instinct_serve.diagnose.scan import Hit, Scan
from instinct_serve.hardware.profiles import GFX_TARGETS

ROCM_IMAGE = "vllm/vllm-openai-rocm"
INSTINCT_GFX = GFX_TARGETS  # the gfx targets of the vLLM ROCm images (hardware.profiles)


def at_hit(hit: Hit | None, count: int = 1) -> dict[str, Any]:
    """The evidence fields of a finding."""
    if hit is None:
        return {}
    return {"line": hit.line.raw, "line_no": hit.line.no, "occurrences": max(count, 1)}


def gfx_of(ctx: DiagnoseContext) -> str:
    return (ctx.gfx or "").split(":")[0].lower()


# The memory-saving formats worth suggesting, in order, as the precision table names them
# (data/gpu_overrides.json); the table says which run natively or emulated on each gfx.
_SUGGESTED = (
    ("fp8_fnuz", "FP8"),
    ("fp8_ocp", "FP8"),
    ("mxfp4", "MXFP4"),
    ("int4", "AWQ/GPTQ int4"),
)


def _smaller_precisions(gfx: str) -> tuple[list[str], list[str]]:
    """The suggested formats a gfx runs natively, and emulated."""
    from instinct_serve.catalog.overrides import load_gpu_overrides

    support = load_gpu_overrides().config(gfx).precision
    native = [w for n, w in _SUGGESTED if n in support.native]
    emulated = [w for n, w in _SUGGESTED if n in support.emulated and w not in native]
    return list(dict.fromkeys(native)), list(dict.fromkeys(emulated))


def quant_suggestion(ctx: DiagnoseContext) -> str:
    """A checkpoint format that needs less memory and runs on this gfx (from the precision
    table, the one list of what runs where)."""
    gfx = gfx_of(ctx)
    if gfx in INSTINCT_GFX:
        native, emulated = _smaller_precisions(gfx)
        if native:
            return f"an {' or '.join(native)} checkpoint (native on {gfx})"
        return f"an {' or '.join(emulated)} checkpoint (weight-only on {gfx})"
    parts = []
    for target in INSTINCT_GFX:
        native, emulated = _smaller_precisions(target)
        parts.append(f"{', '.join(native or emulated)} on {target}")
    return "a quantized checkpoint your GPU runs (" + "; ".join(parts) + ")"


def model_words(ctx: DiagnoseContext) -> str:
    return f"of {ctx.model} " if ctx.model else ""


def older(have: str | None, need: str | None) -> bool | None:
    if not have or not need:
        return None
    try:
        return Version(have.lstrip("v")) < Version(need.lstrip("v"))
    except InvalidVersion:
        return None


_BLOCK_END = re.compile(
    r"^\s*(?:Traceback \(most recent call last\)|The above exception|"
    r"During handling of the above exception)"
)


def message_block(scan: Scan, index: int, limit: int = 8) -> list[LogLine]:
    """An exception's message: the line before it if that starts the exception, the line
    itself, and the continuation lines up to the next exception or traceback."""
    block = [scan.lines[index]]
    if index > 0 and EXCEPTION_START.match(scan.lines[index - 1].text):
        block.insert(0, scan.lines[index - 1])
    for line in scan.lines[index + 1 : index + 1 + limit]:
        if EXCEPTION_START.match(line.text) or _BLOCK_END.match(line.text):
            break
        block.append(line)
    # "The above exception was the direct cause of ...": the cause carries the HTTP status.
    for j in range(index - 1, max(-1, index - 5), -1):
        if scan.lines[j].text.lstrip().startswith("The above exception"):
            for k in range(j - 1, max(-1, j - limit), -1):
                if EXCEPTION_START.match(scan.lines[k].text):
                    return scan.lines[k:j] + block
            break
    return block
