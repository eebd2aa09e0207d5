"""The catalog as documents: what ``recipes show`` and the MCP ``recipes_show`` return.

Pure: a loaded ``Catalog`` in, JSON-ready dicts out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from instinct_serve.hardware.profiles import UPSTREAM_HARDWARE

if TYPE_CHECKING:
    from instinct_serve.catalog.store import Catalog


def recipe_summary(recipe: Any) -> dict[str, Any]:
    """The fields that identify a recipe: a ``recipes list`` row starts with them."""
    return {
        "model_id": recipe.model_id,
        "title": recipe.title,
        "provider": recipe.provider,
        "tasks": recipe.tasks,
        "architecture": recipe.architecture,
        "parameter_count": recipe.parameter_count,
        "active_parameters": recipe.active_parameters,
        "context_length": recipe.context_length,
        "min_vllm_version": recipe.min_vllm_version,
        "nightly_required": recipe.nightly_required,
    }


def recipe_document(catalog: Catalog, recipe: Any) -> dict[str, Any]:
    """One recipe, every field a user or agent may ask about, and its upstream page."""
    amd = recipe.amd
    return {
        **recipe_summary(recipe),
        "description": recipe.description,
        "base_args": recipe.base_args,
        "base_env": recipe.base_env,
        "features": {
            name: {**f.to_dict(), "opt_in": name in recipe.opt_in_features}
            for name, f in recipe.features.items()
        },
        "opt_in_features": recipe.opt_in_features,
        "variants": {k: v.to_dict() for k, v in recipe.variants.items()},
        "hardware_overrides_amd": amd.to_dict() if amd else None,
        "amd_hardware": {
            hw: recipe.hardware_status(hw) for hw in UPSTREAM_HARDWARE if recipe.hardware_status(hw)
        },
        "amd_image": recipe.amd_image(),
        "compatible_strategies": recipe.compatible_strategies,
        "source_path": recipe.source_path,
        "url": catalog.site_url(recipe.model_id),
        "recipe_json": recipe.to_dict(),
    }


def show_document(
    catalog: Catalog,
    model: str,
    gpu: str | None,
    variant: str | None,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    """How MODEL resolves: the match, the recipe, and with ``gpu`` the merged AMD view
    cross-checked against upstream's rendered command. ``warnings``: what the caller was
    told about the catalog (``store.checked_catalog``), else the catalog's own."""
    from instinct_serve.catalog.config import amd_config, compare_with_rendered
    from instinct_serve.catalog.matching import lookup

    match = lookup(model, catalog)
    amd = amd_config(match, gpu, variant=variant, strategies=catalog.strategies) if gpu else None
    rendered = cross = None
    if amd is not None and amd.hardware_id and match.recipe is not None:
        found = catalog.rendered(match.recipe.model_id, amd.hardware_id)
        if found is not None:
            rendered = found.to_dict()
            cross = compare_with_rendered(amd.args, amd.env, found.argv, found.env)
    return {
        "requested": model,
        "match": match.to_dict(),
        "catalog": catalog.summary(),
        "recipe": recipe_document(catalog, match.recipe) if match.recipe else None,
        "legacy": match.legacy.to_dict() if match.legacy else None,
        "generic": _generic(match.model_id) if match.kind == "generic" else None,
        "amd": amd.to_dict() if amd else None,
        "upstream_rendered": rendered,
        "cross_check": cross,
        "default_image": catalog.docker_image,
        "warnings": catalog.warnings if warnings is None else warnings,
    }


def _generic(model_id: str) -> dict[str, Any]:
    """The generic layer by name alone (``plan`` also reads the model's config)."""
    from instinct_serve.catalog.families import family_of, generic_launch

    launch = generic_launch(model_id, None)
    family = family_of(model_id, None)
    return {
        "family": family.key if family else None,
        "args": launch.args,
        "features": launch.features,
        "reasons": launch.reasons,
    }
