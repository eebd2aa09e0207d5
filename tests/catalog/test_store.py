"""The cache file, the shipped snapshot, and staleness."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from instinct_serve.catalog.matching import lookup
from instinct_serve.catalog.overrides import data_text
from instinct_serve.catalog.snapshot import build_snapshot, infer_docker_tag, read_source_md
from instinct_serve.catalog.store import (
    SNAPSHOT_FILE,
    CacheError,
    cache_document,
    cache_path,
    catalog_from_doc,
    dumps_document,
    load_catalog,
    load_snapshot,
    staleness_warning,
)
from instinct_serve.gather.recipes_cache import write_cache
from tests.infra.paths import RECIPES_CORPUS, REPO

NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)


def small_doc(fetched_at: str = "2026-09-01T11:00:00+00:00", **kw: object) -> dict[str, object]:
    snapshot = json.loads(data_text(SNAPSHOT_FILE))
    entry = snapshot["models"]["Qwen/Qwen3.5-9B"]
    return cache_document(
        source=str(kw.get("source", "git")),
        fetched_at=fetched_at,
        recipes={"Qwen/Qwen3.5-9B": (entry["source_path"], entry["recipe"])},
        skipped=[],
        source_commit="abc123",
        docker_image="vllm/vllm-openai-rocm:v0.30.0",
        docker_tag="v0.30.0",
    )


def test_the_shipped_snapshot_is_what_the_build_script_makes() -> None:
    """The snapshot cannot drift from tests/data/vllm-recipes silently."""
    shipped = data_text(SNAPSHOT_FILE)
    assert dumps_document(build_snapshot(RECIPES_CORPUS)) == shipped
    script = REPO / "scripts" / "build_recipes_snapshot.py"
    out = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "up to date (173 recipes)" in out.stdout


def test_snapshot_provenance() -> None:
    commit, date = read_source_md(RECIPES_CORPUS)
    snap = load_snapshot()
    assert snap.from_snapshot and snap.source == "snapshot"
    assert snap.source_commit == commit == "8959cf64189c71d36e11c6a30335f923f261b1f7"
    assert snap.fetched_at == date
    assert len(snap) == 173 and snap.skipped == []
    # no network at build time: the newest release a non-nightly recipe of that commit needs
    assert snap.docker_image == "vllm/vllm-openai-rocm:v0.27.1"
    assert "guide" not in snap.models["Qwen/Qwen3.5-9B"]["recipe"]  # prose is not shipped


def test_infer_docker_tag_ignores_nightly_recipes(tmp_path: Path) -> None:
    from instinct_serve.catalog.parse import parse_corpus
    from tests.catalog.conftest import write_yaml

    write_yaml(
        tmp_path / "models/a/one.yaml",
        {"model": {"model_id": "a/one", "min_vllm_version": "0.9.2"}},
    )
    write_yaml(
        tmp_path / "models/a/two.yaml",
        {
            "model": {"model_id": "a/two", "min_vllm_version": "0.10.1"},
            "variants": {"x": {"min_vllm_version": "0.11.0"}},
        },
    )
    write_yaml(
        tmp_path / "models/a/three.yaml",
        {"model": {"model_id": "a/three", "min_vllm_version": "0.99.0", "nightly_required": True}},
    )
    assert infer_docker_tag(parse_corpus(tmp_path)) == "v0.11.0"


def test_default_model_resolves_offline_from_the_snapshot() -> None:
    assert not os.path.exists(cache_path())
    catalog = load_catalog()
    assert catalog.from_snapshot and catalog.warnings == []
    match = lookup("Qwen/Qwen3.5-9B", catalog)
    assert match.kind == "exact" and match.recipe is not None
    assert match.recipe.features["reasoning"].args == ["--reasoning-parser", "qwen3"]


def test_write_then_read_the_cache() -> None:
    path = write_cache(small_doc())
    assert path == cache_path() and os.path.exists(path)
    catalog = load_catalog()
    assert not catalog.from_snapshot
    assert catalog.origin == path and catalog.source == "git"
    assert catalog.docker_image == "vllm/vllm-openai-rocm:v0.30.0"
    assert list(catalog.models) == ["Qwen/Qwen3.5-9B"]
    assert load_catalog() is catalog  # memoised on the file's identity
    write_cache(small_doc(source="import"))
    assert load_catalog().source == "import"  # a new file is picked up
    leftovers = [p for p in os.listdir(os.path.dirname(path)) if p.endswith(".tmp")]
    assert leftovers == []


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff not json",
        b'{"schema": 1, "models": {}',  # truncated
        b'{"schema": 99, "source": "git", "fetched_at": "2026-01-01T00:00:00Z", "models": {}}',
        b'{"schema": 1, "source": "git", "fetched_at": "yesterday", "models": {}}',
        b'{"schema": 1, "source": "git", "fetched_at": "2026-01-01T00:00:00Z", '
        b'"models": {"a/b": {"recipe": {"model": {}}}}}',
    ],
)
def test_corrupt_cache_falls_back_to_the_snapshot_with_a_warning(content: bytes) -> None:
    path = cache_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(content)
    catalog = load_catalog()
    assert catalog.from_snapshot
    assert len(catalog.warnings) == 1
    assert path in catalog.warnings[0] and "instinct recipes sync" in catalog.warnings[0]
    assert lookup("Qwen/Qwen3.5-9B", catalog).kind == "exact"


def test_an_invalid_document_is_never_written() -> None:
    write_cache(small_doc())
    before = Path(cache_path()).read_bytes()
    bad = small_doc()
    bad["models"] = {"a/b": {"recipe": {}}}
    with pytest.raises(CacheError):
        write_cache(bad)
    assert Path(cache_path()).read_bytes() == before


def test_catalog_from_doc_rejects_unknown_source() -> None:
    doc = small_doc()
    doc["source"] = "ftp"
    with pytest.raises(CacheError, match="unknown source"):
        catalog_from_doc(doc, "x")


def test_staleness() -> None:
    fresh = catalog_from_doc(small_doc("2026-09-01T00:30:00Z"), "x")
    assert staleness_warning(fresh, now=NOW) is None
    old = catalog_from_doc(small_doc("2026-08-29T12:00:00+00:00"), "x")
    message = staleness_warning(old, now=NOW)
    assert message is not None
    assert "3 days old" in message and "instinct recipes sync" in message
    hours = catalog_from_doc(small_doc("2026-08-31T10:00:00Z"), "x")
    assert "26 hours old" in (staleness_warning(hours, now=NOW) or "")
    snap_message = staleness_warning(load_snapshot(), now=NOW)
    assert snap_message is not None
    assert "snapshot shipped" in snap_message and "2026-08-21" in snap_message
    assert "instinct recipes sync" in snap_message
