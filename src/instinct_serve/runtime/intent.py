"""Intent records: a multi-step change says what it is about to do before its first
destructive step, and clears that after its last; a change cut short (a ``kill -9``, a
lost ssh connection, an unexpected error) leaves its record for the next command.

``<data dir>/intents/<name>.<change>.json`` on the endpoint's host (through the ``Host``,
like ``plans`` and ``verified``, so every client of the host sees it), written whole and
renamed into place (``hostfs.write_text``): a reader sees the step before or the step
after, never half a record. It names the change (``upgrade``, ``rollback``, ``resize``,
``replace``; a prune needs none: its ``.KEY.removing`` directories are its record,
``runtime.caches``), the endpoint, the plans involved (the old one, with the
last-good plan recorded before the change, and the new one), the containers it launched
and has not proven yet (``candidates``), the old endpoint's container once it is stopped
and kept aside (``parked``), and the step reached. ``runtime.recover`` reads the records
back (``ps``, ``serve``, ``rollback``, ``watch``) and finishes or undoes each change whose
process is gone.

Who is alive: the record names its owner (machine, pid, the process's start time). On the
same machine a dead or reused pid means the change was interrupted; a record written from
another machine counts as in progress until ``STALE_S`` after its last step.

Records are data, not trust: one that does not parse is skipped, and every container it
names is looked up and checked to be ours before anything is done to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.names import CONTAINER_NAME
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import plans

CHANGES = ("upgrade", "rollback", "resize", "replace")
STALE_S = 6 * 3600.0  # a record from another machine: in progress this long after its step
MAX_RECORD_BYTES = 1_048_576
# $1: the directory; one record per line (each file is one line of JSON).
_READ_ALL = 'for f in "$1"/*.json; do [ -f "$f" ] && head -c 1048576 "$f" && echo; done; exit 0'


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of its stat), or None
    when there is no such process (or it is a zombie: it has ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            words = fh.read().rpartition(")")[2].split()
    except OSError:
        return None
    if len(words) < 20 or words[0] in ("Z", "X"):
        return None
    return words[19]


def _owner() -> dict[str, Any]:
    pid = os.getpid()
    return {"machine": socket.gethostname(), "pid": pid, "start": _start_time(pid)}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class Intent:
    """One change in progress (module docstring)."""

    change: str
    name: str
    step: str
    old: LaunchPlan | None = None
    old_last_good: LaunchPlan | None = None  # the last-good plan recorded before the change
    new: LaunchPlan | None = None
    candidates: list[str] = field(default_factory=list)
    parked: str | None = None  # the old endpoint's container id, stopped and kept aside
    extra: dict[str, Any] = field(default_factory=dict)
    owner: dict[str, Any] = field(default_factory=_owner)
    at: str = field(default_factory=_now)
    host: Host | None = field(default=None, repr=False, compare=False)

    def to_doc(self) -> dict[str, Any]:
        def plan(p: LaunchPlan | None) -> dict[str, Any] | None:
            return plans.to_doc(p) if p is not None else None

        return {
            "change": self.change,
            "name": self.name,
            "step": self.step,
            "old": plan(self.old),
            "old_last_good": plan(self.old_last_good),
            "new": plan(self.new),
            "candidates": list(self.candidates),
            "parked": self.parked,
            "extra": self.extra,
            "owner": self.owner,
            "at": self.at,
        }

    @classmethod
    def from_doc(cls, doc: Any) -> Intent | None:
        if not isinstance(doc, dict):
            return None
        change, name, step = doc.get("change"), doc.get("name"), doc.get("step")
        if change not in CHANGES or not isinstance(name, str) or not isinstance(step, str):
            return None
        if not CONTAINER_NAME.fullmatch(name):
            return None
        candidates = doc.get("candidates") or []
        if not isinstance(candidates, list) or not all(
            isinstance(c, str) and CONTAINER_NAME.fullmatch(c) for c in candidates
        ):
            return None
        parked, extra, owner = doc.get("parked"), doc.get("extra") or {}, doc.get("owner") or {}
        if parked is not None and not isinstance(parked, str):
            return None
        if not isinstance(extra, dict) or not isinstance(owner, dict):
            return None
        return cls(
            change=change,
            name=name,
            step=step,
            old=plans.from_doc(doc.get("old")),
            old_last_good=plans.from_doc(doc.get("old_last_good")),
            new=plans.from_doc(doc.get("new")),
            candidates=candidates,
            parked=parked,
            extra=extra,
            owner=owner,
            at=str(doc.get("at") or ""),
        )

    # -- what it says

    @property
    def old_hash(self) -> str | None:
        return plan_hash(self.old)

    @property
    def new_hash(self) -> str | None:
        return plan_hash(self.new)

    def describe(self) -> str:
        """``an interrupted upgrade of NAME (plan 1a2b… → 3c4d…, step switching)``."""
        plans_part = ""
        if self.old_hash or self.new_hash:
            plans_part = f"plan {self.old_hash or '-'} → {self.new_hash or '-'}, "
        return f"{self.change} of {self.name} ({plans_part}step {self.step})"

    def to_dict(self) -> dict[str, Any]:
        """What ``ps --json`` and the events show of it (no plan bodies)."""
        return {
            "change": self.change,
            "name": self.name,
            "step": self.step,
            "old_plan": self.old_hash,
            "new_plan": self.new_hash,
            "old_image": self.old.image if self.old else None,
            "new_image": self.new.image if self.new else None,
            "candidates": list(self.candidates),
            "parked": self.parked,
            "at": self.at,
        }

    # -- its owner

    def alive(self) -> bool:
        """Whether the process that wrote it may still be working on it."""
        owner = self.owner
        if owner.get("machine") == socket.gethostname():
            pid = owner.get("pid")
            if not isinstance(pid, int):
                return False
            start = _start_time(pid)
            return start is not None and start == owner.get("start")
        try:
            then = datetime.fromisoformat(self.at).timestamp()
        except ValueError:
            return False
        return time.time() - then < STALE_S

    # -- writing (the change in progress)

    def advance(self, step: str, **fields: Any) -> None:
        """The change reached ``step`` (and ``fields`` changed): written before the step's
        destructive action, so a kill during it finds the record saying so."""
        self.step = step
        for key, value in fields.items():
            setattr(self, key, value)
        self.at = _now()
        assert self.host is not None
        write(self.host, self)


def plan_hash(plan: LaunchPlan | None) -> str | None:
    if plan is None:
        return None
    return plan.labels.get(LABEL_PLAN_HASH) or plan.plan_hash


def _dir(host: Host) -> str:
    from instinct_serve.engine import hostfs

    return hostfs.join(hostfs.data_dir(host), "intents")


def _path(host: Host, name: str, change: str) -> str | None:
    if not CONTAINER_NAME.fullmatch(name) or change not in CHANGES:
        return None
    return f"{_dir(host)}/{name}.{change}.json"


def write(host: Host, intent: Intent) -> None:
    """Write the record whole (temp file, then rename): it must be there before the step
    it announces, so a failure to write it stops the change (raises)."""
    from instinct_serve.engine import hostfs

    path = _path(host, intent.name, intent.change)
    if path is None:
        return
    intent.host = host
    hostfs.makedirs(host, _dir(host))
    hostfs.write_text(host, path, json.dumps(intent.to_doc(), separators=(",", ":")))


def clear(host: Host, intent: Intent) -> None:
    path = _path(host, intent.name, intent.change)
    if path is not None:
        host.run(["rm", "-f", "--", path], timeout=30)


def present(host: Host, intent: Intent) -> bool:
    """Whether the record is still there (another settle may have ended it meanwhile)."""
    path = _path(host, intent.name, intent.change)
    return path is not None and host.exists(path)


def load_all(host: Host) -> list[Intent]:
    """Every record on the host (one command), oldest first."""
    result = host.run(["sh", "-c", _READ_ALL, "sh", _dir(host)], timeout=30)
    found: list[Intent] = []
    for line in result.stdout.splitlines():
        try:
            doc = json.loads(line[:MAX_RECORD_BYTES])
        except ValueError:
            continue
        intent = Intent.from_doc(doc)
        if intent is not None:
            intent.host = host
            found.append(intent)
    return sorted(found, key=lambda i: i.at)


def begin(
    host: Host,
    change: str,
    name: str,
    *,
    step: str,
    old: LaunchPlan | None = None,
    new: LaunchPlan | None = None,
    candidates: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> Intent:
    """Write the record of a change about to start (the old endpoint's recorded plans are
    kept in it, so an undo can put the records back as they were)."""
    record = plans.load(host, name)
    intent = Intent(
        change=change,
        name=name,
        step=step,
        old=old if old is not None else record.current,
        old_last_good=record.last_good,
        new=new,
        candidates=list(candidates or []),
        extra=dict(extra or {}),
    )
    write(host, intent)
    return intent


@contextlib.contextmanager
def change(
    host: Host,
    kind: str,
    name: str,
    *,
    device_root: str = "",
    settle: Callable[[Intent], object] | None = None,
    extra: dict[str, Any] | None = None,
    **fields: Any,
) -> Iterator[Intent]:
    """``with change(...) as intent:`` the record written first, cleared after the last
    step. Cut short by an exception (Ctrl-C, a cancelled MCP call, an unexpected error),
    the change is finished or undone at once by ``settle`` (what the next command would
    do after a kill: ``runtime.recover``), then the exception goes on."""
    if device_root:  # the stand-in device tree (tests) a relaunch needs again
        extra = {**(extra or {}), "device_root": device_root}
    intent = begin(host, kind, name, extra=extra, **fields)  # step, old, new, candidates
    try:
        yield intent
    except BaseException:
        if settle is not None:
            with contextlib.suppress(Exception):
                settle(intent)
                clear(host, intent)
        raise
    clear(host, intent)


def replacing(host: Host, plan: LaunchPlan, removed: str, device_root: str = "") -> Intent:
    """``serve --replace`` (or ``watch``'s relaunch) is about to remove ``removed`` for
    ``plan``: the record stays until ``plan`` is proven (``settled``) or its serve reports
    a failure."""
    extra = {"removed": removed, **({"device_root": device_root} if device_root else {})}
    return begin(host, "replace", plan.container_name, step="replacing", new=plan, extra=extra)


def settled(host: Host, plan: LaunchPlan) -> None:
    """``plan`` was proven and recorded as its endpoint's (``plans.save``): a ``replace``
    or ``resize`` that was bringing exactly this plan is over."""
    for kind in ("replace", "resize"):
        path = _path(host, plan.container_name, kind)
        if path is None:
            continue
        text = (host.read_text(path) or "")[:MAX_RECORD_BYTES]
        with contextlib.suppress(ValueError, InstinctError):
            intent = Intent.from_doc(json.loads(text)) if text else None
            if intent is not None and intent.new_hash == plan_hash(plan):
                clear(host, intent)
