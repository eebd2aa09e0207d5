"""Environment variables from recipes and our GPU data (issue 19): a name is
``[A-Za-z_][A-Za-z0-9_]*`` and a value is one line without NUL, or the recipe is skipped
with the reason (as a malformed recipe is), the strategy left out, the data file damaged.
What an older cache still holds never reaches a launch."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from instinct_serve.catalog.config import amd_config
from instinct_serve.catalog.overrides import data_text, gpu_overrides_from_data
from instinct_serve.catalog.parse import RecipeFileError, parse_corpus, parse_recipe_text
from instinct_serve.catalog.recipe import Recipe, env_problem, recipe_env_problem
from instinct_serve.catalog.schema import validate_gpu_overrides
from instinct_serve.catalog.store import cache_document, load_catalog
from instinct_serve.gather.recipes_cache import write_cache
from tests.catalog.conftest import write_yaml
from tests.infra.paths import RECIPES_CORPUS

BAD_NAMES = ["1X", "A-B", "A B", "A=B", "$(id)", "X;rm", "", "É", "A\nB", "A" * 129]
BAD_VALUES = ["a\nb", "a\rb", "a\x00b", "x" * 4097]


def recipe(**sections: Any) -> dict[str, Any]:
    return {"model": {"model_id": "acme/model", **sections.pop("model", {})}, **sections}


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names(name: str) -> None:
    assert env_problem(name, "1")
    assert env_problem("GOOD_NAME_1", "ok") is None
    assert env_problem("_x", "") is None


@pytest.mark.parametrize("value", BAD_VALUES)
def test_bad_values(value: str) -> None:
    assert env_problem("VLLM_X", value)


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        (recipe(model={"base_env": {"A-B": 1}}), "A-B"),
        (recipe(variants={"default": {"extra_env": {"X Y": "1"}}}), "X Y"),
        (recipe(hardware_overrides={"amd": {"extra_env": {"$(id)": "1"}}}), "$(id)"),
        (
            recipe(variants={"fp8": {"hardware_overrides": {"mi300x": {"extra_env": {"1X": 1}}}}}),
            "1X",
        ),
        (recipe(features={"tools": {"env": {"X;rm": "1"}}}), "X;rm"),
        (
            recipe(
                features={
                    "spec": {
                        "modes": {"mtp": {"hardware_overrides": {"amd": {"env": {"A=B": "1"}}}}}
                    }
                }
            ),
            "A=B",
        ),
        (recipe(strategy_overrides={"single_node_tp": {"extra_env": {"A B": "1"}}}), "A B"),
        (
            recipe(
                strategy_overrides={
                    "single_node_tep": {"hardware_overrides": {"amd": {"extra_env": {"-x": "1"}}}}
                }
            ),
            "-x",
        ),
        (recipe(model={"base_env": {"VLLM_X": "a\nb"}}), "line break"),
        (recipe(model={"base_env": {"VLLM_X": "a\x00b"}}), "NUL"),
    ],
)
def test_a_recipe_with_a_bad_variable_is_refused(doc: dict[str, Any], where: str) -> None:
    from instinct_serve.catalog.parse import validate_data

    with pytest.raises(RecipeFileError) as err:
        validate_data(doc)
    assert where in str(err.value)
    assert recipe_env_problem(doc)


def test_yaml_values_that_are_numbers_stay_fine() -> None:
    data = parse_recipe_text("model: {model_id: a/b, base_env: {A: 1, B_2: true, _C: x}}\n")
    assert data["model"]["base_env"] == {"A": "1", "B_2": "true", "_C": "x"}


def test_the_corpus_skips_only_the_bad_recipe(tmp_path: Path) -> None:
    good = (RECIPES_CORPUS / "models/Qwen/Qwen3.5-9B.yaml").read_text()
    (tmp_path / "models/Qwen").mkdir(parents=True)
    (tmp_path / "models/Qwen/Qwen3.5-9B.yaml").write_text(good)
    write_yaml(
        tmp_path / "models/acme/evil.yaml",
        recipe(hardware_overrides={"amd": {"extra_env": {"X$(touch /tmp/p)": "1"}}}),
    )
    result = parse_corpus(tmp_path)
    assert list(result.recipes) == ["Qwen/Qwen3.5-9B"]
    (skipped,) = result.skipped
    assert skipped.path == "models/acme/evil.yaml"
    assert "environment variable name" in skipped.reason


def test_a_strategy_with_a_bad_variable_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "strategies").mkdir()
    write_yaml(tmp_path / "strategies/good.yaml", {"name": "good", "env": {"NCCL_X": "1"}})
    write_yaml(tmp_path / "strategies/evil.yaml", {"name": "evil", "env": {"A B": "1"}})
    assert set(parse_corpus(tmp_path).strategies) == {"good"}


def test_a_stored_recipe_never_renders_a_bad_variable() -> None:
    """A cache written before these checks may hold one: the accessors leave it out."""
    data = recipe(
        model={"base_env": {"GOOD": "1", "BAD NAME": "1", "ALSO_BAD": "a\nb"}},
        variants={
            "default": {
                "extra_env": {"V_OK": "1", "V-BAD": "1"},
                "hardware_overrides": {"amd": {"extra_env": {"H;X": "1", "H_OK": "2"}}},
            }
        },
        hardware_overrides={"amd": {"extra_env": {"$(id)": "1", "AMD_OK": "1"}}},
        features={"tools": {"env": {"F=1": "x", "F_OK": "y"}}},
    )
    r = Recipe(data)
    assert r.base_env == {"GOOD": "1"}
    variant = r.variants["default"]
    assert variant.extra_env == {"V_OK": "1"}
    amd = variant.amd_override()
    assert amd is not None and amd.extra_env == {"H_OK": "2"}
    assert r.amd is not None and r.amd.extra_env == {"AMD_OK": "1"}
    assert r.features["tools"].resolve(variant, "mi300x")[1] == {"F_OK": "y"}


def test_a_stored_recipe_through_the_catalog_and_amd_config() -> None:
    bad = recipe(
        model={"base_env": {"GOOD": "1", "BAD NAME": "1"}},
        hardware_overrides={"amd": {"extra_env": {"X\nY": "1"}}},
    )
    write_cache(
        cache_document(
            source="git",
            fetched_at="2026-09-01T11:00:00+00:00",
            recipes={"acme/model": ("models/acme/model.yaml", bad)},
            skipped=[],
        )
    )
    from instinct_serve.catalog.matching import lookup

    match = lookup("acme/model", load_catalog(refresh=True))
    env = amd_config(match, "mi300x").env
    assert env.get("GOOD") == "1"
    assert all(env_problem(k, v) is None for k, v in env.items())


def raw_overrides() -> Any:
    return json.loads(data_text("gpu_overrides.json"))


@pytest.mark.parametrize("where", ["env_defaults", "model_override", "legacy"])
def test_gpu_overrides_with_a_bad_variable_are_damaged(where: str) -> None:
    good = raw_overrides()
    bad = copy.deepcopy(good)
    gfx = bad["gpu_configs"]["gfx942"]
    if where == "env_defaults":
        gfx["env_defaults"]["BAD NAME"] = {"value": "1", "reason": "x" * 12, "reference": "ref1"}
    elif where == "model_override":
        gfx["model_overrides"].append(
            {"match": "x", "env": {"X": "a\nb"}, "reason": "x" * 12, "reference": "ref1"}
        )
    else:
        legacy = next(iter(bad["legacy_models"].values()))
        legacy["env"] = {"$(id)": "1"}
    with pytest.raises(ValidationError):
        validate_gpu_overrides(bad)
    with pytest.raises(TypeError):
        gpu_overrides_from_data(bad)
    gpu_overrides_from_data(good)
