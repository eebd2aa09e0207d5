"""The recipes catalog on disk: the synced cache, the shipped snapshot, and staleness.

``recipes_cache.json`` (in ``paths.cache_dir()``) is written only by ``recipes sync`` and
``recipes import`` (``gather.recipes_cache.write_cache``): whole, to a temporary file that
then replaces the old one, under a file lock, so a reader never sees half a file and a
failed sync leaves the old cache byte-identical. Reading takes no lock and no pydantic: the
JSON was validated when written. A missing cache means the snapshot shipped in the package;
an unreadable one means the same, plus a warning that says so.

Cache format (``schema`` 1)::

    {"schema": 1, "source": "git|api|snapshot|import", "fetched_at": ISO-8601,
     "source_commit": sha|null, "source_url": str|null,
     "docker_image": "vllm/vllm-openai-rocm:vX.Y.Z"|null, "docker_tag": "vX.Y.Z"|null,
     "model_count": n, "skipped": [{"path", "reason"}],
     "models": {"<HF id>": {"source_path": "models/<org>/<repo>.yaml",
                            "recipe": {...upstream recipe, dates as strings...},
                            "amd_rendered": {"mi300x": {"argv", "env", ...}}  # API only
                           }}}
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

from instinct_serve.catalog.overrides import data_text
from instinct_serve.catalog.recipe import Recipe, Variant
from instinct_serve.errors import InstinctError

CACHE_FILE = "recipes_cache.json"
SNAPSHOT_FILE = "recipes_snapshot.json"
CACHE_SCHEMA = 1
SOURCES = ("git", "api", "snapshot", "import")
STALE_AFTER_H = 24.0
DROPPED_KEYS = ("guide",)  # long Markdown prose: 2/3 of the corpus, never read by a planner
UPSTREAM_REPO = "https://github.com/vllm-project/recipes"
SITE_URL = "https://recipes.vllm.ai"


class CacheError(ValueError):
    """A cache document that cannot be used (wrong shape, unknown schema)."""


def cache_path() -> str:
    """Where the synced cache lives (``INSTINCT_CACHE_DIR`` overrides the platform default)."""
    from instinct_serve.paths import cache_dir

    return os.path.join(str(cache_dir()), CACHE_FILE)


class RenderedCommand(NamedTuple):
    """Upstream's own rendering of a recipe for one AMD GPU (from the recipes JSON API)."""

    model_id: str
    hardware: str
    argv: list[str]
    env: dict[str, str]
    docker_image: str | None
    variant: str | None
    strategy: str | None
    deploy_type: str | None
    node_count: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "hardware": self.hardware,
            "argv": self.argv,
            "env": self.env,
            "docker_image": self.docker_image,
            "variant": self.variant,
            "strategy": self.strategy,
            "deploy_type": self.deploy_type,
            "node_count": self.node_count,
        }


class Catalog:
    """The recipes one command works with, and where they came from."""

    def __init__(
        self,
        *,
        source: str,
        fetched_at: str,
        source_commit: str | None,
        source_url: str | None,
        docker_image: str | None,
        docker_tag: str | None,
        models: dict[str, dict[str, Any]],
        skipped: list[dict[str, str]] | None = None,
        origin: str = "",
        from_snapshot: bool = False,
        warnings: list[str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.source = source
        self.fetched_at = fetched_at
        self.source_commit = source_commit
        self.source_url = source_url
        self.docker_image = docker_image  # the default image, vllm/vllm-openai-rocm:vX.Y.Z
        self.docker_tag = docker_tag
        self.models = models
        self.skipped = skipped or []
        self.origin = origin  # a file path, or "shipped snapshot"
        self.from_snapshot = from_snapshot
        self.warnings = warnings or []  # to print on stderr (e.g. a corrupt cache)
        self.extra = extra or {}
        self._lower = {k.lower(): k for k in models}
        self._variant_index: dict[str, tuple[str, str]] | None = None
        self._recipes: dict[str, Recipe] = {}

    def __repr__(self) -> str:
        return f"Catalog(source={self.source!r}, models={len(self.models)}, origin={self.origin!r})"

    def __len__(self) -> int:
        return len(self.models)

    def key_for(self, model_id: str) -> str | None:
        """The catalog key of a recipe id, case-insensitively."""
        return self._lower.get(model_id.strip().lower())

    def recipe(self, model_id: str) -> Recipe | None:
        """The recipe whose ``model.model_id`` is ``model_id`` (case-insensitive)."""
        key = self.key_for(model_id)
        if key is None:
            return None
        cached = self._recipes.get(key)
        if cached is None:
            entry = self.models[key]
            cached = Recipe(entry["recipe"], entry.get("source_path"))
            self._recipes[key] = cached
        return cached

    def recipes(self) -> Iterator[Recipe]:
        for key in sorted(self.models, key=str.lower):
            recipe = self.recipe(key)
            if recipe is not None:
                yield recipe

    def _variants(self) -> dict[str, tuple[str, str]]:
        if self._variant_index is None:
            index: dict[str, tuple[str, str]] = {}
            for key in sorted(self.models, key=str.lower):
                variants = self.models[key]["recipe"].get("variants")
                if not isinstance(variants, dict):
                    continue
                for vkey, vdata in variants.items():
                    mid = vdata.get("model_id") if isinstance(vdata, dict) else None
                    if isinstance(mid, str) and mid and mid.lower() not in self._lower:
                        index.setdefault(mid.lower(), (key, vkey))
            self._variant_index = index
        return self._variant_index

    def variant_owner(self, model_id: str) -> tuple[Recipe, Variant] | None:
        """The recipe and variant whose own checkpoint is ``model_id`` (case-insensitive)."""
        hit = self._variants().get(model_id.strip().lower())
        if hit is None:
            return None
        recipe = self.recipe(hit[0])
        if recipe is None or hit[1] not in recipe.variants:
            return None
        return recipe, recipe.variants[hit[1]]

    def variant_ids(self) -> list[str]:
        """Checkpoints reachable through recipe variants (canonical spelling)."""
        out: list[str] = []
        for recipe_key, vkey in self._variants().values():
            recipe = self.recipe(recipe_key)
            if recipe is not None and vkey in recipe.variants:
                out.append(recipe.variants[vkey].model_id)
        return out

    def source_path(self, model_id: str) -> str | None:
        key = self.key_for(model_id)
        return self.models[key].get("source_path") if key else None

    def site_url(self, model_id: str) -> str | None:
        """The recipe's page on recipes.vllm.ai (its id there comes from the file path)."""
        path = self.source_path(model_id)
        if not path or not path.startswith("models/"):
            return None
        return f"{SITE_URL}/{path[len('models/') :].rsplit('.', 1)[0]}"

    @property
    def strategies(self) -> dict[str, dict[str, Any]]:
        """Upstream's serving strategies (``strategies/*.yaml``) by name; {} when the cache
        predates them or the source had none."""
        found = self.extra.get("strategies")
        return found if isinstance(found, dict) else {}

    def rendered(self, model_id: str, hardware: str) -> RenderedCommand | None:
        """Upstream's rendered command for ``model_id`` on ``hardware`` (API syncs only)."""
        key = self.key_for(model_id)
        if key is None:
            return None
        renders = self.models[key].get("amd_rendered")
        raw = renders.get(hardware) if isinstance(renders, dict) else None
        if not isinstance(raw, dict):
            return None
        node_count = raw.get("node_count")
        return RenderedCommand(
            model_id=key,
            hardware=hardware,
            argv=[str(a) for a in raw.get("argv") or []],
            env={str(k): str(v) for k, v in (raw.get("env") or {}).items()},
            docker_image=raw.get("docker_image"),
            variant=raw.get("variant"),
            strategy=raw.get("strategy"),
            deploy_type=raw.get("deploy_type"),
            node_count=node_count if isinstance(node_count, int) else None,
        )

    def age_hours(self, now: _dt.datetime | None = None) -> float | None:
        fetched = parse_time(self.fetched_at)
        if fetched is None:
            return None
        now = now or _dt.datetime.now(_dt.UTC)
        return (now - fetched).total_seconds() / 3600.0

    def summary(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "fetched_at": self.fetched_at,
            "source_commit": self.source_commit,
            "source_url": self.source_url,
            "docker_image": self.docker_image,
            "docker_tag": self.docker_tag,
            "model_count": len(self.models),
            "skipped": len(self.skipped),
            "origin": self.origin,
            "from_snapshot": self.from_snapshot,
        }


def parse_time(text: str | None) -> _dt.datetime | None:
    """An ISO-8601 time (``Z`` accepted); naive times are taken as UTC."""
    if not text:
        return None
    try:
        value = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=_dt.UTC)


def catalog_from_doc(doc: Any, origin: str, *, from_snapshot: bool = False) -> Catalog:
    """Check a cache document's shape (cheaply: it was validated when written)."""
    if not isinstance(doc, dict):
        raise CacheError("not a JSON object")
    if doc.get("schema") != CACHE_SCHEMA:
        raise CacheError(f"unknown cache schema {doc.get('schema')!r} (expected {CACHE_SCHEMA})")
    models = doc.get("models")
    if not isinstance(models, dict):
        raise CacheError("no models mapping")
    for key, entry in models.items():
        recipe = entry.get("recipe") if isinstance(entry, dict) else None
        model = recipe.get("model") if isinstance(recipe, dict) else None
        if not isinstance(model, dict) or not isinstance(model.get("model_id"), str):
            raise CacheError(f"entry {key!r} has no recipe with a model.model_id")
    source = doc.get("source")
    if source not in SOURCES:
        raise CacheError(f"unknown source {source!r}")
    fetched_at = doc.get("fetched_at")
    if not isinstance(fetched_at, str) or parse_time(fetched_at) is None:
        raise CacheError("fetched_at is not an ISO-8601 time")
    raw_skipped = doc.get("skipped")
    skipped = raw_skipped if isinstance(raw_skipped, list) else []
    known = {
        "schema",
        "source",
        "fetched_at",
        "source_commit",
        "source_url",
        "docker_image",
        "docker_tag",
        "model_count",
        "skipped",
        "models",
    }
    return Catalog(
        source=source,
        fetched_at=fetched_at,
        source_commit=doc.get("source_commit") or None,
        source_url=doc.get("source_url") or None,
        docker_image=doc.get("docker_image") or None,
        docker_tag=doc.get("docker_tag") or None,
        models=models,
        skipped=[s for s in skipped if isinstance(s, dict)],
        origin=origin,
        from_snapshot=from_snapshot,
        extra={k: v for k, v in doc.items() if k not in known},
    )


def load_snapshot() -> Catalog:
    """The snapshot shipped in the package (always present; damaged means reinstall)."""
    try:
        return catalog_from_doc(
            json.loads(data_text(SNAPSHOT_FILE)), "shipped snapshot", from_snapshot=True
        )
    except (OSError, ValueError) as exc:
        raise InstinctError(
            f"the shipped recipes snapshot is damaged ({exc})",
            fix="reinstall instinct-serve, or run `instinct recipes sync`",
            id="data_file_damaged",
        ) from exc


def read_cache(path: str) -> Catalog:
    """Read one cache file; OSError/ValueError/CacheError when it cannot be used (a FIFO, a
    device, a link loop or a file over ``READ_LIMIT`` among them: ``paths.read_regular``)."""
    from instinct_serve.paths import read_regular

    return catalog_from_doc(json.loads(read_regular(path)), path)


_MEMO: tuple[tuple[Any, ...], Catalog] | None = None


def load_catalog(*, refresh: bool = False) -> Catalog:
    """The synced cache if usable, else the shipped snapshot (with a warning if corrupt).

    Memoised per process on the cache file's identity, so repeated lookups cost nothing and
    a new sync (a new file) is picked up.
    """
    global _MEMO
    path = cache_path()
    try:
        st = os.stat(path)
        ident: tuple[Any, ...] = (path, st.st_mtime_ns, st.st_size, st.st_ino)
    except FileNotFoundError:
        ident = (path, None)
    except OSError as exc:  # there, but not even stat-able (a link loop): say so
        ident = (path, exc.errno)
    if not refresh and _MEMO is not None and _MEMO[0] == ident:
        return _MEMO[1]
    warnings: list[str] = []
    catalog: Catalog | None = None
    if ident[1] is not None:
        try:
            catalog = read_cache(path)
        except (OSError, ValueError, CacheError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            warnings.append(
                f"the recipes cache {path} is unreadable ({reason}); using the recipes "
                "snapshot shipped with instinct-serve instead. Run `instinct recipes sync` "
                "to rebuild the cache."
            )
    if catalog is None:
        catalog = load_snapshot()
        catalog.warnings.extend(warnings)
    _MEMO = (ident, catalog)
    return catalog


def checked_catalog() -> tuple[Catalog, list[str]]:
    """The catalog with the GPU overrides and blacklist validated (a broken data file is an
    error here, not a surprise in a later plan), and what the user should be told: load
    problems and staleness."""
    from instinct_serve.catalog.overrides import load_blacklist, load_gpu_overrides

    load_gpu_overrides(validate=True)
    load_blacklist(validate=True)
    catalog = load_catalog()
    warnings = list(catalog.warnings)
    stale = staleness_warning(catalog)
    if stale:
        warnings.append(stale)
    return catalog, warnings


def staleness_warning(
    catalog: Catalog, now: _dt.datetime | None = None, max_age_h: float = STALE_AFTER_H
) -> str | None:
    """A warning when the recipes are older than ``max_age_h``, saying how to refresh them
    (a ``Reminder``: the CLI says it once a day, not on every command)."""
    from instinct_serve.errors import Reminder

    age = catalog.age_hours(now)
    if age is None or age <= max_age_h:
        return None
    days = age / 24.0
    span = f"{days:.0f} days" if days >= 2 else f"{age:.0f} hours"
    commit = f"upstream commit {catalog.source_commit[:12]}, " if catalog.source_commit else ""
    if catalog.from_snapshot:
        text = (
            f"using the recipes snapshot shipped with instinct-serve ({commit}from "
            f"{catalog.fetched_at[:10]}, {span} old); run `instinct recipes sync` to refresh it"
        )
    else:
        text = (
            f"the recipes cache is {span} old ({commit}synced {catalog.fetched_at[:19]}); run "
            "`instinct recipes sync` to refresh it"
        )
    return Reminder(text, "recipes_stale")


# ------------------------------------------------------------------------------ writing


def cache_document(
    *,
    source: str,
    fetched_at: str,
    recipes: dict[str, tuple[str, dict[str, Any]]],
    skipped: list[dict[str, str]],
    source_commit: str | None = None,
    source_url: str | None = None,
    docker_image: str | None = None,
    docker_tag: str | None = None,
    rendered: dict[str, dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A cache document (deterministic order) from validated recipes keyed by model id.

    ``recipes`` maps a model id to ``(source_path, validated recipe JSON)``.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r}")
    models: dict[str, Any] = {}
    for model_id in sorted(recipes, key=str.lower):
        source_path, data = recipes[model_id]
        recipe = {k: v for k, v in data.items() if k not in DROPPED_KEYS}
        entry: dict[str, Any] = {"source_path": source_path, "recipe": recipe}
        if rendered and rendered.get(model_id):
            entry["amd_rendered"] = rendered[model_id]
        models[model_id] = entry
    doc: dict[str, Any] = {
        "schema": CACHE_SCHEMA,
        "source": source,
        "fetched_at": fetched_at,
        "source_commit": source_commit,
        "source_url": source_url,
        "docker_image": docker_image,
        "docker_tag": docker_tag,
    }
    doc.update(extra or {})
    doc["model_count"] = len(models)
    doc["skipped"] = sorted(skipped, key=lambda s: s.get("path", ""))
    doc["models"] = models
    return doc


def dumps_document(doc: dict[str, Any]) -> str:
    """Compact, stable JSON (the snapshot is compared byte for byte in the tests)."""
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"


def forget_loaded() -> None:
    """Drop the memoised catalog (after the cache was replaced: ``gather.recipes_cache``)."""
    global _MEMO
    _MEMO = None
