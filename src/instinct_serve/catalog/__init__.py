"""The configuration knowledge of instinct-serve: recipes, AMD overrides, blacklist, matching.

Data
    * upstream recipes (vllm-project/recipes, ``models/<org>/<repo>.yaml``): a snapshot ships
      in ``data/recipes_snapshot.json``; ``instinct recipes sync`` refreshes a cache in
      ``paths.cache_dir()/recipes_cache.json`` (git or the recipes JSON API, plus the newest
      ``vllm/vllm-openai-rocm`` release from Docker Hub);
    * ``data/gpu_overrides.json``: our reviewed Instinct facts (docker flags, env per gfx,
      model overrides, workarounds, precision support, legacy models);
    * ``data/blacklist.json``: models that are not LLM endpoints, with an alternative;
    * ``data/validated_stacks.json``: known-good/known-bad image x gfx x model (or feature)
      stacks, each from a public issue (``catalog.stacks``; a synced repository's newer
      table replaces it through the cache).

API for the planner (all pure over loaded data; only ``load_catalog`` reads files)::

    load_catalog() -> Catalog
        The cache if usable, else the shipped snapshot. ``.docker_image`` is the default
        image (``vllm/vllm-openai-rocm:vX.Y.Z``), ``.warnings`` lists problems to print
        (e.g. a corrupt cache), ``.rendered(recipe.model_id, cfg.hardware_id)`` upstream's
        own command (argv, env, image; default variant) when synced from the JSON API,
        else None.
    staleness_warning(catalog) -> str | None
        "recipes are N days old; run `instinct recipes sync`" (snapshot: its data's age).
    lookup(model_id, catalog=None) -> Match
        exact | variant | base_model | legacy | generic, with ``explanation``, ``recipe``,
        ``variant_key``, ``legacy``, ``blacklist`` and (generic) ``suggestions``.
    ensure_servable(match, image=None) -> Match
        Raises InstinctError ``blacklisted`` (reason + alternative) or, given the image to
        run, ``needs_newer_vllm``; returns the match otherwise.
    close_matches(model_id, n=3) -> list[str]       "did you mean" candidates
    unknown_model_error(model_id) -> UsageError     a ready "not in the catalog" error
    amd_config(match, gpu, variant=None, features=None, modes=None) -> AmdConfig
        The merged AMD view for a gfx (``gfx942``) or profile (``mi300x``): ``args``, ``env``
        (with ``env_sources`` and ``layers``: gpu env_defaults < recipe base < variant <
        variant@GPU < hardware_overrides.amd < variant amd < features < gpu model_overrides),
        ``image`` pinned by the recipe (None: use ``catalog.docker_image``),
        ``precision``/``precision_status``, ``min_vllm_version``, ``context_length``,
        ``warnings``. Parallelism, port and --max-model-len are the planner's.
    compare_with_rendered(args, env, rendered.argv, rendered.env) -> list[str]
        Differences from upstream's rendering, for a cross-check warning.
    load_gpu_overrides() -> GpuOverrides
        ``.docker_argv()`` (mandatory Instinct flags), ``.config(gfx)`` → GpuConfig with
        ``.env`` (defaults), ``.overrides_for(*model_ids)``, ``.precision.status(p)``
        (native|emulated|unsupported|unknown), ``.workarounds``; ``.legacy(model_id)``.
    load_blacklist() -> Blacklist                   ``.get(model_id)`` → BlacklistEntry | None

Recipe accessors (``catalog.recipe.Recipe``): ``model_id``, ``base_args``, ``base_env``,
``features`` (name → Feature; ``.resolve(variant, hw_id)`` gives args/env on AMD),
``opt_in_features``, ``default_features(hw_id, variant_key)``, ``variants`` (key → Variant:
``precision`` read from the recipe, never from the key; ``model_id``, ``vram_minimum_gb``,
``extra_args``/``extra_env``, ``hardware_overrides``), ``amd`` (hardware_overrides.amd:
``extra_args``, ``extra_env``, ``image``), ``amd_image(variant, hw_id)``,
``min_vllm_version``, ``nightly_required``, ``context_length``, ``hardware_status(hw_id)``,
``declared_tp(variant, hw_id)`` (a TP size the recipe states, else None).

Records (Variant, Feature, LegacyModel, BlacklistEntry, ...) are NamedTuples, cheap to
define at start-up: use their ``to_dict()`` for JSON, not ``cli.common.to_jsonable``.

Nothing here imports pydantic, yaml or httpx at import time: ``plan`` must start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from instinct_serve.catalog.config import (
        AmdConfig,
        amd_config,
        compare_with_rendered,
        resolve_gpu,
    )
    from instinct_serve.catalog.matching import (
        Match,
        check_model_id,
        close_matches,
        ensure_servable,
        lookup,
        required_vllm,
        unknown_model_error,
        vllm_gate,
    )
    from instinct_serve.catalog.overrides import (
        Blacklist,
        BlacklistEntry,
        GpuConfig,
        GpuOverrides,
        LegacyModel,
        load_blacklist,
        load_gpu_overrides,
    )
    from instinct_serve.catalog.recipe import Feature, HardwareOverride, Recipe, Variant
    from instinct_serve.catalog.store import (
        Catalog,
        RenderedCommand,
        cache_path,
        load_catalog,
        staleness_warning,
    )

# name -> submodule: importing the package imports nothing until a name is used.
_EXPORTS = {
    "AmdConfig": "config",
    "amd_config": "config",
    "compare_with_rendered": "config",
    "resolve_gpu": "config",
    "Match": "matching",
    "check_model_id": "matching",
    "close_matches": "matching",
    "ensure_servable": "matching",
    "lookup": "matching",
    "required_vllm": "matching",
    "unknown_model_error": "matching",
    "vllm_gate": "matching",
    "Blacklist": "overrides",
    "BlacklistEntry": "overrides",
    "GpuConfig": "overrides",
    "GpuOverrides": "overrides",
    "LegacyModel": "overrides",
    "load_blacklist": "overrides",
    "load_gpu_overrides": "overrides",
    "Feature": "recipe",
    "HardwareOverride": "recipe",
    "Recipe": "recipe",
    "Variant": "recipe",
    "Catalog": "store",
    "RenderedCommand": "store",
    "cache_path": "store",
    "load_catalog": "store",
    "staleness_warning": "store",
}

__all__ = [
    "AmdConfig",
    "Blacklist",
    "BlacklistEntry",
    "Catalog",
    "Feature",
    "GpuConfig",
    "GpuOverrides",
    "HardwareOverride",
    "LegacyModel",
    "Match",
    "Recipe",
    "RenderedCommand",
    "Variant",
    "amd_config",
    "cache_path",
    "check_model_id",
    "close_matches",
    "compare_with_rendered",
    "ensure_servable",
    "load_blacklist",
    "load_catalog",
    "load_gpu_overrides",
    "lookup",
    "required_vllm",
    "resolve_gpu",
    "staleness_warning",
    "unknown_model_error",
    "vllm_gate",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
