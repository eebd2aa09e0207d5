"""``instinct rollback NAME``: the last good plan (the one an upgrade replaced) served again
in place of the current one, which becomes the last good (a second rollback undoes the
first). A replica group swaps back behind its router (``runtime.upgrade_group``); one
endpoint is relaunched on its port (``runtime.upgrade``).
"""

from __future__ import annotations

from instinct_serve.errors import UsageError
from instinct_serve.hosts import Host
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import journal, plans
from instinct_serve.runtime.backend import Backend
from instinct_serve.runtime.documents import ServeOutcome
from instinct_serve.runtime.events import EventSink
from instinct_serve.runtime.settings import ServeSettings
from instinct_serve.runtime.upgrade import Clock, deploy_replacing
from instinct_serve.runtime.upgrade_group import swap


def rollback(
    host: Host, name: str, settings: ServeSettings, sink: EventSink, *, device_root: str = ""
) -> ServeOutcome:
    """Serve ``name``'s last good plan in place of its current one; the current one becomes
    the last good (a second rollback undoes the first)."""
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
    clock = Clock(sink)
    outcome = deploy_replacing(host, record.last_good, backend, settings, clock)
    if outcome.status == "ready":
        plans.save(host, outcome.plan, last_good=record.current)
        journal.record(
            host, name, "rolled_back", downtime_s=clock.downtime_s, image=outcome.plan.image
        )
        outcome.figures = {**outcome.figures, "downtime_s": clock.downtime_s}
    return outcome


def backend_for_plan(host: Host, plan: LaunchPlan, device_root: str = "") -> Backend:
    """The backend a recorded plan runs on (``device_root``: the stand-in device tree of
    ``--root``, as serve's)."""
    if plan.launcher == "native":
        from instinct_serve.engine.discovery import discover, require_usable
        from instinct_serve.runtime.native import NativeBackend

        return NativeBackend(host, require_usable(discover(host)).vllm_command)
    from instinct_serve.runtime.docker_backend import DockerBackend

    return DockerBackend(host, device_root=device_root)
