"""Pydantic schemas: the upstream recipe format as it really is, and our two data files.

Used where data *enters* the product (``recipes sync``/``import``, the snapshot build, the
``instinct recipes`` commands, tests), never on the planning hot path: importing pydantic
costs ~120 ms, more than the whole ``plan`` budget. Recipes are validated once when a cache
is written; afterwards ``catalog.recipe.Recipe`` reads the stored, already-normalised JSON.

Recipe models keep unknown keys (``extra="allow"``): upstream adds fields often, and a new
key must never make a recipe unusable. Known keys are typed so that everything the planner
reads is of the shape it expects: args are lists of strings, env values are strings (YAML
``1``/``true`` become ``"1"``/``"true"``), and an empty YAML value (``strategy_overrides:``)
becomes an empty container.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
)

from instinct_serve.catalog.recipe import env_problem, recipe_env_problem

# ---------------------------------------------------------------------------- coercions


def _scalar_text(value: Any) -> str:
    """A YAML scalar as the text a shell would see (bools as ``true``/``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ValueError(f"expected a string, got {type(value).__name__}")


def _args(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"expected a list of arguments, got {type(value).__name__}")
    return [_scalar_text(v) for v in value]


def _env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of environment variables, got {type(value).__name__}")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"invalid environment variable name {key!r}")
        out[key] = _scalar_text(val)
    return _checked_env(out)


def _checked_env(env: dict[str, str]) -> dict[str, str]:
    """Names ``[A-Za-z_][A-Za-z0-9_]*``, values on one line without NUL (``env_problem``):
    a recipe or data file that breaks this is refused when it is read, never rendered."""
    for key, val in env.items():
        problem = env_problem(key, val)
        if problem:
            raise ValueError(problem)
    return env


def _opt_text(value: Any) -> str | None:
    return None if value is None else _scalar_text(value)


def _empty_dict(value: Any) -> Any:
    return {} if value is None else value


def _empty_list(value: Any) -> Any:
    return [] if value is None else value


Args = Annotated[list[str], BeforeValidator(_args)]
Env = Annotated[dict[str, str], BeforeValidator(_env)]
OptText = Annotated[str | None, BeforeValidator(_opt_text)]
StrList = Annotated[list[str], BeforeValidator(_empty_list)]

_MODEL_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


class _Open(BaseModel):
    """Unknown keys are kept (and written back), never an error."""

    model_config = ConfigDict(extra="allow")


# ----------------------------------------------------------------------------- recipes


class RecipeMeta(_Open):
    title: OptText = None
    slug: OptText = None
    provider: OptText = None
    description: OptText = None
    date_added: OptText = None
    date_updated: OptText = None
    difficulty: OptText = None
    tasks: StrList = Field(default_factory=list)
    hardware: Annotated[dict[str, str], BeforeValidator(_empty_dict)] = Field(default_factory=dict)
    related_recipes: StrList = Field(default_factory=list)


class RecipeModelSection(_Open):
    model_id: str
    min_vllm_version: OptText = None
    architecture: OptText = None
    parameter_count: OptText = None
    active_parameters: OptText = None
    # tokens; upstream writes 0 for "not stated"; at most --max-model-len's bound (2^26)
    context_length: int | None = Field(default=None, ge=0, le=1 << 26)
    base_args: Args = Field(default_factory=list)
    base_env: Env = Field(default_factory=dict)
    nightly_required: bool = False
    docker_image: str | dict[str, Any] | None = None

    @field_validator("model_id")
    @classmethod
    def _model_id(cls, value: str) -> str:
        value = value.strip()
        if not _MODEL_ID.match(value):
            raise ValueError(f"model_id {value!r} is not a Hugging Face id (org/name)")
        return value


def _opt_args(value: Any) -> list[str] | None:
    return None if value is None else _args(value)


def _opt_env(value: Any) -> dict[str, str] | None:
    return None if value is None else _env(value)


class FeatureHardwareOverride(_Open):
    """A feature's per-hardware replacement (``args``/``env`` replace, not extend)."""

    args: Annotated[list[str] | None, BeforeValidator(_opt_args)] = None
    env: Annotated[dict[str, str] | None, BeforeValidator(_opt_env)] = None


class FeatureMode(_Open):
    label: OptText = None
    description: OptText = None
    args: Args = Field(default_factory=list)
    env: Env = Field(default_factory=dict)
    variants: list[str] | None = None
    hardware: dict[str, str] | None = None
    hardware_overrides: Annotated[
        dict[str, FeatureHardwareOverride], BeforeValidator(_empty_dict)
    ] = Field(default_factory=dict)


class RecipeFeature(_Open):
    description: OptText = None
    args: Args = Field(default_factory=list)
    env: Env = Field(default_factory=dict)
    default_mode: OptText = None
    modes: dict[str, FeatureMode] | None = None
    hardware_overrides: Annotated[
        dict[str, FeatureHardwareOverride], BeforeValidator(_empty_dict)
    ] = Field(default_factory=dict)
    strategies: list[str] | None = None


class HardwareOverride(_Open):
    extra_args: Args = Field(default_factory=list)
    extra_env: Env = Field(default_factory=dict)
    docker_image: OptText = None


class RecipeVariant(_Open):
    precision: OptText = None
    model_id: OptText = None
    vram_minimum_gb: float | None = None
    description: OptText = None
    label: OptText = None
    extra_args: Args = Field(default_factory=list)
    extra_env: Env = Field(default_factory=dict)
    min_vllm_version: OptText = None
    docker_image: str | dict[str, Any] | None = None
    hardware_overrides: Annotated[dict[str, HardwareOverride], BeforeValidator(_empty_dict)] = (
        Field(default_factory=dict)
    )
    supported_hardware: list[str] | None = None
    tp: int | dict[str, int] | None = None
    default_modes: dict[str, str] | None = None


def _strategy_env(value: dict[str, Any]) -> dict[str, Any]:
    """``strategy_overrides.<s>.extra_env`` (and its hardware overrides') are untyped here
    (upstream's shape varies): their environment maps are checked all the same."""
    problem = recipe_env_problem(value)
    if problem:
        raise ValueError(problem)
    return value


class RecipeDoc(_Open):
    """One file of ``models/<org>/<repo>.yaml`` (or one recipe of the JSON API)."""

    meta: RecipeMeta = Field(default_factory=RecipeMeta)
    model: RecipeModelSection
    features: Annotated[dict[str, RecipeFeature], BeforeValidator(_empty_dict)] = Field(
        default_factory=dict
    )
    opt_in_features: StrList = Field(default_factory=list)
    variants: Annotated[dict[str, RecipeVariant], BeforeValidator(_empty_dict)] = Field(
        default_factory=dict
    )
    compatible_strategies: StrList = Field(default_factory=list)
    hardware_overrides: Annotated[dict[str, HardwareOverride], BeforeValidator(_empty_dict)] = (
        Field(default_factory=dict)
    )
    strategy_overrides: Annotated[
        dict[str, Any], BeforeValidator(_empty_dict), AfterValidator(_strategy_env)
    ] = Field(default_factory=dict)
    hardware_opt_in_features: Annotated[dict[str, list[str]], BeforeValidator(_empty_dict)] = Field(
        default_factory=dict
    )


# ------------------------------------------------------------------ gpu_overrides.json


class Sourced(BaseModel):
    """Every reviewed fact says why it is there and where it comes from."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=10)
    reference: str = Field(min_length=4)


class DockerFlag(Sourced):
    argv: list[str] = Field(min_length=1)


class EnvDefault(Sourced):
    value: str


class ArgRemoval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    flag: str = Field(pattern=r"^--?[\w.\-]+$")
    value_prefix: str | None = None


CheckedEnv = Annotated[dict[str, str], AfterValidator(_checked_env)]


class ModelOverride(Sourced):
    match: str = Field(min_length=1)
    env: CheckedEnv = Field(default_factory=dict)
    args: list[str] = Field(default_factory=list)
    remove_args: list[ArgRemoval] = Field(default_factory=list)


class Workaround(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]*$")
    symptom: str = Field(min_length=10)
    fix: str = Field(min_length=10)
    reference: str = Field(min_length=4)
    status: str | None = None


class PrecisionSupport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    native: list[str]
    emulated: list[str] = Field(default_factory=list)
    unsupported: list[str] = Field(default_factory=list)
    aliases: dict[str, str] = Field(default_factory=dict)
    notes: str = ""


class GpuConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    family: str
    profiles: list[str]
    recipe_hardware: dict[str, str | None]
    aiter: bool
    env_defaults: dict[str, EnvDefault]
    precision: PrecisionSupport

    @field_validator("env_defaults")
    @classmethod
    def _env_names(cls, value: dict[str, EnvDefault]) -> dict[str, EnvDefault]:
        _checked_env({k: v.value for k, v in value.items()})
        return value

    model_overrides: list[ModelOverride] = Field(default_factory=list)
    workarounds: list[Workaround] = Field(default_factory=list)


class LegacyModelDoc(Sourced):
    title: str
    tasks: list[str] = Field(min_length=1)
    architecture: str
    parameter_count: str
    active_parameters: str | None = None
    context_length: int = Field(gt=0)
    precision: str
    min_vllm_version: str
    tool_call_parser: str | None
    reasoning_parser: str | None = None
    args: list[str] = Field(default_factory=list)
    env: CheckedEnv = Field(default_factory=dict)


class GpuOverridesDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    about: str = Field(alias="_about")
    schema_version: int
    docker_flags: list[DockerFlag] = Field(min_length=1)
    gpu_configs: dict[str, GpuConfig]
    legacy_models: dict[str, LegacyModelDoc]

    @field_validator("gpu_configs")
    @classmethod
    def _gfx_keys(cls, value: dict[str, GpuConfig]) -> dict[str, GpuConfig]:
        for key in value:
            if not re.fullmatch(r"gfx[0-9a-f]{3,4}", key):
                raise ValueError(f"gpu_configs key {key!r} is not a gfx target")
        return value


# ---------------------------------------------------------------------- blacklist.json


class BlacklistCategory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = Field(min_length=10)


class BlacklistEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: str
    reason: str = Field(min_length=10)
    alternative: str = Field(pattern=_MODEL_ID.pattern)
    reference: str = Field(min_length=4)


class BlacklistDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    about: str = Field(alias="_about")
    schema_version: int
    categories: dict[str, BlacklistCategory]
    models: dict[str, BlacklistEntry]
    prefixes: dict[str, BlacklistEntry] = Field(default_factory=dict)


def validate_recipe(data: dict[str, Any]) -> dict[str, Any]:
    """Validate one recipe and return its normalised JSON form (unknown keys kept)."""
    doc = RecipeDoc.model_validate(data)
    dumped: dict[str, Any] = doc.model_dump(mode="json", exclude_unset=True)
    return dumped


def validate_gpu_overrides(data: Any) -> GpuOverridesDoc:
    doc = GpuOverridesDoc.model_validate(data)
    for gfx, cfg in doc.gpu_configs.items():
        for status in ("native", "emulated", "unsupported"):
            overlap = set(getattr(cfg.precision, status))
            for other in ("native", "emulated", "unsupported"):
                if other != status and overlap & set(getattr(cfg.precision, other)):
                    raise ValueError(f"{gfx}: a precision is both {status} and {other}")
    return doc


def validate_blacklist(data: Any) -> BlacklistDoc:
    doc = BlacklistDoc.model_validate(data)
    for key, entry in [*doc.models.items(), *doc.prefixes.items()]:
        if entry.category not in doc.categories:
            raise ValueError(f"blacklist entry {key!r}: unknown category {entry.category!r}")
    return doc


# --------------------------------------------------------------- validated_stacks.json

_URL = r"^https://github\.com/[\w.\-]+/[\w.\-]+/(issues|pull)/\d+$"
_VERSION = r"^\d+(\.\d+){0,3}$"
_GFX_RE = r"^gfx[0-9a-f]{3,4}$"


class StackRowDoc(BaseModel):
    """One row of the validated-stack table (``catalog.stacks`` says how it matches)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.\-]*$")
    verdict: str = Field(pattern=r"^(known_bad|known_good)$")
    plan: str | None = Field(default=None, pattern=r"^(refuse|warn|cite)$")
    image: str | None = None
    images: list[str] = Field(default_factory=list)
    vllm_min: str | None = Field(default=None, pattern=_VERSION)
    vllm_max: str | None = Field(default=None, pattern=_VERSION)
    rocm_min: str | None = Field(default=None, pattern=_VERSION)
    rocm_max: str | None = Field(default=None, pattern=_VERSION)
    gfx: list[Annotated[str, Field(pattern=_GFX_RE)]] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    feature: str = Field(min_length=3)
    when_env: dict[str, str] = Field(default_factory=dict)
    unless_env: CheckedEnv = Field(default_factory=dict)
    when_args: list[Annotated[str, Field(pattern=r"^--[\w\-]+$")]] = Field(default_factory=list)
    unless_args: list[Annotated[str, Field(pattern=r"^--[\w\-]+$")]] = Field(default_factory=list)
    symptom: str = Field(min_length=20)
    log_pattern: str | None = None
    fix: str
    fix_env: CheckedEnv = Field(default_factory=dict)
    fix_args: list[str] = Field(default_factory=list)
    source: str = Field(pattern=_URL)
    see_also: list[Annotated[str, Field(pattern=r"^https://")]] = Field(default_factory=list)
    verified: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}$")

    @field_validator("log_pattern")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value


class StacksDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    about: str = Field(alias="_about")
    schema_version: int = Field(ge=1, le=1)
    revision: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    rows: list[StackRowDoc] = Field(min_length=1)


def validate_stacks(data: Any) -> StacksDoc:
    """The table, checked: ids unique; a known_bad row says what a plan does and how to fix
    it; a known_good row names one image with a stated tag."""
    doc = StacksDoc.model_validate(data)
    seen: set[str] = set()
    for row in doc.rows:
        if row.id in seen:
            raise ValueError(f"validated stack {row.id!r} appears twice")
        seen.add(row.id)
        if row.verdict == "known_bad" and (row.plan is None or len(row.fix) < 10):
            raise ValueError(f"known_bad stack {row.id!r} needs 'plan' and a 'fix'")
        if row.verdict == "known_good" and (not row.image or ":" not in row.image):
            raise ValueError(f"known_good stack {row.id!r} needs an 'image' with a tag")
    return doc
