"""``instinct recipes``: list, show, sync and import the model recipes.

``list``/``show`` read the synced cache (else the shipped snapshot) and validate our shipped
data files with their pydantic schema (these commands are not on the start-up hot path);
``sync`` refreshes the cache from git or the recipes JSON API plus Docker Hub; ``import``
reads an agent-skill ``recipes_cache.json``. Warnings (stale or corrupt cache) go to stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from instinct_serve.cli.common import (
    choice,
    emit,
    host_option,
    json_option,
    progress,
    warn,
)
from instinct_serve.hardware.profiles import UPSTREAM_HARDWARE, gpu_choices

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.catalog.store import Catalog

GPU_HELP = gpu_choices()


def _checked_catalog(as_json: bool) -> tuple[Catalog, list[str]]:
    """``catalog.store.checked_catalog``, its warnings also shown on stderr."""
    from instinct_serve.catalog.store import checked_catalog

    catalog, warnings = checked_catalog()
    for message in warnings:
        warn(message, as_json)
    return catalog, warnings


@click.group("recipes")
def recipes() -> None:
    """List, show and sync the model recipes (vllm-project/recipes + AMD overrides)."""


# ------------------------------------------------------------------------------- list


def _amd_summary(recipe: Any) -> str:
    verified = [hw for hw in UPSTREAM_HARDWARE if recipe.hardware_status(hw) == "verified"]
    if verified:
        return ", ".join(verified)
    return "overrides" if recipe.amd is not None else "-"


def _list_row(recipe: Any, blacklisted: str | None) -> dict[str, Any]:
    """One recipe of ``recipes list --json``."""
    from instinct_serve.catalog.documents import recipe_summary

    return {
        **recipe_summary(recipe),
        "variants": {k: v.precision for k, v in recipe.variants.items()},
        "amd": {
            "hardware": {
                hw: recipe.hardware_status(hw)
                for hw in UPSTREAM_HARDWARE
                if recipe.hardware_status(hw)
            },
            "has_overrides": recipe.amd is not None,
            "image": recipe.amd_image(),
        },
        "blacklisted": blacklisted,
    }


def _list_entry(row: dict[str, Any], amd: str) -> tuple[str, str, str, str, str]:
    """The human cells of one row: model, parameters, context, detail, note."""
    params = row["parameter_count"] or "?"
    if row["active_parameters"] and row["active_parameters"] != params:
        params += f" ({row['active_parameters']} active)"
    note = []
    if row["blacklisted"]:
        note.append(f"not an LLM: {row['blacklisted']}")
    if row["nightly_required"]:
        note.append("nightly vLLM")
    context = f"{row['context_length']:,}" if row["context_length"] else "?"
    precisions = ", ".join(sorted({p for p in row["variants"].values() if p}))
    detail = f"{', '.join(row['tasks'])}; {precisions or '?'}; AMD: {amd}"
    return row["model_id"], params, context, detail, "; ".join(note)


@recipes.command("list")
@click.option("--task", metavar="TASK", help="Only recipes with this task (text, multimodal, ...).")
@json_option
def list_cmd(task: str | None, as_json: bool) -> int:
    """List the recipes in the catalog (and our legacy models)."""
    from instinct_serve.catalog.overrides import load_blacklist, load_gpu_overrides

    catalog, _ = _checked_catalog(as_json)
    blacklist = load_blacklist()
    legacy = load_gpu_overrides().legacy_models
    rows: list[dict[str, Any]] = []
    for recipe in catalog.recipes():
        if task and task.lower() not in [t.lower() for t in recipe.tasks]:
            continue
        listed = blacklist.get(recipe.model_id)
        rows.append(_list_row(recipe, listed.category if listed else None))
    legacy_rows = [
        m.to_dict()
        for m in legacy.values()
        if not task or task.lower() in [t.lower() for t in m.tasks]
    ]
    doc = {
        "catalog": catalog.summary(),
        "count": len(rows),
        "models": rows,
        "legacy_models": legacy_rows,
        "warnings": catalog.warnings,
    }

    def entry(row: dict[str, Any]) -> tuple[str, str, str, str, str]:
        return _list_entry(row, _amd_summary(catalog.recipe(row["model_id"])))

    def human(con: Console) -> None:
        from rich.markup import escape

        from instinct_serve.cli.tables import Column, Rows
        from instinct_serve.units import plural

        title = f"{plural(len(rows), 'recipe')} ({catalog.source}, {catalog.fetched_at[:10]})"
        table = Rows(
            [
                Column("MODEL", key=True),
                Column("PARAMS"),
                Column("CONTEXT", right=True, drop=1),
                Column("TASKS; PRECISIONS; AMD", prose=True),
                Column("NOTE", drop=2),
            ],
            title,
        )
        for row in rows:
            table.add(*(escape(cell) for cell in entry(row)))
        table.print(con)
        if legacy_rows:
            old = Rows(
                [
                    Column("MODEL", key=True),
                    Column("PARAMS"),
                    Column("CONTEXT", right=True),
                    Column("TOOL PARSER", drop=1),
                    Column("REASONING PARSER", drop=2),
                ],
                f"{plural(len(legacy_rows), 'legacy model')} (instinct-serve's own entries)",
            )
            for m in legacy_rows:
                old.add(
                    escape(m["model_id"]),
                    escape(str(m["parameter_count"])),
                    f"{m['context_length']:,}",
                    escape(m["tool_call_parser"] or "-"),
                    escape(m["reasoning_parser"] or "-"),
                )
            old.print(con)
        con.print(f"default image: {catalog.docker_image or '(none)'}")

    emit(doc, as_json, human)
    return 0


# ------------------------------------------------------------------------------- show


@recipes.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("--gpu", metavar="GPU", help=f"Rank for this GPU: {GPU_HELP}.")
@click.option("--gpu-count", metavar="N", help="Number of GPUs (with --gpu).")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 100))
@host_option
@json_option
def search_cmd(
    query: tuple[str, ...],
    gpu: str | None,
    gpu_count: str | None,
    limit: int,
    host_spec: str | None,
    as_json: bool,
) -> int:
    """Which recipes QUERY means ("qwen3", "deepseek r1"), ranked for the GPUs: the words,
    then whether it fits, whether the recipe verified this GPU, and how often other
    recipes refer to it. Without --gpu the host's GPUs are detected (none: no fit column)."""
    from instinct_serve.catalog.search import search
    from instinct_serve.gather.search import search_target

    catalog, warnings = _checked_catalog(as_json)
    target = search_target(gpu, gpu_count, host_spec)
    hits = search(catalog, " ".join(query), target, limit=limit)
    doc = {
        "query": " ".join(query),
        "target": target._asdict() if target else None,
        "results": [h.to_dict() for h in hits],
        "warnings": warnings,
    }

    def human(con: Console) -> None:
        from rich.markup import escape

        from instinct_serve.cli.tables import Column, Rows
        from instinct_serve.units import plural

        if not hits:
            con.print(f"no recipe matches {' '.join(query)!r}: `instinct recipes list`")
            return
        where = f" for {target.label}" if target else ""
        table = Rows(
            [Column("MODEL", key=True), Column("PARAMS"), Column("WHY", prose=True)],
            f"{plural(len(hits), 'recipe')} for {' '.join(query)!r}{where}",
        )
        for hit in hits:
            table.add(escape(hit.model_id), escape(hit.parameter_count or "?"), escape(hit.why))
        table.print(con)

    emit(doc, as_json, human)
    return 0 if hits else 1


@recipes.command("show")
@click.argument("model")
@click.option("--gpu", metavar="GPU", help=f"Also show the merged AMD view for {GPU_HELP}.")
@click.option(
    "--variant", metavar="KEY", help="Recipe variant for the AMD view (default: the match's)."
)
@json_option
def show_cmd(model: str, gpu: str | None, variant: str | None, as_json: bool) -> int:
    """Show how MODEL resolves: the recipe, the match kind and (with --gpu) the AMD view."""
    from instinct_serve.catalog.documents import show_document

    catalog, warnings = _checked_catalog(as_json)
    doc = show_document(catalog, model, gpu, variant, warnings)

    def human(con: Console) -> None:
        _show_human(con, doc)

    emit(doc, as_json, human)
    return 0


def _kv(con: Console, key: str, value: Any) -> None:
    if value in (None, "", [], {}):
        return
    con.print(f"[bold]{key}:[/] {value}")


def _show_human(con: Console, doc: dict[str, Any]) -> None:
    import shlex

    match = doc["match"]
    con.print(
        f"[bold cyan]{doc['requested']}[/] → [bold]{match['match']}[/]: {match['explanation']}"
    )
    if match["blacklisted"]:
        bl = match["blacklisted"]
        con.print(f"[red]refused ({bl['category']}): {bl['reason']}[/]")
        con.print(f"[red]serve instead: {bl['alternative']}[/]")
    for note in match["notes"]:
        con.print(f"[dim]note: {note}[/]")
    if match["suggestions"]:
        con.print("did you mean: " + ", ".join(match["suggestions"]))
    if doc["recipe"]:
        _show_recipe(con, doc["recipe"])
    legacy = doc["legacy"]
    if legacy:
        shape = f"{legacy['architecture']}, {legacy['parameter_count']}"
        _kv(con, "model", f"{shape}, context {legacy['context_length']}")
        _kv(con, "tool parser", legacy["tool_call_parser"])
        _kv(con, "reasoning parser", legacy["reasoning_parser"])
        _kv(con, "args", shlex.join(legacy["args"]))
        _kv(con, "why", legacy["reason"])
    if doc["generic"]:
        _kv(
            con,
            "args",
            shlex.join(doc["generic"]["args"] + doc["generic"]["features"]["tool_calling"]),
        )
    if doc["amd"]:
        _show_amd(con, doc["amd"], doc["default_image"])
    if doc["cross_check"] is not None:
        if doc["cross_check"]:
            con.print("[yellow]differences from upstream's rendered command:[/]")
            for line in doc["cross_check"]:
                con.print(f"  - {line}")
        else:
            con.print("[green]matches upstream's rendered command[/]")


def _show_recipe(con: Console, recipe: dict[str, Any]) -> None:
    """The upstream recipe: the model, its args and env, features and variants."""
    import shlex

    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows

    con.print()
    _kv(con, "title", f"{recipe['title']} ({recipe['provider']})")
    _kv(con, "description", recipe["description"])
    _kv(con, "tasks", ", ".join(recipe["tasks"]))
    params = recipe["parameter_count"]
    if recipe["active_parameters"] and recipe["active_parameters"] != params:
        params = f"{params} ({recipe['active_parameters']} active)"
    _kv(con, "model", f"{recipe['architecture']}, {params}, context {recipe['context_length']}")
    need = recipe["min_vllm_version"]
    _kv(
        con,
        "vLLM",
        f">= {need}" + (" (nightly required)" if recipe["nightly_required"] else ""),
    )
    _kv(con, "base args", shlex.join(recipe["base_args"]))
    _kv(con, "base env", " ".join(f"{k}={v}" for k, v in recipe["base_env"].items()))
    _kv(con, "AMD hardware", ", ".join(f"{k}: {v}" for k, v in recipe["amd_hardware"].items()))
    _kv(con, "AMD image (pinned)", recipe["amd_image"])
    amd = recipe["hardware_overrides_amd"]
    if amd:
        _kv(con, "AMD extra args", shlex.join(amd["extra_args"]))
        _kv(con, "AMD extra env", " ".join(f"{k}={v}" for k, v in amd["extra_env"].items()))
    _kv(con, "recipe", recipe["url"] or recipe["source_path"])
    feats = Rows(
        [Column("FEATURE", key=True), Column("ARGS", prose=True), Column("DEFAULT")], "features"
    )
    for name, feat in recipe["features"].items():
        args = shlex.join(feat["args"]) if feat["args"] else ", ".join(feat.get("modes", {}))
        feats.add(escape(name), escape(args), "opt-in" if feat["opt_in"] else "on")
    if recipe["features"]:
        feats.print(con)
    variants = Rows(
        [
            Column("VARIANT", key=True),
            Column("PRECISION"),
            Column("CHECKPOINT", key=True),
            Column("MIN VRAM GB", right=True, drop=1),
        ],
        "variants",
    )
    for key, var in recipe["variants"].items():
        vram = var["vram_minimum_gb"]
        variants.add(
            escape(key),
            var["precision"] or "?",
            escape(var["model_id"]),
            f"{vram:g}" if vram else "?",
        )
    variants.print(con)


def _show_amd(con: Console, amd: dict[str, Any], default_image: str) -> None:
    """The merged AMD view for one GPU: variant, args, environment and image."""
    import shlex

    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows

    con.print()
    hw_id = amd["hardware_id"] or "none"
    con.print(f"[bold]AMD view for {amd['gpu']}[/] ({amd['gfx']}, recipes hardware id {hw_id})")
    _kv(con, "variant", amd["variant"])
    if amd["precision"]:
        _kv(con, "precision", f"{amd['precision']} ({amd['precision_status']} on {amd['gfx']})")
    _kv(con, "features", ", ".join(amd["features"]))
    _kv(con, "vllm args", shlex.join(amd["args"]))
    env = Rows(
        [Column("VARIABLE", key=True), Column("VALUE", key=True), Column("FROM", prose=True)],
        "environment (highest precedence wins)",
    )
    for key, value in amd["env"].items():
        env.add(escape(key), escape(value), escape(amd["env_sources"][key]))
    env.print(con)
    _kv(con, "image", amd["image"] or f"{default_image} (catalog default)")
    for warning in amd["warnings"]:
        con.print(f"[yellow]warning:[/] {warning}")


# ------------------------------------------------------------------------- sync/import


def _report_human(con: Console, report: dict[str, Any]) -> None:
    timings = report["timings_s"]
    parts = ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in timings.items() if k != "total_s")
    commit = f" @ {report['source_commit'][:12]}" if report.get("source_commit") else ""
    verb = "imported" if report["source"] == "import" else "synced"
    con.print(
        f"[green]{verb}[/] {report['model_count']} recipes from {report['source_url']}{commit} "
        f"in {timings['total_s']:.1f} s" + (f" ({parts})" if parts else "")
    )
    con.print(f"default image: {report['docker_image'] or '(none)'}")
    hub = report.get("hub") or {}
    if hub.get("note"):
        con.print(f"[yellow]warning:[/] {hub['note']}")
    for item in report["skipped"]:
        con.print(f"[yellow]skipped[/] {item['path']}: {item['reason']}")
    con.print(f"cache: {report['cache_path']}")
    from rich.markup import escape

    ref = report.get("reference")
    if isinstance(ref, dict) and ref.get("error"):
        con.print(
            f"[yellow]warning:[/] AMD's reference configs not synced from {escape(ref['url'])}: "
            f"{escape(str(ref['error']))} (the copy in use is unchanged)"
        )
    elif isinstance(ref, dict):
        con.print(
            f"AMD reference configs: {ref['configs']} from {escape(ref['url'])} @ "
            f"{str(ref['commit'])[:12]} ({escape(ref['path'])})"
        )


@recipes.command("sync")
@click.option("--source", type=choice(["git", "api"]), default="git", show_default=True)
@click.option("--repo-url", metavar="URL", default=None, help="Recipes git repository.")
@click.option("--api-url", metavar="URL", default=None, help="Recipes JSON API base URL.")
@click.option("--hub-url", metavar="URL", default=None, help="Docker Hub base URL.")
@click.option(
    "--reference-url",
    metavar="URL|off",
    default=None,
    help="AMD's reference configs (InferenceX) git repository (default: upstream's, when the "
    "recipes come from upstream git).",
)
@json_option
def sync_cmd(
    source: str,
    repo_url: str | None,
    api_url: str | None,
    hub_url: str | None,
    reference_url: str | None,
    as_json: bool,
) -> int:
    """Refresh the recipes cache (recipes + newest vllm/vllm-openai-rocm release) and AMD's
    reference configs."""
    from instinct_serve.gather.recipes_sync import sync_from

    with progress(f"syncing recipes ({source})", enabled=not as_json):
        report = sync_from(
            source,
            repo_url=repo_url,
            api_url=api_url,
            hub_url=hub_url,
            reference_url=reference_url,
        )
    doc = report.to_dict()
    for item in report.skipped:
        if as_json:
            warn(f"skipped {item['path']}: {item['reason']}", as_json)
    emit(doc, as_json, lambda con: _report_human(con, doc))
    return 0


@recipes.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@json_option
def import_cmd(file: str, as_json: bool) -> int:
    """Import a recipes_cache.json (from the agent skill, or another machine) as the cache."""
    from instinct_serve.gather.recipes_sync import import_cache

    report = import_cache(file)
    doc = report.to_dict()
    emit(doc, as_json, lambda con: _report_human(con, doc))
    return 0


@recipes.command("reference-import")
@click.argument("directory", type=click.Path(file_okay=False))
@json_option
def reference_import_cmd(directory: str, as_json: bool) -> int:
    """Import AMD's reference configs from an InferenceX checkout (configs/amd-master.yaml,
    the deprecated AMD files, the single-node launch scripts) over the shipped snapshot."""
    from pathlib import Path

    from instinct_serve.errors import UsageError
    from instinct_serve.gather.reference import build_references, write_references

    root = Path(directory)
    try:
        if not (root / "configs" / "amd-master.yaml").is_file():
            raise OSError("no configs/amd-master.yaml")
        doc = build_references(root, source="import")
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"cannot import AMD reference configs from {directory}: {exc}",
            fix="pass the root of an InferenceX checkout (or its AMD subset): "
            "configs/amd-master.yaml and benchmarks/single_node/",
            id="import_unreadable",
        ) from None
    path = write_references(doc)
    summary = {
        "path": path,
        "configs": len(doc["configs"]),
        "source_commit": doc["source_commit"],
        "vllm_single_node": sum(
            1 for c in doc["configs"] if c["framework"] == "vllm" and not c["multinode"]
        ),
    }
    emit(
        summary,
        as_json,
        lambda con: con.print(
            f"imported {summary['configs']} AMD reference configs "
            f"({summary['vllm_single_node']} vLLM single-node) into {path}"
        ),
    )
    return 0
