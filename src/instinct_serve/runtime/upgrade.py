"""``serve --upgrade`` of one endpoint (no router): a new plan proven beside the old one,
then a relaunch on the real port; and what the group's upgrade (``runtime.upgrade_group``)
shares with it: the spare ports, the candidate's name, the switch clock.

A running container's published ports cannot be changed, and two containers cannot
publish the same host port:

1. the new plan is launched beside the old one as ``NAME-next`` on a spare port and goes
   through everything serve does. If it fails, it is stopped (kept for its log) and the
   old endpoint is never touched: same container, still answering;
2. once proven, the candidate is stopped (its GPU memory freed), and the plan is served
   on the real port in place of the old endpoint (serve's ``--replace`` path). The image
   is pulled and the weights are on disk and in the page cache by then, so the outage is
   one warm start of the server (measured and reported as ``downtime_s``), not a cold one;
3. the old plan is kept as ``last_good`` (``runtime.plans``); ``rollback``
   (``runtime.rollback``) serves it again the same way. Should the real-port launch itself
   fail, the old plan is served again at once (an automatic rollback).

This path is not zero-downtime: that needs the router (``--replicas N``, ``runtime.
upgrade_group``); a single endpoint served without one keeps no proxy in every request's
path.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeVar

from instinct_serve import vllm_args
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import LABEL_PLAN_HASH, LABEL_PORT
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import journal, plans
from instinct_serve.runtime.backend import Backend, Target
from instinct_serve.runtime.claim import discard_target
from instinct_serve.runtime.deploying import deploy_to_end, reuse_once
from instinct_serve.runtime.documents import ServeOutcome
from instinct_serve.runtime.events import EventSink, Healthy, Note, ServeEvent
from instinct_serve.runtime.settings import ServeSettings

if TYPE_CHECKING:
    from instinct_serve.runtime.serve import Deployer

CANDIDATE_SUFFIX = "-next"
SPARE_PORTS = range(1, 200)  # offsets from the real port tried for the candidate
SPARE_PORT_TRIES = 3  # launches on fresh spare ports when one was taken meanwhile
T = TypeVar("T")


@dataclass
class Clock:
    """From the start of the switch (the old endpoint is stopped first thing) to the new
    one's first /health 200: the outage clients see, an upper bound."""

    sink: EventSink
    stopped_at: float = field(default_factory=time.monotonic)
    healthy_at: float | None = None

    def __call__(self, event: ServeEvent) -> None:
        if isinstance(event, Healthy) and self.healthy_at is None:
            self.healthy_at = time.monotonic()
        self.sink(event)

    @property
    def downtime_s(self) -> float | None:
        if self.healthy_at is None:
            return None
        return round(self.healthy_at - self.stopped_at, 3)


def spare_port(host: Host, port: int, taken: Collection[int] = ()) -> int:
    """A port near ``port`` that nothing listens on, on the endpoint's host (and not one
    of ``taken``, already given to another new replica)."""
    from instinct_serve.runtime.docker import Docker

    docker = Docker(host)
    for offset in SPARE_PORTS:
        candidate = port + offset
        if candidate < 65536 and candidate not in taken and not docker.listeners(candidate):
            return candidate
    raise InstinctError(
        f"no free port near {port} on {host.name} for the new plan to start beside the old",
        fix="free a port above it, or upgrade with `serve --replace` (with an outage)",
        id="port_in_use",
    )


def spare_ports(host: Host, port: int, count: int, taken: Collection[int] = ()) -> list[int]:
    """``count`` different spare ports near ``port`` (``spare_port``), none of ``taken``."""
    ports: list[int] = []
    for _ in range(count):
        ports.append(spare_port(host, port, [*taken, *ports]))
    return ports


def on_spare_ports(
    host: Host,
    port: int,
    count: int,
    launch: Callable[[list[int]], T],
    sink: EventSink,
    taken: Collection[int] = (),
) -> T:
    """``launch`` on ``count`` spare ports near ``port``, none of ``taken``. Nothing
    listens on them when they are chosen, but a connection's local port or another program
    can take one before docker binds it (``port_in_use``): those are passed over and the
    launch is made again on others (``SPARE_PORT_TRIES`` in all). ``launch`` leaves nothing
    behind when it raises (a container docker could not start is removed)."""
    avoid: list[int] = list(taken)
    for attempt in range(1, SPARE_PORT_TRIES + 1):
        ports = spare_ports(host, port, count, avoid)
        try:
            return launch(ports)
        except InstinctError as exc:
            if exc.id != "port_in_use" or attempt == SPARE_PORT_TRIES:
                raise
            avoid += ports
            sink(
                Note(
                    message=f"a spare port was taken before the launch ({exc.message}): "
                    "trying other ports"
                )
            )
    raise AssertionError("unreachable")


def candidate_of(plan: LaunchPlan, port: int) -> LaunchPlan:
    """The new plan under ``NAME-next`` on ``port``, with labels of its own (the real
    plan's hash and port would make a concurrent serve take it for the endpoint)."""
    cand = copy.deepcopy(plan)
    cand.container_name = plan.container_name + CANDIDATE_SUFFIX
    cand.port = port
    if vllm_args.has(cand.vllm_args, "--port"):  # the server's own port is the published one
        cand.vllm_args = vllm_args.set_flag(cand.vllm_args, "--port", str(port))
    cand.labels = {k: v for k, v in plan.labels.items() if k not in (LABEL_PLAN_HASH, LABEL_PORT)}
    return cand


def _deployer(
    host: Host, plan: LaunchPlan, backend: Backend, settings: ServeSettings, sink: EventSink
) -> Deployer:
    from instinct_serve.runtime.serve import Deployer

    return Deployer(host, plan, backend, settings, sink=sink)


def deploy_replacing(
    host: Host, plan: LaunchPlan, backend: Backend, settings: ServeSettings, sink: EventSink
) -> ServeOutcome:
    """Serve ``plan`` to the end, replacing what holds its port or name (ours only); what
    this run launched is removed if it is interrupted."""
    return deploy_to_end(
        _deployer(host, plan, backend, replace(settings, replace=True, detach=False), sink)
    )


def recorded_plan(host: Host, name: str, backend: Backend) -> tuple[Target, LaunchPlan]:
    """The running endpoint ``name`` and the plan it was proven with; ``UsageError`` when
    there is nothing of ours to upgrade, a group, or no record to roll back to."""
    old = backend.target(name)
    if old is None or not old.managed or not old.running:
        raise UsageError(
            f"nothing to upgrade: no running instinct-serve endpoint named {name} on {host.name}",
            fix="serve it without --upgrade (or name the running one with --name)",
            id="not_found",
        )
    old_plan = plans.load(host, name).current
    if old_plan is not None and old_plan.group is not None and old_plan.group.mode == "replicas":
        raise UsageError(
            f"{name} is a replica group behind a router, and the new plan is one endpoint: "
            "an upgrade keeps the endpoint's shape",
            fix=f"upgrade with --replicas {old_plan.group.count} (the router swaps the "
            f"replicas), or replace the group with an outage: `instinct stop {name}`, then serve",
            id="bad_usage",
        )
    if old_plan is None or old_plan.labels.get(LABEL_PLAN_HASH) != old.plan_hash:
        raise UsageError(
            f"{name} runs a plan this tool has no record of (served by an earlier version, "
            "or relaunched by hand): there would be nothing to roll back to",
            fix=f"serve its current plan once more (it is reused and recorded), or replace "
            f"it without a way back: `instinct serve ... --name {name} --replace`",
            id="plan_not_recorded",
        )
    return old, old_plan


def upgrade(
    host: Host,
    plan: LaunchPlan,
    backend: Backend,
    settings: ServeSettings,
    sink: EventSink,
) -> ServeOutcome:
    """Serve ``plan`` in place of the running endpoint of the same name (module docstring)."""
    name = plan.container_name
    old, old_plan = recorded_plan(host, name, backend)
    wanted = plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)
    if wanted == old.plan_hash:
        sink(Note(message=f"{name} already runs this plan: nothing to upgrade"))
        reused = reuse_once(_deployer(host, plan, backend, settings, sink))
        if reused is not None:
            return reused

    def launch(ports: list[int]) -> tuple[LaunchPlan, ServeOutcome]:
        cand = candidate_of(plan, ports[0])
        sink(
            Note(
                message=f"starting the new plan beside {name} as {cand.container_name} on "
                f"port {cand.port}"
            )
        )
        return cand, deploy_replacing(host, cand, backend, settings, sink)

    cand, proven = on_spare_ports(host, plan.port, 1, launch, sink)
    if proven.status not in ("ready", "reused"):
        left = backend.target(cand.container_name)
        if left is not None and left.running:  # a timeout leaves it running: not here
            discard_target(host, left, keep=True)
        note = f"{name} still serves the old plan, untouched"
        proven.notes.append(note)
        sink(Note(message=note))
        why = proven.failure.cause if proven.failure else proven.status
        journal.record(host, name, "upgrade_failed", why=why, candidate=cand.container_name)
        return proven
    cand_target = backend.target(cand.container_name)
    if cand_target is not None:
        discard_target(host, cand_target, keep=False)
    forget_candidate(host, cand.container_name)
    clock = Clock(sink)
    final = deploy_replacing(host, plan, backend, settings, clock)
    if final.status != "ready":
        sink(Note(message=f"the new plan failed on port {plan.port}: serving the old one again"))
        journal.record(
            host, name, "upgrade_failed", why=final.failure.cause if final.failure else final.status
        )
        back = deploy_replacing(host, old_plan, backend, settings, sink)
        journal.record(host, name, "rolled_back", status=back.status, automatic=True)
        final.notes.append(f"rolled back to the old plan: {back.status}")
        return final
    plans.save(host, final.plan, last_good=old_plan)
    journal.record(
        host,
        name,
        "upgraded",
        downtime_s=clock.downtime_s,
        image=final.plan.image,
        previous_image=old_plan.image,
    )
    final.notes.append(
        f"switched over: {name} was down {clock.downtime_s} s (old stopped → new healthy); "
        f"the old plan is kept: `instinct rollback {name}` returns to it"
    )
    final.figures = {**final.figures, "downtime_s": clock.downtime_s}
    return final


def forget_candidate(host: Host, name: str) -> None:
    """The candidate's records (key, proof) are of no use once it is gone."""
    from instinct_serve.runtime.endpoints import _forget_key, _forget_record

    _forget_key(host, name)
    _forget_record(host, name)
