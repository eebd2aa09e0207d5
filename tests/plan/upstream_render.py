"""How vllm-project/recipes renders a recipe into a ``vllm serve`` command for AMD GPUs.

An independent Python re-implementation of the upstream rules, written from reading (not
copying) upstream's JavaScript, so the comparison harness (``bench/plan_vs_upstream.py``)
can measure our planner against what recipes.vllm.ai publishes:

* ``src/lib/command-synthesis.js`` (stored version 015a26cb): ``resolveCommand`` (argument
  and environment layering, ``dedupeArgs`` last-wins, ``formatArgv``),
  ``resolveSingleNodeTp`` (the TP rule), ``recommendStrategy``, ``computeDockerMeta`` (the
  image), the hardware gates (``isPrecisionCompatible``, ``isHardwareSupported``,
  ``isVariantHardwareSupported``, ``isStrategySupportedOnHardware``) and the
  ``strategy_min_gpus`` floors.
* ``scripts/build-recipes-api.mjs`` (stored version 1343d0f1): which (recipe, variant,
  hardware) combinations get a page (``renderAndWriteVariant``, variant promotion), and
  how the recommended rendering is chosen (``buildVariantRendering``: strategy, node count,
  ``defaultFeaturesFor``).

The recipe corpus is the snapshot at upstream commit 8959cf64 (``tests/data/vllm-recipes``).
The stored upstream code versions are the nearest the index holds, not necessarily that
exact commit; fields that only newer code reads (``arch:`` selectors, hardware-keyed
``vram_minimum_gb``, ``default_frontend``, profile ``minimum_tp``) do not occur in the
corpus, so they are not modelled.

Only what the JSON API publishes per GPU is produced: the *recommended* rendering (the
default strategy at its node count, default features on), not the per-strategy
alternatives. Pure: no network, no instinct_serve imports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import yaml

ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = ROOT / "tests" / "data" / "vllm-recipes"
UPSTREAM_COMMIT = "8959cf64189c71d36e11c6a30335f923f261b1f7"
UPSTREAM_CODE = {
    "src/lib/command-synthesis.js": "015a26cb06e8cd628a4b56433e05c34a1782b920",
    "scripts/build-recipes-api.mjs": "1343d0f18c3c2f19c507f7442546c83eb084714f",
}
DEFAULT_PARALLEL_FLAG = "--tensor-parallel-size"
MAX_NODES = 16  # command-synthesis.js MAX_NODES
# command-synthesis.js PRECISION_HARDWARE_CONSTRAINTS: NVFP4/FP4 need NVIDIA Blackwell unless
# the variant widens it with ``precision_hardware``.
PRECISION_CONSTRAINTS: dict[str, dict[str, str]] = {
    "nvfp4": {"brand": "NVIDIA", "generation": "blackwell"},
    "fp4": {"brand": "NVIDIA", "generation": "blackwell"},
}
AMD_IMAGE = "vllm/vllm-openai-rocm:latest"
AMD_NIGHTLY_IMAGE = "vllm/vllm-openai-rocm:nightly"
HEAD_ADDR = "$HEAD_IP"


# ----------------------------------------------------------------------- JS semantics


def _truthy(value: Any) -> bool:
    """JavaScript truthiness: objects and arrays are truthy even when empty."""
    if value is None or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def _or(*values: Any) -> Any:
    """JavaScript ``a || b || ...``."""
    for value in values:
        if _truthy(value):
            return value
    return values[-1] if values else None


def _get(obj: Any, *keys: Any) -> Any:
    """JavaScript optional chaining ``obj?.a?.b``."""
    for key in keys:
        if not isinstance(obj, dict) or key is None:
            return None
        obj = obj.get(key)
    return obj


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def js_str(value: Any) -> str:
    """``String(value)`` as JavaScript writes it (what the JSON API's consumers see)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# ----------------------------------------------------------------------- YAML and corpus


class _Yaml12Loader(yaml.SafeLoader):
    """js-yaml reads YAML 1.2: only true/false are booleans (not yes/no/on/off)."""


_Yaml12Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return yaml.load(fh, Loader=_Yaml12Loader)


@dataclass
class RecipeFile:
    hf_id: str  # from the path, models/<org>/<repo>.yaml (case as on disk)
    source_path: str
    data: dict[str, Any]


@dataclass
class Corpus:
    root: Path
    taxonomy: dict[str, Any]
    strategies: dict[str, dict[str, Any]]  # strategies/*.yaml plus kv_store/*.yaml, by name
    recipes: list[RecipeFile]

    @property
    def profiles(self) -> dict[str, dict[str, Any]]:
        return _dict(self.taxonomy.get("hardware_profiles"))

    def amd_hardware(self) -> list[str]:
        """The AMD profiles of the taxonomy, in taxonomy order (mi300x, mi325x, mi355x)."""
        return [k for k, p in self.profiles.items() if _dict(p).get("brand") == "AMD"]

    def recipe(self, model_id: str) -> RecipeFile | None:
        """A recipe by its path id or ``model.model_id`` (case-insensitive)."""
        want = model_id.strip().lower()
        for rf in self.recipes:
            mid = _get(rf.data, "model", "model_id")
            if rf.hf_id.lower() == want or (isinstance(mid, str) and mid.lower() == want):
                return rf
        return None


def _walk_yaml(folder: Path) -> list[Path]:
    """``findYamlFiles``: depth-first, each directory's entries in byte order (libuv's
    scandir sorts with strcmp), so pages overwritten by a later recipe land as upstream's."""
    out: list[Path] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name.encode()):
        if entry.is_dir():
            out += _walk_yaml(entry)
        elif entry.suffix in (".yaml", ".yml"):
            out.append(entry)
    return out


def load_corpus(root: Path = CORPUS_DIR) -> Corpus:
    """The recipes checkout: taxonomy, strategies (+ kv_store deployments), models/**."""
    taxonomy = _dict(load_yaml(root / "taxonomy.yaml"))
    strategies: dict[str, dict[str, Any]] = {}
    for folder in ("strategies", "kv_store"):
        for path in sorted((root / folder).glob("*.yaml")):
            spec = _dict(load_yaml(path))
            if isinstance(spec.get("name"), str):
                strategies[spec["name"]] = spec
    recipes: list[RecipeFile] = []
    models = root / "models"
    for path in _walk_yaml(models):
        rel = path.relative_to(models)
        if len(rel.parts) < 2:
            continue
        hf_id = f"{rel.parts[0]}/{path.stem}"
        recipes.append(RecipeFile(hf_id, f"models/{rel.as_posix()}", _dict(load_yaml(path))))
    return Corpus(root, taxonomy, strategies, recipes)


# ----------------------------------------------------------------------- hardware keys


def _generation(profile: Mapping[str, Any]) -> Any:
    gen = _or(profile.get("generation"), profile.get("gpu_generation"))
    return gen[0] if isinstance(gen, list) and gen else gen


def hardware_keyed(mapping: Any, profile: Mapping[str, Any], hw_id: str | None) -> Any:
    """A hardware-keyed map's value: exact GPU id > generation > brand (lowercase) >
    ``default`` (command-synthesis.js ``hardwareKeyedValue``)."""
    if not isinstance(mapping, dict):
        return None
    gen = _generation(profile)
    brand = profile.get("brand")
    keys = [hw_id, gen, brand.lower() if isinstance(brand, str) else None, "default"]
    for key in keys:
        if _truthy(key) and mapping.get(key) is not None:
            return mapping[key]
    return None


def _declared_tp(raw: Any, profile: Mapping[str, Any], hw_id: str | None) -> Any:
    return raw if _is_number(raw) else hardware_keyed(raw, profile, hw_id)


def gpu_count(profile: Mapping[str, Any]) -> int:
    count = profile.get("gpu_count")
    return int(count) if _is_number(count) else 1


def single_node_tp_rule(
    recipe: Mapping[str, Any],
    variant: Mapping[str, Any],
    profile: Mapping[str, Any],
    strategy: str = "single_node_tp",
    hw_id: str | None = None,
) -> tuple[int, str]:
    """TP of a single-node rendering and the rule that set it (``resolveSingleNodeTp``).

    Non-``single_node_tp`` strategies (TEP, DEP) take the whole node. For
    ``single_node_tp``: ``variant.tp`` (number or hardware map) > the recipe's
    ``strategy_overrides.single_node_tp.tp`` > auto-fit: 1 GPU when
    ``variant.vram_minimum_gb`` fits one GPU's share of the node, else the whole node (never
    2 or 4); no VRAM hint: the whole node. Declared values are capped at the node's GPU
    count (not for CPU profiles).

    Rules: ``strategy_full_node``, ``variant.tp``, ``strategy_overrides.tp``,
    ``autofit_one_gpu``, ``autofit_full_node``, ``no_vram_hint_full_node``.
    """
    count = gpu_count(profile)
    is_cpu = profile.get("generation") == "cpu"
    if strategy != "single_node_tp":
        return count, "strategy_full_node"
    for raw, rule in (
        (variant.get("tp"), "variant.tp"),
        (_get(recipe, "strategy_overrides", strategy, "tp"), "strategy_overrides.tp"),
    ):
        tp = _declared_tp(raw, profile, hw_id)
        if _is_number(tp) and tp > 0:
            return (int(tp) if is_cpu else int(min(tp, count))), rule
    vram = profile.get("vram_gb")
    per_gpu = vram / count if _is_number(vram) and count else 0
    need = variant.get("vram_minimum_gb") or 0
    if not need or not per_gpu or per_gpu <= 0:
        return count, "no_vram_hint_full_node"
    return (1, "autofit_one_gpu") if need <= per_gpu else (count, "autofit_full_node")


def single_node_tp(
    recipe: Mapping[str, Any],
    variant: Mapping[str, Any],
    profile: Mapping[str, Any],
    strategy: str = "single_node_tp",
    hw_id: str | None = None,
) -> int:
    """``resolveSingleNodeTp`` (see ``single_node_tp_rule``)."""
    return single_node_tp_rule(recipe, variant, profile, strategy, hw_id)[0]


# ----------------------------------------------------------------------- strategies


def effective_strategies(recipe: Mapping[str, Any]) -> list[str]:
    """``compatible_strategies`` plus strategies granted ``supported`` somewhere in
    ``strategy_hardware`` (``effectiveCompatibleStrategies``)."""
    listed = [s for s in _list(recipe.get("compatible_strategies")) if isinstance(s, str)]
    opt_ins = [
        s
        for s, gate in _dict(recipe.get("strategy_hardware")).items()
        if s not in listed and isinstance(gate, dict) and "supported" in gate.values()
    ]
    return listed + opt_ins


def strategy_supported(
    recipe: Mapping[str, Any], strategy: str, profile: Mapping[str, Any], hw_id: str
) -> bool:
    """``isStrategySupportedOnHardware``: a ``strategy_hardware`` gate for this GPU wins;
    else membership of ``compatible_strategies``."""
    gate = hardware_keyed(_get(recipe, "strategy_hardware", strategy), profile, hw_id)
    if gate is not None:
        return bool(gate != "unsupported")
    return strategy in _list(recipe.get("compatible_strategies"))


def recommend_strategy(recipe: Mapping[str, Any], node_count: int = 1) -> str:
    """``recommendStrategy``: the recipe's ``default_strategy`` (its multi-node sibling
    when more than one node), else TP first."""
    compatible = effective_strategies(recipe)
    explicit = recipe.get("default_strategy")
    if _truthy(explicit) and explicit in compatible:
        if node_count > 1 and str(explicit).startswith("single_node_"):
            sibling = "multi_node_" + str(explicit)[len("single_node_") :]
            if sibling in compatible:
                return sibling
        else:
            return str(explicit)
    if node_count > 1:
        for name in ("multi_node_tp", "multi_node_dep", "multi_node_tep"):
            if name in compatible:
                return name
    if "single_node_tp" in compatible:
        return "single_node_tp"
    return compatible[0] if compatible else "single_node_tp"


def _min_gpus_block(block: Any, key: str) -> Any:
    if block is None:
        return 0
    if _is_number(block):
        return block
    if not isinstance(block, dict):
        return 0
    for k in (key, f"multi_node_{key}", f"single_node_{key}"):
        if block.get(k) is not None:
            return block[k]
    return 0


def min_gpus(recipe: Mapping[str, Any], key: str, hw_id: str | None) -> float:
    """The recipe's GPU floor for a strategy (``minGpusForStrategy``)."""
    cfg = recipe.get("strategy_min_gpus")
    if cfg is None:
        return 0
    if _is_number(cfg):
        return float(cfg)
    if not isinstance(cfg, dict):
        return 0
    base = _min_gpus_block(cfg, key)
    exact = _min_gpus_block(cfg.get(hw_id), key) if hw_id else 0
    values = [v for v in (base, exact) if _is_number(v)]
    return float(max(values)) if values else 0


def nodes_for_strategy(
    recipe: Mapping[str, Any], key: str, gpus_per_node: int, hw_id: str | None
) -> int:
    return math.ceil(min_gpus(recipe, key, hw_id) / (gpus_per_node or 8)) or 1


def strategy_reachable(
    recipe: Mapping[str, Any], key: str, deploy_type: Any, gpus_per_node: int, hw_id: str
) -> bool:
    scales_out = deploy_type in ("multi_node", "pd_cluster")
    return (MAX_NODES if scales_out else 1) * (gpus_per_node or 8) >= min_gpus(recipe, key, hw_id)


# ----------------------------------------------------------------------- hardware gates


def _precision_constraint(variant: Mapping[str, Any]) -> dict[str, Any] | None:
    widened = variant.get("precision_hardware")
    if _truthy(widened):
        return _dict(widened)
    precision = variant.get("precision")
    return PRECISION_CONSTRAINTS.get(precision) if isinstance(precision, str) else None


def _matches(profile: Mapping[str, Any], constraint: Mapping[str, Any] | None) -> bool:
    if not constraint:
        return True
    if _truthy(constraint.get("brand")) and profile.get("brand") != constraint["brand"]:
        return False
    if _truthy(constraint.get("generation")):
        gen = _or(profile.get("generation"), profile.get("gpu_generation"))
        gens = gen if isinstance(gen, list) else [gen]
        if constraint["generation"] not in gens:
            return False
    return True


def hardware_refusal(
    recipe: Mapping[str, Any], variant: Mapping[str, Any], profile: Mapping[str, Any], hw_id: str
) -> str | None:
    """Why upstream gives this variant no page on this GPU (``listCompatibleHardware``),
    or None when it renders one."""
    constraint = _precision_constraint(variant)
    if not _matches(profile, constraint):
        assert constraint is not None
        want = " ".join(
            str(constraint[k]) for k in ("brand", "generation") if _truthy(constraint.get(k))
        )
        return f"precision {variant.get('precision')} needs {want} (PRECISION_HARDWARE_CONSTRAINTS)"
    if _get(recipe, "meta", "hardware", hw_id) == "unsupported":
        return f"the recipe marks meta.hardware.{hw_id}: unsupported"
    supported = variant.get("supported_hardware")
    if isinstance(supported, list) and supported and hw_id not in supported:
        return f"variant.supported_hardware does not list {hw_id}"
    return None


def default_hardware(
    profiles: Mapping[str, Mapping[str, Any]], variant: Mapping[str, Any], recipe: Mapping[str, Any]
) -> str:
    """The variant's landing GPU (``pickDefaultHardware``)."""
    constraint = _precision_constraint(variant)
    declared = _dict(_get(recipe, "meta", "hardware"))
    compatible = [
        (hw_id, p)
        for hw_id, p in profiles.items()
        if _matches(p, constraint)
        and _get(recipe, "meta", "hardware", hw_id) != "unsupported"
        and _variant_allows(variant, hw_id)
        and (not _truthy(p.get("restricted")) or hw_id in declared)
    ]
    ids = [hw_id for hw_id, _ in compatible]
    authored = _get(recipe, "meta", "default_hardware")
    if _truthy(authored) and authored in ids:
        return str(authored)
    if constraint and constraint.get("generation") == "blackwell":
        for hw_id in ("b200", "gb200"):
            if hw_id in ids:
                return hw_id
    if "h200" in ids:
        return "h200"
    order = {"NVIDIA": 0, "AMD": 1}
    compatible.sort(key=lambda item: (order.get(str(item[1].get("brand")), 9), item[0]))
    return compatible[0][0] if compatible else "h200"


def _variant_allows(variant: Mapping[str, Any], hw_id: str) -> bool:
    supported = variant.get("supported_hardware")
    return not isinstance(supported, list) or not supported or hw_id in supported


def _scalable(profile: Mapping[str, Any]) -> bool:
    return profile.get("scalable") is not False


def fits_single_node(profile: Mapping[str, Any], variant: Mapping[str, Any]) -> bool:
    vram, want = profile.get("vram_gb"), variant.get("vram_minimum_gb")
    node = vram if _is_number(vram) else 0
    need = want if _is_number(want) else 0
    if need <= 0 or node <= 0:
        return True
    return need <= node


# ----------------------------------------------------------------------- features


def default_features(recipe: Mapping[str, Any], hw_id: str, variant_key: str) -> list[str]:
    """Features on by default (``defaultFeaturesFor``): all − opt-in − this GPU's opt-ins,
    plus features a variant forces through ``default_modes``."""
    opt_in = set(_list(recipe.get("opt_in_features")))
    opt_in.update(_list(_get(recipe, "hardware_opt_in_features", hw_id)))
    forced = set(_dict(_get(recipe, "variants", variant_key, "default_modes")))
    return [f for f in _dict(recipe.get("features")) if f in forced or f not in opt_in]


def _mode_key(
    feature: Mapping[str, Any],
    feature_key: str,
    variant: Mapping[str, Any],
    variant_key: str,
    profile: Mapping[str, Any],
    hw_id: str,
) -> str | None:
    """``resolveModeKey`` with no user selection."""
    modes = feature.get("modes")
    if not isinstance(modes, dict):
        return None
    gen = _generation(profile)

    def allowed(mode: Any) -> bool:
        allow = _get(mode, "variants")
        if isinstance(allow, list) and allow and variant_key not in allow:
            return False
        hw = _get(mode, "hardware")
        if isinstance(hw, dict):
            if _truthy(gen) and hw.get(gen) == "unsupported":
                return False
            if hw.get(hw_id) == "unsupported":
                return False
        return True

    keys = [k for k, m in modes.items() if allowed(m)]
    if not keys:
        return None
    for candidate in (_get(variant, "default_modes", feature_key), feature.get("default_mode")):
        if _truthy(candidate) and candidate in keys:
            return str(candidate)
    return str(keys[0])


def _feature_parts(
    recipe: Mapping[str, Any],
    features: Iterable[str],
    strategy: str,
    variant: Mapping[str, Any],
    variant_key: str,
    profile: Mapping[str, Any],
    hw_id: str,
) -> Iterable[tuple[str, list[Any], dict[str, Any]]]:
    """(name, args, env) of each enabled feature, gated as upstream gates them."""
    for key in features:
        feat = _get(recipe, "features", key)
        if not _truthy(feat) or not isinstance(feat, dict):
            continue
        allow = feat.get("strategies")
        if isinstance(allow, list) and allow and strategy not in allow:
            continue
        if isinstance(feat.get("modes"), dict):
            mode_key = _mode_key(feat, key, variant, variant_key, profile, hw_id)
            mode = _get(feat, "modes", mode_key) if mode_key else None
            if _truthy(mode) and isinstance(mode, dict):
                ho = hardware_keyed(mode.get("hardware_overrides"), profile, hw_id)
                args = _get(ho, "args")
                env = _get(ho, "env")
                yield (
                    f"{key}.modes.{mode_key}",
                    _list(args if args is not None else mode.get("args")),
                    _dict(env if env is not None else mode.get("env")),
                )
            continue
        ho = hardware_keyed(feat.get("hardware_overrides"), profile, hw_id)
        args = _get(ho, "args")
        env = _get(ho, "env")
        yield (
            key,
            _list(args if args is not None else feat.get("args")),
            _dict(env if env is not None else feat.get("env")),
        )


# ----------------------------------------------------------------------- argv

Token = tuple[Any, str]  # (argv token, the upstream layer that wrote it)


def _dedupe_tokens(tokens: list[Token]) -> list[Token]:
    """``dedupeArgs`` on (token, source) pairs: ``--flag value`` units, the last occurrence
    of a flag wins (kept at its own position); positionals always stay. A token after a
    flag is its value unless it starts with ``-``."""
    units: list[tuple[str, Token, Token | None]] = []  # (kind, flag|positional, value)
    i = 0
    while i < len(tokens):
        cur = tokens[i]
        if isinstance(cur[0], str) and cur[0].startswith("-"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and not (isinstance(nxt[0], str) and nxt[0].startswith("-")):
                units.append(("flag", cur, nxt))
                i += 1
            else:
                units.append(("bare", cur, None))
        else:
            units.append(("pos", cur, None))
        i += 1
    seen: set[str] = set()
    keep = [False] * len(units)
    for j in range(len(units) - 1, -1, -1):
        kind, head, _ = units[j]
        if kind == "pos":
            keep[j] = True
        elif head[0] not in seen:
            seen.add(head[0])
            keep[j] = True
    out: list[Token] = []
    for j, (_kind, head, value) in enumerate(units):
        if keep[j]:
            out.append(head)
            if value is not None:
                out.append(value)
    return out


def dedupe_args(args: list[Any]) -> list[Any]:
    """``dedupeArgs`` on plain tokens."""
    return [tok for tok, _src in _dedupe_tokens([(a, "") for a in args])]


def format_argv(model_id: str, args: list[Any]) -> list[str]:
    """``formatArgv``: falsy tokens dropped (``filter(Boolean)``), deduped, stringified."""
    kept = dedupe_args([a for a in args if _truthy(a)])
    return ["vllm", "serve", model_id, *(js_str(a) for a in kept)]


def _format(model_id: str, tokens: list[Token]) -> tuple[list[str], dict[str, str]]:
    """argv (as ``formatArgv``) and the layer each flag's surviving occurrence came from."""
    kept = _dedupe_tokens([t for t in tokens if _truthy(t[0])])
    argv = ["vllm", "serve", model_id, *(js_str(tok) for tok, _src in kept)]
    sources = {
        js_str(tok): src for tok, src in kept if isinstance(tok, str) and tok.startswith("-")
    }
    return argv, sources


PARALLEL_SOURCE = "parallelism"


@dataclass
class Command:
    """One resolved command (``resolveCommand``'s single- or multi-node result)."""

    deploy_type: str
    argv: list[str]  # the head's argv on a multi-node deployment
    env: dict[str, str]
    worker_argv: list[str] | None = None
    tp_rule: str = ""
    arg_sources: dict[str, str] = field(default_factory=dict)  # flag -> upstream layer
    env_sources: dict[str, str] = field(default_factory=dict)  # variable -> upstream layer


def resolve_command(
    corpus: Corpus,
    recipe: Mapping[str, Any],
    variant_key: str,
    strategy_name: str,
    hw_id: str,
    features: Iterable[str],
    node_count: int = 1,
) -> Command:
    """``resolveCommand`` for single-node and multi-node strategies (PD and Mooncake are
    never the recommended rendering on the corpus, so they are not modelled)."""
    variants = _dict(recipe.get("variants"))
    vkey = variant_key if _truthy(variants.get(variant_key)) else "default"
    variant = _dict(variants.get(vkey))
    strategy = _dict(corpus.strategies.get(strategy_name))
    profile = _dict(corpus.profiles.get(hw_id))
    deploy_type = str(strategy.get("deploy_type") or "single_node")
    if deploy_type in ("pd_cluster", "kv_store_lb"):
        raise NotImplementedError(f"{deploy_type} renderings are not modelled")
    gen = _generation(profile)
    count = gpu_count(profile)
    total = count * max(1, node_count)
    is_nvidia = profile.get("brand") == "NVIDIA"
    tp, tp_rule = single_node_tp_rule(recipe, variant, profile, strategy_name, hw_id)
    model_id = str(_or(variant.get("model_id"), _get(recipe, "model", "model_id"), "unknown"))
    variant_exact = _get(variant, "hardware_overrides", hw_id)
    so = _get(recipe, "strategy_overrides", strategy_name)
    feature_parts = list(
        _feature_parts(recipe, features, strategy_name, variant, variant_key, profile, hw_id)
    )
    so_name = f"strategy_overrides.{strategy_name}"

    def by_gen(holder: Any) -> tuple[Any, str]:
        found = _get(holder, "hardware_overrides", gen)
        key = gen
        if not _truthy(found) and is_nvidia:
            found, key = _get(holder, "hardware_overrides", "nvidia"), "nvidia"
        return found, f"hardware_overrides.{key}"

    def tag(values: Iterable[Any], source: str) -> list[Token]:
        return [(v, source) for v in values]

    def build_args(role: str | None, rank: int = 1) -> list[Token]:
        mp_rank = max(1, rank) if role == "worker" else 0
        out: list[Token] = []
        out += tag(_list(_get(recipe, "model", "base_args")), "model.base_args")
        out += tag(_list(variant.get("extra_args")), f"variants.{vkey}.extra_args")
        out += tag(
            _list(_get(variant_exact, "extra_args")), f"variants.{vkey}.hardware_overrides.{hw_id}"
        )
        out += tag(_list(strategy.get("vllm_args")), f"strategies/{strategy_name}.yaml")
        flag = str(strategy.get("parallel_flag") or DEFAULT_PARALLEL_FLAG)
        multi = deploy_type == "multi_node" and node_count > 1
        par: list[Any] = []
        if multi and flag == "--data-parallel-size":
            so_gen, _ = by_gen(so)
            overrides = [
                *_list(_get(so, "vllm_args")),
                *_list(_get(so, "extra_args")),
                *_list(_get(so_gen, "extra_args")),
                *_list(_get(so, "hardware_overrides", hw_id, "extra_args")),
            ]
            at = max(
                (i for i, a in enumerate(overrides) if a == "--data-parallel-size-local"),
                default=-1,
            )
            dp_local = _js_number(overrides[at + 1]) if 0 <= at < len(overrides) - 1 else count
            par += ["--data-parallel-size", str(total), "--data-parallel-size-local", str(count)]
            par += ["--data-parallel-address", HEAD_ADDR]
            if role == "worker":
                par += ["--data-parallel-start-rank", js_str(mp_rank * dp_local)]
        elif multi and strategy.get("parallelism") == "tp_pp":
            par += [
                "--tensor-parallel-size",
                str(count),
                "--pipeline-parallel-size",
                str(node_count),
            ]
            par += ["--nnodes", str(node_count), "--node-rank", str(mp_rank)]
            par += ["--master-addr", HEAD_ADDR]
            par += ["--headless"] if mp_rank > 0 else []
        elif multi and strategy.get("parallelism") == "tp_dp":
            par += ["--tensor-parallel-size", str(count), "--data-parallel-size", str(node_count)]
            par += ["--data-parallel-size-local", "1", "--data-parallel-address", HEAD_ADDR]
            par += ["--data-parallel-start-rank", str(mp_rank)] if role == "worker" else []
        elif multi:
            par += ["--tensor-parallel-size", str(total)]
            par += ["--nnodes", str(node_count), "--node-rank", str(mp_rank)]
            par += ["--master-addr", HEAD_ADDR]
            par += ["--headless"] if mp_rank > 0 else []
        else:
            par += [flag, str(tp)]
        out += tag(par, PARALLEL_SOURCE)
        if _truthy(so):
            out += tag(_list(_get(so, "extra_args")), so_name)
            out += tag(_list(_get(so, "vllm_args")), so_name)
        strategy_ho, ho_key = by_gen(so)
        if _truthy(strategy_ho):
            out += tag(_list(_get(strategy_ho, "extra_args")), f"{so_name}.{ho_key}")
        else:
            recipe_ho, rkey = by_gen(recipe)
            out += tag(_list(_get(recipe_ho, "extra_args")), rkey)
            variant_ho, vho_key = by_gen(variant)
            out += tag(_list(_get(variant_ho, "extra_args")), f"variants.{vkey}.{vho_key}")
        out += tag(
            _list(_get(so, "hardware_overrides", hw_id, "extra_args")),
            f"{so_name}.hardware_overrides.{hw_id}",
        )
        for name, feat_args, _env in feature_parts:
            out += tag(feat_args, f"features.{name}")
        return out

    env: dict[str, Any] = {}
    env_sources: dict[str, str] = {}

    def put(values: Any, source: str) -> None:
        for key, value in _dict(values).items():
            env[str(key)] = value
            env_sources[str(key)] = source

    put(_get(recipe, "model", "base_env"), "model.base_env")
    put(variant.get("extra_env"), f"variants.{vkey}.extra_env")
    put(_get(variant_exact, "extra_env"), f"variants.{vkey}.hardware_overrides.{hw_id}")
    put(strategy.get("env"), f"strategies/{strategy_name}.yaml")
    if _truthy(so):
        put(_get(so, "env"), so_name)
        put(_get(so, "extra_env"), so_name)
    strategy_ho, ho_key = by_gen(so)
    if _truthy(strategy_ho):
        put(_get(strategy_ho, "extra_env"), f"{so_name}.{ho_key}")
    else:
        recipe_ho, rkey = by_gen(recipe)
        put(_get(recipe_ho, "extra_env"), rkey)
        variant_ho, vho_key = by_gen(variant)
        put(_get(variant_ho, "extra_env"), f"variants.{vkey}.{vho_key}")
    put(_get(so, "hardware_overrides", hw_id, "extra_env"), f"{so_name}.hardware_overrides.{hw_id}")
    for name, _args, feat_env in feature_parts:
        put(feat_env, f"features.{name}")
    env_str = {k: js_str(v) for k, v in env.items()}

    def rule(sources: dict[str, str], default: str) -> str:
        src = sources.get("--tensor-parallel-size")
        return f"args:{src}" if src and src != PARALLEL_SOURCE else default

    if deploy_type == "multi_node" and node_count > 1:
        argv, sources = _format(model_id, build_args("head"))
        worker, _ = _format(model_id, build_args("worker", 1))
        return Command(
            "multi_node", argv, env_str, worker, rule(sources, "multi_node"), sources, env_sources
        )
    argv, sources = _format(model_id, build_args(None))
    return Command(deploy_type, argv, env_str, None, rule(sources, tp_rule), sources, env_sources)


def _js_number(value: Any) -> float | int:
    """``Number(value)`` for the ``--data-parallel-size-local`` value."""
    if _is_number(value):
        return value
    try:
        number = float(str(value))
    except ValueError:
        return math.nan
    return int(number) if number.is_integer() else number


# ----------------------------------------------------------------------- docker image


def docker_image(
    recipe: Mapping[str, Any], variant: Mapping[str, Any], profile: Mapping[str, Any], hw_id: str
) -> str:
    """The image upstream puts in an AMD command (``computeDockerMeta``): an exact
    ``variant.hardware_overrides.<gpu>.docker_image`` > the variant's, then the model's
    ``docker_image`` (a brand-keyed map's ``amd`` value; a bare string pins NVIDIA only) >
    ``vllm/vllm-openai-rocm:nightly`` when ``model.nightly_required`` else ``:latest``."""
    if profile.get("brand") != "AMD":
        raise ValueError(f"{hw_id} is not an AMD profile")
    exact = _get(variant, "hardware_overrides", hw_id, "docker_image")
    if isinstance(exact, str):
        return exact
    for override in (variant.get("docker_image"), _get(recipe, "model", "docker_image")):
        if isinstance(override, dict) and any(
            b in override for b in ("nvidia", "amd", "tpu", "intel")
        ):
            value = override.get("amd")
            if isinstance(value, str):
                return value
    nightly = _get(recipe, "model", "nightly_required") is True
    return AMD_NIGHTLY_IMAGE if nightly else AMD_IMAGE


# ----------------------------------------------------------------------- renderings


@dataclass
class Rendering:
    """One per-GPU page of the JSON API: ``/{page}/hw/{hardware}.json``'s recommended
    command (on a multi-node strategy, ``argv`` is the head's)."""

    page: str  # the API id: the recipe's path id, or a promoted variant's model_id
    recipe: str  # the recipe's path id (models/<org>/<repo>.yaml)
    recipe_model_id: str  # the recipe's model.model_id (the catalog's key)
    source_path: str
    derived_from: str | None  # the parent recipe, for a promoted variant page
    hardware: str
    variant: str
    model_id: str  # the checkpoint served (argv[2])
    strategy: str
    deploy_type: str
    node_count: int
    gpu_count: int  # GPUs per node (the taxonomy's profile)
    node_vram_gb: float | None  # the taxonomy profile's vram_gb (the whole node)
    tp: int | None  # --tensor-parallel-size in argv (None when absent, e.g. DEP)
    dp: int | None  # --data-parallel-size in argv
    argv: list[str]
    env: dict[str, str]
    docker_image: str
    worker_argv: list[str] | None = None
    default_hardware: str = ""  # the variant's landing GPU (pickDefaultHardware)
    features: list[str] = field(default_factory=list)  # features on by default here
    tp_rule: str = ""  # which single-node TP rule applied (or multi_node)
    vram_minimum_gb: float | None = None  # the rendered variant's stated VRAM need
    arg_sources: dict[str, str] = field(default_factory=dict)  # flag -> upstream layer
    env_sources: dict[str, str] = field(default_factory=dict)  # variable -> upstream layer

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Rendering:
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})

    def api_entry(self) -> dict[str, Any]:
        """The per-GPU entry as ``gather.recipes_api._render`` keeps it (``amd_rendered``)."""
        return {
            "argv": list(self.argv),
            "env": dict(self.env),
            "variant": self.variant,
            "strategy": self.strategy,
            "deploy_type": self.deploy_type,
            "node_count": self.node_count,
            "docker_image": self.docker_image,
        }


@dataclass
class NotRendered:
    """An AMD GPU that upstream gives no page for a (recipe, variant), and why."""

    recipe: str
    variant: str
    model_id: str
    hardware: str
    reason: str
    page: str = ""  # the API page that has no file for this GPU

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _flag_int(argv: list[str], flag: str) -> int | None:
    value: int | None = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            try:
                value = int(argv[i + 1])
            except ValueError:
                value = None
    return value


def _render_on(
    corpus: Corpus,
    rf: RecipeFile,
    variant_key: str,
    hw_id: str,
) -> tuple[str, str, int, list[str], Command] | None:
    """``buildVariantRendering``'s recommended choice: (variant, strategy, nodes, features,
    command), or None when upstream renders nothing on this GPU."""
    recipe = rf.data
    variant = _dict(_get(recipe, "variants", variant_key))
    profile = _dict(corpus.profiles.get(hw_id))
    count = gpu_count(profile)
    scalable = _scalable(profile)
    if not scalable and not fits_single_node(profile, variant):
        fitting = [
            (k, v)
            for k, v in _dict(recipe.get("variants")).items()
            if _matches(profile, _precision_constraint(_dict(v)))
            and _variant_allows(_dict(v), hw_id)
            and fits_single_node(profile, _dict(v))
        ]
        if not fitting:
            return None
        fitting.sort(key=lambda kv: -(_dict(kv[1]).get("vram_minimum_gb") or 0))
        variant_key, variant = fitting[0][0], _dict(fitting[0][1])

    def deploy(s: str) -> Any:
        return _get(corpus.strategies, s, "deploy_type")

    kv_ids = [
        s for s, spec in corpus.strategies.items() if spec.get("deploy_type") == "kv_store_lb"
    ]
    compatible: list[str] = []
    for s in dict.fromkeys([*effective_strategies(recipe), *kv_ids]):
        if deploy(s) == "kv_store_lb":
            ok = (
                scalable
                and profile.get("brand") in ("NVIDIA", "AMD")
                and _get(recipe, "kv_cache_strategy_hardware", s, hw_id) != "unsupported"
            )
        else:
            ok = (
                strategy_supported(recipe, s, profile, hw_id)
                and strategy_reachable(recipe, s, deploy(s), count, hw_id)
                and (scalable or (not s.startswith("multi_node_") and s != "pd_cluster"))
            )
        if ok:
            compatible.append(s)

    def nodes_for(s: str) -> int:
        floor = 2 if deploy(s) == "multi_node" else 1
        return max(floor, nodes_for_strategy(recipe, s, count, hw_id))

    multi_ok = scalable and any(s.startswith("multi_node_") for s in compatible)
    base_nodes = 2 if not fits_single_node(profile, variant) and multi_ok else 1
    strategy = recommend_strategy(recipe, base_nodes)
    if strategy not in compatible:
        strategy = next(
            (s for s in compatible if deploy(s) != "kv_store_lb" and s != "pd_cluster"),
            next((s for s in compatible if deploy(s) != "kv_store_lb"), strategy),
        )
    nodes = max(base_nodes, nodes_for(strategy))
    features = default_features(recipe, hw_id, variant_key)
    command = resolve_command(corpus, recipe, variant_key, strategy, hw_id, features, nodes)
    return variant_key, strategy, nodes, features, command


def _is_omni(recipe: Mapping[str, Any]) -> bool:
    return "omni" in _list(_get(recipe, "meta", "tasks"))


def render_variant(
    corpus: Corpus, rf: RecipeFile, variant_key: str, page: str, hardware: Iterable[str]
) -> tuple[list[Rendering], list[NotRendered]]:
    """``renderAndWriteVariant`` restricted to ``hardware``: the variant's pages there, and
    the GPUs it gets none on (with upstream's reason)."""
    recipe = rf.data
    variant = _dict(_get(recipe, "variants", variant_key))
    model_id = str(_or(variant.get("model_id"), _get(recipe, "model", "model_id"), "unknown"))
    wanted = list(hardware)

    def skipped(reason: str) -> tuple[list[Rendering], list[NotRendered]]:
        return [], [NotRendered(rf.hf_id, variant_key, model_id, hw, reason, page) for hw in wanted]

    if not _truthy(_get(recipe, "variants", variant_key)):
        return skipped(f"the recipe has no '{variant_key}' variant")
    if _is_omni(recipe):
        return skipped(
            "an omni recipe (meta.tasks: omni): rendered by the omni builder, no API page"
        )
    profiles = corpus.profiles
    landing = default_hardware(profiles, variant, recipe)
    if _render_on(corpus, rf, variant_key, landing) is None:
        return skipped(f"nothing renders on its default hardware {landing}")
    out: list[Rendering] = []
    missing: list[NotRendered] = []
    for hw in wanted:
        profile = _dict(profiles.get(hw))
        reason = hardware_refusal(recipe, variant, profile, hw)
        if (
            reason is None
            and _truthy(profile.get("restricted"))
            and hw not in _dict(_get(recipe, "meta", "hardware"))
        ):
            reason = f"{hw} is a restricted profile the recipe does not declare"
        built = None if reason else _render_on(corpus, rf, variant_key, hw)
        if built is None:
            missing.append(
                NotRendered(rf.hf_id, variant_key, model_id, hw, reason or "not rendered", page)
            )
            continue
        used_variant, strategy, nodes, features, command = built
        used = _dict(_get(recipe, "variants", used_variant))
        out.append(
            Rendering(
                page=page,
                recipe=rf.hf_id,
                recipe_model_id=str(_get(recipe, "model", "model_id")),
                source_path=rf.source_path,
                derived_from=None if page == rf.hf_id else rf.hf_id,
                hardware=hw,
                variant=used_variant,
                model_id=command.argv[2],
                strategy=strategy,
                deploy_type=command.deploy_type,
                node_count=nodes,
                gpu_count=gpu_count(profile),
                node_vram_gb=profile.get("vram_gb"),
                tp=_flag_int(command.argv, "--tensor-parallel-size"),
                dp=_flag_int(command.argv, "--data-parallel-size"),
                argv=command.argv,
                env=command.env,
                docker_image=docker_image(recipe, used, profile, hw),
                worker_argv=command.worker_argv,
                default_hardware=landing,
                features=features,
                tp_rule=command.tp_rule,
                vram_minimum_gb=used.get("vram_minimum_gb"),
                arg_sources=command.arg_sources,
                env_sources=command.env_sources,
            )
        )
    return out, missing


def render_recipe(
    corpus: Corpus, rf: RecipeFile, hardware: Iterable[str] | None = None
) -> tuple[list[Rendering], list[NotRendered]]:
    """Every API page of one recipe on ``hardware`` (default: the AMD profiles): the parent
    page (the ``default`` variant) and each promoted variant page (a variant whose
    ``model_id`` is an HF id with no standalone recipe of that exact id). Two variants with
    one ``model_id`` write the same page: the later one replaces it (upstream clears the
    page's folder first), as on the site."""
    hw = list(hardware) if hardware is not None else corpus.amd_hardware()
    standalone = {r.hf_id for r in corpus.recipes}
    pages: dict[str, tuple[list[Rendering], list[NotRendered]]] = {}
    pages[rf.hf_id] = render_variant(corpus, rf, "default", rf.hf_id, hw)
    for key, variant in _dict(rf.data.get("variants")).items():
        mid = _get(variant, "model_id")
        if not isinstance(mid, str) or "/" not in mid or mid in standalone:
            continue
        # upstream clears the page's folder, then writes this variant's files
        pages[mid] = render_variant(corpus, rf, key, mid, hw)
    return (
        [r for rendered, _ in pages.values() for r in rendered],
        [m for _, skipped in pages.values() for m in skipped],
    )


def render_all(
    corpus: Corpus, hardware: Iterable[str] | None = None
) -> tuple[list[Rendering], list[NotRendered]]:
    """All pages of the corpus on ``hardware``, sorted by (page, hardware). A page written
    by two recipes keeps the later recipe's (upstream walks models/ in byte order)."""
    hw = list(hardware) if hardware is not None else corpus.amd_hardware()
    by_page: dict[str, tuple[list[Rendering], list[NotRendered]]] = {}
    for rf in corpus.recipes:
        rendered, skipped = render_recipe(corpus, rf, hw)
        for page in {r.page for r in rendered} | {m.page for m in skipped}:
            by_page[page] = (
                [r for r in rendered if r.page == page],
                [m for m in skipped if m.page == page],
            )
    renderings = [r for rendered, _ in by_page.values() for r in rendered]
    missing = [m for _, skipped in by_page.values() for m in skipped]
    renderings.sort(key=lambda r: (r.page, r.hardware))
    missing.sort(key=lambda m: (m.page, m.hardware))
    return renderings, missing


def amd_rendered(renderings: Iterable[Rendering]) -> dict[str, dict[str, dict[str, Any]]]:
    """The parents' pages in the recipes cache's ``amd_rendered`` shape, keyed by the
    recipe's ``model.model_id`` then GPU (what ``Catalog.rendered()`` reads after an API
    sync: promoted variant pages are not kept there)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in renderings:
        if r.derived_from is None:
            out.setdefault(r.recipe_model_id, {})[r.hardware] = r.api_entry()
    return out


def document(
    renderings: list[Rendering], missing: list[NotRendered], hardware: list[str]
) -> dict[str, Any]:
    """The vendored JSON document (deterministic: sorted lists, sorted keys when dumped)."""
    return {
        "source": {
            "repository": "https://github.com/vllm-project/recipes",
            "corpus_commit": UPSTREAM_COMMIT,
            "upstream_code": UPSTREAM_CODE,
            "renderer": "tests/plan/upstream_render.py",
            "generator": "scripts/render_upstream_amd.py",
        },
        "hardware": hardware,
        "rendering_count": len(renderings),
        "renderings": [r.to_dict() for r in renderings],
        "not_rendered": [m.to_dict() for m in missing],
    }


def load_document(path: Path) -> tuple[list[Rendering], list[NotRendered]]:
    import json

    doc = json.loads(path.read_text(encoding="utf-8"))
    return (
        [Rendering.from_dict(r) for r in doc["renderings"]],
        [NotRendered(**m) for m in doc["not_rendered"]],
    )
