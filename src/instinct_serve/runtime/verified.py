"""What ``serve`` proved about a running endpoint: its warm-up and its coherence probe.

A large model (``runtime.settings.detaches``) is left loading; the next ``serve`` of the
same plan finds it running. Without a record, "healthy" would mean ``/health`` only, for
exactly the models where a first request compiles kernels for minutes; so serve warms up
and probes once, keeps the result here, and a later ``serve``/``ps`` reports it.

``<data dir>/verified/<endpoint name>.json`` on the endpoint's host (next to the API keys,
through the ``Host``, so every client sees the same). A record names the instance it is
about (a container's id and restart count, a native process's pid and start): a restart,
a relaunch or a replacement is a new instance, and its old record no longer counts.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from instinct_serve.hosts import Host
from instinct_serve.names import CONTAINER_NAME

MAX_RECORD_BYTES = 16_384

# $1: the record file, the JSON on stdin (written whole, then renamed into place).
_WRITE = 'd="${1%/*}"; mkdir -p "$d" && tmp="$1.tmp.$$" && cat > "$tmp" && mv -f "$tmp" "$1"'
# $1: the directory; one record per line (each file is one line of JSON).
_READ_ALL = 'for f in "$1"/*.json; do [ -f "$f" ] && head -c 16384 "$f" && echo; done; exit 0'


def record_dir(host: Host) -> str:
    from instinct_serve.engine import hostfs

    return hostfs.join(hostfs.data_dir(host), "verified")


def _path(host: Host, name: str) -> str | None:
    return f"{record_dir(host)}/{name}.json" if CONTAINER_NAME.fullmatch(name) else None


def save(
    host: Host,
    name: str,
    instance: str | None,
    *,
    plan_hash: str | None,
    warmup_latency_s: float | None,
    coherence: dict[str, Any] | None,
) -> None:
    """Keep what serve proved about ``name``'s running ``instance`` (best effort: a record
    that cannot be written only means the next serve proves it again)."""
    path = _path(host, name)
    if path is None or instance is None:
        return
    doc = {
        "name": name,
        "instance": instance,
        "plan_hash": plan_hash,
        "warmup_latency_s": warmup_latency_s,
        "coherence": coherence,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    text = json.dumps(doc, separators=(",", ":"))
    if len(text) < MAX_RECORD_BYTES:
        host.run(["sh", "-c", _WRITE, "sh", path], timeout=30, input=text)


def _parse(text: str) -> dict[str, Any] | None:
    """A record, or None for anything that is not one (records are data, not trust)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        return None
    if not isinstance(doc.get("instance"), str):
        return None
    coherence = doc.get("coherence")
    if coherence is not None and not isinstance(coherence, dict):
        return None
    warmup = doc.get("warmup_latency_s")
    if warmup is not None and not isinstance(warmup, int | float):
        return None
    return doc


def load(host: Host, name: str, instance: str | None) -> dict[str, Any] | None:
    """The record of ``name`` if it is about this very ``instance``."""
    path = _path(host, name)
    if path is None or instance is None:
        return None
    doc = _parse(host.read_text(path, MAX_RECORD_BYTES) or "")
    return doc if doc is not None and doc["instance"] == instance else None


def load_all(host: Host) -> dict[str, dict[str, Any]]:
    """Every record on the host, by endpoint name (one command, for ``ps``)."""
    result = host.run(["sh", "-c", _READ_ALL, "sh", record_dir(host)], timeout=30)
    records: dict[str, dict[str, Any]] = {}
    for line in result.stdout.splitlines():
        doc = _parse(line)
        if doc is not None:
            records[doc["name"]] = doc
    return records


def forget(host: Host, name: str) -> None:
    path = _path(host, name)
    if path is not None:
        host.run(["rm", "-f", "--", path], timeout=30)


def summary(doc: dict[str, Any]) -> dict[str, Any]:
    """What ``ps`` and ``serve`` show of a record."""
    coherence = doc.get("coherence") or {}
    return {
        "warmup_latency_s": doc.get("warmup_latency_s"),
        "coherence": coherence.get("verdict") if isinstance(coherence, dict) else None,
        "at": doc.get("at"),
    }
