"""``instinct recipes ...`` through the real entry point (exit codes, JSON, stderr)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from instinct_serve.catalog.store import cache_path
from instinct_serve.cli.main import main
from tests.catalog.conftest import CorpusRepo
from tests.infra.paths import AMD_SKILL


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0), out, err


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code, out, err = run(capsys, *args, "--json")
    return code, json.loads(out), err


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, err = run_json(capsys, "recipes", "list")
    assert code == 0 and doc["count"] == 173
    assert doc["catalog"]["source"] == "snapshot"
    row = next(r for r in doc["models"] if r["model_id"] == "openai/gpt-oss-120b")
    assert row["variants"] == {"default": "mxfp4", "amd_fp8": "mxfp4"}
    assert row["amd"]["hardware"] == {
        "mi300x": "verified",
        "mi325x": "verified",
        "mi355x": "verified",
    }
    assert any(r["blacklisted"] == "image_generation" for r in doc["models"])
    assert any(m["model_id"] == "Qwen/Qwen3-14B" for m in doc["legacy_models"])
    assert "snapshot shipped" in err and "instinct recipes sync" in err  # stale warning
    code, doc, _ = run_json(capsys, "recipes", "list", "--task", "embedding")
    assert [r["model_id"] for r in doc["models"]] == [
        "jinaai/jina-embeddings-v5-text-small",
        "jinaai/jina-reranker-m0",
    ]


def test_the_age_of_the_recipes_is_said_once_a_day(capsys: pytest.CaptureFixture[str]) -> None:
    """Not on every command, not twice per serve: once, then a day of quiet; the
    documents keep it (``warnings``)."""
    _, _, err = run(capsys, "recipes", "search", "qwen3")
    assert err.count("days old") == 1
    for args in (("recipes", "search", "qwen3"), ("plan", "Qwen/Qwen3.5-9B", "--gpu", "mi300x")):
        _, _, err = run(capsys, *args)
        assert "days old" not in err, err
    code, doc, err = run_json(capsys, "plan", "Qwen/Qwen3.5-9B", "--gpu", "mi300x")
    assert code == 0 and any("days old" in w for w in doc["warnings"]) and "days old" not in err


def test_list_human(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "recipes", "list", "--task", "text")
    assert code == 0 and "default image: vllm/vllm-openai-rocm:v0.27.1" in out
    assert "legacy models" in out


def test_show_with_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = run_json(capsys, "recipes", "show", "Qwen/Qwen3.5-9B", "--gpu", "mi300x")
    assert code == 0
    assert doc["match"]["match"] == "exact"
    assert doc["recipe"]["context_length"] == 262144
    assert doc["recipe"]["url"] == "https://recipes.vllm.ai/Qwen/Qwen3.5-9B"
    assert doc["recipe"]["recipe_json"]["model"]["model_id"] == "Qwen/Qwen3.5-9B"
    amd = doc["amd"]
    assert amd["gfx"] == "gfx942" and amd["env"]["VLLM_ROCM_USE_AITER_FP4BMM"] == "0"
    assert amd["args"] == [
        "--trust-remote-code",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "qwen3_coder",
        "--reasoning-parser",
        "qwen3",
    ]
    assert doc["upstream_rendered"] is None  # synced from a snapshot, not the API
    code, out, _ = run(
        capsys, "recipes", "show", "deepseek-ai/DeepSeek-V3.2-Exp", "--gpu", "gfx942"
    )
    assert code == 0 and "--block-size 1" in out and "VLLM_ROCM_USE_AITER_FP4BMM" in out


def test_show_blacklisted_generic_and_legacy(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = run_json(capsys, "recipes", "show", "Qwen/Qwen-Image")
    assert code == 0 and doc["match"]["blacklisted"]["category"] == "image_generation"
    code, out, _ = run(capsys, "recipes", "show", "Qwen/Qwen-Image")
    assert "refused" in out and "Qwen/Qwen3.5-9B" in out
    code, doc, _ = run_json(capsys, "recipes", "show", "Qwen/Qwen3.5-10B")
    assert doc["match"]["match"] == "generic" and "Qwen/Qwen3.5-9B" in doc["match"]["suggestions"]
    assert doc["generic"]["features"]["tool_calling"][-1] == "hermes"
    code, out, _ = run(capsys, "recipes", "show", "Qwen/Qwen3-14B", "--gpu", "mi210")
    assert code == 0 and "legacy" in out and "VLLM_ROCM_USE_AITER" in out


@pytest.mark.parametrize(
    ("args", "error_id"),
    [
        (["recipes", "show", "not-an-id"], "bad_model_id"),
        (["recipes", "show", "Qwen/Qwen3.5-9B", "--gpu", "h100"], "unknown_gpu"),
        (
            ["recipes", "show", "Qwen/Qwen3.5-9B", "--gpu", "mi300x", "--variant", "x"],
            "unknown_variant",
        ),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], error_id: str
) -> None:
    code, doc, _ = run_json(capsys, *args)
    assert code == 2 and doc["error"]["id"] == error_id and doc["error"]["fix"]
    code, out, err = run(capsys, *args)
    assert code == 2 and "Error:" in err and "Traceback" not in err + out


def test_sync_and_failure(
    capsys: pytest.CaptureFixture[str], corpus_repo: CorpusRepo, hub: HTTPServer, dead_url: str
) -> None:
    code, doc, _ = run_json(
        capsys, "recipes", "sync", "--repo-url", corpus_repo.url, "--hub-url", hub.url_for("/")
    )
    assert code == 0 and doc["ok"] and doc["model_count"] == 173
    assert doc["docker_image"] == "vllm/vllm-openai-rocm:v0.27.1"
    before = Path(cache_path()).read_bytes()
    code, doc, _ = run_json(
        capsys, "recipes", "sync", "--repo-url", corpus_repo.url, "--hub-url", dead_url
    )
    assert code == 1 and doc["error"]["id"] == "hub_unreachable"
    assert "unchanged" in doc["error"]["message"]
    assert Path(cache_path()).read_bytes() == before
    code, out, err = run(
        capsys, "recipes", "sync", "--repo-url", "/nonexistent/x", "--hub-url", dead_url
    )
    assert code == 1 and "recipes sync failed" in err and "Traceback" not in err
    code, out, err = run(capsys, "recipes", "list")
    assert code == 0 and "(git," in out and "warning" not in err  # fresh: no staleness warning


def test_import(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "recipes", "import", str(AMD_SKILL / "recipes_cache.json"))
    assert code == 0 and "imported" in out and "v0.22.0" in out
    code, doc, err = run_json(capsys, "recipes", "list")
    assert doc["catalog"]["source"] == "import" and "days old" in err
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    code, doc, _ = run_json(capsys, "recipes", "import", str(bad))
    assert code == 2 and doc["error"]["id"] == "import_bad_file"


def test_corrupt_cache_warns_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(cache_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{broken")
    code, doc, err = run_json(capsys, "recipes", "show", "Qwen/Qwen3.5-9B")
    assert code == 0 and doc["catalog"]["from_snapshot"]
    assert "unreadable" in err and str(path) in err
    assert doc["warnings"] and "unreadable" in doc["warnings"][0]
