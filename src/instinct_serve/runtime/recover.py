"""Finish or undo a change cut short: what ``ps``, ``serve``, ``rollback`` and ``watch`` do
first with every intent record (``runtime.intent``) whose process is gone.

Per change and step (the step is written before its destructive action):

- ``upgrade``/``rollback`` of one endpoint: before the switch (``candidate``) the unproven
  ``NAME-next`` and its records are removed, the old endpoint was never touched; during it
  (``switching``) the new endpoint on the real port is kept if it was proven there, else
  removed and the old one (kept aside, stopped, as ``NAME-prev``) started again under its
  name, the records put back as they were; after it (``switched``) the switch is finished:
  the new plan recorded with the old as last good, the old container removed;
- ``upgrade``/``rollback`` of a replica group: ``candidate``: the new replicas removed;
  ``routing``: the router pointed at the new replicas when all run (finish), else back at
  the old ones (undo); ``switched``: the old replicas removed;
- ``resize`` (a group served again with ``--replace``): the new plan served to the end
  (its running replicas are reused), since what it replaced is gone;
- ``replace``: the old endpoint put back when it was kept aside, else the new plan proven
  (or launched) to the end;
- ``prune``: named with what it had left; the cache command finishes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.runtime import journal, verified
from instinct_serve.runtime.intent import Intent, clear, load_all


def resolve(
    host: Host,
    note: Callable[[str], None] | None = None,
    *,
    names: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Every interrupted change on the host (or of ``names``), finished or undone; each
    named through ``note``. What was found, for a command's JSON (``interrupted``)."""
    say = note or (lambda _text: None)
    found: list[dict[str, Any]] = []
    try:
        records = load_all(host)
    except InstinctError:
        return found
    busy = {c.name for c in records if c.alive()}
    with contextlib.suppress(InstinctError):
        for stale in sweep(host, busy):
            say(f"removed the stale records of {stale} (no such container)")
    for change in records:
        if names is not None and change.name not in names:
            continue
        doc = change.to_dict()
        if change.alive():
            doc["resolved"] = "in progress"
            found.append(doc)
            continue
        failed_before = change.extra.get("failed")
        try:
            if failed_before:  # tried once: named, not retried at every command
                raise InstinctError(str(failed_before), id="recovery_failed")
            doc["resolved"] = settle(host, change)
        except InstinctError as exc:
            doc["resolved"] = None
            doc["error"] = exc.message
            if not failed_before:
                with contextlib.suppress(InstinctError):
                    change.advance(change.step, extra={**change.extra, "failed": exc.message})
        found.append(doc)
        outcome = doc["resolved"] or f"not resolved: {doc.get('error')}"
        say(f"an interrupted {change.describe()}: {outcome}")
    return found


# $1: the data directory; the names of the candidates' and kept-aside endpoints' records
_ASIDE = (
    'cd "$1" 2>/dev/null || exit 0; for f in plans/*-next.json plans/*-prev.json '
    "verified/*-next.json verified/*-prev.json keys/*-next keys/*-prev; do "
    '[ -f "$f" ] && { f="${f#*/}"; echo "${f%.json}"; }; done; exit 0'
)


def sweep(host: Host, busy: set[str]) -> list[str]:
    """Records of ``NAME-next``/``NAME-prev`` endpoints whose container is gone (left by
    an earlier version, or by a change whose record is gone): removed. Those of a change
    in progress (``busy``: its endpoint's name) are left alone."""
    from instinct_serve.engine import hostfs
    from instinct_serve.runtime.docker import Docker
    from instinct_serve.runtime.upgrade import CANDIDATE_SUFFIX, PARKED_SUFFIX, forget_candidate

    result = host.run(["sh", "-c", _ASIDE, "sh", hostfs.data_dir(host)], timeout=30)
    docker = Docker(host)
    removed = []
    for name in sorted(set(result.stdout.split())):
        base = name.removesuffix(CANDIDATE_SUFFIX).removesuffix(PARKED_SUFFIX)
        if base in busy or docker.get(name) is not None:
            continue
        forget_candidate(host, name)
        removed.append(name)
    return removed


def settle(host: Host, change: Intent, *, device_root: str | None = None) -> str | None:
    """Finish or undo one change (module docstring): what was done, and its record
    cleared; None when it stays (a prune, named only)."""
    if device_root is not None:
        change.extra.setdefault("device_root", device_root)
    if change.change in ("upgrade", "rollback"):
        done = _group(host, change) if change.extra.get("group") else _switch(host, change)
    elif change.change == "resize":
        done = _resize(host, change)
    elif change.change == "replace":
        done = _replace(host, change)
    else:
        return (
            f"{len(change.extra.get('left') or [])} cache(s) were still to remove: "
            "`instinct cache prune` again finishes it"
        )
    clear(host, change)
    journal.record(
        host,
        change.name,
        "interrupted",
        change=change.change,
        step=change.step,
        old_plan=change.old_hash,
        new_plan=change.new_hash,
        resolved=done,
    )
    return done


def _root(change: Intent) -> str:
    root = change.extra.get("device_root")
    return root if isinstance(root, str) else ""


def _proven_new(host: Host, change: Intent) -> bool:
    """The endpoint runs the change's new plan on its real port, proven there."""
    from instinct_serve.runtime.docker import Docker
    from instinct_serve.runtime.docker_backend import container_instance

    info = Docker(host).get(change.name)
    if info is None or not info.state.running or info.id == change.parked:
        return False
    doc = verified.load(host, change.name, container_instance(info))
    wanted = {change.new_hash, change.new.plan_hash if change.new else None} - {None}
    return doc is not None and doc.get("plan_hash") in wanted


def _remove_candidates(host: Host, change: Intent) -> list[str]:
    from instinct_serve.runtime.docker import Docker
    from instinct_serve.runtime.upgrade import forget_candidate

    docker = Docker(host)
    removed = []
    for name in change.candidates:
        info = docker.get(name)
        if info is not None and info.managed and info.id != change.parked:
            docker.stop(info.id)
            removed.append(name)
        forget_candidate(host, name)
    return removed


def _switch(host: Host, change: Intent) -> str:
    from instinct_serve.runtime.upgrade import finish_switch, undo_switch

    name = change.name
    if change.step == "candidate":
        removed = _remove_candidates(host, change)
        what = f"removed the unproven {', '.join(removed)}" if removed else "nothing launched"
        return f"undone before the switch: {what}; {name} still serves the old plan"
    if change.step == "switched" or _proven_new(host, change):
        finish_switch(host, change)
        return f"finished: {name} serves the new plan, the old one is kept as last good"
    back = undo_switch(host, change, keep_failed=False)
    if back == "the old endpoint is gone" and change.old is not None:
        return "undone: " + _serve_to_end(host, change, change.old)
    return f"undone: the unproven new plan removed, {name}'s old plan {back}"


def _serve_to_end(host: Host, change: Intent, plan: Any) -> str:
    """Serve ``plan`` again (a relaunch; its running endpoint is reused): its status."""
    from instinct_serve.runtime.rollback import backend_for_plan
    from instinct_serve.runtime.settings import ServeSettings
    from instinct_serve.runtime.upgrade import deploy_replacing

    backend = backend_for_plan(host, plan, _root(change))
    outcome = deploy_replacing(host, plan, backend, ServeSettings(), lambda _event: None)
    if not outcome.ok:
        raise InstinctError(
            f"{plan.container_name} could not be served again: {outcome.status}",
            fix=f"`instinct logs {plan.container_name}`, then serve it again",
            id="recovery_failed",
        )
    return f"{plan.container_name} served again ({plan.image})"


def _group(host: Host, change: Intent) -> str:
    from instinct_serve.plan.replicas import haproxy_config
    from instinct_serve.runtime import plans
    from instinct_serve.runtime.docker import Docker
    from instinct_serve.runtime.group import reload_router, write_config
    from instinct_serve.runtime.upgrade_group import remove_replicas

    old, new, name = change.old, change.new, change.name
    assert old is not None and new is not None and old.group and new.group
    docker = Docker(host)
    old_names = [m.name for m in old.group.members]
    new_names = [m.name for m in new.group.members]
    new_only = [n for n in new_names if n not in old_names]
    old_only = [n for n in old_names if n not in new_names]
    if change.step == "candidate":
        remove_replicas(docker, new_only)
        return f"undone before the switch: removed {', '.join(new_only)}; {name} is untouched"
    running = all((i := docker.get(n)) is not None and i.state.running for n in new_only)
    if change.step == "routing" and not running:
        write_config(host, name, haproxy_config(old))
        with contextlib.suppress(InstinctError):
            reload_router(docker, name)
        plans.save(host, old, last_good=change.old_last_good)
        remove_replicas(docker, new_only)
        return f"undone: {name} routes to its old replicas again"
    if change.step == "routing":
        write_config(host, name, haproxy_config(new))
        reload_router(docker, name)
    plans.save(host, new, last_good=old)
    remove_replicas(docker, old_only)
    return f"finished: {name} routes to {', '.join(new_names)}; the old plan is the last good"


def _resize(host: Host, change: Intent) -> str:
    from instinct_serve.runtime.deploying import deploy_to_end
    from instinct_serve.runtime.group import GroupDeployer
    from instinct_serve.runtime.settings import ServeSettings

    plan = change.new
    assert plan is not None and plan.group is not None
    settings = ServeSettings(replace=True)
    outcome = deploy_to_end(GroupDeployer(host, plan, settings, device_root=_root(change)))
    if not outcome.ok:
        raise InstinctError(
            f"the group {change.name} could not be served with {len(plan.group.members)} "
            f"replicas: {outcome.status}",
            fix=f"`instinct ps`, `instinct logs {change.name}`; serve it again with --replace",
            id="recovery_failed",
        )
    return f"finished: {change.name} serves {len(plan.group.members)} replicas"


def _replace(host: Host, change: Intent) -> str:
    from instinct_serve.runtime.upgrade import undo_switch

    if _proven_new(host, change):
        return f"finished: {change.name} serves the new plan"
    if change.parked is not None:
        back = undo_switch(host, change, keep_failed=False)
        return f"undone: the unproven new plan removed, {change.name}'s old plan {back}"
    plan = change.new or change.old
    if plan is None:
        return "nothing to do: no plan recorded"
    from instinct_serve.runtime.docker import Docker

    left = Docker(host).get(change.name)
    if left is not None and left.managed and not left.state.running:
        return f"over: the new plan had failed ({change.name} kept stopped for its log)"
    return "finished: " + _serve_to_end(host, change, plan)
