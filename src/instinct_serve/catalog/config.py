"""The AMD view of a match: vLLM args and env for one GPU, layer by layer, with precedence.

Layers, lowest precedence first (env: later wins per key; args: concatenated, then the last
occurrence of each flag wins, as a shell would)::

    gpu env_defaults (gfx)                       our reviewed per-gfx defaults
    recipe model.base_args / base_env
    variant extra_args / extra_env
    variant hardware_overrides.<mi300x|mi325x|mi355x>
    recipe hardware_overrides.amd                upstream's AMD tuning
    variant hardware_overrides.amd
    features (tool_calling, reasoning, ...)      hardware_overrides inside a feature replace it
    gpu model_overrides (gfx, id prefix)         ours, highest: known-bad combinations

This mirrors upstream's command builder (which puts the exact-GPU variant layer before the
generation layer, as here) minus the parallelism flags, which are the planner's job.
Legacy models use their own args/env/features in place of the recipe layers; generic models
get ``--trust-remote-code`` and hermes tool calling.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from instinct_serve import vllm_args
from instinct_serve.catalog.matching import Match, required_vllm
from instinct_serve.catalog.overrides import (
    UNKNOWN,
    UNSUPPORTED,
    ArgRemoval,
    GpuConfig,
    GpuOverrides,
    load_gpu_overrides,
)
from instinct_serve.errors import UsageError
from instinct_serve.hardware.profiles import UPSTREAM_HARDWARE, products


class Layer(NamedTuple):
    name: str
    args: list[str]
    env: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.name, "args": self.args, "env": self.env}


class AmdConfig:
    """What to pass ``vllm serve`` on one AMD GPU (without parallelism, port or length)."""

    def __init__(
        self,
        *,
        gpu: str,
        gfx: str,
        hardware_id: str | None,
        model_id: str,
        match: str,
        variant: str | None,
        precision: str | None,
        precision_status: str,
        features: list[str],
        args: list[str],
        env: dict[str, str],
        env_sources: dict[str, str],
        layers: list[Layer],
        image: str | None,
        min_vllm_version: str | None,
        context_length: int | None,
        warnings: list[str],
    ) -> None:
        self.gpu = gpu
        self.gfx = gfx
        self.hardware_id = hardware_id  # upstream's GPU id (mi300x, mi325x, mi355x) or None
        self.model_id = model_id
        self.match = match
        self.variant = variant
        self.precision = precision
        self.precision_status = precision_status
        self.features = features
        self.args = args
        self.env = env
        self.env_sources = env_sources
        self.layers = layers
        self.image = image  # pinned by the recipe for AMD; None: use catalog.docker_image
        self.min_vllm_version = min_vllm_version
        self.context_length = context_length
        self.warnings = warnings

    def __repr__(self) -> str:
        return f"AmdConfig({self.model_id!r}, gfx={self.gfx!r}, args={self.args!r})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "gfx": self.gfx,
            "hardware_id": self.hardware_id,
            "model_id": self.model_id,
            "match": self.match,
            "variant": self.variant,
            "precision": self.precision,
            "precision_status": self.precision_status,
            "features": self.features,
            "args": self.args,
            "env": self.env,
            "env_sources": self.env_sources,
            "image": self.image,
            "min_vllm_version": self.min_vllm_version,
            "context_length": self.context_length,
            "layers": [layer.to_dict() for layer in self.layers],
            "warnings": self.warnings,
        }


def default_strategy(recipe: Any) -> str:
    """The recipe's single-node strategy: its ``default_strategy`` when that is a single-node
    one it lists as compatible, else ``single_node_tp`` (upstream's recommendStrategy for
    one node)."""
    wanted = recipe.data.get("default_strategy")
    compatible = recipe.compatible_strategies
    if (
        isinstance(wanted, str)
        and wanted.startswith("single_node_")
        and (not compatible or wanted in compatible)
    ):
        return wanted
    return "single_node_tp"


def resolve_gpu(gpu: str, overrides: GpuOverrides | None = None) -> tuple[str, str | None]:
    """``gfx942``/``mi300x``/``MI355X`` → (gfx, profile key or None)."""
    overrides = overrides or load_gpu_overrides()
    text = gpu.strip().lower()
    if text in overrides.gpu_configs:
        return text, None
    from instinct_serve.hardware.profiles import get_profile, gpu_choices

    try:
        profile = get_profile(text)
    except UsageError as exc:
        raise UsageError(
            f"unknown GPU {gpu!r}", fix="use one of: " + gpu_choices(), id="unknown_gpu"
        ) from exc
    if profile.key != text and text.startswith("gfx"):
        return profile.gfx_version, None
    return profile.gfx_version, profile.key


def _select_features(
    available: Iterable[str], wanted: Iterable[str] | None, default: list[str], what: str
) -> list[str]:
    names = list(available)
    if wanted is None:
        return default
    chosen = list(dict.fromkeys(wanted))
    unknown = [f for f in chosen if f not in names]
    if unknown:
        raise UsageError(
            f"{what} has no feature {', '.join(unknown)}",
            fix="available: " + (", ".join(names) or "none"),
            id="unknown_feature",
        )
    return chosen


@dataclass
class _Parts:
    """What one match's branch (recipe, legacy, generic) contributes to the config."""

    layers: list[Layer]
    warnings: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    image: str | None = None
    precision: str | None = None
    context: int | None = None
    variant: str | None = None


def amd_config(
    match: Match,
    gpu: str,
    *,
    variant: str | None = None,
    features: Iterable[str] | None = None,
    modes: dict[str, str] | None = None,
    overrides: GpuOverrides | None = None,
    model_config: Mapping[str, Any] | None = None,
    strategies: Mapping[str, Any] | None = None,
) -> AmdConfig:
    """Merge every layer for ``match`` on ``gpu`` (a gfx target or a profile name).

    ``variant`` picks a recipe variant (default: the match's); ``features`` replaces the
    default feature set (recipes: all but opt-in; legacy/generic: all they have); ``modes``
    picks a mode of a single-select feature (``{"spec_decoding": "mtp"}``), else upstream's
    default for the variant and GPU. ``model_config``: the model's ``config.json`` when
    known; a model outside the catalog takes its family's parsers and remote-code need
    from it (``catalog.families``). ``strategies``: upstream's strategy definitions
    (``Catalog.strategies``); the recipe's default single-node strategy adds its flags
    (``single_node_tep``: ``--enable-expert-parallel``) and its ``strategy_overrides``.
    """
    overrides = overrides or load_gpu_overrides()
    gfx, profile = resolve_gpu(gpu, overrides)
    cfg: GpuConfig = overrides.config(gfx)
    hw = cfg.hardware_id(profile)
    parts = _Parts([Layer(f"gpu env_defaults ({gfx})", [], cfg.env)])
    if match.recipe is not None:
        _recipe_parts(parts, match, gfx, hw, variant, features, modes, strategies)
    elif match.legacy is not None:
        legacy = match.legacy
        parts.layers.append(Layer("legacy model", list(legacy.args), dict(legacy.env)))
        feats = legacy.features
        parts.features = _select_features(feats, features, list(feats), legacy.model_id)
        parts.layers.extend(Layer(f"feature {name}", feats[name], {}) for name in parts.features)
        parts.precision = legacy.precision
        parts.context = legacy.context_length
    else:
        _generic_parts(parts, match, features, model_config)

    ids = [match.model_id]
    if match.recipe is not None:
        ids.append(match.recipe.model_id)
    removals: list[ArgRemoval] = []
    for over in cfg.overrides_for(*ids):
        parts.layers.append(
            Layer(f"gpu model_override {over.match!r} ({gfx})", list(over.args), over.env)
        )
        removals.extend(over.remove_args)
    args, env, sources = fold(parts.layers, removals)

    precision = parts.precision
    status = cfg.precision.status(precision) if precision else UNKNOWN
    if status == UNSUPPORTED:
        parts.warnings.append(f"{precision} weights are not supported on {gfx}")
    return AmdConfig(
        gpu=gpu,
        gfx=gfx,
        hardware_id=hw,
        model_id=match.model_id,
        match=match.kind,
        variant=parts.variant,
        precision=precision,
        precision_status=status,
        features=parts.features,
        args=args,
        env=env,
        env_sources=sources,
        layers=parts.layers,
        image=parts.image,
        min_vllm_version=required_vllm(match),
        context_length=parts.context,
        warnings=parts.warnings,
    )


def fold(
    layers: Iterable[Layer], removals: Iterable[ArgRemoval] = ()
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Apply ``layers`` lowest first, each the same way: its args follow the ones before
    (the last occurrence of each flag wins, as a shell would, then ``removals`` apply) and
    its env replaces theirs per key. Returns the args, the env and each variable's layer."""
    tokens: list[str] = []
    env: dict[str, str] = {}
    sources: dict[str, str] = {}
    for layer in layers:
        tokens.extend(layer.args)
        for key, value in layer.env.items():
            env[key] = value
            sources[key] = layer.name
    args = vllm_args.dedupe(tokens)
    for removal in removals:
        args = vllm_args.remove(args, removal.flag, removal.value_prefix)
    return args, env, sources


def _doc_layer(name: str, doc: Mapping[str, Any], args_key: str, env_key: str) -> Layer:
    """A layer from a strategy document (or one of its overrides), as plain strings."""
    return Layer(
        name,
        [str(a) for a in doc.get(args_key) or []],
        {str(k): str(v) for k, v in (doc.get(env_key) or {}).items()},
    )


def _recipe_parts(
    parts: _Parts,
    match: Match,
    gfx: str,
    hw: str | None,
    variant: str | None,
    features: Iterable[str] | None,
    modes: dict[str, str] | None,
    strategies: Mapping[str, Any] | None,
) -> None:
    """A recipe's layers (base, variant, its GPU override, the strategy, the AMD
    overrides, the features) and what it pins (image, precision, context)."""
    recipe = match.recipe
    assert recipe is not None
    variant_key = variant or match.variant_key or recipe.default_variant.key
    if variant_key not in recipe.variants and recipe.variants:
        raise UsageError(
            f"{recipe.model_id} has no variant {variant_key!r}",
            fix="available: " + ", ".join(recipe.variants),
            id="unknown_variant",
        )
    var = recipe.variants.get(variant_key) or recipe.default_variant
    parts.variant = var.key
    parts.layers.append(Layer("recipe base_args/base_env", recipe.base_args, recipe.base_env))
    parts.layers.append(Layer(f"variant {var.key}", var.extra_args, var.extra_env))
    exact = var.exact_override(hw)
    if exact is not None:
        name = f"variant {var.key} hardware_overrides.{hw}"
        parts.layers.append(Layer(name, exact.extra_args, exact.extra_env))
    parts.layers.extend(_strategy_layers(recipe, hw, strategies))
    if recipe.amd is not None:
        amd = recipe.amd
        parts.layers.append(Layer("recipe hardware_overrides.amd", amd.extra_args, amd.extra_env))
    var_amd = var.amd_override()
    if var_amd is not None:
        name = f"variant {var.key} hardware_overrides.amd"
        parts.layers.append(Layer(name, var_amd.extra_args, var_amd.extra_env))
    parts.features = _select_features(
        recipe.features, features, recipe.default_features(hw, var.key), recipe.model_id
    )
    for name in parts.features:
        picked = (modes or {}).get(name)
        feature = recipe.features[name]
        if picked is not None and picked not in feature.modes:
            raise UsageError(
                f"feature {name} of {recipe.model_id} has no mode {picked!r}",
                fix="available: " + (", ".join(feature.modes) or "none (not a modal feature)"),
                id="unknown_feature_mode",
            )
        feat_args, feat_env = feature.resolve(var, hw, picked)
        parts.layers.append(Layer(f"feature {name}", feat_args, feat_env))
    parts.image = recipe.amd_image(var.key, hw)
    parts.precision = var.precision if match.kind != "base_model" else None
    parts.context = recipe.context_length
    if recipe.hardware_status(hw) == "unsupported":
        parts.warnings.append(f"the recipe marks {hw} as unsupported for {recipe.model_id}")
    if not var.supports_hardware(hw):
        parts.warnings.append(
            f"variant {var.key} lists only {', '.join(var.supported_hardware or [])}"
        )
    if recipe.is_omni:
        parts.warnings.append("this recipe is for vLLM-Omni (generation), not `vllm serve`")
    if hw is None and recipe.amd is not None:
        parts.warnings.append(
            f"upstream AMD overrides are validated on {'/'.join(products(UPSTREAM_HARDWARE))},"
            f" not {gfx}"
        )


def _strategy_layers(
    recipe: Any, hw: str | None, strategies: Mapping[str, Any] | None
) -> list[Layer]:
    """The recipe's default single-node strategy: its flags, then the recipe's overrides
    of it (and their AMD and per-GPU hardware overrides)."""
    strategy = default_strategy(recipe)
    layers: list[Layer] = []
    doc = (strategies or {}).get(strategy)
    if isinstance(doc, dict):
        layers.append(_doc_layer(f"strategy {strategy}", doc, "vllm_args", "env"))
    over = recipe.strategy_overrides.get(strategy)
    if not isinstance(over, dict):
        return layers
    layers.append(_doc_layer(f"strategy_overrides.{strategy}", over, "extra_args", "extra_env"))
    hw_over = over.get("hardware_overrides")
    hw_over = hw_over if isinstance(hw_over, dict) else {}
    for key in ("amd", hw):
        entry = hw_over.get(key) if key else None
        if isinstance(entry, dict):
            name = f"strategy_overrides.{strategy}.hardware_overrides.{key}"
            layers.append(_doc_layer(name, entry, "extra_args", "extra_env"))
    return layers


def _generic_parts(
    parts: _Parts,
    match: Match,
    features: Iterable[str] | None,
    model_config: Mapping[str, Any] | None,
) -> None:
    """A model outside the catalog: its family's launch (``catalog.families``)."""
    from instinct_serve.catalog.families import generic_launch

    generic = generic_launch(match.model_id, model_config)
    parts.layers.append(Layer("generic", list(generic.args), {}))
    parts.features = _select_features(
        generic.features, features, list(generic.features), match.model_id
    )
    parts.layers.extend(
        Layer(f"feature {name}", generic.features[name], {}) for name in parts.features
    )
    if model_config is None:
        parts.warnings.append(
            f"{match.model_id} is outside the catalog and its config could not be read: "
            "no remote code is trusted and the parsers follow its name; pass "
            "`-- --trust-remote-code` if it ships custom code"
        )


# Flags the planner decides for the launch (TP from the fit and the objective, the port, the
# context the KV room holds): a difference there is a decision with its own reason in the
# plan, not a difference of configuration.
PLANNER_FLAGS = frozenset(
    {
        "--port",
        "--host",
        "--tensor-parallel-size",
        "-tp",
        "--distributed-executor-backend",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--enable-auto-tool-choice",
        "--served-model-name",
    }
)


def compare_with_rendered(
    args: Iterable[str],
    env: dict[str, str],
    rendered_argv: Iterable[str],
    rendered_env: dict[str, str],
    *,
    own_env: Iterable[str] = (),
) -> list[str]:
    """The differences that change behaviour between our args/env and upstream's rendering,
    both ways: a flag or variable only one side sets, or sets to another value.

    Flags the planner decides (``PLANNER_FLAGS``) and variables our own per-gfx data sets
    (``own_env``: each has its reason in the plan) are left out; ``vllm serve MODEL`` at the
    head of upstream's argv is skipped.
    """
    from instinct_serve.vllm_args import units

    theirs = list(rendered_argv)
    if theirs[:2] == ["vllm", "serve"]:
        theirs = theirs[3:]

    def flags(argv: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        for unit in units(argv):
            if unit.name is not None and unit.name not in PLANNER_FLAGS:
                found[unit.name] = unit.value or ""
        return found

    ours_f, theirs_f = flags(list(args)), flags(theirs)
    diffs: list[str] = []
    for name, want in theirs_f.items():
        have = ours_f.get(name)
        if have is None:
            diffs.append(f"upstream sets {name}{' ' + want if want else ''}; we do not")
        elif want != have:
            diffs.append(f"{name}: upstream {want!r}, ours {have!r}")
    for name, have in ours_f.items():
        if name not in theirs_f:
            diffs.append(f"we set {name}{' ' + have if have else ''}; upstream does not")
    ours_only = set(own_env)
    for key, value in rendered_env.items():
        if key not in env:
            diffs.append(f"upstream sets {key}={value}; we do not")
        elif env[key] != value:
            diffs.append(f"{key}: upstream {value!r}, ours {env[key]!r}")
    for key, value in env.items():
        if key not in rendered_env and key not in ours_only:
            diffs.append(f"we set {key}={value}; upstream does not")
    return diffs
