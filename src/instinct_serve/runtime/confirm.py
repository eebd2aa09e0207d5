"""One rule for anything destructive: say what will be touched and what kept, then ask.

A ``Change`` is that summary: every container, process, API key and record a command will
stop or remove (name, id, owner, model, port), and what it keeps. Its ``hash`` covers the
action, the host and what is touched, so an approval is of exactly that: if anything
else would be touched by the time the user agrees (an endpoint replaced meanwhile, another
one on the port), the approval no longer holds. What is kept is said, not hashed: it is
not acted on. The front ends apply one rule (``cli.common.confirm_change``: ask, or
``--yes``, or refuse without a terminal; ``approval`` for MCP: ``confirm=true`` and the
summary's ``change_hash``, as ``serve`` takes ``plan_hash``) to ``stop``, ``serve
--replace`` and ``rollback``. The builders here read the host only; they change nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError, UsageError

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.plan.model import LaunchPlan
    from instinct_serve.runtime.backend import Backend
    from instinct_serve.runtime.endpoints import Row


@dataclass(frozen=True)
class Item:
    """One thing a change touches or keeps."""

    kind: str  # container, process, router, replica, key, record, plan
    name: str
    id: str | None = None
    owner: str | None = None
    model: str | None = None
    port: int | None = None

    def describe(self) -> str:
        facts = [
            f"id {self.id}" if self.id else "",
            f"owner {self.owner}"
            if self.owner
            else ("owner unknown" if self.kind in _RUNS else ""),
            f"model {self.model}" if self.model else "",
            f"port {self.port}" if self.port else "",
        ]
        said = ", ".join(f for f in facts if f)
        return f"{self.kind} {self.name}" + (f" ({said})" if said else "")


_RUNS = frozenset({"container", "process", "router", "replica"})


@dataclass(frozen=True)
class Change:
    """What a destructive command will touch and keep (see the module docstring)."""

    action: str  # stop, replace, rollback
    host: str
    touch: tuple[Item, ...] = ()
    keep: tuple[Item, ...] = ()
    # names given that nothing is done to, with why (not_found, not_managed)
    skipped: tuple[dict[str, Any], ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not self.touch

    @property
    def hash(self) -> str:
        body = {"action": self.action, "host": self.host, "touch": [asdict(i) for i in self.touch]}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "host": self.host,
            "touch": [asdict(i) for i in self.touch],
            "keep": [asdict(i) for i in self.keep],
            "skipped": list(self.skipped),
            "change_hash": self.hash,
        }

    def lines(self) -> list[str]:
        """The human summary, one line each (plain text: the caller escapes it)."""
        out = [f"{self.action} on {self.host} will stop or remove:"]
        out += [f"  - {item.describe()}" for item in self.touch]
        if self.keep:
            out.append("and keep:")
            out += [f"  - {item.describe()}" for item in self.keep]
        out += [f"  (not {self.action}: {s['name']}: {s['message']})" for s in self.skipped]
        return out


def approval(change: Change, *, confirm: bool, change_hash: str | None) -> dict[str, Any] | None:
    """MCP's rule: None when the caller approved exactly ``change`` (``confirm`` and its
    hash), else the summary document to show the user (nothing was done). ``confirm``
    without the hash, or with the hash of another change, is refused."""
    if change.empty or (confirm and change_hash == change.hash):
        return None
    if confirm and change_hash is None:
        raise UsageError(
            f"{change.action} with confirm=true needs the change_hash of the summary the "
            "user approved",
            fix="call without confirm to get the summary, show it to the user, then call "
            "again with confirm=true and its change_hash",
            id="approval_required",
            details={"change": change.to_dict()},
        )
    if change_hash is not None:
        raise InstinctError(
            f"what {change.action} would touch changed since the summary was approved "
            f"(change_hash {change_hash} -> {change.hash}); nothing was done",
            fix="show the new summary (in details) to the user, then call again with its "
            "change_hash",
            id="change_changed",
            details={"approved": change_hash, "now": change.hash, "change": change.to_dict()},
        )
    return {
        "confirmed": False,
        "done": False,
        "change": change.to_dict(),
        "change_hash": change.hash,
        "next": "show this summary to the user; once they agree, call again with the same "
        f"arguments, confirm=true and change_hash={change.hash}",
    }


# --------------------------------------------------------------------------- builders


def _kind(row: Row) -> str:
    if row.role in ("router", "replica"):
        return row.role
    return "container" if row.engine == "docker" else "process"


def _items(host: Host, row: Row, proofs: dict[str, Any]) -> list[Item]:
    """An endpoint (a group: its router and replicas), its API keys and proof records."""
    from instinct_serve.runtime import keys

    out: list[Item] = []
    for each in (row, *row.members):
        out.append(Item(_kind(each), each.name, each.id, row.owner, each.model, each.port))
    for each in (row, *row.members):
        try:
            path = keys.key_path(host, each.name)
        except InstinctError:
            continue
        if each.engine == "docker" and host.exists(path):
            out.append(Item("key", path, owner=row.owner))
        if each.name in proofs:
            out.append(Item("record", f"proof of {each.name}", owner=row.owner))
    return out


def _kept(row: Row) -> Item:
    return Item(_kind(row), row.name, row.id, row.owner, row.model, row.port)


@dataclass
class StopSelection:
    """``stop``: what it will stop (top-level names, in order) and the summary to approve."""

    change: Change
    names: list[str]


def _proofs(host: Host) -> dict[str, Any]:
    from instinct_serve.runtime import verified

    try:
        return verified.load_all(host)
    except InstinctError:
        return {}


def stop_selection(host: Host, names: Sequence[str], *, everyone: bool) -> StopSelection:
    """The endpoints ``stop NAME...`` (any owner's: named on purpose) or ``stop --all``
    (no names: the caller's own, everyone's with ``everyone``; a native endpoint while it
    runs or processes of it survive) would stop; names that are unknown or not this tool's
    are ``skipped``."""
    from instinct_serve.runtime.endpoints import list_endpoints
    from instinct_serve.runtime.owner import caller, is_mine

    found_all = [(name, _find(host, name)) for name in dict.fromkeys(names)]
    skipped = [{"name": n, **f} for n, f in found_all if isinstance(f, dict)]
    ours = [f for _n, f in found_all if not isinstance(f, dict)]
    listed = not names or ours  # the listing: for --all, and for a group's members
    rows = list_endpoints(host, health=False, everyone=True).rows if listed else []
    chosen: list[Row] = []
    if not names:
        me = caller()
        chosen = [r for r in rows if (everyone or is_mine(r.owner, me))]
        chosen = [r for r in chosen if r.engine == "docker" or r.running or r.survivors]
    by_name = {r.name: r for r in rows}
    for engine, found in ours:
        row = by_name.get(found.name) or _row_of(found, engine)
        if row not in chosen:
            chosen.append(row)
    proofs = _proofs(host) if chosen else {}
    touch = [item for row in chosen for item in _items(host, row, proofs)]
    keep = [_kept(r) for r in rows if r not in chosen] if not names else []
    change = Change("stop", host.name, tuple(touch), tuple(keep), tuple(skipped))
    return StopSelection(change, [r.name for r in chosen])


def _find(host: Host, name: str) -> tuple[str, Any] | dict[str, str]:
    """``endpoints.find``'s (engine, endpoint) for one of ours, else why not (a dict)."""
    from instinct_serve.runtime.endpoints import find

    try:
        engine, found = find(host, name)
    except InstinctError as exc:
        return {"status": exc.id, "message": exc.message}
    if engine == "docker" and not found.managed:
        why = (
            f"refusing to stop container {found.name}: instinct-serve did not create it "
            "(no instinct-serve.managed=true label)"
        )
        return {"status": "not_managed", "message": why}
    return engine, found


def _row_of(found: Any, engine: str) -> Row:
    """A row for an endpoint ``ps`` does not list as one (a replica, a multi-node rank)."""
    from instinct_serve.runtime.endpoints import Row
    from instinct_serve.runtime.owner import of_labels, of_meta

    if engine == "docker":
        state = found.state
        return Row(
            name=found.name,
            engine=engine,
            model=found.model,
            port=found.port,
            status=state.status,
            running=state.running,
            uptime_s=None,
            health=None,
            id=found.short_id,
            owner=of_labels(found.labels),
        )
    meta = found.meta
    port = meta.get("port")
    return Row(
        name=found.name,
        engine=engine,
        model=str(meta.get("model") or "") or None,
        port=port if isinstance(port, int) else None,
        status="",
        running=True,
        uptime_s=None,
        health=None,
        owner=of_meta(meta),
    )


def replace_change(host: Host, plan: LaunchPlan, backend: Backend) -> Change:
    """What ``serve --replace`` would stop and remove to free ``plan``'s port and name: our
    endpoints holding them (a replica group whole: its router and every replica), not one
    of this very plan (reused, not replaced). Foreign holders are refused, never touched."""
    from instinct_serve.plan.labels import LABEL_PLAN_HASH, LABEL_ROLE, label_text
    from instinct_serve.runtime.claim import routed_group
    from instinct_serve.runtime.docker import Docker
    from instinct_serve.runtime.owner import of_labels, of_meta

    wanted = plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)
    touch: list[Item] = []
    for occ in backend.occupants(plan):
        target = occ.target
        if target is None or not occ.managed or (target.running and target.plan_hash == wanted):
            continue
        if target.engine != "docker":
            found = _native(host, target.name)
            owner = of_meta(found.meta) if found is not None else None
            touch.append(Item("process", target.name, None, owner, target.model, target.port))
            continue
        info = Docker(host).get(target.handle)
        group = routed_group(host, target) or ([info] if info is not None else [])
        for each in group:
            kind = label_text(each.labels, LABEL_ROLE) if len(group) > 1 else "container"
            owner = of_labels(each.labels)
            item = Item(kind or "container", each.name, each.short_id, owner, each.model, each.port)
            touch.append(item)
    return Change("replace", host.name, tuple(dict.fromkeys(touch)))


def _native(host: Host, name: str) -> Any:
    from instinct_serve.engine import launcher

    try:
        return launcher.load(host, name)
    except InstinctError:
        return None


def rollback_change(host: Host, name: str) -> Change:
    """What ``rollback NAME`` replaces: the endpoint serving the current plan (a group
    whole), once the last good plan is proven; the last good plan is what it keeps. Empty
    when there is nothing to roll back to (the rollback itself then says why)."""
    from instinct_serve.runtime import plans
    from instinct_serve.runtime.endpoints import list_endpoints

    record = plans.load(host, name)
    if record.last_good is None:
        return Change("rollback", host.name)
    rows = list_endpoints(host, health=False, everyone=True).rows
    proofs = _proofs(host)
    touch = [item for row in rows if row.name == name for item in _items(host, row, proofs)]
    current = record.current
    if current is not None:
        touch.append(Item("plan", f"current plan of {name}", current.plan_hash, None,
                          current.model, current.port))  # fmt: skip
    good = record.last_good
    keep = Item("plan", f"last good plan of {name}", good.plan_hash, None, good.model, good.port)
    return Change("rollback", host.name, tuple(touch), (keep,))
