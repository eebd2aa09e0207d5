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
    layers: list[Layer] = [Layer(f"gpu env_defaults ({gfx})", [], cfg.env)]
    warnings: list[str] = []
    image: str | None = None
    precision: str | None = None
    context: int | None = None
    variant_key: str | None = None
    chosen: list[str]
    min_vllm = required_vllm(match)

    if match.recipe is not None:
        recipe = match.recipe
        variant_key = variant or match.variant_key or recipe.default_variant.key
        if variant_key not in recipe.variants and recipe.variants:
            raise UsageError(
                f"{recipe.model_id} has no variant {variant_key!r}",
                fix="available: " + ", ".join(recipe.variants),
                id="unknown_variant",
            )
        var = recipe.variants.get(variant_key) or recipe.default_variant
        variant_key = var.key
        layers.append(Layer("recipe base_args/base_env", recipe.base_args, recipe.base_env))
        layers.append(Layer(f"variant {var.key}", var.extra_args, var.extra_env))
        exact = var.exact_override(hw)
        if exact is not None:
            layers.append(
                Layer(
                    f"variant {var.key} hardware_overrides.{hw}", exact.extra_args, exact.extra_env
                )
            )
        strategy = default_strategy(recipe)
        doc = (strategies or {}).get(strategy)
        if isinstance(doc, dict):
            layers.append(
                Layer(
                    f"strategy {strategy}",
                    [str(a) for a in doc.get("vllm_args") or []],
                    {str(k): str(v) for k, v in (doc.get("env") or {}).items()},
                )
            )
        over = recipe.strategy_overrides.get(strategy)
        if isinstance(over, dict):
            layers.append(
                Layer(
                    f"strategy_overrides.{strategy}",
                    [str(a) for a in over.get("extra_args") or []],
                    {str(k): str(v) for k, v in (over.get("extra_env") or {}).items()},
                )
            )
            hw_over = over.get("hardware_overrides")
            hw_over = hw_over if isinstance(hw_over, dict) else {}
            for key in ("amd", hw):
                entry = hw_over.get(key) if key else None
                if isinstance(entry, dict):
                    layers.append(
                        Layer(
                            f"strategy_overrides.{strategy}.hardware_overrides.{key}",
                            [str(a) for a in entry.get("extra_args") or []],
                            {str(k): str(v) for k, v in (entry.get("extra_env") or {}).items()},
                        )
                    )
        if recipe.amd is not None:
            layers.append(
                Layer("recipe hardware_overrides.amd", recipe.amd.extra_args, recipe.amd.extra_env)
            )
        var_amd = var.amd_override()
        if var_amd is not None:
            layers.append(
                Layer(
                    f"variant {var.key} hardware_overrides.amd",
                    var_amd.extra_args,
                    var_amd.extra_env,
                )
            )
        chosen = _select_features(
            recipe.features, features, recipe.default_features(hw, var.key), recipe.model_id
        )
        for name in chosen:
            picked = (modes or {}).get(name)
            feature = recipe.features[name]
            if picked is not None and picked not in feature.modes:
                raise UsageError(
                    f"feature {name} of {recipe.model_id} has no mode {picked!r}",
                    fix="available: " + (", ".join(feature.modes) or "none (not a modal feature)"),
                    id="unknown_feature_mode",
                )
            feat_args, feat_env = feature.resolve(var, hw, picked)
            layers.append(Layer(f"feature {name}", feat_args, feat_env))
        image = recipe.amd_image(var.key, hw)
        precision = var.precision if match.kind != "base_model" else None
        context = recipe.context_length
        if recipe.hardware_status(hw) == "unsupported":
            warnings.append(f"the recipe marks {hw} as unsupported for {recipe.model_id}")
        if not var.supports_hardware(hw):
            warnings.append(
                f"variant {var.key} lists only {', '.join(var.supported_hardware or [])}"
            )
        if recipe.is_omni:
            warnings.append("this recipe is for vLLM-Omni (generation), not `vllm serve`")
        if hw is None and recipe.amd is not None:
            warnings.append(
                f"upstream AMD overrides are validated on {'/'.join(products(UPSTREAM_HARDWARE))},"
                f" not {gfx}"
            )
    elif match.legacy is not None:
        legacy = match.legacy
        layers.append(Layer("legacy model", list(legacy.args), dict(legacy.env)))
        feats = legacy.features
        chosen = _select_features(feats, features, list(feats), legacy.model_id)
        layers.extend(Layer(f"feature {name}", feats[name], {}) for name in chosen)
        precision = legacy.precision
        context = legacy.context_length
    else:
        from instinct_serve.catalog.families import generic_launch

        generic = generic_launch(match.model_id, model_config)
        layers.append(Layer("generic", list(generic.args), {}))
        chosen = _select_features(
            generic.features, features, list(generic.features), match.model_id
        )
        layers.extend(Layer(f"feature {name}", generic.features[name], {}) for name in chosen)
        if model_config is None:
            warnings.append(
                f"{match.model_id} is outside the catalog and its config could not be read: "
                "no remote code is trusted and the parsers follow its name; pass "
                "`-- --trust-remote-code` if it ships custom code"
            )

    ids = [match.model_id]
    if match.recipe is not None:
        ids.append(match.recipe.model_id)
    removals: list[ArgRemoval] = []
    for over in cfg.overrides_for(*ids):
        layers.append(
            Layer(f"gpu model_override {over.match!r} ({gfx})", list(over.args), over.env)
        )
        removals.extend(over.remove_args)

    args = vllm_args.dedupe(tok for layer in layers for tok in layer.args)
    for removal in removals:
        args = vllm_args.remove(args, removal.flag, removal.value_prefix)
    env: dict[str, str] = {}
    sources: dict[str, str] = {}
    for layer in layers:
        for key, value in layer.env.items():
            env[key] = value
            sources[key] = layer.name

    status = cfg.precision.status(precision) if precision else UNKNOWN
    if status == UNSUPPORTED:
        warnings.append(f"{precision} weights are not supported on {gfx}")
    return AmdConfig(
        gpu=gpu,
        gfx=gfx,
        hardware_id=hw,
        model_id=match.model_id,
        match=match.kind,
        variant=variant_key,
        precision=precision,
        precision_status=status,
        features=chosen,
        args=args,
        env=env,
        env_sources=sources,
        layers=layers,
        image=image,
        min_vllm_version=min_vllm,
        context_length=context,
        warnings=warnings,
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
