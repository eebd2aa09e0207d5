"""Which catalog recipes a few words mean, ranked for the GPUs at hand.

"Serve Qwen3" or "DeepSeek" names a family, not a checkpoint. The answer ranks recipes by
how well the words match (a whole-word match of the name beats a substring, the title and
provider count less), then by what matters on the target: the model fits the GPUs (from
the recipe's stated VRAM or its parameter count, the same rough sizing the planner uses
offline), the recipe marks this GPU verified, and how often other recipes point at it
(``related_recipes``: the catalog's own sense of which models matter); a general text model
comes before an OCR or speech one of the same name. A non-LLM recipe (blacklisted) comes
last. Pure: the catalog and the target are handed in.
"""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from instinct_serve.catalog.store import Catalog


class SearchTarget(NamedTuple):
    """The GPUs a search ranks for (None: rank without hardware)."""

    hardware_id: str | None  # upstream's id (mi300x) when the GPU is one of them
    vram_bytes: int
    gpu_count: int
    label: str


class SearchHit(NamedTuple):
    model_id: str
    title: str
    score: float
    fits: str | None  # "one GPU", "N GPUs", "no" (does not fit), None (unknown/no target)
    verified: bool
    references: int
    parameter_count: str | None
    why: str

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


_WORD = re.compile(r"[a-z0-9.]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _text_score(query: list[str], recipe: Any) -> float:
    """0..1: how well the words match the recipe's name, title and provider."""
    name = recipe.model_id.split("/", 1)[-1].lower()
    name_words = set(_words(name.replace("-", " ")))
    hay = f"{recipe.model_id} {recipe.title} {recipe.provider or ''}".lower()
    score = 0.0
    for word in query:
        if word in name_words:
            score += 1.0
        elif any(w.startswith(word) for w in name_words):
            score += 0.8
        elif word in name:
            score += 0.6
        elif word in hay:
            score += 0.4
        else:
            best = difflib.get_close_matches(word, list(name_words), n=1, cutoff=0.75)
            score += 0.3 if best else 0.0
    return score / max(len(query), 1)


def _fit(recipe: Any, target: SearchTarget | None, utilization: float) -> str | None:
    if target is None or not target.vram_bytes:
        return None
    from instinct_serve.catalog.rough import rough_size

    variant = recipe.default_variant
    size = rough_size(
        parameter_count=recipe.parameter_count,
        precision=variant.precision,
        vram_minimum_gb=variant.vram_minimum_gb,
        vram_bytes=target.vram_bytes,
        gpu_count=target.gpu_count,
        utilization=utilization,
    )
    known = size.preferred()
    if not known:
        return None
    need = known[0]
    if need.tp is None:
        return "no"
    return "one GPU" if need.tp == 1 else f"{need.tp} GPUs"


def search(
    catalog: Catalog,
    query: str,
    target: SearchTarget | None = None,
    *,
    limit: int = 10,
    utilization: float = 0.9,
) -> list[SearchHit]:
    """The recipes ``query`` most likely means, best first (see the module doc)."""
    from instinct_serve.catalog.overrides import load_blacklist

    words = _words(query)
    if not words:
        return []
    recipes = list(catalog.recipes())
    references: dict[str, int] = {}
    for recipe in recipes:
        for other in recipe.meta.get("related_recipes") or []:
            key = str(other).lower()
            references[key] = references.get(key, 0) + 1
    blacklist = load_blacklist()
    hits = []
    for recipe in recipes:
        text = _text_score(words, recipe)
        if text < 0.6:  # most of the words must match
            continue
        exact = "-".join(words) == recipe.model_id.split("/", 1)[-1].lower()
        if exact:
            text += 1.0  # the name itself, written without its org
        fits = _fit(recipe, target, utilization)
        verified = bool(
            target is not None
            and target.hardware_id
            and recipe.hardware_status(target.hardware_id) == "verified"
        )
        refs = references.get(recipe.model_id.lower(), 0)
        listed = blacklist.get(recipe.model_id) is not None
        chat = "text" in (recipe.tasks or [])
        score = text * 20  # the words first: "qwen3" means Qwen3, not Qwen3.5
        score += {"one GPU": 2.3, "no": -6.0}.get(fits or "", 2.0 if fits else 0.0)
        score += 1.5 if chat else 0.0  # a general language model before OCR, speech, ...
        score += 1.5 if verified else 0.0
        score += min(refs, 6) * 0.5
        score -= 8.0 if listed else 0.0
        why = ["its name exactly" if exact else f"matches {text:.0%} of the words"]
        if fits:
            why.append("does not fit" if fits == "no" else f"fits on {fits}")
        if verified:
            why.append(f"verified on {target.hardware_id if target else ''}")
        if refs:
            why.append(f"referenced by {refs} recipe{'s' if refs > 1 else ''}")
        if listed:
            why.append("not an LLM endpoint")
        hits.append(
            SearchHit(
                recipe.model_id,
                recipe.title,
                round(score, 2),
                fits,
                verified,
                refs,
                recipe.parameter_count,
                "; ".join(why),
            )
        )
    hits.sort(key=lambda h: (-h.score, len(h.model_id), h.model_id))
    return hits[:limit]
