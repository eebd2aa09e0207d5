"""Typed, read-only views over one stored recipe (no pydantic: this is the planning hot path).

Records are ``NamedTuple``s (a dataclass costs ~1 ms to define, a NamedTuple ~0.1 ms, and
start-up time is a product requirement): call ``.to_dict()`` for JSON.

The JSON these classes read was validated by ``catalog.schema`` when the cache or snapshot
was written, so the accessors can trust shapes (args are ``list[str]``, env values ``str``)
and stay cheap: a ``Recipe`` is a thin wrapper over its dict, built only for the recipe a
command actually asks for.

Hardware-keyed maps follow upstream's command builder (``src/lib/command-synthesis.js`` of
vllm-project/recipes): an exact GPU id (``mi300x``, ``mi325x``, ``mi355x``) wins over the
generation/brand key (both ``amd`` for Instinct), which wins over ``default``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from instinct_serve.names import ENV_NAME_RULE, is_env_name

AMD_KEYS = ("amd",)  # generation and brand of every Instinct profile in upstream's taxonomy

# Environment variables that recipes and the GPU data set on a launch: a shell-safe name
# (``names.is_env_name``) and a one-line value.
MAX_ENV_VALUE = 4096
# Where recipe data holds environment maps: a key ending a path in these names.
ENV_KEYS = ("env", "extra_env", "base_env")


def env_problem(name: Any, value: Any) -> str | None:
    """Why ``name=value`` cannot be set on a launch (None: it can). Values are text (YAML
    numbers and booleans were turned into text when the recipe was read) on one line."""
    if not is_env_name(name):
        return f"environment variable name {str(name)[:60]!r} is not {ENV_NAME_RULE}"
    if not isinstance(value, str):
        return f"environment variable {name} has a value that is not text"
    if len(value) > MAX_ENV_VALUE:
        return f"environment variable {name} has a value longer than {MAX_ENV_VALUE}"
    if any(c in value for c in "\0\n\r"):
        return f"environment variable {name} has a value with a NUL or a line break"
    return None


def env_maps(data: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(where, value) of every environment map in a recipe's data (``env``, ``extra_env``,
    ``base_env`` at any depth: variants, hardware and strategy overrides, features, modes)."""
    if isinstance(data, dict):
        for key, value in data.items():
            where = f"{path}.{key}" if path else str(key)
            if key in ENV_KEYS:
                yield where, value
            else:
                yield from env_maps(value, where)
    elif isinstance(data, list):
        for item in data:
            yield from env_maps(item, path)


def recipe_env_problem(data: Any) -> str | None:
    """The first environment problem of a recipe's data, naming where it is (None: none).
    The schema refuses such a recipe when it is read (it is skipped with this reason)."""
    for where, mapping in env_maps(data):
        if mapping is None:
            continue
        if not isinstance(mapping, dict):
            return f"{where}: not a mapping of environment variables"
        for name, value in mapping.items():
            problem = env_problem(name, value)
            if problem:
                return f"{where}: {problem}"
    return None


def _str_list(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _str_dict(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _env_dict(value: Any) -> dict[str, str]:
    """An environment map, without the entries ``env_problem`` refuses: a recipe stored
    before this check (a cache of an older version) never puts them on a command line."""
    if not isinstance(value, dict):
        return {}
    pairs = ((str(k), str(v)) for k, v in value.items() if isinstance(v, str | int | float))
    return {k: v for k, v in pairs if env_problem(k, v) is None}


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def clean_image(value: str | None) -> str | None:
    """An image reference as written, minus a stray ``docker pull`` (an upstream typo)."""
    if not value:
        return None
    text = value.strip()
    if text.startswith("docker pull "):
        text = text[len("docker pull ") :].strip()
    return text or None


def amd_image_of(value: Any) -> str | None:
    """The AMD image of a ``docker_image`` field: a bare string pins NVIDIA only upstream."""
    if isinstance(value, dict):
        amd = value.get("amd")
        return clean_image(amd) if isinstance(amd, str) else None
    return None


def hardware_keyed(mapping: Mapping[str, Any], hw_id: str | None) -> Any:
    """Upstream's lookup order for AMD: exact GPU id, then ``amd``, then ``default``."""
    for key in (hw_id, *AMD_KEYS, "default"):
        if key and key in mapping:
            return mapping[key]
    return None


class HardwareOverride(NamedTuple):
    """``hardware_overrides.<key>``: extra args and env (and rarely an image) for hardware."""

    key: str
    extra_args: list[str]
    extra_env: dict[str, str]
    image: str | None
    raw: dict[str, Any]

    @classmethod
    def from_data(cls, key: str, data: Any) -> HardwareOverride:
        data = data if isinstance(data, dict) else {}
        image = data.get("docker_image", data.get("image"))
        return cls(
            key=key,
            extra_args=_str_list(data.get("extra_args")),
            extra_env=_env_dict(data.get("extra_env")),
            image=clean_image(image) if isinstance(image, str) else None,
            raw=data,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "extra_args": self.extra_args,
            "extra_env": self.extra_env,
            "image": self.image,
        }


def _overrides(data: Any) -> dict[str, HardwareOverride]:
    if not isinstance(data, dict):
        return {}
    return {str(k): HardwareOverride.from_data(str(k), v) for k, v in data.items()}


class Variant(NamedTuple):
    """``variants.<key>``. The key is a label: ``precision`` says what the weights are."""

    key: str
    model_id: str  # the checkpoint served: the variant's own, else the recipe's
    precision: str | None
    vram_minimum_gb: float | None
    description: str | None
    label: str | None
    extra_args: list[str]
    extra_env: dict[str, str]
    min_vllm_version: str | None
    docker_image: Any
    hardware_overrides: dict[str, HardwareOverride]
    supported_hardware: list[str] | None
    tp: Any
    default_modes: dict[str, str]
    own_model_id: bool  # False when the variant serves the recipe's checkpoint

    @classmethod
    def from_data(cls, key: str, data: Any, recipe_model_id: str) -> Variant:
        data = data if isinstance(data, dict) else {}
        own = _opt_str(data.get("model_id"))
        vram = data.get("vram_minimum_gb")
        supported = data.get("supported_hardware")
        return cls(
            key=key,
            model_id=own or recipe_model_id,
            precision=_opt_str(data.get("precision")),
            vram_minimum_gb=float(vram) if isinstance(vram, int | float) else None,
            description=_opt_str(data.get("description")),
            label=_opt_str(data.get("label")),
            extra_args=_str_list(data.get("extra_args")),
            extra_env=_env_dict(data.get("extra_env")),
            min_vllm_version=_opt_str(data.get("min_vllm_version")),
            docker_image=data.get("docker_image"),
            hardware_overrides=_overrides(data.get("hardware_overrides")),
            supported_hardware=_str_list(supported) if isinstance(supported, list) else None,
            tp=data.get("tp"),
            default_modes=_str_dict(data.get("default_modes")),
            own_model_id=own is not None,
        )

    def supports_hardware(self, hw_id: str | None) -> bool:
        """``supported_hardware`` is an allowlist when present (upstream semantics)."""
        if not self.supported_hardware or hw_id is None:
            return True
        return hw_id in self.supported_hardware

    def amd_override(self) -> HardwareOverride | None:
        return self.hardware_overrides.get("amd")

    def exact_override(self, hw_id: str | None) -> HardwareOverride | None:
        return self.hardware_overrides.get(hw_id) if hw_id else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "model_id": self.model_id,
            "precision": self.precision,
            "vram_minimum_gb": self.vram_minimum_gb,
            "description": self.description,
            "extra_args": self.extra_args,
            "extra_env": self.extra_env,
            "min_vllm_version": self.min_vllm_version,
            "amd_image": amd_image_of(self.docker_image),
            "hardware_overrides": {k: v.to_dict() for k, v in self.hardware_overrides.items()},
            "supported_hardware": self.supported_hardware,
        }


class FeatureMode(NamedTuple):
    """One choice of a single-select feature (``spec_decoding`` → MTP / EAGLE3 / ...)."""

    key: str
    args: list[str]
    env: dict[str, str]
    variants: list[str] | None
    hardware: dict[str, str]
    hardware_overrides: dict[str, Any]
    description: str | None

    @classmethod
    def from_data(cls, key: str, data: Any) -> FeatureMode:
        data = data if isinstance(data, dict) else {}
        variants = data.get("variants")
        return cls(
            key=key,
            args=_str_list(data.get("args")),
            env=_env_dict(data.get("env")),
            variants=_str_list(variants) if isinstance(variants, list) and variants else None,
            hardware=_str_dict(data.get("hardware")),
            hardware_overrides=data.get("hardware_overrides") or {},
            description=_opt_str(data.get("description")),
        )

    def available(self, variant_key: str, hw_id: str | None) -> bool:
        if self.variants is not None and variant_key not in self.variants:
            return False
        return all(self.hardware.get(k) != "unsupported" for k in (*AMD_KEYS, hw_id) if k)


class Feature(NamedTuple):
    """``features.<name>``: args/env turned on by a feature (tool calling, reasoning, ...)."""

    name: str
    description: str | None
    args: list[str]
    env: dict[str, str]
    default_mode: str | None
    modes: dict[str, FeatureMode]
    hardware_overrides: dict[str, Any]
    strategies: list[str] | None

    @classmethod
    def from_data(cls, name: str, data: Any) -> Feature:
        data = data if isinstance(data, dict) else {}
        modes = data.get("modes") if isinstance(data.get("modes"), dict) else {}
        strategies = data.get("strategies")
        return cls(
            name=name,
            description=_opt_str(data.get("description")),
            args=_str_list(data.get("args")),
            env=_env_dict(data.get("env")),
            default_mode=_opt_str(data.get("default_mode")),
            modes={str(k): FeatureMode.from_data(str(k), v) for k, v in (modes or {}).items()},
            hardware_overrides=data.get("hardware_overrides") or {},
            strategies=_str_list(strategies) if isinstance(strategies, list) else None,
        )

    def mode_for(
        self, variant: Variant, hw_id: str | None, selected: str | None = None
    ) -> FeatureMode | None:
        """The active mode: the user's pick, the variant's default, the feature's, the first."""
        allowed = [k for k, m in self.modes.items() if m.available(variant.key, hw_id)]
        if not allowed:
            return None
        for choice in (selected, variant.default_modes.get(self.name), self.default_mode):
            if choice and choice in allowed:
                return self.modes[choice]
        return self.modes[allowed[0]]

    def resolve(
        self, variant: Variant, hw_id: str | None, selected_mode: str | None = None
    ) -> tuple[list[str], dict[str, str]]:
        """Args and env of this feature on AMD hardware ``hw_id`` (overrides replace)."""
        if self.modes:
            mode = self.mode_for(variant, hw_id, selected_mode)
            if mode is None:
                return [], {}
            over = hardware_keyed(mode.hardware_overrides, hw_id)
            over = over if isinstance(over, dict) else {}
            args = _str_list(over["args"]) if "args" in over else mode.args
            env = _env_dict(over["env"]) if "env" in over else mode.env
            return list(args), dict(env)
        over = hardware_keyed(self.hardware_overrides, hw_id)
        over = over if isinstance(over, dict) else {}
        args = _str_list(over["args"]) if isinstance(over.get("args"), list) else self.args
        env = _env_dict(over["env"]) if isinstance(over.get("env"), dict) else self.env
        return list(args), dict(env)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "description": self.description,
            "args": self.args,
            "env": self.env,
        }
        if self.modes:
            doc["default_mode"] = self.default_mode
            doc["modes"] = {
                k: {"args": m.args, "env": m.env, "variants": m.variants}
                for k, m in self.modes.items()
            }
        return doc


class Recipe:
    """One upstream recipe (``models/<org>/<repo>.yaml``), read-only."""

    __slots__ = ("_features", "_variants", "data", "source_path")

    def __init__(self, data: dict[str, Any], source_path: str | None = None) -> None:
        self.data = data
        self.source_path = source_path
        self._features: dict[str, Feature] | None = None
        self._variants: dict[str, Variant] | None = None

    def __repr__(self) -> str:
        return f"Recipe({self.model_id!r})"

    # ---- meta
    @property
    def meta(self) -> dict[str, Any]:
        meta = self.data.get("meta")
        return meta if isinstance(meta, dict) else {}

    @property
    def model(self) -> dict[str, Any]:
        model = self.data.get("model")
        return model if isinstance(model, dict) else {}

    @property
    def model_id(self) -> str:
        return str(self.model.get("model_id", ""))

    @property
    def title(self) -> str:
        return _opt_str(self.meta.get("title")) or self.model_id.split("/")[-1]

    @property
    def provider(self) -> str | None:
        return _opt_str(self.meta.get("provider"))

    @property
    def description(self) -> str | None:
        return _opt_str(self.meta.get("description"))

    @property
    def tasks(self) -> list[str]:
        return _str_list(self.meta.get("tasks"))

    @property
    def date_updated(self) -> str | None:
        return _opt_str(self.meta.get("date_updated"))

    def hardware_status(self, hw_id: str | None) -> str | None:
        """``meta.hardware.<id>``: ``verified``, ``unsupported`` or None (not stated)."""
        hardware = self.meta.get("hardware")
        if not hw_id or not isinstance(hardware, dict):
            return None
        return _opt_str(hardware.get(hw_id))

    # ---- model
    @property
    def architecture(self) -> str | None:
        return _opt_str(self.model.get("architecture"))

    @property
    def parameter_count(self) -> str | None:
        return _opt_str(self.model.get("parameter_count"))

    @property
    def active_parameters(self) -> str | None:
        return _opt_str(self.model.get("active_parameters"))

    @property
    def context_length(self) -> int | None:
        value = self.model.get("context_length")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def min_vllm_version(self) -> str | None:
        return _opt_str(self.model.get("min_vllm_version"))

    @property
    def nightly_required(self) -> bool:
        return self.model.get("nightly_required") is True

    @property
    def base_args(self) -> list[str]:
        return _str_list(self.model.get("base_args"))

    @property
    def base_env(self) -> dict[str, str]:
        return _env_dict(self.model.get("base_env"))

    @property
    def is_omni(self) -> bool:
        """Served through vLLM-Omni (generation models), not a plain ``vllm serve``."""
        return "omni" in self.tasks

    # ---- features
    @property
    def features(self) -> dict[str, Feature]:
        if self._features is None:
            raw = self.data.get("features")
            raw = raw if isinstance(raw, dict) else {}
            self._features = {str(k): Feature.from_data(str(k), v) for k, v in raw.items()}
        return self._features

    @property
    def opt_in_features(self) -> list[str]:
        return _str_list(self.data.get("opt_in_features"))

    def default_features(self, hw_id: str | None = None, variant_key: str = "default") -> list[str]:
        """Features on by default: all, minus opt-in ones, plus those a variant forces."""
        opt_in = set(self.opt_in_features)
        per_hw = self.data.get("hardware_opt_in_features")
        if hw_id and isinstance(per_hw, dict):
            opt_in.update(_str_list(per_hw.get(hw_id)))
        variant = self.variants.get(variant_key)
        forced = set(variant.default_modes) if variant else set()
        return [name for name in self.features if name in forced or name not in opt_in]

    # ---- variants
    @property
    def variants(self) -> dict[str, Variant]:
        if self._variants is None:
            raw = self.data.get("variants")
            raw = raw if isinstance(raw, dict) else {}
            mid = self.model_id
            self._variants = {str(k): Variant.from_data(str(k), v, mid) for k, v in raw.items()}
        return self._variants

    @property
    def default_variant(self) -> Variant:
        """``variants.default``, else the first one, else a bare variant of the recipe."""
        if "default" in self.variants:
            return self.variants["default"]
        if self.variants:
            return next(iter(self.variants.values()))
        return Variant.from_data("default", {}, self.model_id)

    def variant_for_model(self, model_id: str) -> Variant | None:
        """The variant whose own checkpoint is ``model_id`` (case-insensitive)."""
        key = model_id.lower()
        for variant in self.variants.values():
            if variant.own_model_id and variant.model_id.lower() == key:
                return variant
        return None

    # ---- hardware and strategies
    @property
    def hardware_overrides(self) -> dict[str, HardwareOverride]:
        return _overrides(self.data.get("hardware_overrides"))

    @property
    def amd(self) -> HardwareOverride | None:
        """``hardware_overrides.amd``: what upstream adds on every AMD Instinct GPU."""
        return self.hardware_overrides.get("amd")

    @property
    def compatible_strategies(self) -> list[str]:
        return _str_list(self.data.get("compatible_strategies"))

    @property
    def strategy_overrides(self) -> dict[str, Any]:
        value = self.data.get("strategy_overrides")
        return value if isinstance(value, dict) else {}

    def declared_tp(self, variant_key: str = "default", hw_id: str | None = None) -> int | None:
        """A tensor-parallel size the recipe states for single-node TP on this GPU, if any.

        Upstream order: the variant's ``tp`` (a number or a hardware-keyed map), then
        ``strategy_overrides.single_node_tp.tp``; None means "size it from memory".
        """
        variant = self.variants.get(variant_key) or self.default_variant
        sntp = self.strategy_overrides.get("single_node_tp")
        for raw in (variant.tp, sntp.get("tp") if isinstance(sntp, dict) else None):
            value = hardware_keyed(raw, hw_id) if isinstance(raw, dict) else raw
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    def amd_image(self, variant_key: str = "default", hw_id: str | None = None) -> str | None:
        """An image the recipe pins for AMD, most specific first; None means the default."""
        variant = self.variants.get(variant_key) or self.default_variant
        exact = variant.exact_override(hw_id)
        if exact and exact.image:
            return exact.image
        for over in (variant.amd_override(), self.amd):
            if over and over.image:
                return over.image
        return amd_image_of(variant.docker_image) or amd_image_of(self.model.get("docker_image"))

    def to_dict(self) -> dict[str, Any]:
        return self.data
