"""The decisions of issue 13, each on the example that showed it wrong: the checkpoint asked
for is served, what cannot run here is refused before a download, an unsized model is never
planned blind at TP 1, and TP follows the objective, the recipe and the kernels.

Offline (the shipped snapshot and metadata); every example goes through ``make_plan``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from instinct_serve import vllm_args
from instinct_serve.errors import UsageError
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from instinct_serve.plan.constraints import Shape, Situation, tp_problems
from tests.plan.plans import plan, reason, refused

# ---------------------------------------------------------------- the checkpoint asked for


@pytest.mark.parametrize(
    ("model", "precision", "recipe"),
    [
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "fp8", "Qwen/Qwen3-235B-A22B-Instruct-2507"),
        ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "fp8", "meta-llama/Llama-3.3-70B-Instruct"),
        ("amd/GLM-5-MXFP4", "mxfp4", "zai-org/GLM-5"),
        ("moonshotai/Kimi-K2-Instruct-0905", "fp8", "moonshotai/Kimi-K2-Instruct"),
        ("Qwen/Qwen3-8B-AWQ", "int4", "Qwen/Qwen3-8B"),
    ],
)
def test_a_base_model_match_serves_the_checkpoint_asked_for(
    model: str, precision: str, recipe: str
) -> None:
    doc = plan(model)
    assert doc["model"] == model and doc["served_model_name"] == model
    assert doc["precision"] == precision
    why = reason(doc, "variant")
    assert f"you asked for {model}: it is served as asked" in why and recipe in why


def test_the_lent_variant_is_the_one_of_the_same_precision() -> None:
    doc = plan("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")
    assert doc["variant"] == "fp8"  # its flags and env; the weights stay the ones asked for
    assert "lends its fp8 variant's flags and env" in reason(doc, "variant")


def test_a_precision_that_names_another_checkpoint_is_refused() -> None:
    with pytest.raises(UsageError) as err:
        make_plan(PlanOptions(model="Qwen/Qwen3-8B-AWQ", gpu="mi300x", precision="bf16"))
    assert err.value.id == "conflicting_precision"


# ---------------------------------------------------------------- refused before launch


@pytest.mark.parametrize(
    ("model", "gpu", "kw", "error_id"),
    [
        ("nvidia/DeepSeek-R1-0528-NVFP4-v2", "mi355x", {}, "unsupported_precision"),
        ("nvidia/DeepSeek-R1-0528-NVFP4-v2", "mi300x", {}, "unsupported_precision"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "mi250x", {}, "unsupported_precision"),
        ("Eco-Tech/Qwen3.8-27B-w8a8", "mi300x", {}, "variant_not_for_gpu"),
        ("deepseek-ai/DeepSeek-V4-Flash", "mi300x", {}, "gpu_unsupported_by_recipe"),
        ("RedHatAI/Muse-Glimmer-30B-FP8-block", "mi300x", {}, "needs_nightly"),
        (
            "Qwen/Qwen3-8B",
            "mi300x",
            {"extra_args": ["--quantization", "ascend"]},
            "unsupported_quantization",
        ),
    ],
)
def test_what_cannot_run_here_is_refused_with_its_source_and_forced_with_a_warning(
    model: str, gpu: str, kw: dict[str, Any], error_id: str
) -> None:
    error = refused(model, gpu, **kw)
    assert error.id == error_id and error.exit_code == 1
    assert error.details["source"]  # every rule cites where it comes from
    assert error.fix and "--force" in error.fix
    forced = plan(model, gpu, force=True, **kw)
    assert any(w.startswith("--force: launching although") for w in forced["warnings"])
    assert any(r["item"] == f"forced past {error_id}" for r in forced["reasons"])


def test_a_refusal_offers_the_variant_that_runs() -> None:
    error = refused("nvidia/DeepSeek-R1-0528-NVFP4-v2", "mi355x")
    assert "deepseek-ai/DeepSeek-R1" in (error.fix or "")
    nightly = refused("RedHatAI/Muse-Glimmer-30B-FP8-block")
    assert "--image vllm/vllm-openai-rocm:nightly" in (nightly.fix or "")
    doc = plan("RedHatAI/Muse-Glimmer-30B-FP8-block", image="vllm/vllm-openai-rocm:nightly")
    assert doc["image"] == "vllm/vllm-openai-rocm:nightly"  # offered explicitly, then taken


# ---------------------------------------------------------------- never planned blind


@pytest.mark.parametrize(
    ("model", "min_tp"),
    [("Qwen/Qwen3-235B-A22B", 4), ("meta-llama/Llama-3.1-405B-Instruct", 8)],
)
def test_an_unsized_model_is_sized_from_what_is_known_not_tp_1(model: str, min_tp: int) -> None:
    doc = plan(model)
    assert doc["tensor_parallel_size"] >= min_tp
    assert "parameter count" in reason(doc, "tp minimum")
    assert any("rests on an estimate" in w for w in doc["warnings"])


def test_the_estimate_follows_the_memory_share_vllm_may_use() -> None:
    full = plan("Qwen/Qwen3-235B-A22B", "mi325x")["tensor_parallel_size"]
    half_doc = plan("Qwen/Qwen3-235B-A22B", "mi325x", gpu_memory_utilization=0.5)
    half = half_doc["tensor_parallel_size"]
    assert half > full


def test_a_node_too_small_is_refused_before_the_download() -> None:
    error = refused("Qwen/Qwen3.8-2.4T-A95B")  # upstream renders it on 2 nodes
    assert error.id == "does_not_fit"
    # the recipe's stated VRAM is trusted before a parameter count (issue 27)
    assert "such GPUs" in (error.fix or "") and "states 5871 GB" in error.message
    assert "--hosts" in (error.fix or "") and "later release" not in (error.fix or "")
    error = refused("Qwen/Qwen3-235B-A22B", gpu_count=1)
    assert error.id == "does_not_fit" and error.details["need_tp"] == 4


def test_with_nothing_to_size_by_tp_is_required() -> None:
    with pytest.raises(UsageError) as err:
        make_plan(PlanOptions(model="someorg/mystery-model", gpu="mi300x"))
    assert err.value.id == "unsized_model" and "--tp" in (err.value.fix or "")
    doc = plan("someorg/mystery-model", tp=2)
    assert doc["tensor_parallel_size"] == 2


# ---------------------------------------------------------------- TP by objective


def test_deepseek_r1_takes_the_tp_the_recipe_and_amd_use() -> None:
    doc = plan("deepseek-ai/DeepSeek-R1")
    assert doc["tensor_parallel_size"] == 8  # was 4: 13 GB of KV per GPU, 1.16x concurrency


def test_qwen3_235b_2507_on_mi325x_keeps_its_full_context() -> None:
    doc = plan("Qwen/Qwen3-235B-A22B-Instruct-2507", gpu="mi325x")
    assert doc["tensor_parallel_size"] >= 4  # was 2 with the context cut to 102k
    assert not doc["context_limited"]
    assert "spans the node" in reason(doc, "--tensor-parallel-size")


def test_latency_grows_tp_until_the_full_context_fits() -> None:
    doc = plan("meta-llama/Llama-3.3-70B-Instruct")  # at TP 1 the KV holds 129k of 131k
    assert doc["tensor_parallel_size"] == 2 and not doc["context_limited"]
    assert "full context" in reason(doc, "--tensor-parallel-size")


def test_throughput_takes_the_smallest_safe_tp() -> None:
    latency = plan("Qwen/Qwen3-235B-A22B-Instruct-2507", gpu="mi325x")
    throughput = plan("Qwen/Qwen3-235B-A22B-Instruct-2507", gpu="mi325x", objective="throughput")
    assert throughput["tensor_parallel_size"] < latency["tensor_parallel_size"]
    assert "throughput" in reason(throughput, "--tensor-parallel-size")


def test_a_small_model_is_not_spread_over_the_node() -> None:
    assert plan("Qwen/Qwen3.5-9B")["tensor_parallel_size"] == 1
    assert plan("Qwen/Qwen3.5-9B", gpu_count=4)["tensor_parallel_size"] == 1


def test_the_recipes_own_tp_flag_and_tep_strategy_decide_for_latency() -> None:
    minimax = plan("MiniMaxAI/MiniMax-M2")  # hardware_overrides.amd passes TP 2
    assert minimax["tensor_parallel_size"] == 2
    flash = plan("deepseek-ai/DeepSeek-V4-Flash", gpu="mi355x")  # single_node_tep
    assert flash["tensor_parallel_size"] == 8
    assert "--enable-expert-parallel" in flash["vllm_args"]
    assert any(r["source"] == "strategy single_node_tep" for r in flash["reasons"])


def test_aiter_mla_heads_per_rank_by_vllm_release() -> None:
    r1 = Shape(num_attention_heads=128, num_kv_heads=128, uses_mla=True)
    aiter = {"VLLM_ROCM_USE_AITER": "1"}
    old = Situation(env=aiter, vllm_version="0.9.2")
    new = Situation(env=aiter, vllm_version="0.27.1")
    assert [tp for tp in (1, 2, 4, 8) if not tp_problems(tp, r1, old)] == [1, 8]
    assert [tp for tp in (1, 2, 4, 8) if not tp_problems(tp, r1, new)] == [1, 2, 4, 8]
    problem = tp_problems(4, r1, old)[0]
    assert problem[0] == "aiter_mla_heads" and "ROCm/aiter#548" in problem[1]
    assert tp_problems(4, r1, Situation(env={}, vllm_version="0.9.2")) == []  # AITER off


def test_heads_kv_heads_and_fp8_blocks_rule_out_a_tp() -> None:
    shape = Shape(num_attention_heads=24, num_kv_heads=8, intermediate_size=17408, fp8_block_n=128)
    sit = Situation(env={})
    assert "attention_heads_divisible" in [c for c, _ in tp_problems(16, shape, sit)]
    assert tp_problems(8, shape, sit) == []
    odd = Shape(num_attention_heads=32, num_kv_heads=8, intermediate_size=1536, fp8_block_n=128)
    assert "fp8_block_divisible" in [c for c, _ in tp_problems(8, odd, sit)]  # 1536/8 = 192


def test_a_tp_the_kernels_reject_is_refused_unless_forced() -> None:
    from instinct_serve.plan.decisions import choose_tp

    shape = Shape(num_attention_heads=12, num_kv_heads=4)
    kw: dict[str, Any] = dict(
        gpu_count=8, fit_at=lambda tp: None, recipe_tp=None, rough=None, shape=shape
    )
    with pytest.raises(UsageError) as err:
        choose_tp(PlanOptions(tp=8), situation=Situation(env={}), **kw)
    assert err.value.id == "tp_not_allowed" and err.value.details["allowed"] == [1, 2, 4]
    forced = choose_tp(PlanOptions(tp=8, force=True), situation=Situation(env={}), **kw)
    assert forced.tp == 8 and "TP 8 ruled out" in forced.skipped[-1]


# ---------------------------------------------------------------- generic models


def model_dir(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def test_a_generic_model_gets_its_familys_parsers_and_no_blind_remote_code(
    tmp_path: Path,
) -> None:
    llama = plan("acme/llama-3.1-8b-custom-instruct", tp=1)
    assert vllm_args.value(llama["vllm_args"], "--tool-call-parser") == "llama3_json"
    assert "--trust-remote-code" not in llama["vllm_args"]
    mistral = plan("acme/mistral-small-custom", tp=1)
    assert vllm_args.value(mistral["vllm_args"], "--tool-call-parser") == "mistral"


def test_the_docker_form_passes_the_model_positionally() -> None:
    from instinct_serve.plan.render import docker_argv

    result = make_plan(PlanOptions(gpu="mi300x"))
    argv = docker_argv(result.plan)
    assert "--model" not in argv
    assert argv[argv.index(result.plan.image) + 1] == result.plan.model


def test_plan_list_ranks_every_precision_and_tp_with_the_pick_first() -> None:
    from instinct_serve.gather.choices import plan_choices

    listing = plan_choices(PlanOptions(model="deepseek-ai/DeepSeek-R1", gpu="mi300x"))
    first = listing.choices[0]
    assert first.chosen and first.tp == 8 and first.feasible
    assert listing.chosen_why and "spans the node" in listing.chosen_why
    nvfp4 = [c for c in listing.choices if c.precision == "nvfp4"]
    assert nvfp4 and all(not c.feasible and "no kernel" in (c.why_not or "") for c in nvfp4)
    tp4 = next(c for c in listing.choices if c.tp == 4 and c.model_id == first.model_id)
    assert tp4.full_context_concurrency is not None and tp4.full_context_concurrency < 2


def test_plan_list_says_how_each_size_is_known() -> None:
    """Shipped metadata computed from config shapes is ``config``; a catalog model with no
    metadata offline gets the weights of its recipe's parameter count, said to be estimated."""
    from instinct_serve.gather.choices import plan_choices

    shipped = plan_choices(PlanOptions(model="Qwen/Qwen3-8B", gpu="mi300x"))
    sized = [c for c in shipped.choices if c.verdict is not None]
    assert sized and {c.size_basis for c in sized} == {"config"}
    listing = plan_choices(PlanOptions(model="ByteDance-Seed/Seed-OSS-36B-Instruct", gpu="mi300x"))
    rows = {c.tp: c for c in listing.choices}
    assert {c.size_basis for c in rows.values()} == {"estimated"}
    # 36B x 2 bytes (bf16, rough.BYTES_PER_PARAM) = 72 GB = 67.1 GiB on one GPU, half on two
    assert (rows[1].weights_per_gpu_gib, rows[2].weights_per_gpu_gib) == (67.1, 33.5)
    assert rows[1].kv_cache_tokens is None and rows[1].verdict is None
