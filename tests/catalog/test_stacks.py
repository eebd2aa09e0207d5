"""The validated-stack table (data/validated_stacks.json): it loads and validates, plan refuses
a known-bad stack (``--force`` launches it) and swaps a refused default image for the newest
known-good one, diagnose cites a row from a real log line, and ``recipes sync`` replaces the
table from a real git repository."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from instinct_serve.catalog.overrides import data_text
from instinct_serve.catalog.schema import validate_stacks
from instinct_serve.catalog.stacks import (
    STACKS_FILE,
    Launch,
    image_versions,
    load_stacks,
    table_for,
)
from instinct_serve.catalog.store import cache_path, load_catalog
from instinct_serve.diagnose import diagnose
from instinct_serve.diagnose.model import DiagnoseContext
from instinct_serve.errors import InstinctError
from instinct_serve.gather.plan import make_plan
from instinct_serve.gather.recipes_cache import write_cache
from instinct_serve.gather.recipes_sync import SyncError, sync
from instinct_serve.options import PlanOptions
from tests.catalog.conftest import CorpusRepo
from tests.infra.cli import run_instinct

PUBLIC_LOGS = Path(__file__).parents[1] / "fixtures" / "logs" / "public"

QWEN_397B = "Qwen/Qwen3.5-397B-A17B-FP8"
BAD_IMAGE = "vllm/vllm-openai-rocm:v0.26.0"  # vllm#51580: NaN logits on gfx942
GOOD_IMAGE = "vllm/vllm-openai-rocm:nightly-f8d03e77416bf90c49acbe50e233275722f02c4b"
ISSUE = re.compile(r"^https://github\.com/[\w.\-]+/[\w.\-]+/(issues|pull)/\d+$")


def shipped_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(data_text(STACKS_FILE))
    return doc


def plan(**kw: Any) -> Any:
    kw.setdefault("hf_cache", "/srv/hf-cache")
    kw.setdefault("compile_cache", "/srv/compile-cache")
    return make_plan(PlanOptions(**kw)).plan


def test_the_table_loads_validates_and_cites_public_issues() -> None:
    doc = validate_stacks(shipped_doc())
    table = load_stacks()
    bad = [r for r in table.rows if r.known_bad]
    assert len(table.rows) == len(doc.rows) >= 15 and len(bad) >= 15
    assert all(ISSUE.match(r.source) for r in table.rows)
    sources = {r.source for r in table.rows}
    for named in (  # the four issue 27 names
        "https://github.com/vllm-project/vllm/issues/43029",
        "https://github.com/vllm-project/vllm/issues/56945",
        "https://github.com/vllm-project/vllm/issues/51580",
        "https://github.com/ROCm/aiter/issues/3635",
    ):
        assert named in sources
    assert {r.plan for r in bad} == {"refuse", "warn", "cite"}


def test_a_broken_table_is_refused_by_the_schema() -> None:
    doc = shipped_doc()
    doc["rows"].append(copy.deepcopy(doc["rows"][0]))
    with pytest.raises(ValueError, match="appears twice"):
        validate_stacks(doc)
    doc = shipped_doc()
    doc["rows"][0]["source"] = "https://example.com/a-blog-post"
    with pytest.raises(ValueError):
        validate_stacks(doc)


def test_versions_come_from_both_tag_styles() -> None:
    assert image_versions("vllm/vllm-openai-rocm:v0.26.0") == ((0, 26, 0), None)
    assert image_versions("rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715") == ((0, 9, 1), (6, 4, 1))
    assert image_versions(GOOD_IMAGE) == (None, None)
    table = load_stacks()
    launch = Launch(
        image="rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715", gfx="gfx942", args=["--port", "1"]
    )
    assert [r.id for r in table.known_bad(launch, plan=("warn",))] == [
        "rocm-4614-graph-capture-stale-state"
    ]
    eager = Launch(image=launch.image, gfx="gfx942", args=["--enforce-eager"])
    assert table.known_bad(eager, plan=("warn",)) == []


def test_plan_refuses_a_known_bad_stack_and_force_launches_it() -> None:
    with pytest.raises(InstinctError) as info:
        plan(model=QWEN_397B, gpu="mi325x", image=BAD_IMAGE)
    err = info.value
    assert err.id == "known_bad_stack" and int(err.exit_code) == 1
    assert "vllm-51580-aiter-moe-nan-gfx942" in err.message and "NaN" in err.message
    assert f"--image {GOOD_IMAGE}" in err.fix and "VLLM_ROCM_USE_AITER_MOE=0" in err.fix
    assert err.details["source"] == "https://github.com/vllm-project/vllm/issues/51580"

    forced = plan(model=QWEN_397B, gpu="mi325x", image=BAD_IMAGE, force=True)
    assert forced.image == BAD_IMAGE
    assert any("vllm-51580" in w for w in forced.warnings)
    # the fix in the launch clears the row; the same image on gfx950 is no known-bad stack
    fixed = plan(
        model=QWEN_397B, gpu="mi325x", image=BAD_IMAGE, env_literal={"VLLM_ROCM_USE_AITER_MOE": "0"}
    )
    assert fixed.image == BAD_IMAGE and not any("vllm-51580" in w for w in fixed.warnings)
    assert plan(model=QWEN_397B, gpu="mi355x", image=BAD_IMAGE).image == BAD_IMAGE


def _cache_with(docker_tag: str, stacks: dict[str, Any] | None = None) -> None:
    """The shipped snapshot as the recipes cache, with another default image (and table)."""
    doc = json.loads(data_text("recipes_snapshot.json"))
    doc["docker_image"] = f"vllm/vllm-openai-rocm:{docker_tag}"
    doc["docker_tag"] = docker_tag
    doc["source"] = "git"
    if stacks is not None:
        doc["validated_stacks"] = stacks
    write_cache(doc)


def test_plan_swaps_a_refused_default_image_for_the_newest_known_good() -> None:
    _cache_with("v0.26.0")
    assert load_catalog().docker_image == BAD_IMAGE
    chosen = plan(model=QWEN_397B, gpu="mi325x")
    assert chosen.image == GOOD_IMAGE
    why = next(r.why for r in chosen.reasons if r.item == GOOD_IMAGE)
    assert "known-good" in why and "vllm-51580-aiter-moe-nan-gfx942" in why
    # a model the table says nothing about keeps the default
    assert plan(model="Qwen/Qwen3-8B", gpu="mi325x", gpu_count=1).image == BAD_IMAGE


def test_plan_warns_about_a_known_slow_stack() -> None:
    aiter_off = plan(
        model="Qwen/Qwen3.5-122B-A10B-FP8", gpu="mi325x", env_literal={"VLLM_ROCM_USE_AITER": "0"}
    )
    slow = [w for w in aiter_off.warnings if "vllm-56945-image-aiter-off" in w]
    assert len(slow) == 1 and "issues/56945" in slow[0] and "3.7x" in slow[0]
    default = plan(model="Qwen/Qwen3.5-122B-A10B-FP8", gpu="mi325x")  # AITER on: cleared
    assert default.env.get("VLLM_ROCM_USE_AITER") == "1"
    assert not any("vllm-56945" in w for w in default.warnings)


def test_the_attention_backend_flip_is_cleared_by_the_recipes_flag() -> None:
    table = load_stacks()
    minimax = ("MiniMaxAI/MiniMax-M2.5",)
    flipped = Launch(
        image="vllm/vllm-openai-rocm:v0.21.0", gfx="gfx942", model_ids=minimax, args=["--port", "8"]
    )
    assert [r.id for r in table.known_bad(flipped, plan=("warn",))] == [
        "vllm-43029-rocm-attn-default-minimax"
    ]
    before = Launch(
        image="vllm/vllm-openai-rocm:v0.18.0", gfx="gfx942", model_ids=minimax, args=["--port", "8"]
    )
    assert table.known_bad(before) == []
    # the MiniMax recipe passes --attention-backend ROCM_AITER_FA (recipes#481): no warning
    planned = plan(model="MiniMaxAI/MiniMax-M2.5", gpu="mi325x", image=flipped.image)
    assert planned.vllm_args[planned.vllm_args.index("--attention-backend") + 1] == "ROCM_AITER_FA"
    assert not any("vllm-43029" in w for w in planned.warnings)


# Lines from the public issues the rows cite, as quoted there (ROCm/aiter#2187);
# the baton line is aiter's JIT-lock wait as ROCm/aiter#1162 quotes it (the path after it ours).
MOE_FAULT_LOG = """\
INFO 03-04 11:35:04 [fp8.py:259] Using AITER Fp8 MoE backend out of potential backends
Memory access fault by GPU node-8 ... Reason: Unknown.
"""
BATON_LOG = "[aiter] waiting for baton release at /data/aiter-jit-cache/build/lock_module_mla\n"


def _stack_finding(log: str, **ctx: Any) -> Any:
    found = diagnose(log, DiagnoseContext(**ctx)).get("known_bad_stack")
    return found


def test_diagnose_cites_the_row_a_log_matches() -> None:
    vl = DiagnoseContext(gfx="gfx950", model="Qwen/Qwen3-VL-235B-A22B-Instruct-FP8")
    found = diagnose(MOE_FAULT_LOG, vl)
    assert found.primary is not None and found.primary.id == "known_bad_stack"
    assert found.primary.details["source"] == "https://github.com/ROCm/aiter/issues/2187"
    assert found.primary.retry == {"set_env": {"VLLM_ROCM_USE_AITER_MOE": "0"}}
    assert found.primary.line == "Memory access fault by GPU node-8 ... Reason: Unknown."
    # the same generic line for another model or another GPU cites no row
    assert _stack_finding(MOE_FAULT_LOG, gfx="gfx950", model="Qwen/Qwen3-8B") is None
    assert _stack_finding(MOE_FAULT_LOG, gfx="gfx942", model=vl.model) is None
    # the fix already in the launch: the row does not apply
    fixed = {"VLLM_ROCM_USE_AITER": "1", "VLLM_ROCM_USE_AITER_MOE": "0"}
    assert _stack_finding(MOE_FAULT_LOG, gfx="gfx950", model=vl.model, env=fixed) is None

    v32 = "deepseek-ai/DeepSeek-V3.2"
    hang = _stack_finding(BATON_LOG, gfx="gfx950", model=v32, env={"AITER_JIT_DIR": "/d"})
    assert hang is not None and "Unset AITER_JIT_DIR" in hang.fix
    assert hang.details["source"] == "https://github.com/ROCm/aiter/issues/3635"
    no_jit_dir = {"VLLM_ROCM_USE_AITER": "1"}
    assert _stack_finding(BATON_LOG, gfx="gfx950", model=v32, env=no_jit_dir) is None


def _newer_table() -> dict[str, Any]:
    doc = shipped_doc()
    doc["revision"] = "2099-01-01"
    doc["rows"].append(
        {
            "id": "test-qwen3-8b-refused-on-gfx942",
            "verdict": "known_bad",
            "plan": "refuse",
            "gfx": ["gfx942"],
            "models": ["Qwen/Qwen3-8B"],
            "feature": "a row added upstream",
            "symptom": "A row that only the synced table has, to see sync deliver it.",
            "fix": "Serve it on another GPU for this test.",
            "source": "https://github.com/vllm-project/vllm/issues/51580",
            "log_pattern": "MARKER-ONLY-IN-THE-SYNCED-TABLE",
        }
    )
    return doc


def test_recipes_sync_updates_the_table(corpus_repo: CorpusRepo, hub: HTTPServer) -> None:
    log = "ERROR MARKER-ONLY-IN-THE-SYNCED-TABLE\n"
    assert _stack_finding(log, gfx="gfx942", model="Qwen/Qwen3-8B") is None
    report = sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    assert report.details["validated_stacks"] is None  # upstream carries none
    assert table_for(load_catalog()).revision == load_stacks().revision
    assert plan(model="Qwen/Qwen3-8B", gpu="mi300x", gpu_count=1).model == "Qwen/Qwen3-8B"

    corpus_repo.commit_file(STACKS_FILE, json.dumps(_newer_table()))
    report = sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    rows = len(load_stacks().rows) + 1
    assert report.details["validated_stacks"] == {"revision": "2099-01-01", "rows": rows}
    table = table_for(load_catalog())
    assert table.revision == "2099-01-01" and len(table.rows) == rows
    with pytest.raises(InstinctError) as info:
        plan(model="Qwen/Qwen3-8B", gpu="mi300x", gpu_count=1)
    assert info.value.id == "known_bad_stack" and "test-qwen3-8b" in info.value.message
    # diagnose reads the same table
    log = "ERROR MARKER-ONLY-IN-THE-SYNCED-TABLE\n"
    cited = _stack_finding(log, gfx="gfx942", model="Qwen/Qwen3-8B")
    assert cited is not None and cited.details["stack"]["id"] == "test-qwen3-8b-refused-on-gfx942"

    # a broken table upstream fails the sync and leaves the cache as it was
    before = Path(cache_path()).read_bytes()
    broken = _newer_table()
    broken["rows"][0]["source"] = "not a url"
    corpus_repo.commit_file(STACKS_FILE, json.dumps(broken))
    with pytest.raises(SyncError) as failed:
        sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    assert failed.value.id == "stacks_invalid" and Path(cache_path()).read_bytes() == before


def test_the_cli_refuses_with_the_id_and_force_plans() -> None:
    args = ["plan", QWEN_397B, "--gpu", "mi325x", "--image", BAD_IMAGE, "--json"]
    refused = run_instinct(args, timeout=120)
    assert refused.returncode == 1, refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["id"] == "known_bad_stack" and "--force" in error["fix"]
    assert error["details"]["stack"]["id"] == "vllm-51580-aiter-moe-nan-gfx942"
    forced = run_instinct([*args, "--force"], timeout=120)
    assert forced.returncode == 0, forced.stderr
    doc = json.loads(forced.stdout)
    assert doc["image"] == BAD_IMAGE
    assert any(r["item"] == "forced past known_bad_stack" for r in doc["reasons"])


@pytest.mark.parametrize(
    ("log", "model", "finding"),
    [
        (
            "06_rocm_attn_illegal_address_full_graph_capture_llama3.2-1b.log",
            "meta-llama/Llama-3.2-1B-Instruct",
            "attn_full_graph_capture_fault",
        ),
        (
            "07_triton_attn_full_graph_capture_memory_fault_step3.5_tp4.log",
            "stepfun-ai/Step-3.5-Flash",
            "attn_full_graph_capture_fault",
        ),
    ],
)
def test_a_row_never_displaces_the_rule_that_explains_its_log(
    log: str, model: str, finding: str
) -> None:
    """The issues of these public logs are rows too (for plan); their own rule, which cites
    the same issue with its retry, stays the primary finding and no row is cited twice."""
    text = (PUBLIC_LOGS / log).read_text(encoding="utf-8")
    found = diagnose(text, DiagnoseContext(model=model))
    assert found.primary is not None and found.primary.id == finding
    assert found.get("known_bad_stack") is None


def test_diagnose_cites_the_eagle3_interface_row_for_minimax_m3() -> None:
    """The EAGLE3 draft that cannot attach (AMD's MiniMax-M3 scripts patch vLLM for it):
    cited for MiniMax-M3 with a speculative config, not for another model."""
    log = (
        "ERROR 08-20 10:01:02 [core.py:700] RuntimeError: Model does not support EAGLE3 "
        "interface but aux_hidden_state_outputs was requested\n"
    )
    args = ["--speculative-config", '{"method": "eagle3", "model": "Inferact/MiniMax-M3-EAGLE3"}']
    found = _stack_finding(log, gfx="gfx950", model="MiniMaxAI/MiniMax-M3-MXFP8", args=args)
    assert found is not None
    assert found.details["stack"]["id"] == "inferencex-minimax-m3-eagle3-interface"
    assert "SupportsEagle3" in found.fix
    assert _stack_finding(log, gfx="gfx950", model="Qwen/Qwen3-8B", args=args) is None
