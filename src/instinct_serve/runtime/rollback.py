"""``instinct rollback NAME``: the last good plan (the one an upgrade replaced) served again
in place of the current one, which becomes the last good (a second rollback undoes the
first). It goes the way ``serve --upgrade`` does: a replica group swaps back behind its
router (``runtime.upgrade_group``); one endpoint's last good plan is first launched and
proven beside it as ``NAME-next`` on a spare port, and only then switched onto the real
port (``runtime.upgrade``). A failed rollback leaves the current endpoint serving and the
records unchanged. An interrupted change on the host is finished or undone first
(``runtime.recover``).
"""

from __future__ import annotations

from instinct_serve.errors import UsageError
from instinct_serve.hosts import Host
from instinct_serve.runtime import plans
from instinct_serve.runtime.documents import ServeOutcome
from instinct_serve.runtime.events import EventSink, Note
from instinct_serve.runtime.settings import ServeSettings
from instinct_serve.runtime.upgrade import backend_for_plan, upgrade
from instinct_serve.runtime.upgrade_group import swap


def rollback(
    host: Host, name: str, settings: ServeSettings, sink: EventSink, *, device_root: str = ""
) -> ServeOutcome:
    """Serve ``name``'s last good plan in place of its current one; the current one becomes
    the last good (a second rollback undoes the first)."""
    from instinct_serve.runtime.recover import resolve

    resolve(host, lambda text: sink(Note(message=text)))
    record = plans.load(host, name)
    if record.last_good is None:
        raise UsageError(
            f"no plan to roll back to for {name} on {host.name}",
            fix="a last-good plan is kept by `instinct serve ... --upgrade`",
            id="no_last_good",
        )
    if record.last_good.group is not None and record.current is not None:
        if record.current.group is None:
            raise UsageError(
                f"{name} is one endpoint now and was a replica group: rollback swaps "
                "replicas behind a router, or relaunches one endpoint, not one for the other",
                fix=f"`instinct stop {name}`, then serve the plan you want",
                id="no_last_good",
            )
        return swap(
            host,
            record.current,
            record.last_good,
            settings,
            sink,
            device_root=device_root,
            kind="rolled_back",
        )
    backend = backend_for_plan(host, record.last_good, device_root)
    return upgrade(host, record.last_good, backend, settings, sink, kind="rolled_back")
