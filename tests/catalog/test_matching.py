"""Model matching on the shipped snapshot, the blacklist, and the vLLM version gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from instinct_serve.catalog.matching import (
    close_matches,
    ensure_servable,
    lookup,
    name_matches,
    strip_suffixes,
    unknown_model_error,
    vllm_gate,
)
from instinct_serve.catalog.overrides import load_blacklist
from instinct_serve.catalog.store import Catalog, load_snapshot
from instinct_serve.errors import ExitCode, InstinctError, UsageError


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_snapshot()


# requested id, kind, served checkpoint, recipe (or legacy id), variant
TABLE = [
    ("Qwen/Qwen3.5-9B", "exact", "Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-9B", "default"),
    ("qwen/QWEN3.5-9b", "exact", "Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-9B", "default"),
    ("Google/gemma-4-31B-it", "exact", "google/gemma-4-31B-it", "google/gemma-4-31B-it", "default"),
    # a variant's checkpoint → its recipe and variant (key amd_fp8, precision mxfp4)
    (
        "amd/gpt-oss-120b-w-mxfp4-a-fp8",
        "variant",
        "amd/gpt-oss-120b-w-mxfp4-a-fp8",
        "openai/gpt-oss-120b",
        "amd_fp8",
    ),
    (
        "nvidia/Llama-3.3-70B-Instruct-FP8",
        "variant",
        "nvidia/Llama-3.3-70B-Instruct-FP8",
        "meta-llama/Llama-3.3-70B-Instruct",
        "fp8",
    ),
    # date suffixes, both directions, and quantisation suffixes
    (
        "moonshotai/Kimi-K2-Instruct-0905",
        "base_model",
        "moonshotai/Kimi-K2-Instruct-0905",
        "moonshotai/Kimi-K2-Instruct",
        "default",
    ),
    (
        "mistralai/Ministral-3-14B-Instruct",
        "base_model",
        "mistralai/Ministral-3-14B-Instruct",
        "mistralai/Ministral-3-14B-Instruct-2512",
        "default",
    ),
    # a dated checkpoint the recipe lists itself is a variant, not a base-model guess
    (
        "deepseek-ai/DeepSeek-R1-0528",
        "variant",
        "deepseek-ai/DeepSeek-R1-0528",
        "deepseek-ai/DeepSeek-R1",
        "r1_0528",
    ),
    (
        "deepseek-ai/DeepSeek-V3-0324",
        "base_model",
        "deepseek-ai/DeepSeek-V3-0324",
        "deepseek-ai/DeepSeek-V3",
        "default",
    ),
    (
        "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
        "base_model",
        "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
        "Qwen/Qwen3-235B-A22B-Instruct-2507",
        "default",
    ),
    ("Qwen/Qwen3.5-9B-AWQ", "base_model", "Qwen/Qwen3.5-9B-AWQ", "Qwen/Qwen3.5-9B", "default"),
    # another organisation's re-quantisation of exactly this model
    (
        "RedHatAI/Qwen3-8B-FP8-dynamic",
        "base_model",
        "RedHatAI/Qwen3-8B-FP8-dynamic",
        "Qwen/Qwen3-8B",
        "default",
    ),
    # legacy entries (not in the recipes)
    ("Qwen/Qwen3-14B", "legacy", "Qwen/Qwen3-14B", "Qwen/Qwen3-14B", None),
    (
        "meta-llama/llama-3.1-70b-instruct",
        "legacy",
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.1-70B-Instruct",
        None,
    ),
    # a Thinking checkpoint must not inherit the non-thinking Instruct recipe (no reasoning
    # parser there): our legacy entry with the right parser wins
    (
        "Qwen/Qwen3-235B-A22B-Thinking-2507",
        "legacy",
        "Qwen/Qwen3-235B-A22B-Thinking-2507",
        "Qwen/Qwen3-235B-A22B-Thinking-2507",
        None,
    ),
    ("Qwen/Qwen3-235B-A22B", "legacy", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B", None),
    # conservative: another size, a base model, a different org's fine-tune → generic
    ("Qwen/Qwen3.5-10B", "generic", "Qwen/Qwen3.5-10B", None, None),
    ("Qwen/Qwen3.5-9B-Base", "generic", "Qwen/Qwen3.5-9B-Base", None, None),
    ("someone/Qwen3.5-9B-finetune", "generic", "someone/Qwen3.5-9B-finetune", None, None),
    ("someone/Kimi-K2-Instruct-0905", "generic", "someone/Kimi-K2-Instruct-0905", None, None),
    ("acme/totally-unknown-7B", "generic", "acme/totally-unknown-7B", None, None),
]


@pytest.mark.parametrize(("requested", "kind", "served", "source", "variant"), TABLE)
def test_lookup_table(
    catalog: Catalog,
    requested: str,
    kind: str,
    served: str,
    source: str | None,
    variant: str | None,
) -> None:
    match = lookup(requested, catalog)
    assert match.kind == kind, match.explanation
    assert match.model_id == served
    assert match.explanation
    if kind == "legacy":
        assert match.legacy is not None and match.legacy.model_id == source
        assert match.recipe is None
    elif kind == "generic":
        assert match.recipe is None and match.legacy is None
    else:
        assert match.recipe is not None and match.recipe.model_id == source
        assert match.variant_key == variant
    assert match.to_dict()["match"] == kind


def test_variant_precision_comes_from_the_recipe(catalog: Catalog) -> None:
    match = lookup("amd/gpt-oss-120b-w-mxfp4-a-fp8", catalog)
    assert match.variant is not None and match.variant.precision == "mxfp4"
    assert "precision mxfp4" in match.explanation


def test_base_match_explains_what_differs(catalog: Catalog) -> None:
    match = lookup("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", catalog)
    assert "differ only by '-FP8'" in match.explanation  # -2507 is common to both
    assert match.notes
    match = lookup("LiquidAI/LFM2.5-1.2B-JP-202612", catalog)
    assert match.recipe is not None and match.recipe.model_id == "LiquidAI/LFM2.5-1.2B-JP-202606"
    assert "'-202612' and '-202606'" in match.explanation
    assert "chosen over LiquidAI/LFM2.5-1.2B-JP" in match.explanation


def test_generic_match_suggests_close_names(catalog: Catalog) -> None:
    match = lookup("Qwen/Qwen3.5-10B", catalog)
    assert "Qwen/Qwen3.5-9B" in match.suggestions
    assert close_matches("qwen3.5-9b", 3, catalog)[0] == "Qwen/Qwen3.5-9B"
    assert close_matches("zzzzzzzz/qqqqqqq", 3, catalog) == []


def test_strip_suffixes() -> None:
    assert strip_suffixes("kimi-k2-instruct-0905") == ("kimi-k2-instruct", ["-0905"])
    assert strip_suffixes("qwen3-8b-fp8-dynamic") == ("qwen3-8b", ["-fp8-dynamic"])
    assert strip_suffixes("x-2507-awq") == ("x", ["-2507", "-awq"])
    assert strip_suffixes("lfm2.5-1.2b-jp-202606") == ("lfm2.5-1.2b-jp", ["-202606"])
    # sizes and version numbers are not dates
    assert strip_suffixes("gpt-oss-120b") == ("gpt-oss-120b", [])
    assert strip_suffixes("glm-4-9b-hf") == ("glm-4-9b-hf", [])
    assert strip_suffixes("model-9999") == ("model-9999", [])


@pytest.mark.parametrize("bad", ["", "Qwen3.5-9B", "a/b/c", "org/", "a b/c", "--help/x"])
def test_invalid_ids_are_usage_errors(catalog: Catalog, bad: str) -> None:
    with pytest.raises(UsageError) as info:
        lookup(bad, catalog)
    assert info.value.exit_code == ExitCode.USAGE and info.value.id == "bad_model_id"


def test_a_local_model_directory_is_served_as_it_is(catalog: Catalog, tmp_path: Path) -> None:
    model = tmp_path / "SmolLM2-135M-Instruct"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    match = lookup(str(model), catalog)
    assert (match.kind, match.model_id, match.recipe, match.suggestions) == (
        "generic",
        str(model),
        None,
        (),
    )
    assert f"local model directory {model} (LlamaForCausalLM)" in match.explanation


@pytest.mark.parametrize(
    ("path", "error"),
    [("/x", "model_dir_not_found"), ("./no-such-dir", "model_dir_not_found"), ("DIR", "invalid")],
)
def test_a_path_that_is_not_a_model_directory_says_so(
    catalog: Catalog, tmp_path: Path, path: str, error: str
) -> None:
    text = str(tmp_path) if path == "DIR" else path  # an existing directory without config
    with pytest.raises(UsageError) as info:
        lookup(text, catalog)
    assert info.value.exit_code == ExitCode.USAGE
    assert info.value.id == (error if error != "invalid" else "model_dir_invalid")


@pytest.mark.parametrize(
    ("bare", "meant"),
    [
        ("qwen3.5-9b", "Qwen/Qwen3.5-9B"),
        (" Qwen3.5-9B ", "Qwen/Qwen3.5-9B"),
        ("gpt-oss", "openai/gpt-oss-120b"),
    ],
)
def test_a_bare_name_is_answered_with_the_ids_it_means(
    catalog: Catalog, bare: str, meant: str
) -> None:
    with pytest.raises(UsageError) as info:
        lookup(bare, catalog)
    assert f"did you mean {meant}?" in str(info.value)
    assert info.value.fix is not None and meant in info.value.fix
    # ranked by the catalog (references), not by the shortest name (issue 18)
    assert name_matches("gpt-oss", catalog) == ["openai/gpt-oss-120b", "openai/gpt-oss-20b"]
    assert name_matches("zzzzqqq", catalog) == [] and name_matches("a/b/c", catalog) == []


# ------------------------------------------------------------------------------ blacklist


@pytest.mark.parametrize(
    ("requested", "category", "kind"),
    [
        ("Qwen/Qwen-Image", "image_generation", "exact"),
        ("qwen/qwen-image", "image_generation", "exact"),
        ("Qwen/Qwen-Image-2512", "image_generation", "base_model"),  # via its recipe
        ("jinaai/jina-embeddings-v5-text-small", "embedding", "exact"),
        ("openai/whisper-large-v3-turbo", "speech_recognition", "generic"),  # by prefix
        ("black-forest-labs/FLUX.1-dev", "image_generation", "generic"),
        ("mistralai/Voxtral-4B-TTS-2603", "text_to_speech", "exact"),
    ],
)
def test_blacklisted_models_are_refused(
    catalog: Catalog, requested: str, category: str, kind: str
) -> None:
    match = lookup(requested, catalog)
    assert match.kind == kind
    assert match.blacklist is not None and match.blacklist.category == category
    with pytest.raises(InstinctError) as info:
        ensure_servable(match)
    err = info.value
    assert err.id == "blacklisted" and err.exit_code == ExitCode.FAILED
    assert match.blacklist.reason in err.message
    assert err.fix and match.blacklist.alternative in err.fix
    assert err.details["alternative"] == match.blacklist.alternative


def test_servable_models_pass(catalog: Catalog) -> None:
    for mid in ("Qwen/Qwen3.5-9B", "openai/gpt-oss-120b", "Qwen/Qwen3-14B", "acme/x-7B"):
        match = lookup(mid, catalog)
        assert ensure_servable(match, catalog.docker_image) is match


def test_every_generation_and_embedding_recipe_is_blacklisted(catalog: Catalog) -> None:
    """The derivation rule: omni (vLLM-Omni generation) and embedding tasks."""
    blacklist = load_blacklist()
    for recipe in catalog.recipes():
        if {"omni", "embedding"} & set(recipe.tasks):
            assert blacklist.get(recipe.model_id) is not None, recipe.model_id


def test_blacklist_entries_name_real_recipes_and_servable_alternatives(catalog: Catalog) -> None:
    blacklist = load_blacklist()
    entries = [*blacklist.entries.values(), *blacklist.prefixes]
    for entry in entries:
        if "vllm-project/recipes" in entry.reference:
            assert catalog.recipe(entry.key) is not None, entry.key
        alt = lookup(entry.alternative, catalog)
        assert alt.kind == "exact" and alt.blacklist is None, entry.alternative
        assert alt.recipe is not None and "text" in alt.recipe.tasks


def test_vision_and_ocr_models_are_not_blacklisted(catalog: Catalog) -> None:
    for mid in ("zai-org/GLM-OCR", "deepseek-ai/DeepSeek-OCR", "Qwen/Qwen2.5-VL-7B-Instruct"):
        assert lookup(mid, catalog).blacklist is None


# ----------------------------------------------------------------------------- vLLM gate


@pytest.mark.parametrize(
    ("model", "image", "ok"),
    [
        ("moonshotai/Kimi-K3", "vllm/vllm-openai-rocm:v0.27.1", True),  # needs 0.27.1
        ("moonshotai/Kimi-K3", "vllm/vllm-openai-rocm:v0.25.0", False),
        ("moonshotai/Kimi-K3", "vllm/vllm-openai-rocm:v0.28.0", True),
        ("Qwen/Qwen3.5-9B", "vllm/vllm-openai-rocm:v0.16.0", False),  # needs 0.17.0
        ("dots-studio/dots3-note-prev", "vllm/vllm-openai-rocm:v0.30.0", False),  # nightly
        ("dots-studio/dots3-note-prev", "vllm/vllm-openai-rocm:nightly", True),  # can't tell
        ("Qwen/Qwen3.8-2.4T-A95B", "vllm/vllm-openai-rocm:qwen38", True),  # its pinned image
        ("Qwen/Qwen3-14B", "vllm/vllm-openai-rocm:v0.8.4", False),  # legacy minimum 0.8.5
        ("acme/unknown-7B", "vllm/vllm-openai-rocm:v0.1.0", True),  # nothing to check
        ("deepseek-ai/DeepSeek-V4-Flash-0731", "vllm/vllm-openai-rocm:v0.24.0", False),  # variant
    ],
)
def test_vllm_gate(catalog: Catalog, model: str, image: str, ok: bool) -> None:
    match = lookup(model, catalog)
    assert (vllm_gate(match, image) is None) == ok
    if ok:
        ensure_servable(match, image)
    else:
        with pytest.raises(InstinctError) as info:
            ensure_servable(match, image)
        assert info.value.id == "needs_newer_vllm" and "instinct recipes sync" in (
            info.value.fix or ""
        )


def test_unknown_model_error(catalog: Catalog) -> None:
    err = unknown_model_error("Qwen/Qwen3.5-10B", catalog)
    assert err.id == "unknown_model" and err.fix and "Qwen/Qwen3.5-9B" in err.fix
