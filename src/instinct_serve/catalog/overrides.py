"""Our reviewed AMD data: ``data/gpu_overrides.json`` and ``data/blacklist.json``.

Both files are validated against ``catalog.schema`` (pydantic) by the test suite and by the
``instinct recipes`` commands. On the planning hot path they are read into the small frozen
NamedTuples below without pydantic (that import alone would cost more than ``plan``'s whole
start-up budget); a damaged installed file still fails with a clear error, not a traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, NamedTuple

from instinct_serve.catalog.recipe import env_problem
from instinct_serve.errors import InstinctError, UsageError

GPU_OVERRIDES_FILE = "gpu_overrides.json"
BLACKLIST_FILE = "blacklist.json"

# precision statuses, in the order a planner prefers them
NATIVE, EMULATED, UNSUPPORTED, UNKNOWN = "native", "emulated", "unsupported", "unknown"


def data_text(name: str) -> str:
    """A shipped data file's text (next to the package; importlib.resources for zip installs)."""
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", name)
    try:
        with open(here, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        from importlib import resources

        return resources.files("instinct_serve.data").joinpath(name).read_text(encoding="utf-8")


def _damaged(name: str, exc: Exception) -> InstinctError:
    return InstinctError(
        f"the shipped data file {name} is damaged ({type(exc).__name__}: {exc})",
        fix="reinstall instinct-serve (pip install --force-reinstall instinct-serve)",
        id="data_file_damaged",
    )


# ------------------------------------------------------------------------ gpu overrides


class DockerFlag(NamedTuple):
    argv: tuple[str, ...]
    reason: str
    reference: str


class EnvDefault(NamedTuple):
    value: str
    reason: str
    reference: str


class ArgRemoval(NamedTuple):
    flag: str
    value_prefix: str | None = None


class ModelOverride(NamedTuple):
    """Env/args forced for models whose id starts with ``match`` (``*``: every model)."""

    match: str
    env: dict[str, str]
    args: tuple[str, ...]
    remove_args: tuple[ArgRemoval, ...]
    reason: str
    reference: str

    def matches(self, model_ids: Iterable[str]) -> bool:
        if self.match == "*":
            return True
        prefix = self.match.lower()
        return any(mid.lower().startswith(prefix) for mid in model_ids if mid)

    def to_dict(self) -> dict[str, Any]:
        return {
            "match": self.match,
            "env": self.env,
            "args": list(self.args),
            "remove_args": [
                {"flag": r.flag, "value_prefix": r.value_prefix} for r in self.remove_args
            ],
            "reason": self.reason,
            "reference": self.reference,
        }


class Workaround(NamedTuple):
    id: str
    symptom: str
    fix: str
    reference: str
    status: str | None = None


class PrecisionSupport(NamedTuple):
    native: frozenset[str]
    emulated: frozenset[str]
    unsupported: frozenset[str]
    aliases: dict[str, str]
    notes: str

    def status(self, precision: str | None) -> str:
        """``native``/``emulated``/``unsupported``/``unknown`` for a recipe precision name."""
        if not precision:
            return UNKNOWN
        name = precision.strip().lower()
        name = self.aliases.get(name, name)
        if name in self.native:
            return NATIVE
        if name in self.emulated:
            return EMULATED
        if name in self.unsupported:
            return UNSUPPORTED
        return UNKNOWN

    def to_dict(self) -> dict[str, Any]:
        return {
            "native": sorted(self.native),
            "emulated": sorted(self.emulated),
            "unsupported": sorted(self.unsupported),
            "aliases": self.aliases,
            "notes": self.notes,
        }


class GpuConfig(NamedTuple):
    """Everything we know about one gfx target."""

    gfx: str
    family: str
    profiles: tuple[str, ...]
    recipe_hardware: dict[str, str | None]  # our profile (or "default") → upstream hw id
    aiter: bool
    env_defaults: dict[str, EnvDefault]
    precision: PrecisionSupport
    model_overrides: tuple[ModelOverride, ...]
    workarounds: tuple[Workaround, ...]

    @property
    def env(self) -> dict[str, str]:
        """The default environment of this gfx (lowest precedence of all layers)."""
        return {k: v.value for k, v in self.env_defaults.items()}

    def overrides_for(self, *model_ids: str) -> list[ModelOverride]:
        """Model overrides matching any of the ids (the served checkpoint, its recipe)."""
        return [o for o in self.model_overrides if o.matches(model_ids)]

    def hardware_id(self, profile: str | None = None) -> str | None:
        """The upstream recipes hardware id (``mi300x``...) for a profile of this gfx."""
        if profile and profile in self.recipe_hardware:
            return self.recipe_hardware[profile]
        return self.recipe_hardware.get("default")

    def to_dict(self) -> dict[str, Any]:
        return {
            "gfx": self.gfx,
            "family": self.family,
            "profiles": list(self.profiles),
            "aiter": self.aiter,
            "env_defaults": self.env,
            "precision": self.precision.to_dict(),
            "model_overrides": [o.to_dict() for o in self.model_overrides],
            "workarounds": [w._asdict() for w in self.workarounds],
        }


class LegacyModel(NamedTuple):
    """A useful model the upstream recipes do not cover, with what ``plan`` needs."""

    model_id: str
    title: str
    tasks: tuple[str, ...]
    architecture: str
    parameter_count: str
    active_parameters: str | None
    context_length: int
    precision: str
    min_vllm_version: str
    tool_call_parser: str | None
    reasoning_parser: str | None
    args: tuple[str, ...]
    env: dict[str, str]
    reason: str
    reference: str

    @property
    def features(self) -> dict[str, list[str]]:
        """The same feature names recipes use, so a planner treats both alike."""
        feats: dict[str, list[str]] = {}
        if self.tool_call_parser:
            feats["tool_calling"] = [
                "--enable-auto-tool-choice",
                "--tool-call-parser",
                self.tool_call_parser,
            ]
        if self.reasoning_parser:
            feats["reasoning"] = ["--reasoning-parser", self.reasoning_parser]
        return feats

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "title": self.title,
            "tasks": list(self.tasks),
            "architecture": self.architecture,
            "parameter_count": self.parameter_count,
            "active_parameters": self.active_parameters,
            "context_length": self.context_length,
            "precision": self.precision,
            "min_vllm_version": self.min_vllm_version,
            "tool_call_parser": self.tool_call_parser,
            "reasoning_parser": self.reasoning_parser,
            "args": list(self.args),
            "env": self.env,
            "features": self.features,
            "reason": self.reason,
            "reference": self.reference,
        }


class GpuOverrides:
    """The whole ``gpu_overrides.json``: docker flags, per-gfx configs, legacy models."""

    __slots__ = ("_legacy_index", "docker_flags", "gpu_configs", "legacy_models")

    def __init__(
        self,
        docker_flags: tuple[DockerFlag, ...],
        gpu_configs: dict[str, GpuConfig],
        legacy_models: dict[str, LegacyModel],
    ) -> None:
        self.docker_flags = docker_flags
        self.gpu_configs = gpu_configs
        self.legacy_models = legacy_models
        self._legacy_index = {m.lower(): m for m in legacy_models}

    def docker_argv(self) -> list[str]:
        """The flags every Instinct container needs, as argv tokens."""
        return [tok for flag in self.docker_flags for tok in flag.argv]

    def config(self, gfx: str) -> GpuConfig:
        key = gfx.strip().lower()
        if key not in self.gpu_configs:
            raise UsageError(
                f"no AMD configuration for {gfx!r}",
                fix="use one of: " + ", ".join(self.gpu_configs),
                id="unknown_gfx",
            )
        return self.gpu_configs[key]

    def legacy(self, model_id: str) -> LegacyModel | None:
        key = self._legacy_index.get(model_id.strip().lower())
        return self.legacy_models[key] if key else None


def _tuple_str(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of strings")
    return tuple(value)


def _dict_str(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError("expected a mapping of strings")
    return dict(value)


def _env(value: Any) -> dict[str, str]:
    """An environment map of the data file, every name and value checked (``env_problem``):
    a bad one makes the file damaged, it never reaches a command line."""
    env = _dict_str(value)
    for name, val in env.items():
        problem = env_problem(name, val)
        if problem:
            raise TypeError(problem)
    return env


def gpu_overrides_from_data(data: dict[str, Any]) -> GpuOverrides:
    """Build the runtime view (raises KeyError/TypeError on a damaged file)."""
    flags = tuple(
        DockerFlag(_tuple_str(f["argv"]), str(f["reason"]), str(f["reference"]))
        for f in data["docker_flags"]
    )
    configs: dict[str, GpuConfig] = {}
    for gfx, cfg in data["gpu_configs"].items():
        prec = cfg["precision"]
        _env({k: v["value"] for k, v in cfg["env_defaults"].items()})
        configs[gfx] = GpuConfig(
            gfx=gfx,
            family=str(cfg["family"]),
            profiles=_tuple_str(cfg["profiles"]),
            recipe_hardware=dict(cfg["recipe_hardware"]),
            aiter=bool(cfg["aiter"]),
            env_defaults={
                k: EnvDefault(str(v["value"]), str(v["reason"]), str(v["reference"]))
                for k, v in cfg["env_defaults"].items()
            },
            precision=PrecisionSupport(
                native=frozenset(_tuple_str(prec["native"])),
                emulated=frozenset(_tuple_str(prec.get("emulated", []))),
                unsupported=frozenset(_tuple_str(prec.get("unsupported", []))),
                aliases=_dict_str(prec.get("aliases", {})),
                notes=str(prec.get("notes", "")),
            ),
            model_overrides=tuple(
                ModelOverride(
                    match=str(o["match"]),
                    env=_env(o.get("env", {})),
                    args=_tuple_str(o.get("args", [])),
                    remove_args=tuple(
                        ArgRemoval(str(r["flag"]), r.get("value_prefix"))
                        for r in o.get("remove_args", [])
                    ),
                    reason=str(o["reason"]),
                    reference=str(o["reference"]),
                )
                for o in cfg.get("model_overrides", [])
            ),
            workarounds=tuple(
                Workaround(
                    str(w["id"]),
                    str(w["symptom"]),
                    str(w["fix"]),
                    str(w["reference"]),
                    w.get("status"),
                )
                for w in cfg.get("workarounds", [])
            ),
        )
    legacy: dict[str, LegacyModel] = {}
    for mid, entry in data["legacy_models"].items():
        legacy[mid] = LegacyModel(
            model_id=mid,
            title=str(entry["title"]),
            tasks=_tuple_str(entry["tasks"]),
            architecture=str(entry["architecture"]),
            parameter_count=str(entry["parameter_count"]),
            active_parameters=entry.get("active_parameters"),
            context_length=int(entry["context_length"]),
            precision=str(entry["precision"]),
            min_vllm_version=str(entry["min_vllm_version"]),
            tool_call_parser=entry.get("tool_call_parser"),
            reasoning_parser=entry.get("reasoning_parser"),
            args=_tuple_str(entry.get("args", [])),
            env=_env(entry.get("env", {})),
            reason=str(entry["reason"]),
            reference=str(entry["reference"]),
        )
    return GpuOverrides(flags, configs, legacy)


_GPU_OVERRIDES: GpuOverrides | None = None


def load_gpu_overrides(*, validate: bool = False) -> GpuOverrides:
    """The shipped GPU overrides; ``validate=True`` also checks them with the pydantic schema."""
    global _GPU_OVERRIDES
    if _GPU_OVERRIDES is not None and not validate:
        return _GPU_OVERRIDES
    try:
        data = json.loads(data_text(GPU_OVERRIDES_FILE))
        if validate:
            from instinct_serve.catalog.schema import validate_gpu_overrides

            validate_gpu_overrides(data)
        result = gpu_overrides_from_data(data)
    except InstinctError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _damaged(GPU_OVERRIDES_FILE, exc) from exc
    _GPU_OVERRIDES = result
    return result


# ---------------------------------------------------------------------------- blacklist


class BlacklistEntry(NamedTuple):
    """Why a model cannot be served as an LLM endpoint here, and what to serve instead."""

    key: str  # the listed id or prefix
    category: str
    category_description: str
    reason: str
    alternative: str
    reference: str
    by_prefix: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "listed_as": self.key,
            "by_prefix": self.by_prefix,
            "category": self.category,
            "category_description": self.category_description,
            "reason": self.reason,
            "alternative": self.alternative,
            "reference": self.reference,
        }


class Blacklist:
    """Listed ids (case-insensitive) and id prefixes of models that are not LLM endpoints."""

    __slots__ = ("entries", "prefixes")

    def __init__(
        self, entries: dict[str, BlacklistEntry], prefixes: tuple[BlacklistEntry, ...]
    ) -> None:
        self.entries = entries  # lower-case id → entry
        self.prefixes = prefixes

    def get(self, model_id: str | None) -> BlacklistEntry | None:
        if not model_id:
            return None
        key = model_id.strip().lower()
        if key in self.entries:
            return self.entries[key]
        for entry in self.prefixes:
            if key.startswith(entry.key.lower()):
                return entry
        return None

    def __len__(self) -> int:
        return len(self.entries) + len(self.prefixes)


def blacklist_from_data(data: dict[str, Any]) -> Blacklist:
    categories = {k: str(v["description"]) for k, v in data["categories"].items()}

    def entry(key: str, raw: dict[str, Any], by_prefix: bool) -> BlacklistEntry:
        cat = str(raw["category"])
        return BlacklistEntry(
            key=key,
            category=cat,
            category_description=categories[cat],
            reason=str(raw["reason"]),
            alternative=str(raw["alternative"]),
            reference=str(raw["reference"]),
            by_prefix=by_prefix,
        )

    entries = {k.lower(): entry(k, v, False) for k, v in data["models"].items()}
    prefixes = tuple(entry(k, v, True) for k, v in data.get("prefixes", {}).items())
    return Blacklist(entries, prefixes)


_BLACKLIST: Blacklist | None = None


def load_blacklist(*, validate: bool = False) -> Blacklist:
    """The shipped blacklist; ``validate=True`` also checks it with the pydantic schema."""
    global _BLACKLIST
    if _BLACKLIST is not None and not validate:
        return _BLACKLIST
    try:
        data = json.loads(data_text(BLACKLIST_FILE))
        if validate:
            from instinct_serve.catalog.schema import validate_blacklist

            validate_blacklist(data)
        result = blacklist_from_data(data)
    except InstinctError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _damaged(BLACKLIST_FILE, exc) from exc
    _BLACKLIST = result
    return result
