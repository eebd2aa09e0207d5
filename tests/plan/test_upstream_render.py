"""The re-implementation of vllm-project/recipes' AMD command rendering, checked against what
upstream itself asserts and against AMD-published launch commands.

Sources (each test names the one it checks):

* upstream tests: ``tests/command-synthesis.test.mjs`` (stored version 2e8f844b) in
  vllm-project/recipes;
* upstream code comments/rules: ``src/lib/command-synthesis.js`` (015a26cb) and
  ``scripts/build-recipes-api.mjs`` (1343d0f1);
* AMD-published commands: vllm-project/recipes ``DeepSeek/AMD_GPU/README.md`` (AMD's
  DeepSeek-R1 on MI300X guide), the ROCm blog "The vLLM MoE Playbook" (rocm.blogs.amd.com,
  24 Nov 2025, appendix commands on MI300X), and the vLLM recipes page "Qwen3-Coder Usage
  Guide" (docs.vllm.ai/projects/recipes, "Serving on 8xMI300x/MI325x/MI355x GPUs").

Only facts the recipe snapshot (upstream commit 8959cf64) still encodes are asserted: a
published command's TP, AITER switch and parsers, not its benchmark-only flags.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from tests.plan.upstream_render import (
    AMD_IMAGE,
    AMD_NIGHTLY_IMAGE,
    Corpus,
    Rendering,
    amd_rendered,
    dedupe_args,
    default_features,
    docker_image,
    format_argv,
    hardware_keyed,
    load_corpus,
    load_document,
    render_all,
    single_node_tp,
)

ROOT = Path(__file__).resolve().parents[2]
VENDORED = ROOT / "tests" / "data" / "upstream_rendered_amd.json"
AMD_PROFILE = {"brand": "AMD", "generation": "amd", "gpu_count": 8, "vram_gb": 1536}


@functools.cache
def corpus() -> Corpus:
    return load_corpus()


@functools.cache
def rendered() -> tuple[list[Rendering], list[object]]:
    renderings, missing = render_all(corpus())
    return renderings, list(missing)


def page(page_id: str, hw: str) -> Rendering:
    found = [r for r in rendered()[0] if r.page == page_id and r.hardware == hw]
    assert len(found) == 1, f"{page_id} on {hw}: {len(found)} pages"
    return found[0]


def flag(argv: list[str], name: str) -> str | None:
    value = None
    for i, arg in enumerate(argv):
        if arg == name:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else ""
    return value


# ----------------------------------------------------------- upstream's own assertions


def test_small_variant_on_amd_takes_one_gpu() -> None:
    # tests/command-synthesis.test.mjs: "Atlas A3 enforces two NPUs without changing other
    # hardware": resolveSingleNodeTp({model: {}}, {vram_minimum_gb: 20}, amd) === 1
    assert single_node_tp({"model": {}}, {"vram_minimum_gb": 20}, AMD_PROFILE) == 1


def test_amd_default_image_is_rocm_latest() -> None:
    # tests/command-synthesis.test.mjs: "existing Docker brands keep their current
    # defaults": computeDockerMeta(recipe, variant, {brand: "AMD"}).image
    assert docker_image({"model": {}}, {}, {"brand": "AMD"}, "mi300x") == AMD_IMAGE
    assert AMD_IMAGE == "vllm/vllm-openai-rocm:latest"


# ----------------------------------------------------------- upstream's rules (code)


def test_autofit_is_binary_one_gpu_or_the_node() -> None:
    # command-synthesis.js autoFitTp: "TP=1 when the weights fit on a single GPU,
    # otherwise fan out to the full node ... Skips intermediate sizes (TP=2/4)"
    assert single_node_tp({}, {"vram_minimum_gb": 192}, AMD_PROFILE) == 1
    assert single_node_tp({}, {"vram_minimum_gb": 193}, AMD_PROFILE) == 8
    assert single_node_tp({}, {}, AMD_PROFILE) == 8  # no VRAM hint: the node
    assert single_node_tp({}, {"vram_minimum_gb": 20}, AMD_PROFILE, "single_node_tep") == 8


def test_declared_tp_precedence_and_cap() -> None:
    # resolveSingleNodeTp: variant.tp (number or map) > strategy_overrides.single_node_tp.tp,
    # capped at the node's GPUs; maps resolve exact id > generation > brand > default
    recipe = {"strategy_overrides": {"single_node_tp": {"tp": 4}}}
    assert single_node_tp(recipe, {"vram_minimum_gb": 10}, AMD_PROFILE) == 4
    assert single_node_tp(recipe, {"tp": 2}, AMD_PROFILE) == 2
    assert single_node_tp({}, {"tp": 16}, AMD_PROFILE) == 8
    tp_map = {"tp": {"mi300x": 2, "amd": 4, "default": 8}}
    assert single_node_tp({}, tp_map, AMD_PROFILE, hw_id="mi300x") == 2
    assert single_node_tp({}, tp_map, AMD_PROFILE, hw_id="mi355x") == 4
    assert hardware_keyed({"default": 1}, AMD_PROFILE, "mi325x") == 1
    assert hardware_keyed({"nvidia": 1}, AMD_PROFILE, "mi325x") is None


def test_dedupe_keeps_the_last_flag_at_its_position() -> None:
    # command-synthesis.js dedupeArgs: last wins; a value starting with "-" is a new flag
    args = ["--a", "1", "--b", "--a", "2", "pos", "--c", "-1"]
    assert dedupe_args(args) == ["--b", "--a", "2", "pos", "--c", "-1"]
    # formatArgv: args.filter(Boolean) drops falsy tokens (0, "", null) before dedupe
    assert format_argv("m", ["--x", 0, "--y", 8, ""]) == ["vllm", "serve", "m", "--x", "--y", "8"]


def test_default_features_drop_opt_ins_and_gpu_opt_ins() -> None:
    # build-recipes-api.mjs defaultFeaturesFor: all − opt_in − hardware_opt_in[hw], plus
    # features a variant forces through default_modes
    recipe = {
        "features": {"a": {}, "b": {}, "c": {}, "d": {}},
        "opt_in_features": ["b", "d"],
        "hardware_opt_in_features": {"mi300x": ["c"]},
        "variants": {"v": {"default_modes": {"d": "x"}}},
    }
    assert default_features(recipe, "mi300x", "default") == ["a"]
    assert default_features(recipe, "mi355x", "v") == ["a", "c", "d"]


def test_nightly_required_and_pins_choose_the_image() -> None:
    # computeDockerMeta: exact variant.hardware_overrides.<gpu>.docker_image > variant, then
    # model docker_image (brand map's amd; a bare string pins NVIDIA only) > nightly/latest
    nightly = {"model": {"nightly_required": True}}
    assert docker_image(nightly, {}, AMD_PROFILE, "mi300x") == AMD_NIGHTLY_IMAGE
    bare = {"model": {"docker_image": "vllm/vllm-openai:x"}}
    assert docker_image(bare, {}, AMD_PROFILE, "mi300x") == AMD_IMAGE
    mapped = {"model": {"docker_image": {"nvidia": "n", "amd": "rocm:pinned"}}}
    assert docker_image(mapped, {}, AMD_PROFILE, "mi300x") == "rocm:pinned"
    exact = {"hardware_overrides": {"mi355x": {"docker_image": "rocm:mi355x"}}}
    assert docker_image(mapped, exact, AMD_PROFILE, "mi355x") == "rocm:mi355x"


# ----------------------------------------------------------- the snapshot


def test_snapshot_renders_732_amd_pages() -> None:
    # issue 13: "the vllm-project/recipes renderer's own AMD commands (732 renderings)"
    renderings, _missing = rendered()
    assert len(renderings) == 732
    assert {r.hardware for r in renderings} == {"mi300x", "mi325x", "mi355x"}
    assert len({(r.page, r.hardware) for r in renderings}) == 732


def test_vendored_json_is_current() -> None:
    from scripts.render_upstream_amd import build

    assert VENDORED.read_text(encoding="utf-8") == build(), "rerun scripts/render_upstream_amd.py"
    renderings, missing = load_document(VENDORED)
    assert [r.to_dict() for r in renderings] == [r.to_dict() for r in rendered()[0]]
    assert len(missing) == len(rendered()[1])


def test_deepseek_r1_matches_amds_mi300x_command() -> None:
    # vllm-project/recipes DeepSeek/AMD_GPU/README.md (AMD's MI300X guide): "SAFETENSORS_FAST_GPU=1
    # VLLM_ROCM_USE_AITER=1 ... vllm serve deepseek-ai/DeepSeek-R1 -tp 8 ... --trust-remote-code"
    r = page("deepseek-ai/DeepSeek-R1", "mi300x")
    assert r.argv[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-R1"]
    assert r.tp == 8 and r.node_count == 1
    assert r.env["VLLM_ROCM_USE_AITER"] == "1"
    assert r.env["SAFETENSORS_FAST_GPU"] == "1"
    assert flag(r.argv, "--trust-remote-code") == ""
    assert flag(r.argv, "--reasoning-parser") == "deepseek_r1"
    assert r.docker_image == AMD_IMAGE


@pytest.mark.parametrize("hw", ["mi300x", "mi325x", "mi355x"])
def test_qwen3_coder_matches_the_8x_mi_command(hw: str) -> None:
    # docs.vllm.ai/projects/recipes Qwen3-Coder-480B-A35B, "Serving on 8xMI300x/MI325x/MI355x
    # GPUs", BF16: "VLLM_ROCM_USE_AITER=1 vllm serve Qwen/Qwen3-Coder-480B-A35B-Instruct ...
    # --tensor-parallel-size 8 --enable-auto-tool-choice --tool-call-parser qwen3_coder"
    r = page("Qwen/Qwen3-Coder-480B-A35B-Instruct", hw)
    assert r.tp == 8
    assert r.env["VLLM_ROCM_USE_AITER"] == "1"
    assert flag(r.argv, "--tool-call-parser") == "qwen3_coder"
    assert flag(r.argv, "--enable-auto-tool-choice") == ""


def test_qwen3_235b_on_mi300x_is_tp8() -> None:
    # ROCm blog "The vLLM MoE Playbook" (24 Nov 2025), appendix, "Qwen3: TP=8":
    # "vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507 --tensor-parallel-size 8 ...
    #  --trust-remote-code"
    r = page("Qwen/Qwen3-235B-A22B-Instruct-2507", "mi300x")
    assert r.tp == 8 and r.tp_rule == "autofit_full_node"
    assert flag(r.argv, "--trust-remote-code") == ""


def test_llama4_scout_tp_follows_per_gpu_memory() -> None:
    # the same binary auto-fit on two GPUs: vram_minimum_gb 262 (Llama-4-Scout-17B-16E-Instruct.yaml
    # line 40) exceeds a 192 GB MI300X but fits a 288 GB MI355X
    assert page("meta-llama/Llama-4-Scout-17B-16E-Instruct", "mi300x").tp == 8
    assert page("meta-llama/Llama-4-Scout-17B-16E-Instruct", "mi355x").tp == 1


def test_amd_hardware_override_tp_wins_over_the_declared_tp() -> None:
    # MiniMax-M2.yaml: strategy_overrides.single_node_tp.tp: 4 (line 100), but
    # hardware_overrides.amd.extra_args has --tensor-parallel-size 2 (lines 86-87), which
    # dedupeArgs keeps because hardware overrides come after the parallelism flags
    r = page("MiniMaxAI/MiniMax-M2", "mi300x")
    assert r.tp == 2 and r.tp_rule == "args:hardware_overrides.amd"
    assert flag(r.argv, "--attention-backend") == "ROCM_AITER_FA"


def test_variant_tp_map_per_gpu() -> None:
    # Inkling-Small.yaml variants.mxfp4.tp: {mi300x: 2, mi325x: 2, mi355x: 1}
    assert page("EmbeddedLLM/Inkling-Small-MXFP4", "mi300x").tp == 2
    assert page("EmbeddedLLM/Inkling-Small-MXFP4", "mi355x").tp == 1


def test_too_big_for_one_node_renders_two_nodes() -> None:
    # build-recipes-api.mjs buildVariantRendering: !fitsSingleNode and a multi_node_*
    # strategy → 2 nodes, recommendStrategy(…, 2) → multi_node_tp, TP = 2 x 8
    r = page("Qwen/Qwen3.8-2.4T-A95B", "mi300x")
    assert (r.strategy, r.node_count, r.tp, r.deploy_type) == ("multi_node_tp", 2, 16, "multi_node")
    assert flag(r.argv, "--nnodes") == "2" and flag(r.argv, "--node-rank") == "0"
    assert r.worker_argv is not None and "--headless" in r.worker_argv
    assert flag(r.worker_argv, "--node-rank") == "1"
    assert r.env["NCCL_SOCKET_IFNAME"] == "$IFACE_NAME"  # strategies/multi_node_tp.yaml env
    assert r.docker_image == "vllm/vllm-openai-rocm:qwen38"  # model.docker_image.amd


def test_default_strategy_tep_takes_the_node_and_adds_ep() -> None:
    # DeepSeek-V4-Flash.yaml default_strategy: single_node_tep; strategies/single_node_tep.yaml
    # vllm_args: [--enable-expert-parallel]; the parent page serves variants.default's checkpoint
    r = page("deepseek-ai/DeepSeek-V4-Flash", "mi355x")
    assert r.strategy == "single_node_tep" and r.tp == 8
    assert r.model_id == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert r.arg_sources["--enable-expert-parallel"] == "strategies/single_node_tep.yaml"


def test_pages_upstream_does_not_render_on_amd() -> None:
    _renderings, missing = rendered()
    reasons = {(m.page, m.hardware): m.reason for m in missing}  # type: ignore[attr-defined]
    # PRECISION_HARDWARE_CONSTRAINTS: nvfp4 needs NVIDIA Blackwell
    assert "nvfp4" in reasons[("RedHatAI/MiniMax-M2-NVFP4", "mi355x")]
    # isHardwareSupported: meta.hardware.mi300x: unsupported
    assert "meta.hardware.mi300x" in reasons[("deepseek-ai/DeepSeek-V4-Flash", "mi300x")]
    assert all(
        r.page != "deepseek-ai/DeepSeek-V4-Flash" or r.hardware != "mi300x" for r in rendered()[0]
    )
    # omni recipes get no API page (buildVariantRendering returns null)
    assert any("omni" in reason for reason in reasons.values())


def test_shared_checkpoint_page_keeps_the_last_variant() -> None:
    # ERNIE-4.5-VL-28B-A3B-PT.yaml: variants 424b and 424b_fp8 both name
    # baidu/ERNIE-4.5-VL-424B-A47B-PT; renderAndWriteVariant clears the page folder, so the
    # later variant's files are the ones published
    r = page("baidu/ERNIE-4.5-VL-424B-A47B-PT", "mi300x")
    assert r.variant == "424b_fp8"
    assert flag(r.argv, "--quantization") == "fp8"


def test_nightly_image_and_upstream_typo_are_kept() -> None:
    # Muse-Glimmer-30B.yaml model.nightly_required: true, no AMD pin → :nightly
    assert page("RedHatAI/Muse-Glimmer-30B-FP8-block", "mi300x").docker_image == AMD_NIGHTLY_IMAGE
    # MiniMax-M3.yaml line 153: an mi300x docker_image of "docker pull …" (rendered as is)
    typo = page("MiniMaxAI/MiniMax-M3-MXFP8", "mi300x").docker_image
    assert typo == "docker pull vllm/vllm-openai-rocm:nightly"


def test_amd_rendered_is_what_the_catalog_reads() -> None:
    from instinct_serve.catalog.store import Catalog

    renderings, _ = rendered()
    by_model = amd_rendered(renderings)
    models = {
        rf.data["model"]["model_id"]: {
            "source_path": rf.source_path,
            "recipe": rf.data,
            "amd_rendered": by_model.get(rf.data["model"]["model_id"], {}),
        }
        for rf in corpus().recipes
    }
    catalog = Catalog(
        source="api",
        fetched_at="2026-08-21T00:00:00Z",
        source_commit=None,
        source_url=None,
        docker_image=None,
        docker_tag=None,
        models=models,
    )
    got = catalog.rendered("deepseek-ai/DeepSeek-R1", "mi300x")
    assert got is not None
    want = page("deepseek-ai/DeepSeek-R1", "mi300x")
    assert got.argv == want.argv and got.env == want.env
    assert (got.variant, got.strategy, got.node_count) == ("default", "single_node_tp", 1)
    assert got.docker_image == AMD_IMAGE
    head = catalog.rendered("Qwen/Qwen3.8-2.4T-A95B", "mi300x")
    assert head is not None and head.node_count == 2 and head.deploy_type == "multi_node"
    json.dumps(by_model)  # JSON-serialisable, as the cache is
