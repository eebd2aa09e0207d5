"""What the installed vLLM can serve: its version against each recipe's ``min_vllm_version``.

The comparison is pure (``assess``); ``catalog_requirements`` reads the recipes the catalog
knows (synced cache, else the shipped snapshot). Recipes group by their ``architecture``
(dense, moe, ...): per group, how many the installed vLLM is new enough for and the newest
minimum any of them states. A ``nightly`` minimum cannot be compared with a release and is
reported as unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.engine.versions import at_least, parse_version


@dataclass(frozen=True)
class Requirement:
    model_id: str
    architecture: str | None
    min_vllm_version: str | None


@dataclass
class Support:
    requirement: Requirement
    supported: bool | None  # None: cannot tell (no minimum stated is True; nightly is None)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.requirement.model_id,
            "architecture": self.requirement.architecture,
            "min_vllm_version": self.requirement.min_vllm_version,
            "supported": self.supported,
            "note": self.note,
        }


@dataclass
class Capabilities:
    vllm_version: str | None
    recipes: list[Support] = field(default_factory=list)

    def by_architecture(self) -> dict[str, dict[str, Any]]:
        groups: dict[str, dict[str, Any]] = {}
        for item in self.recipes:
            arch = item.requirement.architecture or "unknown"
            group = groups.setdefault(
                arch,
                {
                    "recipes": 0,
                    "supported": 0,
                    "unsupported": [],
                    "unknown": [],
                    "newest_min_vllm_version": None,
                },
            )
            group["recipes"] += 1
            if item.supported is True:
                group["supported"] += 1
            elif item.supported is False:
                group["unsupported"].append(item.requirement.model_id)
            else:
                group["unknown"].append(item.requirement.model_id)
            newest = group["newest_min_vllm_version"]
            stated = item.requirement.min_vllm_version
            if (
                stated
                and parse_version(stated) is not None
                and (newest is None or at_least(stated, newest))
            ):
                group["newest_min_vllm_version"] = stated
        return dict(sorted(groups.items()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "vllm_version": self.vllm_version,
            "architectures": self.by_architecture(),
            "recipes": [r.to_dict() for r in self.recipes],
        }


def judge(vllm_version: str | None, req: Requirement) -> Support:
    if vllm_version is None:
        return Support(req, None, "installed vLLM version unknown")
    if not req.min_vllm_version:
        return Support(req, True, "the recipe states no minimum")
    verdict = at_least(vllm_version, req.min_vllm_version)
    if verdict is None:
        return Support(req, None, f"cannot compare {vllm_version} with {req.min_vllm_version!r}")
    if not verdict:
        return Support(req, False, f"needs vLLM >= {req.min_vllm_version}")
    return Support(req, True)


def assess(vllm_version: str | None, requirements: Iterable[Requirement]) -> Capabilities:
    return Capabilities(vllm_version, [judge(vllm_version, r) for r in requirements])


def catalog_requirements() -> list[Requirement]:
    """Every recipe the catalog knows, with its architecture and vLLM minimum."""
    from instinct_serve.catalog.store import load_catalog

    catalog = load_catalog()
    return [
        Requirement(
            r.model_id, r.architecture, "nightly" if r.nightly_required else r.min_vllm_version
        )
        for r in catalog.recipes()
    ]


def model_requirement(model_id: str) -> Requirement | None:
    """The requirement of one model as the catalog matches it (None: not in the catalog)."""
    from instinct_serve.catalog.matching import lookup, required_vllm

    match = lookup(model_id)
    if match.recipe is None and match.legacy is None:
        return None
    if match.recipe is not None:
        arch = match.recipe.architecture
    else:
        assert match.legacy is not None
        arch = match.legacy.architecture
    return Requirement(match.model_id, arch, required_vllm(match))
