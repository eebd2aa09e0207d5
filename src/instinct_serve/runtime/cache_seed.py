"""Seed a node's compile caches from the head's before a multi-node group launches.

A compile cache (``plan.caches``) is filled by the first process that compiles for its key
(image digest x gfx). On another node the same key's directory starts empty, so every rank
there would compile the same kernels again: minutes on ROCm (AITER JIT modules, Triton
kernels, vLLM's torch.compile). Before the ranks start, each node whose directory of a cache
is empty gets a copy of the head's: one ``tar`` stream from the head through this machine to
the node (``ssh head tar c | ssh node tar x``), so neither node needs the other's address
or keys. It lands in a sibling directory renamed into place once whole, so a copy cut short
(a kill, a timeout) leaves the empty directory the next start seeds again; a seed that fails
leaves the node to compile (said, never a failure). A directory that holds anything is the
node's own and is left alone (two aliases of one machine share it: nothing to copy).

On one host the replicas of a group mount the same directory, so a replica or restart that
starts after the first filled it starts warm with no copy at all; on a cold cache the group
starts its first replica alone to fill it (``cache_is_warm``, ``runtime.group``), rather than
every replica compiling the same kernels into one directory at once. On Kubernetes the pods
do the same among themselves (``plan.caches.FILL_SCRIPT``), by the same test.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host, SshHost
from instinct_serve.plan.caches import FILLED_SH, CacheLayout, rekeyed
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.units import byte_size

SEED_TIMEOUT_S = 900.0  # one cache's copy
PARTIAL = ".seeding"  # the sibling a copy lands in before it is renamed into place
_UNPACK = (
    'set -e; rm -rf -- "$1$2"; mkdir -p -- "$1$2"; tar -C "$1$2" -xf -; '
    'rmdir -- "$1" 2>/dev/null || true; test ! -e "$1"; mv -- "$1$2" "$1"'
)


@dataclass(frozen=True)
class Seeded:
    """One cache copied to one node: what, where from, where to, how much, how long."""

    cache: str
    rank: int
    source: str
    target: str
    size_bytes: int | None
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return {
            "cache": self.cache,
            "rank": self.rank,
            "source": self.source,
            "target": self.target,
            "size_bytes": self.size_bytes,
            "seconds": round(self.seconds, 3),
        }


def filled(host: Host, path: str) -> bool:
    """Whether ``path`` on ``host`` is a directory with anything in it."""
    return host.run(["sh", "-c", FILLED_SH, "sh", path], timeout=30).ok


def cache_is_warm(host: Host, plan: LaunchPlan) -> bool:
    """Whether ``plan``'s compile cache on ``host`` holds a compile yet (``warm_names``),
    under the key its launch will use (the image's digest once pulled; an image not pulled
    yet is a new key: cold). No cache (``--compile-cache off``): nothing to wait for."""
    layout = plan.cache
    if layout is None:
        return True
    if plan.launcher == "docker" and layout.image_id is None:
        from instinct_serve.gather.caches import image_id

        digest = image_id(host, plan.image)
        if digest is None:
            return False
        layout = rekeyed(layout, plan.gfx_version, plan.image, digest)
    return any(filled(host, layout.host_path(n)) for n in layout.warm_names)


def size_of(host: Host, path: str) -> int | None:
    """Bytes under ``path`` (``du -sb``), or None when they cannot be counted."""
    result = host.run(["du", "-sb", "--", path], timeout=120)
    first = result.stdout.split()[:1] if result.ok else []
    return int(first[0]) if first and first[0].isdigit() else None


def _argv_on(host: Host, argv: Sequence[str]) -> list[str]:
    """``argv`` as this machine runs it on ``host`` (over ssh for a remote one)."""
    if isinstance(host, SshHost):
        return [*host.ssh_argv(), "--", host.remote_command(argv, None)]
    return list(argv)


def copy_tree(
    src: Host, src_dir: str, dst: Host, dst_dir: str, *, timeout: float = SEED_TIMEOUT_S
) -> None:
    """Stream ``src_dir``'s contents into ``dst_dir`` (made whole, then renamed into place);
    ``InstinctError`` when either side fails or it takes longer than ``timeout``."""
    pack = _argv_on(src, ["tar", "-C", src_dir, "-cf", "-", "."])
    unpack = _argv_on(dst, ["sh", "-c", _UNPACK, "sh", dst_dir.rstrip("/"), PARTIAL])
    reader = subprocess.Popen(
        pack, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    assert reader.stdout is not None
    writer = subprocess.Popen(
        unpack,
        stdin=reader.stdout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    reader.stdout.close()  # the writer holds the pipe now: a dead writer stops the reader
    try:
        _, wrote = writer.communicate(timeout=timeout)
        _, read = reader.communicate(timeout=30)
    except subprocess.TimeoutExpired as exc:
        for proc in (reader, writer):
            proc.kill()
            proc.wait()
        raise InstinctError(
            f"copying {src_dir} from {src.name} to {dst.name} took over {timeout:g} s",
            id="cache_seed_failed",
        ) from exc
    if reader.returncode or writer.returncode:
        said = (read or wrote or b"").decode(errors="replace").strip().splitlines()
        raise InstinctError(
            f"copying {src_dir} from {src.name} to {dst.name} failed: "
            f"{said[-1] if said else f'exit {reader.returncode or writer.returncode}'}",
            id="cache_seed_failed",
        )


def seed_nodes(
    head: Host,
    head_cache: CacheLayout,
    nodes: Sequence[tuple[int, Host, CacheLayout]],
    note: Callable[[str], None],
) -> list[Seeded]:
    """Each node's empty cache directories filled from the head's filled ones (see the
    module docstring); what was copied. A failed copy is said and skipped."""
    done: list[Seeded] = []
    for rank, host, layout in nodes:
        for cache in layout.dirs:
            if cache.name not in head_cache.names:
                continue
            source, target = head_cache.host_path(cache.name), layout.host_path(cache.name)
            if filled(host, target) or not filled(head, source):
                continue
            began = time.monotonic()
            try:
                copy_tree(head, source, host, target)
            except InstinctError as exc:
                note(f"{cache.name} cache not seeded on {host.name}: {exc}; rank {rank} compiles")
                continue
            seconds = time.monotonic() - began
            size = size_of(host, target)
            done.append(Seeded(cache.name, rank, f"{head.name}:{source}", target, size, seconds))
            note(
                f"seeded the {cache.name} cache of rank {rank} on {host.name} from "
                f"{head.name}: {byte_size(size)} in {seconds:.1f} s ({target})"
            )
    return done
