"""Our reviewed data files: schema, the facts the product relies on, and the skill's data."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import ValidationError

from instinct_serve.catalog.overrides import (
    EMULATED,
    NATIVE,
    UNKNOWN,
    UNSUPPORTED,
    blacklist_from_data,
    data_text,
    gpu_overrides_from_data,
    load_blacklist,
    load_gpu_overrides,
)
from instinct_serve.catalog.schema import validate_blacklist, validate_gpu_overrides
from instinct_serve.catalog.store import load_snapshot
from instinct_serve.errors import UsageError
from instinct_serve.hardware.profiles import PROFILES
from tests.infra.paths import AMD_SKILL

MANDATORY_FLAGS = [
    "--group-add=video",
    "--group-add=render",
    "--cap-add=SYS_PTRACE",
    "--security-opt seccomp=unconfined",
    "--device /dev/kfd",
    "--device /dev/dri",
    "--ipc=host",
]


def raw(name: str) -> Any:
    return json.loads(data_text(name))


def test_shipped_files_pass_their_schema() -> None:
    load_gpu_overrides(validate=True)
    load_blacklist(validate=True)


def test_docker_flags_are_the_mandatory_set() -> None:
    argv = load_gpu_overrides().docker_argv()
    joined = " ".join(argv)
    for flag in MANDATORY_FLAGS:
        assert flag in joined
    assert (
        "--security-opt" in argv and argv[argv.index("--security-opt") + 1] == "seccomp=unconfined"
    )


def test_env_defaults_per_gfx() -> None:
    gpu = load_gpu_overrides()
    assert gpu.config("gfx942").env == {
        "VLLM_ROCM_USE_AITER": "1",
        "VLLM_ROCM_USE_AITER_FP4BMM": "0",  # vllm-project/vllm#34641
    }
    assert gpu.config("gfx950").env == {
        "VLLM_ROCM_USE_AITER": "1",
        "VLLM_ROCM_USE_AITER_FP4BMM": "1",
    }
    assert gpu.config("gfx90a").env == {"VLLM_ROCM_USE_AITER": "0"}  # no AITER on CDNA 2
    assert gpu.config("GFX942").gfx == "gfx942"
    with pytest.raises(UsageError):
        gpu.config("gfx1100")


def test_every_profile_has_a_gpu_config() -> None:
    gpu = load_gpu_overrides()
    for key, profile in PROFILES.items():
        cfg = gpu.config(profile.gfx_version)
        assert key in cfg.profiles
    assert gpu.config("gfx942").hardware_id("mi325x") == "mi325x"
    assert gpu.config("gfx942").hardware_id("mi300a") == "mi300x"
    assert gpu.config("gfx950").hardware_id(None) == "mi355x"
    assert gpu.config("gfx90a").hardware_id("mi250x") is None


@pytest.mark.parametrize(
    ("gfx", "precision", "status"),
    [
        ("gfx942", "bf16", NATIVE),
        ("gfx942", "fp8", NATIVE),  # OCP checkpoints are converted to FNUZ at load
        ("gfx942", "mxfp4", EMULATED),
        ("gfx942", "nvfp4", UNSUPPORTED),
        ("gfx942", "fp4", UNSUPPORTED),  # upstream 'fp4' is NVIDIA FP4
        ("gfx950", "fp8", NATIVE),
        ("gfx950", "mxfp4", NATIVE),
        ("gfx950", "mxfp6", NATIVE),
        ("gfx950", "nvfp4", UNSUPPORTED),
        ("gfx90a", "bf16", NATIVE),
        ("gfx90a", "fp8", UNSUPPORTED),
        ("gfx90a", "mxfp4", UNKNOWN),
        ("gfx942", "int2/4/8", UNKNOWN),
        ("gfx942", None, UNKNOWN),
    ],
)
def test_precision_status(gfx: str, precision: str | None, status: str) -> None:
    assert load_gpu_overrides().config(gfx).precision.status(precision) == status


def test_gpt_oss_override_on_gfx950_only() -> None:
    gpu = load_gpu_overrides()
    (override,) = gpu.config("gfx950").overrides_for("openai/gpt-oss-20b")
    assert override.env == {"VLLM_ROCM_USE_AITER_MOE": "0"}
    assert gpu.config("gfx950").overrides_for("Qwen/Qwen3.5-9B") == []
    assert gpu.config("gfx942").overrides_for("openai/gpt-oss-20b") == []
    (star,) = gpu.config("gfx90a").overrides_for("anything/at-all")
    assert star.match == "*" and star.env == {"VLLM_ROCM_USE_AITER": "0"}


def test_every_fact_says_why() -> None:
    data = raw("gpu_overrides.json")
    for flag in data["docker_flags"]:
        assert flag["reason"] and flag["reference"]
    for cfg in data["gpu_configs"].values():
        for env in cfg["env_defaults"].values():
            assert env["reason"] and env["reference"]
        for over in cfg["model_overrides"]:
            assert over["reason"] and over["reference"]
        for work in cfg["workarounds"]:
            assert work["symptom"] and work["fix"] and work["reference"]
    for entry in data["legacy_models"].values():
        assert entry["reason"] and entry["reference"]


def test_legacy_models_are_not_in_the_recipes_and_are_complete() -> None:
    snapshot = load_snapshot()
    gpu = load_gpu_overrides()
    assert len(gpu.legacy_models) >= 15
    for mid, legacy in gpu.legacy_models.items():
        assert snapshot.recipe(mid) is None, f"{mid} has a recipe: drop the legacy entry"
        assert legacy.context_length > 0 and legacy.min_vllm_version
        assert legacy.tool_call_parser in {None, "hermes", "llama3_json", "mistral", "qwen3_coder"}
        assert legacy.reasoning_parser in {None, "qwen3", "deepseek_r1"}
        if legacy.tool_call_parser:
            assert legacy.features["tool_calling"][-1] == legacy.tool_call_parser
    qwen3 = [m for m in gpu.legacy_models if m.startswith("Qwen/Qwen3-")]
    llama = [m for m in gpu.legacy_models if m.startswith("meta-llama/Llama-3")]
    assert "Qwen/Qwen3-14B" in qwen3 and "Qwen/Qwen3-0.6B" in qwen3 and llama


# -------------------------------------------------------- facts checked against the skill


def _flags(items: list[str]) -> set[str]:
    return {" ".join(item.split()) for item in items}


def test_agrees_with_the_skill_where_it_should() -> None:
    skill = json.loads((AMD_SKILL / "gpu_overrides.json").read_text())
    gpu = load_gpu_overrides()
    ours = {" ".join(f.argv) for f in gpu.docker_flags}
    assert _flags(skill["docker_flags"]) == ours
    for gfx in ("gfx942", "gfx950"):
        assert skill["gpu_configs"][gfx]["env_defaults"] == gpu.config(gfx).env
        skill_prec = skill["gpu_configs"][gfx]["precision"]
        ours_prec = gpu.config(gfx).precision
        assert set(skill_prec["native"]) <= ours_prec.native
        assert set(skill_prec["emulated"]) <= ours_prec.emulated
        assert set(skill_prec["unsupported"]) <= ours_prec.unsupported
    skill_gpt = skill["gpu_configs"]["gfx950"]["model_overrides"][0]
    (ours_gpt,) = gpu.config("gfx950").overrides_for(skill_gpt["match"] + "-120b")
    assert skill_gpt["env_set"] == ours_gpt.env
    shared = [mid for mid in skill["legacy_models"] if gpu.legacy(mid) is not None]
    assert len(shared) >= 3  # Qwen3-0.6B, Qwen3-14B, Qwen3-235B-A22B
    for mid in shared:
        theirs, ours_legacy = skill["legacy_models"][mid], gpu.legacy(mid)
        assert ours_legacy is not None
        assert theirs["tool_call_parser"] == ours_legacy.tool_call_parser
        assert theirs.get("reasoning_parser") in (None, ours_legacy.reasoning_parser)


def test_blacklist_covers_the_skill_categories_we_agree_with() -> None:
    skill = json.loads((AMD_SKILL / "blacklist.json").read_text())
    blacklist = load_blacklist()
    for mid in skill["not_an_llm"]["models"] + skill["needs_audio_pipeline"]["models"]:
        if mid in ("zai-org/Glyph", "nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16"):
            # reviewed and kept servable: a chat VLM and a chat/tool-calling omni LLM
            assert blacklist.get(mid) is None
            continue
        assert blacklist.get(mid) is not None, mid


# ---------------------------------------------------------------- damaged data is caught


def test_schema_rejects_bad_gpu_overrides() -> None:
    good = raw("gpu_overrides.json")
    bad = copy.deepcopy(good)
    bad["gpu_configs"]["gfx942"]["precision"]["emulated"].append("bf16")  # both statuses
    with pytest.raises(ValueError, match="both"):
        validate_gpu_overrides(bad)
    bad = copy.deepcopy(good)
    del bad["docker_flags"][0]["reason"]
    with pytest.raises(ValidationError):
        validate_gpu_overrides(bad)
    bad = copy.deepcopy(good)
    bad["gpu_configs"]["mi300x"] = bad["gpu_configs"]["gfx942"]
    with pytest.raises(ValidationError, match="not a gfx target"):
        validate_gpu_overrides(bad)
    bad = copy.deepcopy(good)
    del bad["gpu_configs"]["gfx942"]["env_defaults"]
    with pytest.raises(KeyError):
        gpu_overrides_from_data(bad)


def test_schema_rejects_bad_blacklist() -> None:
    good = raw("blacklist.json")
    bad = copy.deepcopy(good)
    next(iter(bad["models"].values()))["category"] = "made_up"
    with pytest.raises(ValueError, match="unknown category"):
        validate_blacklist(bad)
    bad = copy.deepcopy(good)
    next(iter(bad["models"].values()))["alternative"] = "not an id"
    with pytest.raises(ValidationError):
        validate_blacklist(bad)
    bad = copy.deepcopy(good)
    del bad["categories"]
    with pytest.raises(KeyError):
        blacklist_from_data(bad)
