"""The merged AMD view (precedence of every layer) and the argv helpers under it."""

from __future__ import annotations

import pytest

from instinct_serve.catalog.config import amd_config, compare_with_rendered, resolve_gpu
from instinct_serve.catalog.matching import lookup
from instinct_serve.catalog.recipe import clean_image
from instinct_serve.catalog.store import Catalog, load_snapshot
from instinct_serve.errors import UsageError
from instinct_serve.vllm_args import dedupe as dedupe_args
from instinct_serve.vllm_args import remove as remove_args
from instinct_serve.vllm_args import value as flag_value


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_snapshot()


def test_deepseek_v32_exp_on_mi300x(catalog: Catalog) -> None:
    cfg = amd_config(lookup("deepseek-ai/DeepSeek-V3.2-Exp", catalog), "mi300x")
    assert (cfg.gfx, cfg.hardware_id, cfg.variant) == ("gfx942", "mi300x", "default")
    assert cfg.args[:3] == ["--trust-remote-code", "--block-size", "1"]
    assert flag_value(cfg.args, "--kv-cache-dtype") == "bfloat16"
    assert flag_value(cfg.args, "--tool-call-parser") == "deepseek_v32"
    assert flag_value(cfg.args, "--reasoning-parser") == "deepseek_v3"
    assert cfg.env["VLLM_ROCM_USE_AITER_FP4BMM"] == "0"
    assert cfg.env_sources["VLLM_ROCM_USE_AITER_FP4BMM"] == "gpu env_defaults (gfx942)"
    assert cfg.env["VLLM_ROCM_USE_AITER"] == "1"
    assert cfg.env_sources["VLLM_ROCM_USE_AITER"] == "recipe hardware_overrides.amd"
    assert cfg.precision == "fp8" and cfg.precision_status == "native"
    assert cfg.image is None and cfg.min_vllm_version == "0.12.0"
    assert cfg.warnings == []


def test_gpt_oss_on_gfx950_gets_the_moe_override(catalog: Catalog) -> None:
    cfg = amd_config(lookup("openai/gpt-oss-120b", catalog), "mi355x")
    assert cfg.env["VLLM_ROCM_USE_AITER_MOE"] == "0"
    assert cfg.env_sources["VLLM_ROCM_USE_AITER_MOE"].startswith("gpu model_override")
    assert cfg.env["VLLM_ROCM_QUICK_REDUCE_QUANTIZATION"] == "INT4"  # upstream AMD env kept
    assert flag_value(cfg.args, "--attention-backend") == "ROCM_AITER_UNIFIED_ATTN"
    assert cfg.precision_status == "native"  # mxfp4 on CDNA 4
    # the AMD variant's checkpoint matches through its recipe's id
    amd_variant = amd_config(lookup("amd/gpt-oss-120b-w-mxfp4-a-fp8", catalog), "gfx950")
    assert amd_variant.variant == "amd_fp8" and amd_variant.env["VLLM_ROCM_USE_AITER_MOE"] == "0"
    # and not on gfx942
    assert (
        "VLLM_ROCM_USE_AITER_MOE"
        not in amd_config(lookup("openai/gpt-oss-120b", catalog), "gfx942").env
    )


def test_gfx90a_forces_aiter_off_over_the_recipe(catalog: Catalog) -> None:
    cfg = amd_config(lookup("openai/gpt-oss-120b", catalog), "mi250x")
    assert cfg.hardware_id is None
    assert cfg.env["VLLM_ROCM_USE_AITER"] == "0"  # recipe amd says 1; gfx90a has no AITER
    assert "--attention-backend" not in cfg.args
    assert flag_value(cfg.args, "--block-size") == "64"  # the rest of the AMD tuning stays
    assert any("not gfx90a" in w for w in cfg.warnings)
    fp8 = amd_config(lookup("deepseek-ai/DeepSeek-V3.2-Exp", catalog), "mi210")
    assert fp8.precision_status == "unsupported"
    assert any("not supported on gfx90a" in w for w in fp8.warnings)


def test_exact_gpu_variant_layer(catalog: Catalog) -> None:
    match = lookup("poolside/Laguna-S-2.1", catalog)
    on_325 = amd_config(match, "mi325x", variant="fp8")
    assert on_325.hardware_id == "mi325x"
    assert on_325.env["VLLM_ROCM_USE_AITER_MOE"] == "0"
    assert on_325.env_sources["VLLM_ROCM_USE_AITER_MOE"] == "variant fp8 hardware_overrides.mi325x"
    on_300 = amd_config(match, "mi300x", variant="fp8")
    assert "VLLM_ROCM_USE_AITER_MOE" not in on_300.env
    # a variant can override our gfx default (GLM-5.2 MXFP4 on MI355X turns FP4BMM off)
    glm = amd_config(lookup("zai-org/GLM-5.2", catalog), "mi355x", variant="mxfp4")
    assert glm.env["VLLM_ROCM_USE_AITER_FP4BMM"] == "0"


def test_feature_hardware_override_replaces_args(catalog: Catalog) -> None:
    match = lookup("moonshotai/Kimi-K3", catalog)
    generic = match.recipe.features["spec_decoding"].args if match.recipe else []
    cfg = amd_config(match, "mi355x", features=["spec_decoding"])
    assert flag_value(cfg.args, "--max-num-seqs") == "128"  # only in the AMD replacement
    assert "--max-num-seqs" not in generic


def test_feature_modes(catalog: Catalog) -> None:
    match = lookup("deepseek-ai/DeepSeek-V4-Flash", catalog)
    spec = ["spec_decoding"]
    # the default variant (0731 checkpoint) defaults to DSpark; MTP can be picked on fp8
    default = amd_config(match, "mi355x", features=spec)
    assert '"method":"dspark"' in (flag_value(default.args, "--speculative-config") or "")
    mtp = amd_config(match, "mi355x", variant="fp8", features=spec, modes={"spec_decoding": "mtp"})
    assert '"method":"mtp"' in (flag_value(mtp.args, "--speculative-config") or "")
    with pytest.raises(UsageError) as info:
        amd_config(match, "mi355x", features=spec, modes={"spec_decoding": "telepathy"})
    assert info.value.id == "unknown_feature_mode" and "dspark" in (info.value.fix or "")


def test_pinned_amd_images(catalog: Catalog) -> None:
    vl = amd_config(lookup("Qwen/Qwen3-VL-235B-A22B-Instruct", catalog), "mi300x")
    assert vl.image == "vllm/vllm-openai-rocm:v0.22.1"
    # a bare docker_image string pins NVIDIA only (upstream semantics)
    assert amd_config(lookup("Qwen/Qwen3.8-27B", catalog), "mi300x").image is None
    # a typo upstream ("docker pull <image>") is cleaned
    m3 = amd_config(lookup("MiniMaxAI/MiniMax-M3", catalog), "mi300x", variant="mxfp8")
    assert m3.image == "vllm/vllm-openai-rocm:nightly"
    assert clean_image(" docker pull a/b:c ") == "a/b:c"


def test_declared_tp(catalog: Catalog) -> None:
    def tp(model: str, variant: str = "default", hw: str | None = "mi300x") -> int | None:
        recipe = catalog.recipe(model)
        assert recipe is not None
        return recipe.declared_tp(variant, hw)

    assert tp("MiniMaxAI/MiniMax-M2.5") == 4  # strategy_overrides.single_node_tp.tp
    assert tp("Qwen/Qwen3-235B-A22B-Instruct-2507", "fp8") == 4  # the variant's own tp
    assert tp("meta-llama/Llama-3.3-70B-Instruct") is None  # only a xeon6-keyed map
    assert tp("meta-llama/Llama-3.3-70B-Instruct", hw="xeon6") == 8
    assert tp("Qwen/Qwen3.5-9B") is None


def test_features_selection(catalog: Catalog) -> None:
    match = lookup("Qwen/Qwen3.5-9B", catalog)
    default = amd_config(match, "gfx942")
    assert default.features == ["tool_calling", "reasoning"]
    assert "--speculative-config" not in default.args
    text_only = amd_config(match, "gfx942", features=["text_only", "spec_decoding"])
    assert "--language-model-only" in text_only.args and "--tool-call-parser" not in text_only.args
    with pytest.raises(UsageError) as info:
        amd_config(match, "gfx942", features=["telepathy"])
    assert info.value.id == "unknown_feature" and "tool_calling" in (info.value.fix or "")
    with pytest.raises(UsageError) as info:
        amd_config(match, "gfx942", variant="fp2")
    assert info.value.id == "unknown_variant"


def test_legacy_and_generic(catalog: Catalog) -> None:
    legacy = amd_config(lookup("Qwen/Qwen3-30B-A3B-Thinking-2507", catalog), "gfx942")
    assert legacy.args == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--reasoning-parser",
        "deepseek_r1",
    ]
    assert legacy.context_length == 262144 and legacy.match == "legacy"
    mistral = amd_config(lookup("mistralai/Mistral-7B-Instruct-v0.3", catalog), "gfx950")
    assert mistral.args[:2] == ["--tokenizer-mode", "mistral"]
    # outside the catalog: nothing guessed (no family in the name, no config to read)
    generic = amd_config(lookup("acme/unknown-7B", catalog), "gfx950")
    assert generic.args == []
    assert generic.env == {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_FP4BMM": "1"}
    assert any("--trust-remote-code" in w for w in generic.warnings)
    # its family's documented parsers, and remote code only when the config needs it
    llama = amd_config(
        lookup("acme/my-llama-3.1-8b-finetune", catalog),
        "gfx942",
        model_config={"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    )
    assert llama.args == ["--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"]
    custom = amd_config(
        lookup("acme/odd-model", catalog),
        "gfx942",
        model_config={"architectures": ["OddForCausalLM"], "auto_map": {"AutoModel": "x.Y"}},
    )
    assert custom.args == ["--trust-remote-code"]


@pytest.mark.parametrize(
    ("gpu", "gfx", "profile"),
    [("gfx942", "gfx942", None), ("MI300X", "gfx942", "mi300x"), ("mi-355x", "gfx950", "mi355x")],
)
def test_resolve_gpu(gpu: str, gfx: str, profile: str | None) -> None:
    assert resolve_gpu(gpu) == (gfx, profile)


def test_unknown_gpu() -> None:
    with pytest.raises(UsageError) as info:
        resolve_gpu("h100")
    assert info.value.id == "unknown_gpu" and "gfx942" in (info.value.fix or "")


# --------------------------------------------------------------------------- argv helpers


def test_dedupe_args_last_wins() -> None:
    assert dedupe_args(["--a", "1", "--b", "--a", "2"]) == ["--b", "--a", "2"]
    assert dedupe_args(["--block-size", "16", "--x", "--block-size=64"]) == [
        "--x",
        "--block-size=64",
    ]
    assert dedupe_args(["--n", "-1", "--n", "-2"]) == ["--n", "-2"]  # negative numbers are values
    assert dedupe_args(["pos", "--a", "{}", "pos"]) == ["pos", "--a", "{}", "pos"]
    assert dedupe_args([]) == []


def test_remove_args_and_flag_value() -> None:
    args = ["--attention-backend", "ROCM_AITER_FA", "--x", "--attention-backend=TRITON_ATTN"]
    assert remove_args(args, "--attention-backend", "ROCM_AITER") == [
        "--x",
        "--attention-backend=TRITON_ATTN",
    ]
    assert remove_args(args, "--attention-backend") == ["--x"]
    assert flag_value(args, "--attention-backend") == "TRITON_ATTN"
    assert flag_value(args, "--x") == ""
    assert flag_value(args, "--missing") is None


def test_compare_with_rendered() -> None:
    diffs = compare_with_rendered(
        ["--a", "1", "--b"],
        {"E": "1", "F": "2"},
        ["vllm", "serve", "org/m", "--a", "2", "--b", "--c", "x"],
        {"E": "1", "F": "3", "G": "4"},
    )
    assert diffs == [
        "--a: upstream '2', ours '1'",
        "upstream sets --c x; we do not",
        "F: upstream '3', ours '2'",
        "upstream sets G=4; we do not",
    ]
