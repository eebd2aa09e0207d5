"""The catalog seam: recipe context, AMD launch flags and a plan's argv into FitOptions."""

from __future__ import annotations

import pytest

from instinct_serve.fit.catalog_link import (
    LaunchContext,
    fit_options,
    launch_context,
)
from instinct_serve.fit.precision import precision_from_name
from instinct_serve.units import token_count


def test_recipe_context_and_amd_flags() -> None:
    ctx = launch_context("openai/gpt-oss-120b", "mi300x")
    assert ctx.recipe_model_id == "openai/gpt-oss-120b" and ctx.context_length == 131072
    assert ctx.flag("--gpu-memory-utilization") == "0.95"
    assert ctx.flag("--block-size") == "64"  # written --block-size=64 in the recipe
    assert "nvfp4" in ctx.unsupported_precisions
    assert ctx.native_precisions is not None and "bf16" in ctx.native_precisions
    assert ("amd/gpt-oss-120b-w-mxfp4-a-fp8", "mxfp4", "amd_fp8") in ctx.variants
    assert ctx.vllm_version is not None


def test_model_outside_the_catalog_gives_an_empty_context() -> None:
    ctx = launch_context("acme/not-a-recipe", "mi300x")
    assert ctx.recipe_model_id is None and ctx.context_length is None
    assert ctx.match_kind == "generic"


def test_a_plan_argv_becomes_fit_options() -> None:
    argv = [
        "--tensor-parallel-size",
        "2",
        "--max-model-len=65536",
        "--kv-cache-dtype",
        "fp8",
        "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 2}',
        "--language-model-only",
        "--gpu-memory-utilization",
        "0.85",
    ]
    ctx = LaunchContext(context_length=262144, launch_args=argv, vllm_version="0.22.0")
    opts, notes = fit_options(ctx)
    assert (opts.tp, opts.max_model_len, opts.kv_cache_dtype) == (2, 65536, "fp8")
    assert (opts.speculative_mtp, opts.language_model_only) == (2, True)
    assert (opts.gpu_memory_utilization, opts.vllm_version) == (0.85, "0.22.0")
    assert opts.native_max_model_len == 262144 and len(notes) == 5
    explicit, _ = fit_options(ctx, gpu_memory_utilization=0.7, tp=4)
    assert (explicit.gpu_memory_utilization, explicit.tp) == (0.7, 4)
    human, _ = fit_options(LaunchContext(launch_args=["--max-model-len", "64K"]))
    assert human.max_model_len == 65536  # vLLM's own reading of 64K


@pytest.mark.parametrize(
    ("text", "count"),
    [
        *[("32768", 32768), (" 32k", 32000), ("25.6k", 25600), ("32K", 32768), ("32Ki", 32768)],
        *[("1M", 2**20), ("1m", 10**6), ("1G", 2**30), ("2g", 2 * 10**9)],
        *[("auto", None), ("-1", None), ("1.5K", None), ("1.5M", None), ("", None)],
    ],
)
def test_context_lengths_read_as_every_vllm_release_reads_them(
    text: str, count: int | None
) -> None:
    """vLLM's human_readable_int: lower case decimal, upper case binary (whole numbers)."""
    assert token_count(text) == count


def test_precision_from_checkpoint_names() -> None:
    assert precision_from_name("Qwen/Qwen3-8B-FP8") == "fp8"
    assert precision_from_name("amd/Llama-3.1-70B-Instruct-MXFP4-Preview") == "mxfp4"
    assert precision_from_name("Qwen/Qwen3-32B-AWQ") == "int4"
    assert precision_from_name("nvidia/DeepSeek-R1-NVFP4") == "nvfp4"
    assert precision_from_name("RedHatAI/Llama-3.3-70B-Instruct-quantized.w8a8") == "int8"
    assert precision_from_name("Qwen/Qwen3.5-9B") is None
