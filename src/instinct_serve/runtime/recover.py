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
  (or launched) to the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.runtime import journal
from instinct_serve.runtime.intent import Intent, clear, load_all, present


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
        if not present(host, change):  # ended by the settle of another (a group's)
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


def settle(host: Host, change: Intent) -> str:
    """Finish or undo one change (module docstring): what was done, and its record
    cleared."""
    if change.change in ("upgrade", "rollback"):
        from instinct_serve.runtime.upgrade import settle_switch
        from instinct_serve.runtime.upgrade_group import settle_group

        group = change.extra.get("group")
        done = settle_group(host, change) if group else settle_switch(host, change)
    elif change.change == "resize":
        done = _resize(host, change)
    else:
        done = _replace(host, change)
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


def _resize(host: Host, change: Intent) -> str:
    from instinct_serve.runtime.deploying import deploy_to_end
    from instinct_serve.runtime.group import GroupDeployer
    from instinct_serve.runtime.settings import ServeSettings
    from instinct_serve.runtime.upgrade import device_root

    plan = change.new
    assert plan is not None and plan.group is not None
    settings = ServeSettings(replace=True)
    root = device_root(change)
    outcome = deploy_to_end(GroupDeployer(host, plan, settings, device_root=root))
    if not outcome.ok:
        raise InstinctError(
            f"the group {change.name} could not be served with {len(plan.group.members)} "
            f"replicas: {outcome.status}",
            fix=f"`instinct ps`, `instinct logs {change.name}`; serve it again with --replace",
            id="recovery_failed",
        )
    return f"finished: {change.name} serves {len(plan.group.members)} replicas"


def _replace(host: Host, change: Intent) -> str:
    from instinct_serve.runtime.upgrade import proven_new, serve_again, undo_switch

    if proven_new(host, change):
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
    return "finished: " + serve_again(host, change, plan)
