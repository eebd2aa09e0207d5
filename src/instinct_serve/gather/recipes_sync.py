"""``instinct recipes sync`` and ``instinct recipes import``: refresh the cache, or nothing.

A sync gathers everything first (the recipes from git or the JSON API, and the newest
``vllm/vllm-openai-rocm`` release from Docker Hub, concurrently), validates it, and only
then replaces the cache in one atomic step. Any failure on the way raises ``SyncError``
and leaves the previous cache byte-identical.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from instinct_serve.catalog.hub import ROCM_REPOSITORY
from instinct_serve.catalog.parse import ParseResult, RecipeFileError
from instinct_serve.catalog.stacks import CACHE_KEY as STACKS_CACHE_KEY
from instinct_serve.catalog.store import cache_document, cache_path, parse_time
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.gather.docker_hub import DEFAULT_HUB_URL
from instinct_serve.gather.recipes_api import DEFAULT_API_URL
from instinct_serve.gather.recipes_cache import write_cache
from instinct_serve.gather.recipes_git import DEFAULT_REPO_URL
from instinct_serve.hosts import Host

DEFAULT_REFERENCE_URL = "https://github.com/SemiAnalysisAI/InferenceX.git"

HTTP_TIMEOUT_S = 20.0
MIN_RECIPES = 1  # a sync that parses nothing is a broken source, not an empty catalog


class SyncError(InstinctError):
    """A sync that failed; the message says what, and that the cache is unchanged."""

    default_id = "sync_failed"


@dataclass
class SyncReport:
    source: str
    source_url: str
    source_commit: str | None
    fetched_at: str
    docker_image: str | None
    docker_tag: str | None
    model_count: int
    skipped: list[dict[str, str]]
    cache_path: str
    timings_s: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "source": self.source,
            "source_url": self.source_url,
            "source_commit": self.source_commit,
            "fetched_at": self.fetched_at,
            "docker_image": self.docker_image,
            "docker_tag": self.docker_tag,
            "model_count": self.model_count,
            "skipped": self.skipped,
            "cache_path": self.cache_path,
            "timings_s": self.timings_s,
            **self.details,
        }


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _fail(what: str, exc: InstinctError) -> SyncError:
    return SyncError(
        f"recipes sync failed ({what}): {exc.message}; the existing recipes cache was left "
        "unchanged",
        fix=exc.fix,
        id=exc.id,
        details=exc.details,
    )


def _write(doc: dict[str, Any]) -> tuple[str, float]:
    """Write the new cache; a disk or lock problem is a SyncError, not a traceback."""
    from filelock import Timeout

    try:
        written: str
        written, seconds = _timed(write_cache, doc)
    except (OSError, Timeout) as exc:
        raise SyncError(
            f"cannot write the recipes cache {cache_path()}: {exc}; the existing cache was "
            "left unchanged",
            fix="check the permissions and free space of the cache directory "
            "(INSTINCT_CACHE_DIR), or wait for the other sync to finish",
            id="cache_write_failed",
        ) from exc
    return written, seconds


def _client(timeout: float) -> Any:
    import httpx

    from instinct_serve import __version__

    return httpx.Client(
        timeout=timeout,
        follow_redirects=True,
        headers={"User-Agent": f"instinct-serve/{__version__}"},
    )


def _timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.monotonic()
    value = fn(*args, **kwargs)
    return value, round(time.monotonic() - start, 3)


def _git_recipes(repo_url: str, host: Host | None) -> tuple[ParseResult, dict[str, Any]]:
    from instinct_serve.catalog.parse import parse_corpus
    from instinct_serve.gather.recipes_git import checkout
    from instinct_serve.paths import cache_dir

    co, git_s = _timed(checkout, repo_url, Path(cache_dir()) / "recipes-git", host=host)
    try:
        parsed, parse_s = _timed(parse_corpus, co.path)
    except RecipeFileError as exc:
        raise InstinctError(
            f"{repo_url} is not a recipes repository ({exc})", fix="check --repo-url"
        ) from exc
    return parsed, {
        "validated_stacks": _repo_stacks(co.path, repo_url),
        "commit": co.commit,
        "commit_date": co.commit_date,
        "git_action": co.action,
        "git_s": git_s,
        "parse_s": parse_s,
    }


def _repo_stacks(path: Path, repo_url: str) -> dict[str, Any] | None:
    """The validated-stack table at the root of the synced repository, checked; None when
    the repository has none (upstream's recipes do not: a fork or mirror may carry one)."""
    from pydantic import ValidationError

    from instinct_serve.catalog.schema import validate_stacks
    from instinct_serve.catalog.stacks import STACKS_FILE

    file = path / STACKS_FILE
    if not file.is_file():
        return None
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
        validate_stacks(doc)
    except (OSError, ValueError, ValidationError) as exc:
        raise InstinctError(
            f"{repo_url}: {STACKS_FILE} is not a valid validated-stack table ({exc})",
            fix=f"fix {STACKS_FILE} in that repository (schema: catalog.schema.StacksDoc)",
            id="stacks_invalid",
        ) from exc
    return dict(doc)


def _extra(parsed: ParseResult, stacks: dict[str, Any] | None) -> dict[str, Any] | None:
    """The cache document's keys beyond the recipes: upstream's strategies, and the
    validated-stack table the repository carries (``catalog.stacks.table_for``)."""
    extra: dict[str, Any] = {"strategies": parsed.strategies} if parsed.strategies else {}
    if stacks is not None:
        extra[STACKS_CACHE_KEY] = stacks
    return extra or None


def _stacks_summary(stacks: dict[str, Any] | None) -> dict[str, Any] | None:
    return {"revision": stacks["revision"], "rows": len(stacks["rows"])} if stacks else None


def _source_recipes(
    source: str, client: Any, repo_url: str, api_url: str, host: Host | None
) -> tuple[ParseResult, dict[str, Any], dict[str, Any], str]:
    """The recipes of ``source``: parsed, AMD-rendered (the API only), the source's timings
    and facts, and its URL."""
    from instinct_serve.gather.recipes_api import fetch_api

    if source == "git":
        parsed, info = _git_recipes(repo_url, host)
        return parsed, {}, info, repo_url
    api_result, api_s = _timed(fetch_api, client, api_url)
    info = {"api_s": api_s, "api_requests": api_result.requests}
    return api_result.parsed, api_result.rendered, info, api_url


def reference_url_for(source: str, repo_url: str, given: str | None) -> str | None:
    """Where AMD's reference configs come from in this sync: the URL given; else upstream
    InferenceX when the recipes come from upstream git (a mirror of the recipes says nothing
    of the configs: name their mirror too); ``off`` or an API sync: none."""
    if given is not None:
        return None if given in ("", "off") else given
    return DEFAULT_REFERENCE_URL if source == "git" and repo_url == DEFAULT_REPO_URL else None


def _reference(
    url: str | None, host: Host | None, details: dict[str, Any], timings: dict[str, float]
) -> None:
    """AMD's reference configs from ``url`` (none: not synced); a failure is reported in
    ``details`` and leaves the recipes synced."""
    from instinct_serve.gather.reference import sync_references

    if url is not None:
        details["reference"], timings["reference_s"] = _timed(sync_references, url, host)


def sync_from(
    source: str,
    *,
    repo_url: str | None = None,
    api_url: str | None = None,
    hub_url: str | None = None,
    reference_url: str | None = None,
) -> SyncReport:
    """``recipes sync``, the CLI's and the MCP tool's: each URL not given is upstream's
    (the reference configs: ``reference_url_for``)."""
    repo = repo_url or DEFAULT_REPO_URL
    return sync(
        source=source,
        repo_url=repo,
        reference_url=reference_url_for(source, repo, reference_url),
        api_url=api_url or DEFAULT_API_URL,
        hub_url=hub_url or DEFAULT_HUB_URL,
    )


def sync(
    *,
    source: str = "git",
    repo_url: str = DEFAULT_REPO_URL,
    reference_url: str | None = None,
    hub_url: str = DEFAULT_HUB_URL,
    api_url: str = DEFAULT_API_URL,
    host: Host | None = None,
    max_pages: int = 20,
    timeout: float = HTTP_TIMEOUT_S,
) -> SyncReport:
    """Refresh the recipes cache from ``source`` (git|api), Docker Hub and ``reference_url``
    (``reference_url_for``: AMD's configs); SyncError if not."""
    from instinct_serve.gather.docker_hub import resolve_rocm_image

    if source not in ("git", "api"):
        raise UsageError(f"unknown source {source!r}", fix="use --source git or --source api")
    start = time.monotonic()
    with _client(timeout) as client, ThreadPoolExecutor(max_workers=2) as pool:
        hub_future = pool.submit(
            _timed,
            resolve_rocm_image,
            client,
            hub_url,
            repository=ROCM_REPOSITORY,
            max_pages=max_pages,
        )
        try:
            parsed, rendered, info, source_url = _source_recipes(
                source, client, repo_url, api_url, host
            )
        except InstinctError as exc:
            hub_future.cancel()
            raise _fail(f"{source} source", exc) from exc
        try:
            image, hub_s = hub_future.result()
        except InstinctError as exc:
            raise _fail("Docker Hub", exc) from exc
    if len(parsed.recipes) < MIN_RECIPES:
        raise SyncError(
            f"recipes sync failed: {source_url} yielded no usable recipe "
            f"({len(parsed.skipped)} skipped); the existing recipes cache was left unchanged",
            fix="check --repo-url / --api-url",
            id="sync_empty",
        )
    fetched_at = _now()
    stacks = info.pop("validated_stacks", None)
    doc = cache_document(
        source=source,
        fetched_at=fetched_at,
        source_commit=info.get("commit"),
        source_url=source_url,
        docker_image=image.image,
        docker_tag=image.tag,
        recipes={k: (v.source_path, v.data) for k, v in parsed.recipes.items()},
        skipped=[s.to_dict() for s in parsed.skipped],
        rendered=rendered,
        extra=_extra(parsed, stacks),
    )
    written, write_s = _write(doc)
    timings = {k: v for k, v in info.items() if k.endswith("_s")} | {"hub_s": hub_s}
    timings["write_s"] = write_s
    details = {k: v for k, v in info.items() if not k.endswith("_s")} | {"hub": image.to_dict()}
    details |= {"amd_rendered": len(rendered), "validated_stacks": _stacks_summary(stacks)}
    _reference(reference_url, host, details, timings)  # after the recipes' cache is written
    timings["total_s"] = round(time.monotonic() - start, 3)
    return SyncReport(
        source=source,
        source_url=source_url,
        source_commit=info.get("commit"),
        fetched_at=fetched_at,
        docker_image=image.image,
        docker_tag=image.tag,
        model_count=len(parsed.recipes),
        skipped=[s.to_dict() for s in parsed.skipped],
        cache_path=written,
        timings_s=timings,
        details=details,
    )


def _read_import(file: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cache file's document and its ``models`` mapping; UsageError if it is not one."""
    from instinct_serve.paths import read_regular

    try:  # a regular file under the cap only: a FIFO or /dev/zero must not hang or fill memory
        doc = json.loads(read_regular(file))
    except OSError as exc:
        raise UsageError(
            f"cannot read {file}: {exc.strerror or exc}",
            fix="check the path",
            id="import_unreadable",
        ) from exc
    except ValueError as exc:
        raise UsageError(
            f"{file} is not JSON ({exc})",
            fix="pass a recipes_cache.json file",
            id="import_bad_file",
        ) from exc
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        raise UsageError(
            f"{file} has no 'models' mapping: not a recipes cache",
            fix="pass a recipes_cache.json written by the agent skill or by instinct-serve",
            id="import_bad_file",
        )
    return doc, models


def import_cache(file: str) -> SyncReport:
    """Import a recipes cache file: the agent skill's ``recipes_cache.json`` or ours."""
    from instinct_serve.catalog.parse import ParsedRecipe, Skipped, validate_data

    start = time.monotonic()
    doc, models = _read_import(file)
    parsed = ParseResult()
    rendered: dict[str, Any] = {}
    for key in sorted(models, key=str.lower):
        entry = models[key]
        source_path = (
            entry.get("source_path") if isinstance(entry, dict) else None
        ) or f"models/{key}.yaml"
        recipe = entry.get("recipe") if isinstance(entry, dict) else None
        if not isinstance(recipe, dict):
            parsed.add(Skipped(str(source_path), "entry has no recipe object"))
            continue
        try:
            item: ParsedRecipe | Skipped = ParsedRecipe(str(source_path), validate_data(recipe))
        except RecipeFileError as exc:
            item = Skipped(str(source_path), str(exc))
        parsed.add(item)
        if isinstance(item, ParsedRecipe) and isinstance(entry.get("amd_rendered"), dict):
            rendered[item.model_id] = entry["amd_rendered"]
    if not parsed.recipes:
        raise SyncError(
            f"nothing to import from {file}: no valid recipe ({len(parsed.skipped)} skipped); "
            "the existing recipes cache was left unchanged",
            fix="check the file",
            id="import_empty",
        )
    fetched_at = doc.get("fetched_at")
    if not isinstance(fetched_at, str) or parse_time(fetched_at) is None:
        fetched_at = _now()
    image = doc.get("docker_image") if isinstance(doc.get("docker_image"), str) else None
    tag = doc.get("docker_tag") if isinstance(doc.get("docker_tag"), str) else None
    if image and not tag and ":" in image.rsplit("/", 1)[-1]:
        tag = image.rsplit(":", 1)[1]
    commit = doc.get("source_commit") if isinstance(doc.get("source_commit"), str) else None
    new = cache_document(
        source="import",
        fetched_at=fetched_at,
        source_commit=commit,
        source_url=str(Path(file).resolve()),
        docker_image=image,
        docker_tag=tag,
        recipes={k: (v.source_path, v.data) for k, v in parsed.recipes.items()},
        skipped=[s.to_dict() for s in parsed.skipped],
        rendered=rendered,
    )
    written, _ = _write(new)
    return SyncReport(
        source="import",
        source_url=str(Path(file).resolve()),
        source_commit=commit,
        fetched_at=fetched_at,
        docker_image=image,
        docker_tag=tag,
        model_count=len(parsed.recipes),
        skipped=[s.to_dict() for s in parsed.skipped],
        cache_path=written,
        timings_s={"total_s": round(time.monotonic() - start, 3)},
        details={"format": "instinct-serve" if doc.get("schema") else "agent-skill"},
    )


__all__ = ["SyncError", "SyncReport", "cache_path", "import_cache", "sync"]
