"""The comparison harness (bench/plan_vs_upstream.py) classifies differences correctly.

These tests pin the harness, not the planner: most feed it a stub planner whose answer is
known, and the one run of the real planner (a fixed sample of ten pages) asserts only that
every outcome lands in the right bucket, whatever the planner decides today.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from bench.plan_vs_upstream import (
    DEFECT,
    KINDS,
    OURS,
    SCOPE,
    UNEXPLAINED,
    UPSTREAM,
    Comparison,
    Ours,
    compare,
    compare_unrendered,
    flag_map,
    load_planner,
    renderings,
    run,
    same_value,
    summary,
)

from tests.plan.upstream_render import NotRendered, Rendering

SAMPLE = [
    "deepseek-ai/DeepSeek-R1",
    "deepseek-ai/DeepSeek-V4-Flash",
    "MiniMaxAI/MiniMax-M2",
    "Qwen/Qwen3.8-2.4T-A95B",
    "Qwen/Qwen3-235B-A22B-Instruct-2507",
    "meta-llama/Llama-3.3-70B-Instruct",
    "openai/gpt-oss-120b",
    "jinaai/jina-embeddings-v5-text-small",
    "baidu/ERNIE-4.5-VL-424B-A47B-PT",
    "RedHatAI/Muse-Glimmer-30B-FP8-block",
]


@functools.cache
def vendored() -> tuple[list[Rendering], list[NotRendered]]:
    return renderings()


def page(page_id: str, hw: str) -> Rendering:
    return next(r for r in vendored()[0] if r.page == page_id and r.hardware == hw)


def serve_args(r: Rendering) -> list[str]:
    """Upstream's flags as our planner would hold them (after ``vllm serve MODEL``)."""
    return r.argv[3:]


def stub(**by_model: Ours) -> Any:
    """A planner answering from a table (model id, case-insensitive) and recording calls."""
    table = {k.lower(): v for k, v in by_model.items()}
    calls: list[tuple[str, dict[str, Any]]] = []

    def plan(model: str, gpu: str, gpu_count: int, **options: Any) -> Ours:
        calls.append((model, options))
        return table.get(model.lower(), Ours(ok=False, error_id="unknown_model"))

    plan.calls = calls  # type: ignore[attr-defined]
    return plan


def like_upstream(r: Rendering, **changes: Any) -> Ours:
    """Our answer equal to upstream's rendering, then ``changes``."""
    ours = Ours(
        ok=True,
        model=r.model_id,
        variant=r.variant,
        tp=r.tp,
        args=serve_args(r),
        env=dict(r.env),
        image=r.docker_image,
        arg_sources={},
        env_sources={},
    )
    for key, value in changes.items():
        setattr(ours, key, value)
    return ours


def kinds(c: Comparison) -> set[tuple[str, str, str]]:
    return {(d.kind, d.aspect, d.category) for d in c.differences}


# ------------------------------------------------------------------- argv helpers


def test_flag_map_normalises_spelling_not_meaning() -> None:
    got = flag_map(
        ["vllm", "serve", "m", "--model", "x", "--max_num_seqs=8", "-tp", "4", "--port", "1",
         "--host", "h", "--enforce-eager", "--offset", "-1"]
    )  # fmt: skip
    assert got == {
        "--max-num-seqs": "8",
        "--tensor-parallel-size": "4",
        "--enforce-eager": "",
        "--offset": "-1",
    }
    assert same_value('{"a": 1, "b": [2]}', '{"b":[2],"a":1}')
    assert same_value("0.90", "0.9")
    assert not same_value("fp8", "fp8_e4m3")


# ------------------------------------------------------------------- known classifications


def test_identical_plan_has_no_differences() -> None:
    r = page("deepseek-ai/DeepSeek-R1", "mi300x")
    c = compare(r, stub(**{r.recipe_model_id: like_upstream(r)}))
    assert c.differences == []
    assert c.flags_identical and c.env_identical and c.tp_status == "equal"


def test_partial_node_tp_is_the_binary_autofit_defect() -> None:
    r = page("deepseek-ai/DeepSeek-R1", "mi300x")
    assert r.tp_rule == "autofit_full_node"
    ours = like_upstream(r, tp=4, args=[a if a != "8" else "4" for a in serve_args(r)])
    c = compare(r, stub(**{r.recipe_model_id: ours}))
    assert kinds(c) == {(DEFECT, "tp", "tp_autofit_binary")}
    assert c.tp_status == "explained" and c.flags_identical


def test_tp_one_gpu_by_our_bytes_but_not_by_upstreams_gb() -> None:
    r = page("meta-llama/Llama-4-Scout-17B-16E-Instruct", "mi325x")
    assert (r.vram_minimum_gb, r.node_vram_gb, r.tp) == (262, 2048, 8)
    ours = like_upstream(r, tp=1, vram_gb_per_gpu=274.88)
    c = compare(r, stub(**{r.recipe_model_id: ours}))
    assert (DEFECT, "tp", "tp_vram_units") in kinds(c)


def test_recipe_args_tp_and_declared_tp() -> None:
    r = page("MiniMaxAI/MiniMax-M2", "mi300x")
    c = compare(r, stub(**{r.recipe_model_id: like_upstream(r, tp=4)}))
    assert (DEFECT, "tp", "tp_recipe_args") in kinds(c)
    r = page("EmbeddedLLM/Inkling-Small-MXFP4", "mi300x")
    c = compare(r, stub(**{r.page: like_upstream(r, tp=8)}))
    assert (DEFECT, "tp", "tp_recipe_declared") in kinds(c)


def test_missing_strategy_flag_is_a_strategy_layer_defect() -> None:
    r = page("deepseek-ai/DeepSeek-V4-Flash", "mi355x")
    args = [a for a in serve_args(r) if a != "--enable-expert-parallel"]
    c = compare(r, stub(**{r.recipe_model_id: like_upstream(r, args=args)}))
    assert kinds(c) == {(DEFECT, "flag", "strategy_layer")}
    assert not c.flags_identical and not c.flags_faithful


def test_our_deliberate_additions_are_ours() -> None:
    r = page("deepseek-ai/DeepSeek-R1", "mi300x")
    ours = like_upstream(
        r,
        args=[*serve_args(r), "--distributed-executor-backend", "mp", "--port", "8000"],
        env={**r.env, "VLLM_ROCM_USE_AITER_FP4BMM": "0"},
        image="vllm/vllm-openai-rocm:v0.27.1",
        arg_sources={"--distributed-executor-backend": "planner"},
        env_sources={"VLLM_ROCM_USE_AITER_FP4BMM": "gpu env_defaults (gfx942)"},
        env_reasons={"VLLM_ROCM_USE_AITER_FP4BMM": "FP4 batched GEMM is a CDNA 4 instruction"},
    )
    c = compare(r, stub(**{r.recipe_model_id: ours}))
    assert kinds(c) == {
        (OURS, "flag", "planner_executor_backend"),
        (OURS, "env", "our_gfx_env_default"),
        (OURS, "image", "image_release_pinned"),
    }
    assert c.flags_faithful and c.env_faithful and not c.flags_identical
    env = next(d for d in c.differences if d.aspect == "env")
    assert "CDNA 4" in env.reason


def test_unknown_flag_source_is_unexplained() -> None:
    r = page("deepseek-ai/DeepSeek-R1", "mi300x")
    ours = like_upstream(r, args=[*serve_args(r), "--max-num-seqs", "7"])
    c = compare(r, stub(**{r.recipe_model_id: ours}))
    assert [(d.kind, d.item) for d in c.differences] == [(UNEXPLAINED, "--max-num-seqs")]
    assert summary([c])["unexplained"] == 1


def test_other_checkpoint_is_counted_once_and_flags_use_upstreams() -> None:
    r = page("deepseek-ai/DeepSeek-V4-Flash", "mi355x")
    other = like_upstream(r, model="deepseek-ai/DeepSeek-V4-Flash", variant="x", args=[])
    same = like_upstream(r)
    plan = stub(**{r.recipe_model_id: other, r.model_id: same})
    c = compare(r, plan)
    assert kinds(c) == {(DEFECT, "checkpoint", "variant_selection")}
    assert [model for model, _ in plan.calls] == [r.recipe_model_id, r.model_id]
    assert c.flags_compared and c.flags_identical


def test_refusals_by_reason() -> None:
    r = page("jinaai/jina-embeddings-v5-text-small", "mi300x")
    blacklisted = Ours(ok=False, error_id="blacklisted", error="an embedding model")
    c = compare(r, stub(**{r.recipe_model_id: blacklisted}))
    assert (OURS, "refusal", "refused_blacklisted") in kinds(c)
    assert not c.flags_compared and c.tp_status == "n/a"

    big = page("Qwen/Qwen3.8-2.4T-A95B", "mi300x")
    too_big = Ours(ok=False, error_id="does_not_fit", error="does not fit on 8x MI300X")
    c = compare(big, stub(**{big.recipe_model_id: too_big}))
    assert kinds(c) == {(SCOPE, "refusal", "refused_multi_node")}

    r = page("meta-llama/Llama-3.3-70B-Instruct", "mi300x")
    c = compare(r, stub(**{r.recipe_model_id: Ours(ok=False, error_id="does_not_fit")}))
    assert (DEFECT, "refusal", "refused_fit_disagrees") in kinds(c)
    c = compare(r, stub(**{r.recipe_model_id: Ours(ok=False, error_id="weird")}))
    assert (UNEXPLAINED, "refusal", "refused_weird") in kinds(c)


def test_two_node_page_planned_on_one_node() -> None:
    r = page("Qwen/Qwen3.8-2.4T-A95B", "mi300x")
    ours = like_upstream(r, tp=8, env={"VLLM_ENGINE_READY_TIMEOUT_S": "3600"})
    c = compare(r, stub(**{r.recipe_model_id: ours}))
    assert (DEFECT, "nodes", "multi_node_planned_on_one") in kinds(c)
    assert (SCOPE, "env", "multi_node_strategy") in kinds(c)  # GLOO/NCCL socket names
    assert c.tp_status == "explained"


def test_images() -> None:
    r = page("RedHatAI/Muse-Glimmer-30B-FP8-block", "mi300x")
    c = compare(r, stub(**{r.page: like_upstream(r, image="vllm/vllm-openai-rocm:v0.27.1")}))
    assert kinds(c) == {(DEFECT, "image", "nightly_image")}
    r = page("MiniMaxAI/MiniMax-M3-MXFP8", "mi300x")
    ours = like_upstream(r, image="vllm/vllm-openai-rocm:nightly")
    assert (UPSTREAM, "image", "upstream_invalid_image") in kinds(
        compare(r, stub(**{r.page: ours}))
    )


def test_shared_checkpoint_page() -> None:
    r = page("baidu/ERNIE-4.5-VL-424B-A47B-PT", "mi300x")
    first = like_upstream(
        r, variant="424b", args=["--trust-remote-code", "--mm-encoder-tp-mode", "data"]
    )
    c = compare(r, stub(**{r.page: first}))
    assert {d.kind for d in c.differences} == {UPSTREAM}
    assert (UPSTREAM, "variant", "shared_checkpoint_page") in kinds(c)


def test_no_upstream_page() -> None:
    missing = NotRendered(
        "MiniMaxAI/MiniMax-M2", "nvfp4", "RedHatAI/MiniMax-M2-NVFP4", "mi355x",
        "precision nvfp4 needs NVIDIA blackwell (PRECISION_HARDWARE_CONSTRAINTS)",
        "RedHatAI/MiniMax-M2-NVFP4",
    )  # fmt: skip
    planned = Ours(ok=True, model="RedHatAI/MiniMax-M2-NVFP4", tp=1)
    c = compare_unrendered(missing, stub(**{missing.model_id: planned}))
    assert c is not None and kinds(c) == {(DEFECT, "refusal", "upstream_precision_gate")}
    refused = Ours(ok=False, error_id="unsupported_precision")
    assert compare_unrendered(missing, stub(**{missing.model_id: refused})) is None


# ------------------------------------------------------------------- the real planner


@pytest.fixture(scope="module")
def sample_run() -> list[Comparison]:
    items = [r for r in vendored()[0] if r.page in SAMPLE]
    missing = [m for m in vendored()[1] if m.recipe in {r.recipe for r in items}]
    return run(items, missing, load_planner())


def test_real_planner_sample_is_classified(sample_run: list[Comparison]) -> None:
    rendered = [c for c in sample_run if c.upstream_renders]
    assert len(rendered) == 29  # 10 pages x 3 GPUs, less DeepSeek-V4-Flash on mi300x
    for c in sample_run:
        for d in c.differences:
            assert d.kind in KINDS and d.category and d.reason, d
    by_page = {(c.page, c.hardware): c for c in rendered}

    big = by_page[("Qwen/Qwen3.8-2.4T-A95B", "mi300x")]
    if big.ours_error:
        assert any(d.category == "refused_multi_node" for d in big.differences)
    else:
        assert any(d.category == "multi_node_planned_on_one" for d in big.differences)

    jina = by_page[("jinaai/jina-embeddings-v5-text-small", "mi325x")]
    if jina.ours_error:
        assert all(d.aspect == "refusal" for d in jina.differences)

    tep = by_page[("deepseek-ai/DeepSeek-V4-Flash", "mi355x")]
    if tep.flags_compared and not tep.flags_faithful:
        assert any(d.category == "strategy_layer" for d in tep.differences)

    s = summary(sample_run)
    assert s["renderings_compared"] == 29
    assert sum(s["tp"].values()) == 29
