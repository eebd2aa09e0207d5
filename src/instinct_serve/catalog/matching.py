"""From a model id to the configuration that serves it: ``lookup`` and its helpers.

Order (the first hit wins):

1. ``exact``: a recipe's ``model.model_id``, case-insensitively;
2. ``variant``: a checkpoint a recipe lists as a variant (``...-FP8`` → recipe + variant);
3. ``base_model``: the same model line under a date suffix (``Kimi-K2-Instruct-0905`` ↔
   ``Kimi-K2-Instruct``), a quantisation suffix (``-FP8``, ``-AWQ``), a re-quantisation of
   the exact model by another organisation, or a ``-Thinking`` checkpoint of a hybrid
   ``-Instruct`` recipe that has a reasoning parser. Conservative on purpose: the size and
   every other name token must be equal, and a ``-Base`` model never matches;
4. ``legacy``: our ``legacy_models`` (useful models upstream does not cover);
5. ``generic``: ``--trust-remote-code`` + hermes tool calling, with close names to suggest.

A local model directory (a ``config.json`` inside, as ``vllm serve DIR`` takes it) is not a
Hub id and is in no catalog: it is served as it is, with the generic settings, under its
path (``local_model_dir``); nothing is suggested for it.

The blacklist is consulted for the requested id and for the matched recipe; refusing is
the caller's decision (``ensure_servable``), so ``show`` can still explain a model.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from typing import Any, Literal

from instinct_serve.catalog.overrides import (
    BlacklistEntry,
    LegacyModel,
    load_blacklist,
    load_gpu_overrides,
)
from instinct_serve.catalog.recipe import Recipe, Variant
from instinct_serve.catalog.store import Catalog, load_catalog
from instinct_serve.errors import InstinctError, UsageError

MatchKind = Literal["exact", "variant", "base_model", "legacy", "generic"]


_ID = r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$"
# Date suffixes: YYMM (2507, 2512), MMDD (0905, 0731), YYYYMM (202606), YYYYMMDD.
_DATE = (
    r"-(?:2[3-9](?:0[1-9]|1[0-2])|(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
    r"|20[2-3]\d(?:0[1-9]|1[0-2])(?:(?:0[1-9]|[12]\d|3[01]))?)$"
)
# Quantisation suffixes of re-published checkpoints (one or more, stripped from the end).
_QUANT = (
    r"-(?:fp8(?:-dynamic|-static|-block)?|fp16|bf16|int4|int8|w4a16|w8a8|w4a8|awq|gptq"
    r"(?:-int4|-int8)?|mxfp4|mxfp6|mxfp8|nvfp4|fp4|quantized(?:\.w\d+a\d+)?|dynamic)$"
)
_FAMILY = r"-(instruct|thinking)(?=$|-)"
_BASE = r"-base(?=$|-)"
_RELEASE = r"v?(\d+(?:\.\d+){1,3})"


@cache
def _re(pattern: str) -> re.Pattern[str]:
    """Compiled on first use: most commands never need the matching regexes."""
    return re.compile(pattern, re.IGNORECASE)


class Match:
    """How a requested model id resolved, and what to serve it with."""

    __slots__ = (
        "_catalog",
        "_suggestions",
        "blacklist",
        "explanation",
        "kind",
        "legacy",
        "model_id",
        "notes",
        "recipe",
        "requested",
        "variant_key",
    )

    def __init__(
        self,
        requested: str,
        kind: MatchKind,
        model_id: str,
        explanation: str,
        *,
        recipe: Recipe | None = None,
        variant_key: str | None = None,
        legacy: LegacyModel | None = None,
        blacklist: BlacklistEntry | None = None,
        suggestions: tuple[str, ...] | None = None,
        notes: tuple[str, ...] = (),
        catalog: Catalog | None = None,
    ) -> None:
        self.requested = requested
        self.kind: MatchKind = kind
        self.model_id = model_id  # the checkpoint to serve
        self.explanation = explanation
        self.recipe = recipe
        self.variant_key = variant_key
        self.legacy = legacy
        self.blacklist = blacklist
        self._suggestions = suggestions
        self._catalog = catalog  # for suggestions, computed only when asked for
        self.notes = notes

    def __repr__(self) -> str:
        return f"Match({self.requested!r}, kind={self.kind!r}, model_id={self.model_id!r})"

    @property
    def suggestions(self) -> tuple[str, ...]:
        """Close catalog ids for a generic match ("did you mean"); () otherwise."""
        if self._suggestions is None:
            found = (
                close_matches(self.requested, 3, self._catalog) if self.kind == "generic" else []
            )
            self._suggestions = tuple(found)
        return self._suggestions

    @property
    def variant(self) -> Variant | None:
        if self.recipe is None:
            return None
        if self.variant_key and self.variant_key in self.recipe.variants:
            return self.recipe.variants[self.variant_key]
        return self.recipe.default_variant

    @property
    def blacklisted(self) -> bool:
        return self.blacklist is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "match": self.kind,
            "model_id": self.model_id,
            "explanation": self.explanation,
            "recipe_id": self.recipe.model_id if self.recipe else None,
            "variant": self.variant_key,
            "legacy": self.legacy is not None,
            "blacklisted": self.blacklist.to_dict() if self.blacklist else None,
            "suggestions": list(self.suggestions),
            "notes": list(self.notes),
        }


def check_model_id(model_id: str, catalog: Catalog | None = None) -> str:
    """A Hugging Face id (``org/name``) or a UsageError that says what is wrong.

    Text written as a path (``/``, ``./``, ``~``) that is not a model directory is answered
    as such (``model_dir_not_found``, ``model_dir_invalid``), not as a malformed Hub id.

    With ``catalog``, a bare name (``qwen3.5-9b``, ``gpt-oss``) is answered with the catalog
    ids it most likely means, since that is what people type first.
    """
    text = (model_id or "").strip()
    if _looks_like_path(text) and local_model_dir(text) is None:
        raise _not_a_model_dir(text)
    if not _re(_ID).match(text):
        hits = name_matches(text, catalog) if catalog is not None else []
        fix = "use the org/name form, e.g. " + (" or ".join(hits) if hits else "Qwen/Qwen3.5-9B")
        raise UsageError(
            f"{model_id!r} is not a Hugging Face model id"
            + (f"; did you mean {hits[0]}?" if hits else ""),
            fix=fix,
            id="bad_model_id",
        )
    return text


def local_model_dir(model: str) -> str | None:
    """``model`` as a local model directory (absolute, normalised), or None.

    A directory counts when it holds a ``config.json``: what ``vllm serve DIR`` loads. A
    path that does not exist is left to ``check_model_id`` (then it is not a Hub id either).
    """
    text = (model or "").strip()
    if not text:
        return None
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")):
        return path
    return None


def _looks_like_path(text: str) -> bool:
    """Written as a filesystem path (``/m``, ``./m``, ``../m``, ``~/m``), not as a Hub id."""
    return text.startswith(("/", "./", "../", "~")) or text in (".", "..")


def _not_a_model_dir(text: str) -> UsageError:
    path = os.path.abspath(os.path.expanduser(text))
    if not os.path.exists(path):
        return UsageError(
            f"the model directory {path} does not exist",
            fix="pass an existing model directory (config.json, *.safetensors, tokenizer) "
            "or a Hugging Face id (org/name)",
            id="model_dir_not_found",
            details={"path": path},
        )
    return UsageError(
        f"{path} is not a model directory: it has no config.json",
        fix="pass the directory that holds the model's config.json and weights",
        id="model_dir_invalid",
        details={"path": path},
    )


def _local_architectures(path: str) -> list[str]:
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deep
        return []
    archs = doc.get("architectures") if isinstance(doc, dict) else None
    return [str(a) for a in archs] if isinstance(archs, list) else []


def name_matches(text: str, catalog: Catalog, n: int = 3) -> list[str]:
    """The catalog ids a bare name most likely means (``catalog.search``: the words, then
    how often other recipes refer to it), else close ones."""
    query = text.strip().lower()
    if not query or "/" in query.strip("/") or len(query) < 2:
        return []
    from instinct_serve.catalog.search import search

    found = [hit.model_id for hit in search(catalog, query, limit=n)]
    return found or close_matches(query, n=n, catalog=catalog)


def _split(model_id: str) -> tuple[str, str]:
    """(lower-case org, name as written): suffixes are compared case-insensitively but
    reported as the user wrote them."""
    org, _, name = model_id.partition("/")
    return org.lower(), name


def strip_suffixes(name: str) -> tuple[str, list[str]]:
    """A model name without trailing date and quantisation suffixes, and what was removed."""
    removed: list[str] = []
    changed = True
    while changed:
        changed = False
        for pattern in (_QUANT, _DATE):
            m = _re(pattern).search(name)
            if m and m.start() > 0:
                removed.insert(0, m.group(0))
                name = name[: m.start()]
                changed = True
    return name, removed


def _family(name: str) -> str | None:
    found = _re(_FAMILY).findall(name)
    return found[-1].lower() if found else None


def _base_match(requested: str, catalog: Catalog) -> tuple[Recipe, str] | None:
    """The recipe of the same model line (see module doc), and why."""
    req_org, req_name = _split(requested)
    if _re(_BASE).search(req_name):
        return None
    req_base, req_removed = strip_suffixes(req_name)
    req_base = req_base.lower()
    req_family = _family(req_base)

    same_line: list[tuple[str, Recipe, list[str]]] = []
    swapped: list[tuple[str, Recipe, list[str]]] = []
    requant: list[Recipe] = []
    for recipe in catalog.recipes():
        org, name = _split(recipe.model_id)
        if _re(_BASE).search(name):
            continue
        base, removed = strip_suffixes(name)
        base = base.lower()
        if org != req_org:
            if not req_removed or any(_re(_DATE).fullmatch(s) for s in req_removed):
                continue
            if name.lower() == req_base:  # a re-quantisation of exactly this model
                requant.append(recipe)
            continue
        if base == req_base:
            same_line.append((removed[-1] if removed else "", recipe, removed))
        elif (
            req_family == "thinking"
            and _family(base) == "instruct"
            and _re(_FAMILY).sub("-thinking", base) == req_base
            and "reasoning" in recipe.features
        ):
            swapped.append((removed[-1] if removed else "", recipe, removed))

    def pick(cands: list[tuple[str, Recipe, list[str]]]) -> tuple[Recipe, list[str]]:
        """Deterministic: original weights before a quantised recipe, then the latest date."""

        def key(c: tuple[str, Recipe, list[str]]) -> tuple[bool, str, str]:
            quantised = any(_re(_QUANT).fullmatch(s) for s in c[2])
            return (not quantised, c[0], c[1].model_id.lower())

        cands.sort(key=key)
        return cands[-1][1], cands[-1][2]

    if same_line:
        recipe, removed = pick(same_line)
        mine = {s.lower() for s in req_removed}
        theirs = {s.lower() for s in removed}
        differ = [s for s in req_removed if s.lower() not in theirs]
        differ += [s for s in removed if s.lower() not in mine]
        what = " and ".join(f"'{s}'" for s in differ)
        why = (
            f"same model line as the recipe {recipe.model_id} (names differ only by {what})"
            if what
            else f"same model line as the recipe {recipe.model_id}"
        )
        if len(same_line) > 1:
            others = ", ".join(c[1].model_id for c in same_line if c[1] is not recipe)
            why += f"; chosen over {others}"
        return recipe, why
    if swapped:
        recipe, _ = pick(swapped)
        return recipe, (
            f"-Thinking checkpoint of the hybrid recipe {recipe.model_id} (same size and "
            "architecture; the recipe's reasoning parser applies)"
        )
    if len(requant) == 1:
        recipe = requant[0]
        return recipe, (
            f"re-quantised checkpoint of {recipe.model_id} ({' '.join(req_removed)} weights, "
            "same architecture)"
        )
    return None


def close_matches(model_id: str, n: int = 3, catalog: Catalog | None = None) -> list[str]:
    """Catalog ids that look like ``model_id`` (for "did you mean" messages)."""
    import difflib

    catalog = catalog or load_catalog()
    ids = [r.model_id for r in catalog.recipes()]
    ids += catalog.variant_ids()
    ids += list(load_gpu_overrides().legacy_models)
    by_lower: dict[str, str] = {}
    for mid in ids:
        by_lower.setdefault(mid.lower(), mid)
    query = model_id.strip().lower()
    hits = difflib.get_close_matches(query, list(by_lower), n=n, cutoff=0.6)
    if len(hits) < n:  # names alone: "qwen3.5-9b" should find "Qwen/Qwen3.5-9B"
        names: dict[str, str] = {}
        for low in by_lower:
            names.setdefault(low.split("/", 1)[-1], low)
        more = difflib.get_close_matches(query.split("/", 1)[-1], list(names), n=n, cutoff=0.6)
        hits += [names[m] for m in more if names[m] not in hits]
    return [by_lower[h] for h in hits[:n]]


def _local_dir_match(model_id: str) -> Match | None:
    """The generic match of a local model directory (None: ``model_id`` names none)."""
    local = local_model_dir(model_id)
    if local is None:
        return None
    archs = _local_architectures(local)
    what = f" ({', '.join(archs)})" if archs else ""
    return Match(
        model_id.strip(),
        "generic",
        model_id.strip(),
        f"local model directory {local}{what}: not in the recipes catalog, generic vLLM "
        "settings (trust remote code, hermes tool calling)",
        suggestions=(),
        notes=("served from the directory as it is: no Hub download",),
    )


def lookup(model_id: str, catalog: Catalog | None = None) -> Match:
    """Resolve ``model_id`` (see the module doc for the order); never raises for a valid id
    or a local model directory."""
    catalog = catalog or load_catalog()
    local = _local_dir_match(model_id)
    if local is not None:
        return local
    requested = check_model_id(model_id, catalog)
    blacklist = load_blacklist()

    def listed(*ids: str) -> BlacklistEntry | None:
        return next((hit for mid in ids if (hit := blacklist.get(mid)) is not None), None)

    recipe = catalog.recipe(requested)
    if recipe is not None:
        how = "recipe" if recipe.model_id == requested else "recipe (case-insensitive)"
        return Match(
            requested,
            "exact",
            recipe.model_id,
            f"{how} {recipe.model_id} from vllm-project/recipes",
            recipe=recipe,
            variant_key=recipe.default_variant.key,
            blacklist=listed(requested, recipe.model_id),
        )

    owner = catalog.variant_owner(requested)
    if owner is not None:
        recipe, variant = owner
        prec = f", precision {variant.precision}" if variant.precision else ""
        return Match(
            requested,
            "variant",
            variant.model_id,
            f"variant '{variant.key}' of the recipe {recipe.model_id}{prec}",
            recipe=recipe,
            variant_key=variant.key,
            blacklist=listed(requested, recipe.model_id),
        )

    base = _base_match(requested, catalog)
    if base is not None:
        recipe, why = base
        return Match(
            requested,
            "base_model",
            requested,
            why,
            recipe=recipe,
            variant_key=recipe.default_variant.key,
            blacklist=listed(requested, recipe.model_id),
            notes=(
                "the recipe's variants describe other checkpoints: size and precision come "
                "from this checkpoint's own config",
            ),
        )

    legacy = load_gpu_overrides().legacy(requested)
    if legacy is not None:
        return Match(
            requested,
            "legacy",
            legacy.model_id,
            f"instinct-serve's own entry for {legacy.model_id} (not in vllm-project/recipes)",
            legacy=legacy,
            blacklist=listed(requested),
        )

    return Match(
        requested,
        "generic",
        requested,
        "not in the recipes catalog: generic vLLM settings (the tool and reasoning parsers "
        "of its family; remote code only if its config needs it)",
        blacklist=listed(requested),
        catalog=catalog,
    )


def parse_release(text: str | None) -> tuple[int, ...] | None:
    """``0.27.1``/``v0.27.1`` → (0, 27, 1); anything else (nightly, rc, custom) → None."""
    m = _re(_RELEASE).fullmatch((text or "").strip())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def image_version(image: str | None) -> tuple[int, ...] | None:
    """The vLLM release of an image from its tag (``...:v0.27.1``), None if not a release."""
    if not image:
        return None
    last = image.rsplit("/", 1)[-1]
    return parse_release(last.rsplit(":", 1)[1]) if ":" in last else None


def required_vllm(match: Match) -> str | None:
    """The vLLM the match needs: the highest stated minimum, or ``nightly``."""
    if match.legacy is not None:
        return match.legacy.min_vllm_version
    recipe = match.recipe
    if recipe is None:
        return None
    if recipe.nightly_required:
        return "nightly"
    stated = [recipe.min_vllm_version]
    variant = match.variant
    if variant is not None:
        stated.append(variant.min_vllm_version)
    best: tuple[tuple[int, ...], str] | None = None
    for text in stated:
        if not text:
            continue
        version = parse_release(text)
        if version is None:
            return "nightly"  # e.g. "nightly": not in any release yet
        padded = version + (0,) * (4 - len(version))
        if best is None or padded > best[0]:
            best = (padded, text)
    return best[1] if best else None


def vllm_gate(match: Match, image: str | None) -> str | None:
    """Why ``image`` is too old for the match, or None (fine, or cannot tell from the tag)."""
    need = required_vllm(match)
    have = image_version(image)
    if not need or have is None:
        return None
    if need == "nightly":
        return (
            f"{match.model_id} needs a vLLM newer than any release (the recipe requires a "
            f"nightly build); {image} is a release"
        )
    want = parse_release(need)
    if want is None:
        return None
    pad = 4
    if want + (0,) * (pad - len(want)) > have + (0,) * (pad - len(have)):
        return f"{match.model_id} needs vLLM >= {need}; {image} is older"
    return None


def ensure_servable(match: Match, image: str | None = None) -> Match:
    """Refuse what cannot work: a blacklisted model (its reason and an alternative), or,
    given the image that will run, a vLLM too old for the recipe. Exit 1 either way."""
    entry = match.blacklist
    if entry is None:
        problem = vllm_gate(match, image)
        if problem is None:
            return match
        raise InstinctError(
            problem,
            fix="run `instinct recipes sync` for the newest vllm/vllm-openai-rocm release, or "
            "pass a newer image (e.g. vllm/vllm-openai-rocm:nightly)",
            id="needs_newer_vllm",
            details={"required_vllm": required_vllm(match), "image": image},
        )
    raise InstinctError(
        f"{match.requested} cannot be served as an LLM endpoint: {entry.reason}",
        fix=f"serve {entry.alternative} instead (a text-generation model that this tool can serve)",
        id="blacklisted",
        details={
            "category": entry.category,
            "alternative": entry.alternative,
            "reference": entry.reference,
        },
    )


def unknown_model_error(model_id: str, catalog: Catalog | None = None) -> UsageError:
    """A "not in the catalog" error with close names, for commands that require a recipe."""
    near = close_matches(model_id, 3, catalog)
    fix = (
        "did you mean " + ", ".join(near) + "?"
        if near
        else "run `instinct recipes list` to see the catalog"
    )
    return UsageError(f"{model_id} is not in the recipes catalog", fix=fix, id="unknown_model")
