"""Plans that follow AMD's reference configs (``plan.reference``), with real model ids on
the GPUs AMD publishes them for, offline from the shipped snapshot."""

from __future__ import annotations

from typing import Any

from instinct_serve import vllm_args
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions


def plan(model: str, gpu: str, gpu_count: int = 8, **kw: Any) -> Any:
    return make_plan(PlanOptions(model=model, gpu=gpu, gpu_count=gpu_count, **kw)).plan


def sources(p: Any, name: str) -> list[str]:
    return [r.item for r in p.reasons if r.source == f"AMD reference {name}"]


def test_gpt_oss_on_mi355x_follows_its_config_by_name() -> None:
    p = plan("openai/gpt-oss-120b", "mi355x")
    assert p.tensor_parallel_size == 1  # gptoss-fp4-mi355x-vllm's first row
    assert p.env["VLLM_ROCM_USE_AITER_TRITON_ROPE"] == "1"  # only the reference sets it
    assert p.env["AMDGCN_USE_BUFFER_OPS"] == "0"
    assert vllm_args.value(p.vllm_args, "--attention-backend") == "ROCM_AITER_UNIFIED_ATTN"
    assert vllm_args.value(p.vllm_args, "--gpu-memory-utilization") == "0.95"
    cited = sources(p, "gptoss-fp4-mi355x-vllm")
    assert "VLLM_ROCM_USE_AITER_TRITON_ROPE=1" in cited and "image family" in cited
    # the benchmark-only flag is named, not followed
    assert "--no-enable-prefix-caching" not in p.vllm_args
    assert "--no-enable-prefix-caching" in cited
    # AMD's ATOM config for the same model and GPU: one line, never launched
    other = [r.why for r in p.reasons if r.item == "other servers"]
    assert other == [
        "AMD's reference for openai/gpt-oss-120b on MI355X also runs ATOM "
        "(gptoss-fp4-mi355x-atom); instinct plans vLLM only and does not launch it"
    ]
    assert p.server == "vllm"


def test_reference_ep_and_flags() -> None:
    """MiniMax-M2.5 on MI355X: AMD runs TP 2 with EP 2 and the AITER FA backend."""
    p = plan("MiniMaxAI/MiniMax-M2.5", "mi355x")
    assert p.tensor_parallel_size == 2
    assert "--enable-expert-parallel" in p.vllm_args
    assert vllm_args.value(p.vllm_args, "--attention-backend") == "ROCM_AITER_FA"
    assert p.env["VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT"] == "0"
    tp_why = [r.why for r in p.reasons if r.item.startswith("--tensor-parallel-size")][-1]
    assert tp_why.endswith("AMD's reference minimaxm2.5-fp8-mi355x-vllm runs TP 2 too")


def test_reference_tp_replaces_the_planners() -> None:
    """MiniMax-M3 MXFP8 on MI355X: AMD runs TP 4 where the planner alone picks TP 8."""
    p = plan("MiniMaxAI/MiniMax-M3-MXFP8", "mi355x")
    assert p.tensor_parallel_size == 4
    tp_why = [r.why for r in p.reasons if r.item.startswith("--tensor-parallel-size")][-1]
    assert tp_why == (
        "AMD's reference config minimaxm3-fp8-mi355x-vllm runs TP 4 on MI355X "
        "(the planner alone would pick TP 8)"
    )
    assert vllm_args.value(p.vllm_args, "--attention-backend") == "TRITON_ATTN"


def test_reference_ep1_removes_the_recipes_expert_parallel() -> None:
    p = plan("deepseek-ai/DeepSeek-V4-Pro", "mi355x")
    assert p.tensor_parallel_size == 8
    assert "--enable-expert-parallel" not in p.vllm_args
    assert vllm_args.value(p.vllm_args, "--moe-backend") == "aiter"


def test_recipe_unsupported_gpu_answered_by_amds_config() -> None:
    """The recipe marks MI325X unsupported for DeepSeek-V4-Pro; AMD runs dsv4-fp8-mi325x-vllm."""
    p = plan("deepseek-ai/DeepSeek-V4-Pro", "mi325x")
    assert vllm_args.value(p.vllm_args, "--quantization") == "deepseek_v4_fp8"
    support = [r.why for r in p.reasons if r.item == "recipe support"]
    assert len(support) == 1 and "dsv4-fp8-mi325x-vllm" in support[0]


def test_user_overrides_win() -> None:
    p = plan(
        "openai/gpt-oss-120b",
        "mi300x",
        tp=2,
        env_literal={"VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "FP"},
        extra_args=["--gpu-memory-utilization", "0.8"],
    )
    assert p.tensor_parallel_size == 2
    assert p.env["VLLM_ROCM_QUICK_REDUCE_QUANTIZATION"] == "FP"
    assert vllm_args.value(p.vllm_args, "--gpu-memory-utilization") == "0.8"


def test_another_server_only_is_one_warning_line() -> None:
    p = plan("deepseek-ai/DeepSeek-R1-0528", "mi300x", server="vllm")
    lines = [w for w in p.warnings if "AMD's reference" in w]
    assert lines == [
        "AMD's reference for deepseek-ai/DeepSeek-R1-0528 on MI300X runs SGLang "
        "(dsr1-fp8-mi300x-sglang); --server sglang follows dsr1-fp8-mi300x-sglang"
    ]
    assert p.server == "vllm" and "sglang" not in p.image


def test_a_server_instinct_does_not_launch_is_named_as_such() -> None:
    p = plan("openai/gpt-oss-120b", "mi355x")
    lines = [r.why for r in p.reasons if r.item == "other servers"]
    assert lines == [
        "AMD's reference for openai/gpt-oss-120b on MI355X also runs ATOM "
        "(gptoss-fp4-mi355x-atom); instinct plans vLLM only and does not launch it"
    ]
    assert not any(r.item == "server" for r in p.reasons)  # vLLM, as every plan was


def test_no_reference_no_change() -> None:
    p = plan("Qwen/Qwen3.5-9B", "mi300x", gpu_count=1)
    assert not any(r.source.startswith("AMD reference") for r in p.reasons)


def test_list_shows_the_reference_rows() -> None:
    from instinct_serve.gather.choices import plan_choices

    listing = plan_choices(
        PlanOptions(model="MiniMaxAI/MiniMax-M2.5", gpu="mi325x", gpu_count=8)
    ).to_dict()
    rows = {(r["config"], r["parallel"]) for r in listing["references"]}
    assert ("minimaxm2.5-fp8-mi325x-vllm", "TP 2") in rows
    assert ("minimaxm2.5-fp8-mi325x-vllm", "TP 8 EP 8") in rows


def test_fewer_gpus_than_the_reference_tp_is_said() -> None:
    """Kimi-K2.5 on 4 MI300X: AMD runs kimik2.5-int4-mi300x-vllm at TP 8 only; its flags are
    followed, its TP is not, and the plan says so."""
    p = plan("moonshotai/Kimi-K2.5", "mi300x", gpu_count=4)
    assert p.tensor_parallel_size <= 4
    assert vllm_args.value(p.vllm_args, "--mm-encoder-tp-mode") == "data"
    assert (
        "AMD's reference config kimik2.5-int4-mi300x-vllm runs at TP 8, more GPUs than this "
        "plan has: its flags are followed, its TP is not"
    ) in p.warnings


def test_speculative_mtp_follows_amds_mtp_config() -> None:
    """``--speculative-mtp 2`` (an opt-in): DeepSeek-V4-Pro on MI355X follows AMD's MTP
    config (its --speculative-config, by name) instead of the plain one; without the opt-in
    the plain config, no speculative decoding."""
    plain = plan("deepseek-ai/DeepSeek-V4-Pro", "mi355x")
    assert "--speculative-config" not in plain.vllm_args
    p = plan("deepseek-ai/DeepSeek-V4-Pro", "mi355x", speculative_mtp=2)
    spec = vllm_args.speculative_config(p.vllm_args)
    assert spec == {"method": "mtp", "num_speculative_tokens": 2}
    cited = sources(p, "dsv4-fp4-mi355x-vllm-mtp")
    assert any(item.startswith("--speculative-config") for item in cited), cited
    assert not sources(plain, "dsv4-fp4-mi355x-vllm-mtp") and sources(plain, "dsv4-fp4-mi355x-vllm")


def test_speculative_mtp_without_a_reference_is_your_flag() -> None:
    """No AMD config for the model: the opt-in writes the flag itself, with its reason, and
    asks what the fit sized (a different count replaces an MTP config's)."""
    p = plan("Qwen/Qwen3.5-9B", "mi300x", speculative_mtp=1)
    assert vllm_args.speculative_config(p.vllm_args) == {
        "method": "mtp",
        "num_speculative_tokens": 1,
    }
    why = [r for r in p.reasons if r.item.startswith("--speculative-config")]
    assert [r.source for r in why] == ["--speculative-mtp"]
    three = plan("deepseek-ai/DeepSeek-V4-Pro", "mi355x", speculative_mtp=3)
    assert vllm_args.mtp_tokens(vllm_args.speculative_config(three.vllm_args)) == 3


def test_speculative_eagle3_follows_amds_eagle3_config_with_its_draft() -> None:
    """``--speculative-eagle3 3`` (an opt-in): MiniMax-M3 MXFP8 on MI300X follows AMD's
    EAGLE3 config, whose draft model comes from it (Inferact/MiniMax-M3-EAGLE3); the plain
    plan does not speculate; another draft-token count rewrites the config's."""
    model = "MiniMaxAI/MiniMax-M3-MXFP8"
    plain = plan(model, "mi300x")
    assert "--speculative-config" not in plain.vllm_args
    p = plan(model, "mi300x", speculative_eagle3=3)
    spec = vllm_args.speculative_config(p.vllm_args)
    assert spec == {
        "method": "eagle3",
        "model": "Inferact/MiniMax-M3-EAGLE3",
        "num_speculative_tokens": 3,
    }
    assert vllm_args.value(p.vllm_args, "--kv-cache-dtype") == "fp8"  # the EAGLE3 config's
    cited = sources(p, "minimaxm3-fp8-mi300x-vllm-mtp")
    assert any(i.startswith("--speculative-config") for i in cited)
    draft = [r.why for r in p.reasons if r.item == "EAGLE3 draft"]
    assert draft and "Inferact/MiniMax-M3-EAGLE3" in draft[0] and "does not size" in draft[0]
    two = plan(model, "mi300x", speculative_eagle3=2)
    spec2 = vllm_args.speculative_config(two.vllm_args) or {}
    assert spec2["num_speculative_tokens"] == 2 and spec2["model"] == "Inferact/MiniMax-M3-EAGLE3"


def test_speculative_eagle3_without_a_draft_is_refused_with_the_flag_to_pass() -> None:
    """No EAGLE3 reference (so no draft model) for the checkpoint: an error that says how to
    name the draft, never a plan that launches an EAGLE3 config without one; both opt-ins at
    once is a usage error."""
    import pytest

    from instinct_serve.errors import InstinctError, UsageError

    with pytest.raises(InstinctError) as err:
        plan("deepseek-ai/DeepSeek-V4-Pro", "mi355x", speculative_eagle3=3)
    assert err.value.id == "no_eagle3_draft"
    assert '"method": "eagle3"' in (err.value.fix or "")
    with pytest.raises(UsageError):
        plan("MiniMaxAI/MiniMax-M3-MXFP8", "mi300x", speculative_eagle3=3, speculative_mtp=1)


def test_workload_agentic_follows_amds_agentic_coding_config() -> None:
    """``--workload agentic``: MiniMax-M3 MXFP8 on MI325X follows AMD's agentic-coding config
    (TP 8, prefix caching, chunked prefill, 32k batched tokens, the agentic timeouts) where
    the general plan follows the fixed-length config at TP 4."""
    model = "MiniMaxAI/MiniMax-M3-MXFP8"
    general = plan(model, "mi325x")
    agentic = plan(model, "mi325x", workload="agentic")
    assert general.tensor_parallel_size == 4 and agentic.tensor_parallel_size == 8
    assert vllm_args.value(agentic.vllm_args, "--max-num-batched-tokens") == "32768"
    assert vllm_args.value(agentic.vllm_args, "--stream-interval") == "20"
    assert "--enable-prefix-caching" in agentic.vllm_args
    assert agentic.env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] == "1800"
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" not in general.env
    assert sources(agentic, "minimaxm3-fp8-mi325x-vllm-agentic-mtp")
    # a model AMD publishes no agentic config for: the general config is followed
    gpt = plan("openai/gpt-oss-120b", "mi355x", workload="agentic")
    assert sources(gpt, "gptoss-fp4-mi355x-vllm")


def test_eagle3_on_an_image_without_the_interface_is_warned_about() -> None:
    """The recipe's minimax-m3 image lacks SupportsEagle3 for MiniMax-M3 (AMD's scripts patch
    vLLM for it): the EAGLE3 plan warns with the row; v0.27.1 (AMD's agentic EAGLE3 runs, no
    patch) and a plan without EAGLE3 do not."""
    model = "MiniMaxAI/MiniMax-M3-MXFP8"
    row = "inferencex-minimax-m3-eagle3-interface"
    p = plan(model, "mi325x", speculative_eagle3=3)
    assert p.image == "vllm/vllm-openai-rocm:minimax-m3"
    assert any(row in w for w in p.warnings)
    fixed = plan(model, "mi325x", speculative_eagle3=3, image="vllm/vllm-openai-rocm:v0.27.1")
    assert not any(row in w for w in fixed.warnings)
    assert not any(row in w for w in plan(model, "mi325x").warnings)
