"""The recipes snapshot shipped in the package, built from a recipes checkout.

``scripts/build_recipes_snapshot.py`` calls ``build_snapshot`` on ``tests/data/vllm-recipes``
(the corpus at a fixed upstream commit) and a test rebuilds it and compares bytes, so the
shipped file cannot drift from its source silently.

The snapshot is a cache document (``catalog.store``) with ``source: snapshot`` and
``fetched_at`` = the upstream commit date, so its age is the age of its data. No network is
used: the default image is inferred as the newest vLLM release that any non-nightly recipe
of that commit requires (recipes are only published once their vLLM has shipped); a real
``recipes sync`` replaces it with the newest tag on Docker Hub.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from instinct_serve.catalog.hub import ROCM_REPOSITORY
from instinct_serve.catalog.matching import parse_release
from instinct_serve.catalog.parse import ParseResult, parse_corpus
from instinct_serve.catalog.store import UPSTREAM_REPO, cache_document

_COMMIT = re.compile(r"\*\*Commit:\*\*\s*`([0-9a-f]{7,40})`")
_DATE = re.compile(r"\*\*Commit date:\*\*\s*([0-9T:+\-Z.]+)")


def read_source_md(corpus: Path) -> tuple[str | None, str | None]:
    """Commit and commit date from the corpus's SOURCE.md (our provenance file)."""
    try:
        text = (corpus / "SOURCE.md").read_text(encoding="utf-8")
    except OSError:
        return None, None
    commit = _COMMIT.search(text)
    date = _DATE.search(text)
    return (commit.group(1) if commit else None), (date.group(1) if date else None)


def infer_docker_tag(parsed: ParseResult) -> str | None:
    """``vX.Y.Z``: the highest minimum vLLM that a released (non-nightly) recipe states."""
    best: tuple[int, ...] | None = None
    for item in parsed.recipes.values():
        model = item.data.get("model", {})
        if model.get("nightly_required") is True:
            continue
        stated = [model.get("min_vllm_version")]
        variants = item.data.get("variants") or {}
        stated += [v.get("min_vllm_version") for v in variants.values() if isinstance(v, dict)]
        for text in stated:
            version = parse_release(text) if isinstance(text, str) else None
            if version is not None and (best is None or version > best):
                best = version
    return "v" + ".".join(str(p) for p in best) if best else None


def build_snapshot(
    corpus: Path,
    *,
    commit: str | None = None,
    date: str | None = None,
    docker_tag: str | None = None,
) -> dict[str, Any]:
    """The snapshot document for a recipes checkout (deterministic for a given input)."""
    src_commit, src_date = read_source_md(corpus)
    commit = commit or src_commit
    date = date or src_date
    if not date:
        raise ValueError(
            f"no commit date for {corpus}: pass --date (or keep a SOURCE.md next to models/)"
        )
    parsed = parse_corpus(corpus)
    tag = docker_tag or infer_docker_tag(parsed)
    return cache_document(
        source="snapshot",
        fetched_at=date,
        source_commit=commit,
        source_url=UPSTREAM_REPO,
        docker_image=f"{ROCM_REPOSITORY}:{tag}" if tag else None,
        docker_tag=tag,
        recipes={k: (v.source_path, v.data) for k, v in parsed.recipes.items()},
        skipped=[s.to_dict() for s in parsed.skipped],
        extra={
            "strategies": parsed.strategies,
            "docker_tag_origin": "explicit"
            if docker_tag
            else "inferred: newest min_vllm_version of a non-nightly recipe in this commit",
        },
    )
