"""The compile caches on a host: made ready before a launch, listed, pruned.

``prepare_caches`` runs after the image is on the host (serve's pull) and before the launch:
the key is made from the image's digest now that it is known (``plan.caches.rekeyed``), the
directories are created as the host's user (Docker would make them root's), ``meta.json``
says the tool made them and for what, and AITER's directory is seeded from the image once
per key (``plan.caches.seed_argv``; dropped from the plan when the image cannot seed it,
so its prebuilt modules are never hidden behind an empty mount).

``list_caches`` and ``prune`` read only directories with the tool's ``meta.json``: nothing
else under the root is ever listed as ours or removed, nor a key an endpoint of the tool
(a managed container, running or stopped) still mounts.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from instinct_serve.errors import InstinctError
from instinct_serve.plan.caches import META_FILE, SEED_MARKER, meta_doc, rekeyed, seed_argv
from instinct_serve.plan.labels import LABEL_COMPILE_CACHE

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.plan.caches import CacheLayout
    from instinct_serve.plan.model import LaunchPlan

SEED_TIMEOUT_S = 1800.0  # copying a few GB of prebuilt modules out of the image
_WRITE = 'tmp="$1.tmp.$$" && cat > "$tmp" && mv -f "$tmp" "$1"'


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def prepare_caches(host: Host, plan: LaunchPlan, note: Callable[[str], None]) -> None:
    """Make ``plan.cache`` ready on ``host`` (see the module docstring); updates the plan."""
    layout = plan.cache
    if layout is None:
        return
    if plan.launcher == "docker" and layout.image_id is None:
        from instinct_serve.gather.caches import image_id

        digest = image_id(host, plan.image)
        if digest is not None:
            layout = rekeyed(layout, plan.gfx_version, plan.image, digest)
    dirs = [layout.host_path(c.name) for c in layout.dirs]
    made = host.run(["mkdir", "-p", "--", *dirs], timeout=30)
    if not made.ok:
        raise InstinctError(
            f"cannot create the compile caches under {layout.root} on {host.name}: "
            f"{(made.stderr or made.stdout).strip() or 'mkdir failed'}",
            fix="make the directory writable, point --compile-cache at one that is, or pass "
            "--compile-cache off",
            id="compile_cache_unwritable",
        )
    if "aiter" in layout.names:
        layout = _seed(host, layout, plan.image, note)
    meta = meta_doc(
        layout, image=plan.image, gfx=plan.gfx_version, engine=plan.launcher, now=_now()
    )
    path = posixpath.join(layout.directory, META_FILE)
    host.run(["sh", "-c", _WRITE, "sh", path], timeout=30, input=json.dumps(meta) + "\n")
    plan.cache = layout


def _seed(host: Host, layout: CacheLayout, image: str, note: Callable[[str], None]) -> CacheLayout:
    if host.exists(posixpath.join(layout.host_path("aiter"), SEED_MARKER)):
        return layout
    argv = seed_argv(layout, image)
    assert argv is not None
    note(f"seeding the AITER JIT cache {layout.host_path('aiter')} from {image} (once per image)")
    result = host.run(argv, timeout=SEED_TIMEOUT_S)
    if result.ok and host.exists(posixpath.join(layout.host_path("aiter"), SEED_MARKER)):
        return layout
    said = (result.stderr or result.stdout).strip().splitlines()
    note(
        "AITER JIT cache not mounted: seeding it from the image failed "
        f"({said[-1] if said else f'exit {result.returncode}'}); AITER keeps its modules "
        "in the container"
    )
    return layout.without("aiter")


# --------------------------------------------------------------------------- ls / prune


@dataclass
class CacheEntry:
    """One key's directory under a root, as ``instinct cache ls`` shows it."""

    root: str
    key: str
    size_bytes: int | None
    meta: dict[str, Any]
    image_present: bool | None = None  # the image of the key is still on the host
    used_by: list[str] = field(default_factory=list)  # managed containers mounting it

    @property
    def path(self) -> str:
        return posixpath.join(self.root, self.key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "path": self.path,
            "size_bytes": self.size_bytes,
            "image": self.meta.get("image"),
            "image_id": self.meta.get("image_id"),
            "gfx": self.meta.get("gfx"),
            "engine": self.meta.get("engine"),
            "last_used": self.meta.get("last_used"),
            "image_present": self.image_present,
            "used_by": self.used_by,
        }


# one line per key directory that holds our meta.json (a real directory, not a symlink to
# one elsewhere: the tool never makes those): "<kB>\t<dir>"
_LIST = (
    'for d in "$1"/*/; do [ -L "${d%/}" ] && continue; [ -f "$d/meta.json" ] || continue; '
    'printf "%s\\n" "$(du -sk "$d" 2>/dev/null | cut -f1)	${d%/}"; done'
)
# the removals a killed prune left: "<dir>" per ".KEY.removing" directory under the root
_REMOVING = (
    'for d in "$1"/.*.removing/; do [ -d "$d" ] && [ ! -L "${d%/}" ] '
    '&& printf "%s\\n" "${d%/}"; done; exit 0'
)
REMOVING_SUFFIX = ".removing"
# every container, running or stopped, ours or not: its name, mounts and labels (JSON each)
_INSPECT_FORMAT = "{{json .Name}}\t{{json .Mounts}}\t{{json .Config.Labels}}"


@dataclass
class Listing:
    """The keys under one (canonical) root, and whether the containers could be read: if
    not, nobody is known to use a key, and ``prune`` must remove nothing."""

    root: str
    entries: list[CacheEntry]
    containers_readable: bool = True
    why: str | None = None  # why they could not be read
    unfinished: list[str] = field(default_factory=list)  # removals a killed prune left

    def to_dict(self, host: Host) -> dict[str, Any]:
        """``cache ls --json``, and the MCP ``cache`` tool's document."""
        return {
            "host": host.name,
            "root": self.root,
            "containers_readable": self.containers_readable,
            "caches": [e.to_dict() for e in self.entries],
            "unfinished_removals": self.unfinished,
        }


def listing_for(host: Host, setting: str | None) -> Listing:
    """``cache ls``, the CLI's and the MCP tool's: the caches under the directory
    ``setting`` names (a serve's --compile-cache; default: the tool's cache directory)."""
    from instinct_serve.errors import UsageError
    from instinct_serve.gather.caches import cache_root

    root = cache_root(setting, host)  # canonical on the host
    if root is None:
        raise UsageError(
            "no compile cache directory"
            + (" (`off` has none)" if setting else f" found on {host.name}"),
            fix="name it with --compile-cache DIR",
            agent_fix="name it with `compile_cache`",
            id="bad_input",
        )
    return list_caches(host, root)


def list_caches(host: Host, root: str) -> Listing:
    """The keys the tool made under ``root`` (canonical: ``gather.caches.cache_root``) on
    ``host``, with their size and users."""
    result = host.run(["sh", "-c", _LIST, "sh", root.rstrip("/") or "/"], timeout=120)
    entries: list[CacheEntry] = []
    for line in result.stdout.splitlines():
        kb, _, path = line.partition("\t")
        if not path or posixpath.dirname(path) != root.rstrip("/"):
            continue
        meta = _meta(host.read_text(posixpath.join(path, META_FILE)))
        if meta is None:
            continue
        size = int(kb) * 1024 if kb.strip().isdigit() else None
        entries.append(CacheEntry(root, posixpath.basename(path), size, meta))
    listing = Listing(root, sorted(entries, key=lambda e: e.key))
    listing.unfinished = _unfinished(host, root.rstrip("/") or "/")
    if entries:
        _annotate(host, listing)
    return listing


def _unfinished(host: Host, root: str) -> list[str]:
    """The ``.KEY.removing`` directories a prune killed mid-way left under ``root``: already
    chosen and confirmed, out of every plan's reach (no key is spelled so), finished by the
    next prune."""
    result = host.run(["sh", "-c", _REMOVING, "sh", root], timeout=60)
    return sorted(
        path
        for path in result.stdout.splitlines()
        if posixpath.dirname(path) == root and path.endswith(REMOVING_SUFFIX)
    )


def _meta(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("tool") == "instinct-serve" else None


class Containers(NamedTuple):
    """What every container on a host mounts: ``docker`` False where there is no docker."""

    docker: bool
    paths: dict[str, list[str]]  # container name -> host paths


def container_paths(host: Host) -> Containers | None:
    """The host paths every container (running or stopped, the tool's or not) mounts or names
    in serve's compile-cache label, by container name; None when Docker is installed but the
    list cannot be read (the daemon does not answer). No docker at all: no container."""
    listed = host.run(["docker", "ps", "-aq", "--no-trunc"], timeout=60)
    if listed.returncode == 127:
        return Containers(False, {})
    if not listed.ok:
        return None
    ids = listed.stdout.split()
    if not ids:
        return Containers(True, {})
    found = host.run(
        ["docker", "inspect", "--type", "container", "--format", _INSPECT_FORMAT, *ids],
        timeout=120,
    )
    if not found.ok and "no such" not in found.stderr.lower():  # one removed meanwhile: fine
        return None
    out: dict[str, list[str]] = {}
    for line in found.stdout.splitlines():
        try:
            name, mounts, labels = (json.loads(part) for part in line.split("\t"))
        except ValueError:
            return None
        paths = [m.get("Source") for m in mounts or [] if isinstance(m, dict)]
        paths.append((labels or {}).get(LABEL_COMPILE_CACHE))
        out[str(name).lstrip("/")] = [p for p in paths if isinstance(p, str) and p]
    return Containers(True, out)


def _annotate(host: Host, listing: Listing) -> None:
    """Which containers use each key (a mount or serve's label at or under its directory,
    compared by realpath on the host), and whether its image is still on the host."""
    from instinct_serve.gather.caches import realpaths

    containers = container_paths(host)
    if containers is None:
        listing.containers_readable = False
        listing.why = f"the container list cannot be read on {host.name} (Docker does not answer)"
        return
    real = realpaths(host, [p for paths in containers.paths.values() for p in paths])
    for entry in listing.entries:
        mine = entry.path + "/"
        entry.used_by = sorted(
            name
            for name, paths in containers.paths.items()
            if any((real.get(p) or posixpath.normpath(p)) + "/" == mine for p in paths)
            or any((real.get(p) or posixpath.normpath(p)).startswith(mine) for p in paths)
        )
    if not containers.docker:
        return
    from instinct_serve.runtime.docker import Docker

    docker = Docker(host)
    for entry in listing.entries:
        image_id = entry.meta.get("image_id")
        if entry.meta.get("engine") == "docker" and isinstance(image_id, str):
            entry.image_present = docker.image_present(image_id)


def select(
    entries: list[CacheEntry], *, keys: tuple[str, ...] = (), every: bool = False
) -> tuple[list[CacheEntry], list[tuple[CacheEntry, str]]]:
    """What ``prune`` removes and what it keeps (with why). By default the keys whose image
    is gone from the host (an upgrade left them behind); ``every``: all of them; ``keys``:
    those. Never a key an endpoint of the tool still mounts."""
    chosen: list[CacheEntry] = []
    kept: list[tuple[CacheEntry, str]] = []
    for entry in entries:
        if entry.used_by:
            kept.append((entry, f"mounted by {', '.join(entry.used_by)}"))
        elif keys:
            if entry.key in keys:
                chosen.append(entry)
        elif every or entry.image_present is False:
            chosen.append(entry)
        elif entry.image_present:
            kept.append((entry, "its image is still on the host (--all removes it)"))
        else:
            kept.append((entry, "no image to tell it is stale by (--all or its key removes it)"))
    return chosen, kept


def remove(host: Host, entry: CacheEntry) -> None:
    """Remove one key's directory (only ever one holding the tool's ``meta.json``): renamed
    to ``.KEY.removing`` first (one atomic step: a kill during the long ``rm`` leaves no
    half key that ``ls`` or a serve could take for a cache), then removed."""
    meta = posixpath.join(entry.path, META_FILE)
    if _meta(host.read_text(meta)) is None:
        raise InstinctError(
            f"{entry.path} is not a compile cache instinct-serve made: not removed", id="bad_input"
        )
    aside = posixpath.join(entry.root, f".{entry.key}{REMOVING_SUFFIX}")
    moved = host.run(["mv", "-T", "--", entry.path, aside], timeout=60)
    if not moved.ok:
        _unremovable(host, entry.path, moved.stderr or moved.stdout)
    finish_removal(host, aside)


def finish_removal(host: Host, aside: str) -> None:
    """Remove a ``.KEY.removing`` directory (a removal begun by ``remove``)."""
    if not posixpath.basename(aside).endswith(REMOVING_SUFFIX):
        raise InstinctError(f"{aside} is not a removal in progress: not removed", id="bad_input")
    result = host.run(["rm", "-rf", "--", aside], timeout=600)
    if not result.ok:
        _unremovable(host, aside, result.stderr or result.stdout)


def _unremovable(host: Host, path: str, said: str) -> NoReturn:
    raise InstinctError(
        f"cannot remove {path} on {host.name}: {said.strip() or 'rm failed'}",
        fix=f"files a container wrote may be root's: sudo rm -rf {shlex.quote(path)}",
        id="compile_cache_unremovable",
    )
