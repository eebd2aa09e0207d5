"""``instinct cache ls|prune``: the persistent compile caches (``runtime.caches``).

Only directories the tool made (its ``meta.json``) are listed or removed, never one a
container still mounts (compared by realpath on the host); ``prune`` shows what it would
remove and what it keeps unless ``--yes``, and removes nothing when the containers cannot be
read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from instinct_serve.cli.common import emit, get_host, host_option, json_option
from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.units import byte_size

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.hosts import Host
    from instinct_serve.runtime.caches import CacheEntry, Listing


def _root_option(func: Any) -> Any:
    return click.option(
        "--compile-cache",
        "setting",
        metavar="DIR",
        default=None,
        help="The compile caches' directory, when serve was given one (default: "
        "compile-cache/ in the tool's cache directory on the host).",
    )(func)


def _listing(host: Host, setting: str | None) -> Listing:
    from instinct_serve.runtime.caches import listing_for

    return listing_for(host, setting)


@click.group("cache")
def cache() -> None:
    """The persistent compile caches (vLLM torch.compile, Triton, AITER JIT, MIOpen) that
    serve keeps per image digest and gfx."""


@cache.command("ls")
@_root_option
@host_option
@json_option
def ls(setting: str | None, host_spec: str | None, as_json: bool) -> int:
    """List the compile caches on the host: key, size, image, last use, containers using it."""
    host = get_host(host_spec)
    listing = _listing(host, setting)
    root, entries = listing.root, listing.entries
    doc = listing.to_dict(host)

    def human(con: Console) -> None:
        from rich.markup import escape

        from instinct_serve.cli.tables import Column, Rows

        _unfinished_note(con, listing.unfinished, done=False)
        if not entries:
            con.print(f"No compile caches under {escape(root)} on {escape(host.name)}.")
            return
        table = Rows(
            [
                Column("KEY", key=True),
                Column("SIZE", right=True),
                Column("IMAGE", key=True, drop=2),
                Column("LAST USED", drop=1),
                Column("USED BY"),
            ],
            f"Compile caches in {root}",
        )
        for e in entries:
            image = str(e.meta.get("image") or "-")
            if e.image_present is False:
                image += " (gone)"
            table.add(
                escape(e.key),
                byte_size(e.size_bytes),
                escape(image),
                escape(str(e.meta.get("last_used") or "-")),
                escape(", ".join(e.used_by) or "-"),
            )
        table.print(con)
        if listing.why:
            con.print(f"[yellow]{escape(listing.why)}: who uses them is unknown.[/]")

    emit(doc, as_json, human)
    return 0


@cache.command("prune")
@click.argument("keys", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every cache no endpoint uses.")
@click.option("--yes", "-y", is_flag=True, help="Remove them (else: only show what would go).")
@_root_option
@host_option
@json_option
def prune(
    keys: tuple[str, ...],
    every: bool,
    yes: bool,
    setting: str | None,
    host_spec: str | None,
    as_json: bool,
) -> int:
    """Remove compile caches: by default those whose image is gone from the host, or the
    KEYS named, or --all. Never one a container still mounts, and nothing when the containers
    cannot be read. Shows what would go and what stays unless --yes."""
    from instinct_serve.runtime.caches import finish_removal, remove, select

    if keys and every:
        raise UsageError("give keys or --all, not both", id="bad_input")
    host = get_host(host_spec)
    listing = _listing(host, setting)
    root, entries = listing.root, listing.entries
    unknown = sorted(set(keys) - {e.key for e in entries})
    if unknown:
        raise UsageError(
            f"no compile cache {', '.join(unknown)} under {root} on {host.name}",
            fix="list them with `instinct cache ls`",
            id="bad_input",
        )
    if not listing.containers_readable:
        raise NotReadyError(
            f"{listing.why}: cannot tell which caches are in use, so nothing was removed",
            fix="start Docker (or wait until it answers) and prune again",
            id="containers_unreadable",
        )
    chosen, kept = select(entries, keys=keys, every=every)
    removed: list[CacheEntry] = []
    if yes:
        for aside in listing.unfinished:  # chosen and confirmed by the prune that was cut
            finish_removal(host, aside)
        for entry in chosen:
            remove(host, entry)
            removed.append(entry)
    doc = {
        "host": host.name,
        "root": root,
        "dry_run": not yes,
        "removed" if yes else "would_remove": [e.to_dict() for e in chosen],
        "kept": [{**e.to_dict(), "why": why} for e, why in kept],
        "freed_bytes": sum(e.size_bytes or 0 for e in removed),
        "finished_removals" if yes else "unfinished_removals": listing.unfinished,
    }

    def human(con: Console) -> None:
        _unfinished_note(con, listing.unfinished, done=yes)
        _prune_summary(con, chosen, kept, yes)

    emit(doc, as_json, human)
    return 0


def _unfinished_note(con: Console, unfinished: list[str], *, done: bool) -> None:
    """Removals an interrupted prune left (``.KEY.removing``): finished, or to be."""
    from rich.markup import escape

    for path in unfinished:
        if done:
            con.print(f"finished the interrupted removal of {escape(path)}")
        else:
            con.print(
                f"[yellow]{escape(path)}: a removal an interrupted prune left; "
                "`instinct cache prune --yes` finishes it[/]"
            )


def _prune_summary(
    con: Console, chosen: list[CacheEntry], kept: list[tuple[CacheEntry, str]], yes: bool
) -> None:
    """What goes (or would go) and what stays, with why (in use: by which containers)."""
    from rich.markup import escape

    if not chosen:
        con.print("Nothing to prune.")
    for e in chosen:
        verb = "removed" if yes else "would remove"
        con.print(f"{verb} {escape(e.path)} ({byte_size(e.size_bytes)})")
    for e, why in kept:
        con.print(f"kept {escape(e.path)}: {escape(why)}")
    if chosen and not yes:
        con.print("Pass --yes to remove them.")
