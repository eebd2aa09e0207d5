"""Reading upstream recipe YAML: one file at a time, never aborting the whole corpus.

A malformed recipe is skipped with a reason that names the file; the other recipes load.
YAML is read with the safe loader (the C one when PyYAML has libyaml: ~6x faster), dates
become ISO strings (YAML 1.1 turns ``2026-04-22`` into a ``date``), and a file whose tree is
absurdly large (an alias bomb, a runaway generator) is refused rather than expanded.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from instinct_serve.catalog.recipe import recipe_env_problem

MAX_RECIPE_BYTES = 1 << 20  # the largest upstream recipe is ~60 KB
MAX_NODES = 200_000  # scalar + container nodes after alias expansion
MAX_DEPTH = 64  # upstream recipes nest ~8 deep; YAML aliases can even build cycles


class RecipeFileError(ValueError):
    """Why one recipe file could not be used (the message names no file; callers do)."""


@dataclass(frozen=True)
class ParsedRecipe:
    """A validated recipe: its normalised JSON and where it came from."""

    source_path: str
    data: dict[str, Any]

    @property
    def model_id(self) -> str:
        model_id: str = self.data["model"]["model_id"]
        return model_id


@dataclass(frozen=True)
class Skipped:
    """A recipe file that was left out, and why."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass
class ParseResult:
    recipes: dict[str, ParsedRecipe] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    strategies: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> strategy
    _lower: dict[str, str] = field(default_factory=dict, repr=False)

    def add(self, item: ParsedRecipe | Skipped) -> None:
        """Keep the first recipe for a model id; a later duplicate is skipped, named."""
        if isinstance(item, Skipped):
            self.skipped.append(item)
            return
        key = item.model_id.lower()
        if key in self._lower:
            existing = self.recipes[self._lower[key]]
            self.skipped.append(
                Skipped(
                    item.source_path,
                    f"duplicate model_id {item.model_id} (already defined by "
                    f"{existing.source_path})",
                )
            )
            return
        self._lower[key] = item.model_id
        self.recipes[item.model_id] = item


def _loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """Parse YAML safely; raise RecipeFileError with the parser's own position message."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()
        detail = " ".join(line.strip() for line in first[:4]) if first else type(exc).__name__
        raise RecipeFileError(f"invalid YAML: {detail}") from None
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        # The C loader raises these for some malformed timestamps and numbers.
        raise RecipeFileError(f"invalid YAML: {exc}") from None


def normalize(obj: Any, budget: list[int] | None = None, depth: int = 0) -> Any:
    """JSON-ready data: dates as ISO strings, keys as strings; refuse what JSON cannot hold
    (and trees that are too large, too deep or recursive, which YAML aliases can build)."""
    if budget is None:
        budget = [MAX_NODES]
    budget[0] -= 1
    if budget[0] < 0:
        raise RecipeFileError(f"recipe is too large (more than {MAX_NODES} YAML nodes)")
    if depth > MAX_DEPTH:
        raise RecipeFileError(f"recipe nests deeper than {MAX_DEPTH} levels (or is recursive)")
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise RecipeFileError(f"non-finite number {obj!r}")
        return obj
    if isinstance(obj, _dt.datetime | _dt.date):
        return obj.isoformat()
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            if isinstance(key, _dt.date):
                key = key.isoformat()
            elif not isinstance(key, str | int | float | bool) and key is not None:
                raise RecipeFileError(f"unsupported mapping key of type {type(key).__name__}")
            out[str(key)] = normalize(value, budget, depth + 1)
        return out
    if isinstance(obj, list | tuple):
        return [normalize(v, budget, depth + 1) for v in obj]
    raise RecipeFileError(f"unsupported YAML value of type {type(obj).__name__}")


def _first_error(exc: Exception) -> str:
    """One line out of a pydantic ValidationError: where, and what is wrong."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        items = errors()
        if items:
            err = items[0]
            loc = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
            more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
            return f"{loc}: {err.get('msg', 'invalid')}{more}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def validate_data(data: Any) -> dict[str, Any]:
    """Validate already-loaded recipe data (YAML tree or API JSON) into normalised JSON."""
    from pydantic import ValidationError

    from instinct_serve.catalog.schema import validate_recipe

    data = normalize(data)
    if not isinstance(data, dict):
        raise RecipeFileError(f"a recipe must be a mapping, not {type(data).__name__}")
    try:
        return validate_recipe(data)
    except ValidationError as exc:
        raise RecipeFileError(_first_error(exc)) from None
    except RecursionError:
        raise RecipeFileError("recipe nesting is too deep") from None


def parse_recipe_text(text: str) -> dict[str, Any]:
    """One recipe file's text to validated, normalised JSON; RecipeFileError otherwise."""
    if len(text) > MAX_RECIPE_BYTES:
        raise RecipeFileError(f"file is larger than {MAX_RECIPE_BYTES} bytes")
    return validate_data(load_yaml(text))


def parse_recipe_file(path: Path, source_path: str) -> ParsedRecipe | Skipped:
    """Read and validate one file; a problem becomes a ``Skipped`` naming the file."""
    try:
        if path.stat().st_size > MAX_RECIPE_BYTES:
            raise RecipeFileError(f"file is larger than {MAX_RECIPE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return Skipped(source_path, "not UTF-8 text")
    except OSError as exc:
        return Skipped(source_path, f"cannot read: {exc.strerror or exc}")
    except RecipeFileError as exc:
        return Skipped(source_path, str(exc))
    try:
        return ParsedRecipe(source_path, parse_recipe_text(text))
    except RecipeFileError as exc:
        return Skipped(source_path, str(exc))


def recipe_files(root: Path) -> list[tuple[Path, str]]:
    """Every ``models/**/*.yaml|yml`` under a recipes checkout, sorted (stable output)."""
    models = root / "models"
    found = [p for p in models.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()]
    return [(p, p.relative_to(root).as_posix()) for p in sorted(found)]


def parse_corpus(root: Path) -> ParseResult:
    """Parse a whole recipes checkout; RecipeFileError only if it has no ``models/`` at all."""
    if not (root / "models").is_dir():
        raise RecipeFileError(f"{root} has no models/ directory: not a recipes checkout")
    result = ParseResult()
    for path, rel in recipe_files(root):
        result.add(parse_recipe_file(path, rel))
    result.strategies = parse_strategies(root)
    return result


def parse_strategies(root: Path) -> dict[str, dict[str, Any]]:
    """``strategies/*.yaml`` of a recipes checkout (name -> its vllm_args, env, parallel flag,
    deploy type, hardware match); a malformed file is left out."""
    found: dict[str, dict[str, Any]] = {}
    folder = root / "strategies"
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.yaml")):
        try:
            data = normalize(load_yaml(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, RecipeFileError):
            continue
        if (
            isinstance(data, dict)
            and isinstance(data.get("name"), str)
            and recipe_env_problem(data) is None  # a bad variable name is never rendered
        ):
            found[data["name"]] = data
    return found
