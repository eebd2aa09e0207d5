"""``recipes sync`` against a real git repository and real local HTTP servers; ``import``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from instinct_serve.catalog.config import amd_config, compare_with_rendered
from instinct_serve.catalog.matching import lookup
from instinct_serve.catalog.store import cache_path, load_catalog, staleness_warning
from instinct_serve.errors import UsageError
from instinct_serve.gather.recipes_sync import SyncError, import_cache, sync
from tests.catalog.conftest import (
    CorpusRepo,
    api_documents,
    commit_tree,
    serve_api,
    serve_tag_pages,
)
from tests.infra.paths import AMD_SKILL


def cache_bytes() -> bytes:
    return Path(cache_path()).read_bytes()


def test_git_sync_then_incremental_fetch(corpus_repo: CorpusRepo, hub: HTTPServer) -> None:
    report = sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    assert report.model_count == 173 and report.skipped == []
    assert report.source_commit == corpus_repo.head()
    assert report.docker_image == "vllm/vllm-openai-rocm:v0.27.1"  # across 3 pages
    assert report.details["git_action"] == "cloned" and report.details["hub"]["pages"] == 3
    assert {"git_s", "parse_s", "hub_s", "write_s", "total_s"} <= set(report.timings_s)
    catalog = load_catalog()
    assert catalog.source == "git" and not catalog.from_snapshot
    assert catalog.source_commit == corpus_repo.head()
    assert staleness_warning(catalog) is None
    assert lookup("Qwen/Qwen3.5-9B", catalog).kind == "exact"

    # upstream moves on: a recipe changes, one breaks, one is added
    qwen = (corpus_repo.path / "models/Qwen/Qwen3.5-9B.yaml").read_text()
    corpus_repo.commit_file(
        "models/Qwen/Qwen3.5-9B.yaml",
        qwen.replace("context_length: 262144", "context_length: 131072"),
    )
    corpus_repo.commit_file("models/acme/broken.yaml", "model: [unclosed\n")
    new_head = corpus_repo.commit_file(
        "models/acme/new-1B.yaml", "model: {model_id: acme/new-1B}\nvariants: {default: {}}\n"
    )
    report = sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    assert report.details["git_action"] == "fetched"
    assert report.source_commit == new_head and report.model_count == 174
    assert report.skipped == [
        {"path": "models/acme/broken.yaml", "reason": report.skipped[0]["reason"]}
    ]
    assert "invalid YAML" in report.skipped[0]["reason"]
    recipe = load_catalog().recipe("Qwen/Qwen3.5-9B")
    assert recipe is not None and recipe.context_length == 131072
    assert load_catalog().recipe("acme/new-1B") is not None


def test_dead_docker_hub_leaves_the_cache_byte_identical(
    corpus_repo: CorpusRepo, hub: HTTPServer, dead_url: str
) -> None:
    sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    before = cache_bytes()
    corpus_repo.commit_file("models/acme/new-1B.yaml", "model: {model_id: acme/new-1B}\n")
    with pytest.raises(SyncError) as info:
        sync(repo_url=corpus_repo.url, hub_url=dead_url)
    assert cache_bytes() == before
    assert "Docker Hub" in info.value.message and "unchanged" in info.value.message
    assert info.value.id == "hub_unreachable" and int(info.value.exit_code) == 1


def test_broken_repository_leaves_the_cache_byte_identical(
    corpus_repo: CorpusRepo, hub: HTTPServer, tmp_path: Path
) -> None:
    sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    before = cache_bytes()
    not_a_repo = tmp_path / "empty"
    not_a_repo.mkdir()
    with pytest.raises(SyncError) as info:
        sync(repo_url=not_a_repo.as_uri(), hub_url=hub.url_for("/"))
    assert cache_bytes() == before
    assert "git clone" in info.value.message and "unchanged" in info.value.message
    # the previous clone is intact and still usable
    assert (Path(cache_path()).parent / "recipes-git" / "models").is_dir()


def test_a_repository_without_recipes_is_an_error(hub: HTTPServer, tmp_path: Path) -> None:
    repo = tmp_path / "other"
    repo.mkdir()
    (repo / "README.md").write_text("not recipes\n")
    commit_tree(repo, "x")
    with pytest.raises(SyncError, match="not a recipes repository"):
        sync(repo_url=repo.as_uri(), hub_url=hub.url_for("/"))
    assert not Path(cache_path()).exists()


def test_a_repository_whose_recipes_all_fail_is_an_error(hub: HTTPServer, tmp_path: Path) -> None:
    repo = tmp_path / "bad"
    (repo / "models/a").mkdir(parents=True)
    (repo / "models/a/b.yaml").write_text("model: [\n")
    commit_tree(repo, "x")
    with pytest.raises(SyncError) as info:
        sync(repo_url=repo.as_uri(), hub_url=hub.url_for("/"))
    assert info.value.id == "sync_empty"


@pytest.mark.heavy
def test_api_sync_keeps_upstream_renderings(
    httpserver: HTTPServer, second_server: HTTPServer
) -> None:
    serve_api(httpserver, api_documents())
    serve_tag_pages(second_server, [["v0.30.0", "nightly"]])
    report = sync(source="api", api_url=httpserver.url_for("/"), hub_url=second_server.url_for("/"))
    assert report.source == "api" and report.model_count == 173 and report.skipped == []
    assert report.details["amd_rendered"] > 100
    assert report.docker_image == "vllm/vllm-openai-rocm:v0.30.0"
    catalog = load_catalog()
    assert catalog.source == "api"
    # the API's hf_id comes from the path (Google/...); the key is the real model id
    assert catalog.recipe("google/gemma-4-31B-it") is not None
    assert catalog.source_path("google/gemma-4-31B-it") == "models/Google/gemma-4-31B-it.yaml"
    rendered = catalog.rendered("deepseek-ai/DeepSeek-V3.2-Exp", "mi300x")
    assert rendered is not None
    assert rendered.argv[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2-Exp"]
    assert "--block-size" in rendered.argv
    assert rendered.env["VLLM_ROCM_USE_AITER_MOE"] == "1"
    assert catalog.rendered("deepseek-ai/DeepSeek-V3.2-Exp", "mi325x") is None  # not served
    # cross-check our merged view against upstream's rendering
    cfg = amd_config(lookup("deepseek-ai/DeepSeek-V3.2-Exp", catalog), "mi300x")
    own = {k for k, src in cfg.env_sources.items() if src.startswith("gpu ")}
    diffs = compare_with_rendered(cfg.args, cfg.env, rendered.argv, rendered.env, own_env=own)
    assert diffs == []  # the same flags and env, both ways; TP is the planner's decision
    # a recipe upstream marks unsupported on mi300x has no rendering for it
    assert catalog.rendered("deepseek-ai/DeepSeek-V4-Flash", "mi300x") is None
    assert catalog.rendered("deepseek-ai/DeepSeek-V4-Flash", "mi355x") is not None


def test_api_failures_leave_the_cache_unchanged(
    httpserver: HTTPServer, second_server: HTTPServer, hub: HTTPServer, corpus_repo: CorpusRepo
) -> None:
    sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    before = cache_bytes()
    docs: dict[str, Any] = api_documents(limit=5)
    docs["/models.json"] = b"{not json"
    serve_api(httpserver, docs)
    serve_tag_pages(second_server, [["v0.30.0"]])
    with pytest.raises(SyncError, match="invalid JSON"):
        sync(source="api", api_url=httpserver.url_for("/"), hub_url=second_server.url_for("/"))
    assert cache_bytes() == before
    # a URL httpx cannot even parse (the fuzz audit's control character): the same error
    with pytest.raises(SyncError, match="cannot reach the recipes API") as bad:
        sync(source="api", api_url="x\x16y", hub_url=second_server.url_for("/"))
    assert bad.value.id == "recipes_api_unreachable"
    assert cache_bytes() == before


def test_api_recipe_errors_are_skipped_not_fatal(
    httpserver: HTTPServer, second_server: HTTPServer
) -> None:
    docs = api_documents(limit=6)
    index = docs["/models.json"]
    first = next(e for e in index if not e.get("derived_from"))
    docs[first["json"]] = {"hf_id": first["hf_id"], "model": {"model_id": "not an id"}}
    index.append({"hf_id": "acme/gone", "json": "/acme/gone.json"})  # listed, then 404
    serve_api(httpserver, docs)
    serve_tag_pages(second_server, [["v0.30.0"]])
    report = sync(source="api", api_url=httpserver.url_for("/"), hub_url=second_server.url_for("/"))
    reasons = {s["path"]: s["reason"] for s in report.skipped}
    assert "Hugging Face id" in reasons[f"models/{first['hf_id']}.yaml"]
    assert "404" in reasons["models/acme/gone.yaml"]
    assert report.model_count == 5


def test_unknown_source_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        sync(source="ftp")


# --------------------------------------------------------------------------------- import


def test_import_the_skill_cache() -> None:
    report = import_cache(str(AMD_SKILL / "recipes_cache.json"))
    assert report.source == "import" and report.details["format"] == "agent-skill"
    skill = json.loads((AMD_SKILL / "recipes_cache.json").read_text())
    assert report.model_count + len(report.skipped) == len(skill["models"]) == 98
    assert report.docker_image == "vllm/vllm-openai-rocm:v0.22.0"
    assert report.docker_tag == "v0.22.0"
    catalog = load_catalog()
    assert catalog.source == "import" and catalog.fetched_at == skill["fetched_at"]
    # keyed by the recipe's real model id, not the skill's path-derived key
    assert catalog.recipe("google/gemma-4-31B-it") is not None
    assert "google/gemma-4-31B-it" in catalog.models
    assert lookup("Qwen/Qwen3.5-9B", catalog).kind == "exact"
    assert "instinct recipes sync" in (staleness_warning(catalog) or "")


def test_import_our_own_cache_round_trips(
    corpus_repo: CorpusRepo, hub: HTTPServer, tmp_path: Path
) -> None:
    sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"))
    exported = tmp_path / "exported.json"
    exported.write_bytes(cache_bytes())
    report = import_cache(str(exported))
    assert report.details["format"] == "instinct-serve"
    assert report.model_count == 173 and report.source_commit == corpus_repo.head()


@pytest.mark.parametrize(
    ("content", "error_id"),
    [
        (None, "import_unreadable"),
        ("{not json", "import_bad_file"),
        ('{"fetched_at": "2026-01-01T00:00:00Z"}', "import_bad_file"),
        ('{"models": {"a/b": {"recipe": {"model": {"model_id": "bad"}}}}}', "import_empty"),
    ],
)
def test_import_errors_leave_the_cache_alone(
    tmp_path: Path, content: str | None, error_id: str
) -> None:
    path = tmp_path / "cache.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises((UsageError, SyncError)) as info:
        import_cache(str(path))
    assert info.value.id == error_id
    assert not Path(cache_path()).exists()


def test_an_unwritable_cache_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("INSTINCT_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(SyncError) as info:
        import_cache(str(AMD_SKILL / "recipes_cache.json"))
    assert info.value.id == "cache_write_failed" and "INSTINCT_CACHE_DIR" in (info.value.fix or "")


def test_git_sync_brings_amd_reference_configs(
    corpus_repo: CorpusRepo, hub: HTTPServer, tmp_path: Path
) -> None:
    """AMD's reference configs sync like the recipes (issue 27): from an InferenceX git
    repository (here a real local one holding the shared AMD subset) into the synced copy
    plans read, the commit recorded; a repository that is not one leaves the copy as it was
    and the recipes synced; a mirror of the recipes does not imply one of the configs."""
    import shutil

    from instinct_serve.gather.recipes_git import DEFAULT_REPO_URL
    from instinct_serve.gather.recipes_sync import DEFAULT_REFERENCE_URL, reference_url_for
    from instinct_serve.gather.reference import load_references
    from tests.infra.build_reference_snapshot import default_root

    root = default_root()
    if root is None:
        pytest.skip("the shared InferenceX directory is not on this machine")
    repo = tmp_path / "inferencex"
    shutil.copytree(root, repo)
    (repo / "SOURCE.md").unlink()  # upstream has none: the commit comes from git
    head = commit_tree(repo, "amd configs")

    report = sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"), reference_url=repo.as_uri())
    ref = report.details["reference"]
    assert ref["configs"] == 176 and ref["commit"] == head, ref
    assert "reference_s" in report.timings_s
    refs, warnings = load_references()
    assert refs.source == "git" and refs.source_commit == head and warnings == ()
    assert refs.followed("openai/gpt-oss-120b", "mi300x") is not None

    other = tmp_path / "not-inferencex"
    other.mkdir()
    (other / "README.md").write_text("nothing here\n")
    commit_tree(other, "x")
    report = sync(repo_url=corpus_repo.url, hub_url=hub.url_for("/"), reference_url=other.as_uri())
    assert "amd-master.yaml" in report.details["reference"]["error"]
    assert report.model_count == 173  # the recipes synced all the same
    assert load_references()[0].source_commit == head  # the copy left as it was

    assert reference_url_for("git", corpus_repo.url, None) is None
    assert reference_url_for("git", DEFAULT_REPO_URL, None) == DEFAULT_REFERENCE_URL
    assert reference_url_for("api", DEFAULT_REPO_URL, None) is None
    assert reference_url_for("git", DEFAULT_REPO_URL, "off") is None
