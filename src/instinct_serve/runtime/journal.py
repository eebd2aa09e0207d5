"""What happened to an endpoint after ``ready``: one JSON line per event, on its host.

``instinct watch`` (and ``serve --upgrade``/``rollback``) append here; ``ps`` reads the
restarts and the last failure back. ``<data dir>/events/<endpoint name>.jsonl`` on the
endpoint's host (through the ``Host``, like ``verified`` and ``plans``), so every client
of the host sees the same history. Appends are one ``>>`` of one line (atomic enough for
a line well under PIPE_BUF); reads take the last ``TAIL`` lines.

Kinds: ``watch_started``, ``watch_stopped``, ``unhealthy``, ``hung``, ``exited``, ``restarted``
(``by``: ``docker``: its restart policy, seen as a new run of the container; ``watch``),
``relaunched`` (with a known fix), ``recovered``, ``gave_up``, ``upgraded``,
``upgrade_failed``, ``rollback_failed``, ``rolled_back``, ``interrupted`` (a change cut short,
finished or undone by the next command: ``runtime.recover``), ``crash_log`` (a crashed
container's log saved beside the journal before ``watch`` relaunches it).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from instinct_serve.hosts import Host
from instinct_serve.names import CONTAINER_NAME

TAIL = 500
MAX_LOG_CHARS = 16 * 1024 * 1024  # a crashed container's saved log: its last 16 MiB
MAX_LINE = 3500  # under PIPE_BUF (4096): one write, never interleaved
RESTART_KINDS = frozenset({"restarted", "relaunched"})
FAILURE_KINDS = frozenset(
    {"unhealthy", "hung", "exited", "gave_up", "upgrade_failed", "rollback_failed"}
)

# $1: the file; the line on stdin.
_APPEND = 'mkdir -p "${1%/*}" && cat >> "$1"'
# Reads: regular files only (``-f``: not a FIFO, a device or a link loop), and only their
# last $3 bytes (``tail -c`` seeks: a huge or sparse file costs nothing), then $2 lines.
_READ = '[ -f "$1" ] || exit 0; tail -c "$3" -- "$1" | tail -n "$2"'
# $1: the directory; for each file, its name then its last lines.
_READ_ALL = (
    'for f in "$1"/*.jsonl; do [ -f "$f" ] || continue; '
    'printf "#%s\\n" "${f##*/}"; tail -c "$3" -- "$f" | tail -n "$2"; done; exit 0'
)


def _dir(host: Host) -> str:
    from instinct_serve.engine import hostfs

    return hostfs.join(hostfs.data_dir(host), "events")


def _path(host: Host, name: str) -> str | None:
    return f"{_dir(host)}/{name}.jsonl" if CONTAINER_NAME.fullmatch(name) else None


def record(host: Host, name: str, kind: str, **fields: Any) -> dict[str, Any]:
    """Append one event (best effort: supervision goes on if the file cannot be written)."""
    doc = {"at": datetime.now(UTC).isoformat(timespec="milliseconds"), "kind": kind, **fields}
    line = json.dumps(doc, separators=(",", ":"), default=str)
    if len(line) > MAX_LINE:
        doc = {key: doc[key] for key in ("at", "kind")} | {"truncated": True}
        line = json.dumps(doc)
    path = _path(host, name)
    if path is not None:
        host.run(["sh", "-c", _APPEND, "sh", path], timeout=30, input=line + "\n")
    return doc


def save_log(host: Host, name: str, label: str, text: str) -> str | None:
    """Keep a container's log beside the journal (``events/NAME.LABEL.log``): the path,
    or None when it could not be written."""
    from instinct_serve.engine import hostfs
    from instinct_serve.errors import InstinctError

    path = _path(host, name)
    if path is None or not CONTAINER_NAME.fullmatch(label):
        return None
    target = f"{path.removesuffix('.jsonl')}.{label}.log"
    try:
        hostfs.makedirs(host, _dir(host))
        hostfs.write_text(host, target, text[-MAX_LOG_CHARS:], "600")
    except InstinctError:
        return None
    return target


# $1: the directory, $2: the endpoint name, $3: the label prefix; for each saved log of that
# endpoint whose label starts with it, its file name then its last $4 lines.
_READ_LOGS = (
    'for f in "$1/$2.$3"*.log; do [ -f "$f" ] || continue; '
    'printf "#%s\\n" "${f##*/}"; tail -n "$4" -- "$f"; done; exit 0'
)


def saved_logs(host: Host, name: str, prefix: str, tail: int) -> dict[str, list[str]]:
    """The logs ``save_log`` kept for ``name`` whose label starts with ``prefix``, by label
    (their last ``tail`` lines), oldest label first."""
    if not CONTAINER_NAME.fullmatch(name) or not CONTAINER_NAME.fullmatch(prefix):
        return {}
    argv = ["sh", "-c", _READ_LOGS, "sh", _dir(host), name, prefix, str(tail)]
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    head, tail_mark = f"#{name}.", ".log"
    for line in host.run(argv, timeout=30).stdout.splitlines():
        if line.startswith(head) and line.endswith(tail_mark):
            current = out.setdefault(line[len(head) : -len(tail_mark)], [])
        elif current is not None:
            current.append(line)
    return dict(sorted(out.items()))


def _parse(line: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
        return None
    return doc


def _bytes(tail: int) -> int:
    """The most ``tail`` lines of ours can take (each under ``MAX_LINE``)."""
    return tail * (MAX_LINE + 1)


def read(host: Host, name: str, tail: int = TAIL) -> list[dict[str, Any]]:
    path = _path(host, name)
    if path is None:
        return []
    result = host.run(["sh", "-c", _READ, "sh", path, str(tail), str(_bytes(tail))], timeout=30)
    return [d for d in map(_parse, result.stdout.splitlines()) if d is not None]


def read_all(host: Host, tail: int = TAIL) -> dict[str, list[dict[str, Any]]]:
    """Every endpoint's recent events, by name (one command, for ``ps``)."""
    argv = ["sh", "-c", _READ_ALL, "sh", _dir(host), str(tail), str(_bytes(tail))]
    result = host.run(argv, timeout=30)
    out: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] | None = None
    for line in result.stdout.splitlines():
        if line.startswith("#") and line.endswith(".jsonl"):
            current = out.setdefault(line[1 : -len(".jsonl")], [])
            continue
        doc = _parse(line)
        if doc is not None and current is not None:
            current.append(doc)
    return out


def summary(
    events: list[dict[str, Any]], *, instance_id: str | None = None, daemon_restarts: int = 0
) -> dict[str, Any]:
    """``ps``'s view: how often the endpoint was restarted, and its last failure.

    ``daemon_restarts``: docker's restart count of the current container; the ones a
    watch already recorded for it (``by: docker`` with its ``id``) are not counted twice."""
    restarts = sum(1 for e in events if e["kind"] in RESTART_KINDS)
    seen = sum(
        1
        for e in events
        if e["kind"] == "restarted" and e.get("by") == "docker" and e.get("id") == instance_id
    )
    restarts += max(0, daemon_restarts - seen) if instance_id else 0
    failure = next((e for e in reversed(events) if e["kind"] in FAILURE_KINDS), None)
    last = None
    if failure is not None:
        last = {"at": failure.get("at"), "kind": failure["kind"], "why": failure.get("why")}
    return {"restarts": restarts, "last_failure": last}
