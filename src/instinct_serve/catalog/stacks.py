"""The validated-stack table (``data/validated_stacks.json``): which image × gfx × model family
or feature is known good or known bad, with the public issue that says so, the symptom (and
its log pattern) and the fix. Pure: data in, data out.

Three readers share it: the planner (``known_bad`` rows it refuses or warns about, and the
newest ``known_good`` image when its default image is refused), diagnose (rows whose log
pattern is in a log, cited with their source and fix) and ``recipes sync`` (a newer revision
of the table found in the synced repository replaces the shipped one through the cache:
``table_for(catalog)``).

A row matches a launch when every scope it states holds: the image repository (or one
``repository:tag``), the vLLM and ROCm versions read from the image tag (an image whose tag
states none matches only rows without a range), the gfx target, a model-id substring, the
environment (``when_env``, ``*`` for "set") and the vLLM flags (``when_args``);
``unless_env``/``unless_args`` clear a row whose fix is already in the launch. Fields the
caller does not know (diagnose of a pasted log) are not held against a row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from instinct_serve import vllm_args
from instinct_serve.errors import InstinctError

if TYPE_CHECKING:
    from instinct_serve.catalog.store import Catalog

STACKS_FILE = "validated_stacks.json"
CACHE_KEY = "validated_stacks"  # where a synced table sits in the recipes cache document
PLAN_ACTIONS = ("refuse", "warn", "cite")
VERDICTS = ("known_bad", "known_good")

_VLLM_IN_TAG = re.compile(r"(?:^|[_\-])vllm[_\-]?v?(\d+(?:\.\d+){1,3})", re.IGNORECASE)
_RELEASE_TAG = re.compile(r"v?(\d+(?:\.\d+){1,3})")
_ROCM_IN_TAG = re.compile(r"rocm[_\-]?(\d+(?:\.\d+){1,3})", re.IGNORECASE)

Version = tuple[int, ...]


def _version(text: str | None) -> Version | None:
    match = _RELEASE_TAG.fullmatch((text or "").strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def split_image(image: str) -> tuple[str, str]:
    """``vllm/vllm-openai-rocm:v0.27.1`` → (repository, tag); a digest is no tag."""
    ref = image.strip().split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
        return repo, tag
    return ref, ""


def image_versions(image: str | None) -> tuple[Version | None, Version | None]:
    """The (vLLM, ROCm) versions an image's tag states: ``v0.27.1`` (vLLM), and
    ``rocm7.0.0_vllm_0.10.2_20251006`` (both); None for what it does not state."""
    if not image:
        return None, None
    _repo, tag = split_image(image)
    vllm = _version(tag)
    if vllm is None and (m := _VLLM_IN_TAG.search(tag)):
        vllm = _version(m.group(1))
    rocm = _ROCM_IN_TAG.search(tag)
    return vllm, _version(rocm.group(1)) if rocm else None


def _names(image: str, entry: str) -> bool:
    """``entry`` names ``image``: a repository (any tag), or ``repository:tag`` (that tag)."""
    repo, tag = split_image(image)
    want_repo, want_tag = split_image(entry)
    return repo == want_repo and (not want_tag or tag == want_tag)


def _within(have: Version | None, low: Version | None, high: Version | None) -> bool:
    """``have`` inside [low, high], each bound compared on as many parts as it gives."""
    if low is None and high is None:
        return True
    if have is None:
        return False
    if low is not None and have[: len(low)] + (0,) * (len(low) - len(have)) < low:
        return False
    return not (high is not None and have[: len(high)] > high)


@dataclass(frozen=True)
class Launch:
    """What a row is matched against; ``None``/empty is "not known" where noted."""

    image: str | None = None
    gfx: str | None = None
    model_ids: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    args: Sequence[str] = ()
    vllm_version: str | None = None  # when known apart from the tag (a log's banner)
    env_known: bool = True  # False: diagnose of a log whose launch env is unknown

    def versions(self) -> tuple[Version | None, Version | None]:
        vllm, rocm = image_versions(self.image)
        return vllm or _version(self.vllm_version), rocm


@dataclass(frozen=True)
class StackRow:
    id: str
    verdict: str
    source: str
    symptom: str
    fix: str
    plan: str = "cite"
    image: str | None = None  # a known_good row's image
    images: tuple[str, ...] = ()
    vllm_min: Version | None = None
    vllm_max: Version | None = None
    rocm_min: Version | None = None
    rocm_max: Version | None = None
    gfx: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    feature: str = ""
    when_env: Mapping[str, str] = field(default_factory=dict)
    unless_env: Mapping[str, str] = field(default_factory=dict)
    when_args: tuple[str, ...] = ()
    unless_args: tuple[str, ...] = ()
    log_pattern: str | None = None
    fix_env: Mapping[str, str] = field(default_factory=dict)
    fix_args: tuple[str, ...] = ()
    see_also: tuple[str, ...] = ()
    verified: str | None = None

    @property
    def known_bad(self) -> bool:
        return self.verdict == "known_bad"

    def _scope(self, launch: Launch) -> bool:
        if self.gfx and launch.gfx and launch.gfx not in self.gfx:
            return False
        if self.models:
            ids = [m.lower() for m in launch.model_ids if m]
            if not any(part.lower() in mid for part in self.models for mid in ids):
                return False
        if self.images and launch.image and not any(_names(launch.image, i) for i in self.images):
            return False
        vllm, rocm = launch.versions()
        if (launch.image or launch.vllm_version) and not _within(
            vllm, self.vllm_min, self.vllm_max
        ):
            return False
        return not launch.image or _within(rocm, self.rocm_min, self.rocm_max)

    def _launch_state(self, launch: Launch) -> bool:
        env, args = launch.env, launch.args
        if launch.env_known:
            for name, want in self.when_env.items():
                have = env.get(name)
                if have is None or (want != "*" and have != want):
                    return False
            if any(env.get(name) == value for name, value in self.unless_env.items()):
                return False
        if args and not all(vllm_args.has(args, flag) for flag in self.when_args):
            return False
        return not any(vllm_args.has(args, flag) for flag in self.unless_args)

    def matches(self, launch: Launch) -> bool:
        """Every scope the row states holds for ``launch`` (see the module docstring)."""
        return self._scope(launch) and self._launch_state(launch)

    def citation(self) -> str:
        return f"{self.id} ({self.source})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "verdict": self.verdict,
            "plan": self.plan,
            "feature": self.feature,
            "symptom": self.symptom,
            "fix": self.fix,
            "fix_env": dict(self.fix_env),
            "fix_args": list(self.fix_args),
            "source": self.source,
            "see_also": list(self.see_also),
            "image": self.image,
        }


@dataclass(frozen=True)
class StackTable:
    rows: tuple[StackRow, ...]
    revision: str
    origin: str = "builtin"

    def known_bad(self, launch: Launch, *, plan: Iterable[str] = PLAN_ACTIONS) -> list[StackRow]:
        actions = set(plan)
        return [r for r in self.rows if r.known_bad and r.plan in actions and r.matches(launch)]

    def newest_good(self, launch: Launch) -> StackRow | None:
        """The newest known-good image for the launch's gfx and model (the image itself and
        the version range are what is being chosen, so they are not matched)."""
        probe = Launch(gfx=launch.gfx, model_ids=launch.model_ids, env_known=False)
        good = [r for r in self.rows if not r.known_bad and r.image and r.matches(probe)]
        if not good:
            return None
        return max(good, key=lambda r: (r.verified or "", image_versions(r.image)[0] or ()))

    def with_logs(self) -> list[tuple[StackRow, re.Pattern[str]]]:
        return [(r, _compiled(r.log_pattern)) for r in self.rows if r.log_pattern]


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _bad(origin: str, why: str) -> InstinctError:
    return InstinctError(
        f"the validated-stack table {origin} is invalid: {why}",
        fix="reinstall instinct-serve, or run `instinct recipes sync` again",
        id="data_file_damaged",
    )


def _row(raw: Mapping[str, Any]) -> StackRow:
    def strings(key: str) -> tuple[str, ...]:
        return tuple(str(v) for v in raw.get(key) or ())

    def env(key: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in (raw.get(key) or {}).items()}

    return StackRow(
        id=str(raw["id"]),
        verdict=str(raw["verdict"]),
        source=str(raw["source"]),
        symptom=str(raw["symptom"]),
        fix=str(raw.get("fix") or ""),
        plan=str(raw.get("plan") or "cite"),
        image=raw.get("image"),
        images=strings("images"),
        vllm_min=_version(raw.get("vllm_min")),
        vllm_max=_version(raw.get("vllm_max")),
        rocm_min=_version(raw.get("rocm_min")),
        rocm_max=_version(raw.get("rocm_max")),
        gfx=strings("gfx"),
        models=strings("models"),
        feature=str(raw.get("feature") or ""),
        when_env=env("when_env"),
        unless_env=env("unless_env"),
        when_args=strings("when_args"),
        unless_args=strings("unless_args"),
        log_pattern=raw.get("log_pattern") or None,
        fix_env=env("fix_env"),
        fix_args=strings("fix_args"),
        see_also=strings("see_also"),
        verified=raw.get("verified") or None,
    )


def table_from_doc(doc: Any, origin: str = "builtin") -> StackTable:
    """The table of a JSON document (validated by ``catalog.schema`` where data enters; this
    reads it without pydantic, and a damaged document is one clear error)."""
    try:
        rows = tuple(_row(raw) for raw in doc["rows"])
        revision = str(doc["revision"])
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise _bad(origin, f"{type(exc).__name__}: {exc}") from exc
    return StackTable(rows, revision, origin)


@cache
def load_stacks() -> StackTable:
    """The shipped table."""
    from instinct_serve.catalog.overrides import data_text

    try:
        doc = json.loads(data_text(STACKS_FILE))
    except (OSError, json.JSONDecodeError) as exc:
        raise _bad("builtin", str(exc)) from exc
    return table_from_doc(doc)


def table_for(catalog: Catalog | None) -> StackTable:
    """The table a plan uses: the one ``recipes sync`` stored with the catalog when its
    revision is newer than the shipped one, else the shipped one."""
    shipped = load_stacks()
    synced = catalog.extra.get(CACHE_KEY) if catalog is not None else None
    if isinstance(synced, dict) and str(synced.get("revision", "")) > shipped.revision:
        return table_from_doc(synced, f"synced ({catalog.origin if catalog else ''})")
    return shipped
