"""The recipe loader against the real upstream corpus, hand-made broken files, and fuzzing."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from instinct_serve.catalog.parse import (
    RecipeFileError,
    load_yaml,
    parse_corpus,
    parse_recipe_text,
)
from instinct_serve.catalog.recipe import Recipe
from tests.catalog.conftest import write_yaml
from tests.infra.paths import RECIPES_CORPUS

CORPUS_FILES = sorted((RECIPES_CORPUS / "models").rglob("*.yaml"))


@pytest.fixture(scope="module")
def corpus() -> dict[str, Recipe]:
    result = parse_corpus(RECIPES_CORPUS)
    assert result.skipped == []
    return {k: Recipe(v.data, v.source_path) for k, v in result.recipes.items()}


def test_whole_corpus_loads(corpus: dict[str, Recipe]) -> None:
    assert len(CORPUS_FILES) == 173
    assert len(corpus) == 173
    for model_id, recipe in corpus.items():
        assert recipe.model_id == model_id
        org, _, name = model_id.partition("/")
        assert org and name
        assert recipe.source_path is not None and recipe.source_path.startswith("models/")
        assert recipe.variants, model_id  # every upstream recipe has at least one variant
        for variant in recipe.variants.values():
            assert variant.model_id


def test_model_id_differs_from_path(corpus: dict[str, Recipe]) -> None:
    recipe = corpus["google/gemma-4-31B-it"]
    assert recipe.source_path == "models/Google/gemma-4-31B-it.yaml"


def test_dates_become_iso_strings(corpus: dict[str, Recipe]) -> None:
    meta = corpus["Qwen/Qwen3.5-9B"].meta
    assert meta["date_added"] == "2026-04-22"
    assert meta["date_updated"] == "2026-04-22"
    # PyYAML's own view of the same file: a date object, the trap this guards against
    raw = yaml.safe_load((RECIPES_CORPUS / "models/Qwen/Qwen3.5-9B.yaml").read_text())
    assert not isinstance(raw["meta"]["date_added"], str)


def test_unknown_keys_are_kept(corpus: dict[str, Recipe]) -> None:
    assert "supports_dcp" in corpus["deepseek-ai/DeepSeek-V3.2-Exp"].model
    assert "kv_offload_support" in corpus["deepseek-ai/DeepSeek-V4-Flash"].data
    assert "omni" in corpus["Qwen/Qwen-Image"].data


def test_golden_qwen35_9b(corpus: dict[str, Recipe]) -> None:
    r = corpus["Qwen/Qwen3.5-9B"]
    assert r.base_args == ["--trust-remote-code"]
    assert r.base_env == {}
    assert r.context_length == 262144
    assert r.min_vllm_version == "0.17.0"
    assert r.tasks == ["multimodal", "text"]
    assert r.features["tool_calling"].args == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "qwen3_coder",
    ]
    assert r.features["reasoning"].args == ["--reasoning-parser", "qwen3"]
    assert r.opt_in_features == ["spec_decoding", "text_only"]
    assert r.default_features() == ["tool_calling", "reasoning"]
    (variant,) = r.variants.values()
    assert (variant.key, variant.precision, variant.vram_minimum_gb) == ("default", "bf16", 22.0)
    assert variant.model_id == "Qwen/Qwen3.5-9B" and not variant.own_model_id
    assert r.amd is None


def test_golden_deepseek_v32_exp_amd(corpus: dict[str, Recipe]) -> None:
    amd = corpus["deepseek-ai/DeepSeek-V3.2-Exp"].amd
    assert amd is not None
    assert amd.extra_args[:2] == ["--block-size", "1"]
    assert amd.extra_args[2:4] == ["--kv-cache-dtype", "bfloat16"]
    assert amd.extra_env == {
        "VLLM_ROCM_USE_AITER": "1",
        "VLLM_ROCM_USE_AITER_MOE": "1",
        "SAFETENSORS_FAST_GPU": "1",
        "VLLM_RPC_TIMEOUT": "18000000",
    }


def test_golden_gpt_oss_120b(corpus: dict[str, Recipe]) -> None:
    r = corpus["openai/gpt-oss-120b"]
    assert r.amd is not None
    assert r.amd.extra_env == {
        "VLLM_ROCM_USE_AITER": "1",
        "VLLM_ROCM_QUICK_REDUCE_QUANTIZATION": "INT4",
        "HSA_NO_SCRATCH_RECLAIM": "1",
        "AMDGCN_USE_BUFFER_OPS": "0",
    }
    assert r.amd.extra_args[:2] == ["--attention-backend", "ROCM_AITER_UNIFIED_ATTN"]
    # the variant key says fp8; its precision says mxfp4: always read precision
    amd_fp8 = r.variants["amd_fp8"]
    assert amd_fp8.precision == "mxfp4"
    assert amd_fp8.model_id == "amd/gpt-oss-120b-w-mxfp4-a-fp8"
    assert r.variants["default"].precision == "mxfp4"


def test_env_and_args_are_text_and_empty_values_are_empty() -> None:
    text = """
model:
  model_id: acme/m-1
  base_args: [--max-num-seqs, 8, 0.5]
  base_env: {A: 1, B: true, C: "x"}
meta: {date_added: 2026-01-02, tasks: [text]}
strategy_overrides:
features:
variants:
  default: {precision: bf16, vram_minimum_gb: 3}
hardware_overrides:
  amd:
    extra_env: {VLLM_ROCM_USE_AITER: 1}
"""
    data = parse_recipe_text(text)
    r = Recipe(data)
    assert r.base_args == ["--max-num-seqs", "8", "0.5"]
    assert r.base_env == {"A": "1", "B": "true", "C": "x"}
    assert r.strategy_overrides == {} and r.features == {}
    assert r.amd is not None and r.amd.extra_env == {"VLLM_ROCM_USE_AITER": "1"}
    assert data["meta"]["date_added"] == "2026-01-02"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("model: [", "invalid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        ("meta: {title: x}\n", "model: Field required"),
        ("model: {model_id: no-slash}\n", "not a Hugging Face id"),
        ("model: {model_id: a/b, base_args: --oops}\n", "list of arguments"),
        ("model: {model_id: a/b, base_env: [X]}\n", "mapping of environment"),
        (
            "model: {model_id: a/b}\nvariants: {default: {vram_minimum_gb: lots}}\n",
            "vram_minimum_gb",
        ),
        ("model: {model_id: a/b, context_length: .nan}\n", "non-finite"),
        ("model: {model_id: a/b}\nx: !!binary aGVsbG8=\n", "unsupported YAML value"),
        ("model: {model_id: a/b}\nx: !!python/object:os.system {}\n", "invalid YAML"),
    ],
)
def test_broken_text_is_a_reason(text: str, reason: str) -> None:
    with pytest.raises(RecipeFileError, match=reason):
        parse_recipe_text(text)


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        refs = ", ".join(f"*a{i - 1}" for _ in range(10))
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("model: {model_id: a/b}")
    start = time.monotonic()
    with pytest.raises(RecipeFileError, match="too large"):
        parse_recipe_text("\n".join(lines))
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    "text",
    [
        "model: &m {model_id: a/b, again: *m}\n",  # an alias cycle
        "model: {model_id: a/b}\nx: " + "[" * 80 + "]" * 80 + "\n",
    ],
)
def test_recursive_or_deep_trees_are_refused(text: str) -> None:
    with pytest.raises(RecipeFileError, match="nests deeper"):
        parse_recipe_text(text)


def test_bad_files_are_skipped_by_name(tmp_path: Path) -> None:
    good = (RECIPES_CORPUS / "models/Qwen/Qwen3.5-9B.yaml").read_text()
    models = tmp_path / "models"
    (models / "Qwen").mkdir(parents=True)
    (models / "Qwen/Qwen3.5-9B.yaml").write_text(good)
    (models / "Qwen/Zz-copy.yaml").write_text(good)  # same model_id, later in sort order
    (models / "acme").mkdir()
    (models / "acme/broken.yaml").write_text("model: {model_id: acme/broken\n")
    (models / "acme/latin1.yaml").write_bytes(b"model: {model_id: acme/x}\n# caf\xe9\n")
    write_yaml(models / "acme/nomodel.yml", {"meta": {"title": "no model"}})
    result = parse_corpus(tmp_path)
    assert list(result.recipes) == ["Qwen/Qwen3.5-9B"]
    reasons = {s.path: s.reason for s in result.skipped}
    assert set(reasons) == {
        "models/Qwen/Zz-copy.yaml",
        "models/acme/broken.yaml",
        "models/acme/latin1.yaml",
        "models/acme/nomodel.yml",
    }
    assert "duplicate model_id Qwen/Qwen3.5-9B" in reasons["models/Qwen/Zz-copy.yaml"]
    assert "invalid YAML" in reasons["models/acme/broken.yaml"]
    assert "UTF-8" in reasons["models/acme/latin1.yaml"]
    assert "model" in reasons["models/acme/nomodel.yml"]


def test_no_models_directory(tmp_path: Path) -> None:
    with pytest.raises(RecipeFileError, match="no models/ directory"):
        parse_corpus(tmp_path)


# ------------------------------------------------------------------------------ fuzzing


def _exercise(data: dict[str, Any]) -> None:
    """Everything a planner reads must be usable on whatever validation let through."""
    r = Recipe(data)
    assert isinstance(r.model_id, str) and "/" in r.model_id
    assert all(isinstance(a, str) for a in r.base_args)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in r.base_env.items())
    for hw in (None, "mi300x", "mi355x"):
        r.default_features(hw)
        for variant in r.variants.values():
            assert isinstance(variant.model_id, str)
            r.amd_image(variant.key, hw)
            for feature in r.features.values():
                args, env = feature.resolve(variant, hw)
                assert all(isinstance(a, str) for a in args)
                assert all(isinstance(v, str) for v in env.values())
    if r.amd is not None:
        assert all(isinstance(a, str) for a in r.amd.extra_args)
    r.hardware_status("mi300x")
    _ = (r.context_length, r.min_vllm_version, r.tasks, r.compatible_strategies, r.title)


def _check(text: str) -> None:
    try:
        data = parse_recipe_text(text)
    except RecipeFileError:
        return
    _exercise(data)


MUTATIONS = ("delete", "duplicate", "swap", "indent", "dedent", "truncate", "garble", "inject")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(CORPUS_FILES) - 1),
    ops=st.lists(
        st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 10**6), st.text(max_size=12)),
        min_size=1,
        max_size=4,
    ),
)
def test_fuzz_text_mutations(index: int, ops: list[tuple[str, int, str]]) -> None:
    lines = CORPUS_FILES[index].read_text(encoding="utf-8").split("\n")
    for op, pos, junk in ops:
        i = pos % max(1, len(lines))
        if op == "delete" and lines:
            del lines[i]
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif op == "swap" and len(lines) > 1:
            j = (pos // 7) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "indent" and lines:
            lines[i] = "  " + lines[i]
        elif op == "dedent" and lines:
            lines[i] = lines[i].lstrip()
        elif op == "truncate":
            lines = lines[:i]
        elif op == "garble" and lines:
            line = lines[i]
            k = pos % (len(line) + 1)
            lines[i] = line[:k] + junk + line[k + len(junk) :]
        elif op == "inject":
            lines.insert(i, junk)
    _check("\n".join(lines))


def _nodes(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += _nodes(value, (*path, key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            out += _nodes(value, (*path, i))
    return out


REPLACEMENTS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.lists(st.one_of(st.text(max_size=8), st.integers()), max_size=4),
    st.dictionaries(
        st.text(max_size=8), st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=3
    ),
)


@pytest.mark.heavy
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(0, len(CORPUS_FILES) - 1),
    picks=st.lists(st.tuples(st.integers(0, 10**6), REPLACEMENTS), min_size=1, max_size=5),
)
def test_fuzz_tree_mutations(index: int, picks: list[tuple[int, Any]]) -> None:
    tree = load_yaml(CORPUS_FILES[index].read_text(encoding="utf-8"))
    for pos, replacement in picks:
        nodes = _nodes(tree)[1:]
        if not nodes:
            break
        path = nodes[pos % len(nodes)]
        parent = tree
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = replacement
    _check(yaml.safe_dump(tree, sort_keys=False))


def test_fuzz_random_bytes_of_real_files() -> None:
    rng = random.Random(1234)
    for _ in range(200):
        raw = bytearray(CORPUS_FILES[rng.randrange(len(CORPUS_FILES))].read_bytes())
        for _ in range(rng.randint(1, 20)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        _check(raw.decode("utf-8", errors="replace"))
