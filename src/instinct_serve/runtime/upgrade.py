"""``serve --upgrade`` and ``rollback``: a new plan proven beside the old one, then swapped.

**Behind a router (a replica group, ``upgrade_group``): zero downtime.** The router holds
the public port and never lets go of it:

1. the new replicas start beside the old ones on spare loopback ports, as ``NAME-next-rI``
   (or back as ``NAME-rI`` when the old ones are the ``-next`` ones; ``plan.replicas.
   moved``), and each goes through everything serve does (``GroupDeployer``: start-up,
   /health, warm-up, coherence, a known failure relaunched once with its fix). A failed
   one is kept stopped for its log, the other new ones are removed, and the old group is
   never touched: same containers, same router configuration;
2. once all are proven, the router's configuration is rewritten to them and HAProxy
   reloads gracefully (master-worker mode, SIGUSR2: ``runtime.group.reload_router``): its
   new worker takes the listening socket over from the old one, which finishes the
   requests it holds and exits; then the old replicas are removed
   (``figures.switch_s``, ``drain_s``);
3. the old plan is kept as ``last_good``; ``rollback`` swaps back the same way.

Old and new replicas run together for a while, on the same GPUs unless ``--gpus`` says
otherwise. When a GPU cannot hold both (the sum of their ``--gpu-memory-utilization``
shares passes 1: ``check_fits_beside``), two or more replicas on the same GPU sets are
replaced one at a time (``_roll``: replica I out of rotation by a reload, drained, removed,
the new one started on its GPUs, proven, put in rotation; a failed one puts the old plan
back the same way); anything else is refused before anything starts.

**One endpoint (no router): a relaunch on the real port.** A running container's
published ports cannot be changed, and two containers cannot publish the same host port:

1. the new plan is launched beside the old one as ``NAME-next`` on a spare port and goes
   through everything serve does. If it fails, it is stopped (kept for its log) and the
   old endpoint is never touched: same container, still answering;
2. once proven, the candidate is stopped (its GPU memory freed), and the plan is served
   on the real port in place of the old endpoint (serve's ``--replace`` path). The image
   is pulled and the weights are on disk and in the page cache by then, so the outage is
   one warm start of the server (measured and reported as ``downtime_s``), not a cold one;
3. the old plan is kept as ``last_good`` (``runtime.plans``); ``rollback`` serves it again
   the same way. Should the real-port launch itself fail, the old plan is served again at
   once (an automatic rollback).

This path is not zero-downtime: that needs the router (``--replicas N``); a single
endpoint served without one keeps no proxy in every request's path.
"""

from __future__ import annotations

import contextlib
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
from instinct_serve.plan.replicas import Replica, haproxy_config
from instinct_serve.runtime import journal, plans
from instinct_serve.runtime.backend import Backend
from instinct_serve.runtime.deploying import deploy_to_end
from instinct_serve.runtime.documents import ServeOutcome
from instinct_serve.runtime.events import EventSink, Healthy, Note, ServeEvent
from instinct_serve.runtime.settings import ServeSettings

if TYPE_CHECKING:
    from instinct_serve.runtime.docker import Docker
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


def _deploy(
    host: Host, plan: LaunchPlan, backend: Backend, settings: ServeSettings, sink: EventSink
) -> ServeOutcome:
    """Serve ``plan`` to the end, replacing what holds its port or name (ours only); what
    this run launched is removed if it is interrupted."""
    return deploy_to_end(
        _deployer(host, plan, backend, replace(settings, replace=True, detach=False), sink)
    )


def upgrade(
    host: Host,
    plan: LaunchPlan,
    backend: Backend,
    settings: ServeSettings,
    sink: EventSink,
) -> ServeOutcome:
    """Serve ``plan`` in place of the running endpoint of the same name (module docstring)."""
    name = plan.container_name
    old = backend.target(name)
    if old is None or not old.managed or not old.running:
        raise UsageError(
            f"nothing to upgrade: no running instinct-serve endpoint named {name} on {host.name}",
            fix="serve it without --upgrade (or name the running one with --name)",
            id="not_found",
        )
    record = plans.load(host, name)
    old_plan = record.current
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
    wanted = plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)
    if wanted == old.plan_hash:
        sink(Note(message=f"{name} already runs this plan: nothing to upgrade"))
        deployer = _deployer(host, plan, backend, settings, sink)
        try:
            reused = deployer.reuse()
        finally:
            deployer.close()
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
        return cand, _deploy(host, cand, backend, settings, sink)

    cand, proven = on_spare_ports(host, plan.port, 1, launch, sink)
    from instinct_serve.runtime.claim import discard_target

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
    _forget_candidate(host, cand.container_name)
    clock = Clock(sink)
    final = _deploy(host, plan, backend, settings, clock)
    if final.status != "ready":
        sink(Note(message=f"the new plan failed on port {plan.port}: serving the old one again"))
        journal.record(
            host, name, "upgrade_failed", why=final.failure.cause if final.failure else final.status
        )
        back = _deploy(host, old_plan, backend, settings, sink)
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


# ----------------------------------------------------------------------------- groups


def _launch_and_prove(
    host: Host,
    plan: LaunchPlan,
    settings: ServeSettings,
    sink: EventSink,
    gfx: str | None,
    device_root: str,
) -> list[ServeOutcome] | ServeOutcome:
    """Launch ``plan``'s replicas (replacing what holds their names or ports: ours only)
    and prove each: their outcomes, or the first failed one; removed if interrupted."""
    from instinct_serve.runtime.group import GroupDeployer

    deployer = GroupDeployer(
        host, plan, replace(settings, replace=True), sink=sink, gfx=gfx, device_root=device_root
    )
    try:
        failed = deployer.launch_members()
        return failed if failed is not None else deployer.prove_members()
    except BaseException:
        deployer.abandon()
        raise
    finally:
        deployer.close()


def upgrade_group(
    host: Host,
    plan: LaunchPlan,
    settings: ServeSettings,
    sink: EventSink,
    *,
    gfx: str | None = None,
    device_root: str = "",
) -> ServeOutcome:
    """Serve the replica group ``plan`` in place of the running group of the same name,
    behind the same router, without refusing a request (module docstring)."""
    from instinct_serve.runtime.docker import Docker
    from instinct_serve.runtime.group import GroupDeployer, config_path, is_router, reloadable

    name = plan.container_name
    router = Docker(host).get(name)
    if router is None or not is_router(router) or not router.state.running:
        raise UsageError(
            f"nothing to upgrade: no running instinct-serve replica group named {name} on "
            f"{host.name}",
            fix="serve it without --upgrade (or name the running group with --name); a "
            "single endpoint is upgraded as a single endpoint (without --replicas)",
            id="not_found",
        )
    old_plan = plans.load(host, name).current
    if (
        old_plan is None
        or old_plan.group is None
        or (host.read_text(config_path(host, name)) or "") != haproxy_config(old_plan)
    ):
        raise UsageError(
            f"the group {name} runs a plan this tool has no record of (served by an earlier "
            "version, or changed by hand): there would be nothing to roll back to",
            fix=f"serve its current plan once more (it is reused and recorded), or replace "
            f"it without a way back: `instinct stop {name}`, then serve",
            id="plan_not_recorded",
        )
    if not reloadable(router):
        raise UsageError(
            f"the router of {name} was started by an earlier version, without HAProxy's "
            "master-worker mode: it cannot reload its configuration in place",
            fix=f"restart the group once (a short outage): `instinct stop {name}` and serve "
            "its current plan; later upgrades swap the replicas without one",
            id="router_not_reloadable",
        )
    old_router, new_router = old_plan.group.router, plan.group.router if plan.group else None
    if (
        old_router is None
        or new_router is None
        or (old_router.bind, old_router.port) != (new_router.bind, new_router.port)
    ):
        raise UsageError(
            f"the new plan listens elsewhere than {name}'s router ("
            + (f"{new_router.bind}:{new_router.port}" if new_router else "no router")
            + (f" instead of {old_router.bind}:{old_router.port}" if old_router else "")
            + "): an upgrade keeps the router and its address",
            fix="upgrade with the same --port and --public, or replace the group with an "
            f"outage: `instinct stop {name}`, then serve",
            id="bad_usage",
        )
    wanted = plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)
    if wanted == old_plan.labels.get(LABEL_PLAN_HASH):
        sink(Note(message=f"{name} already runs this plan: nothing to upgrade"))
        deployer = GroupDeployer(host, plan, settings, sink=sink, gfx=gfx, device_root=device_root)
        try:
            reused = deployer.reuse()
        finally:
            deployer.close()
        if reused is not None:
            return reused
    return _swap(host, old_plan, plan, settings, sink, gfx=gfx, device_root=device_root)


def gpu_load(plan: LaunchPlan) -> dict[int, float]:
    """The share of each GPU's memory a group's replicas take (``--gpu-memory-
    utilization``, vLLM's default where the plan does not set it)."""
    from instinct_serve.engine.gpus import VLLM_DEFAULT_UTILIZATION

    text = vllm_args.value(plan.vllm_args, "--gpu-memory-utilization")
    try:
        share = float(text) if text else VLLM_DEFAULT_UTILIZATION
    except ValueError:
        share = VLLM_DEFAULT_UTILIZATION
    load: dict[int, float] = {}
    members = plan.group.members if plan.group is not None else []
    for member in members:
        for gpu in member.gpus:
            load[gpu] = load.get(gpu, 0.0) + share
    return load


def check_fits_beside(old: LaunchPlan, new: LaunchPlan) -> None:
    """Old and new replicas run together during the switch: refuse, before starting
    anything, when a GPU both use cannot hold both (vLLM reserves its share at start)."""
    old_load, new_load = gpu_load(old), gpu_load(new)
    over = sorted(g for g in old_load.keys() & new_load.keys() if old_load[g] + new_load[g] > 1.0)
    if not over:
        return
    gpus = ",".join(map(str, over))
    raise UsageError(
        f"the new replicas would start on GPU(s) {gpus} beside the old ones, which already "
        f"reserve {max(old_load[g] for g in over):.0%} of their memory; together they would "
        f"need {max(old_load[g] + new_load[g] for g in over):.0%}: the switch needs old and "
        "new running at once",
        fix="upgrade onto other GPUs (--gpus), or onto the same GPU sets with two or more "
        "replicas (they are then replaced one at a time), or serve both plans with a smaller "
        "share (`-- --gpu-memory-utilization 0.45`), or replace the group with an outage "
        f"(`instinct stop {old.container_name}`, then serve)",
        id="upgrade_does_not_fit",
        details={"gpus": over, "old": old_load, "new": new_load},
    )


def _swap(
    host: Host,
    old_plan: LaunchPlan,
    plan: LaunchPlan,
    settings: ServeSettings,
    sink: EventSink,
    *,
    gfx: str | None = None,
    device_root: str = "",
    kind: str = "upgraded",
) -> ServeOutcome:
    """Start ``plan``'s replicas beside ``old_plan``'s, prove them, point the router at
    them (a graceful reload), stop the old ones once drained; record and journal it."""
    from instinct_serve.plan.replicas import moved
    from instinct_serve.runtime.docker import Docker
    from instinct_serve.runtime.group import (
        GroupDeployer,
        reload_router,
        wait_drained,
        write_config,
    )

    name = plan.container_name
    old_group, group = old_plan.group, plan.group
    assert old_group is not None and group is not None and group.router is not None
    docker = Docker(host)
    old_names = [m.name for m in old_group.members]
    prefix = name + CANDIDATE_SUFFIX + "-r"
    suffix = "" if all(n.startswith(prefix) for n in old_names) else CANDIDATE_SUFFIX
    try:
        check_fits_beside(old_plan, plan)
    except UsageError:
        if not _can_roll(old_plan, plan):
            raise
        # the names; each new replica's port is chosen when it is launched (``_Roller``)
        rolled = moved(plan, [m.port for m in group.members], suffix)
        return _roll(host, old_plan, rolled, settings, sink, gfx, device_root, kind)

    def launch(ports: list[int]) -> tuple[LaunchPlan, list[ServeOutcome] | ServeOutcome]:
        cand = moved(plan, ports, suffix)
        assert cand.group is not None
        sink(
            Note(
                message=f"starting the new plan beside {name}'s replicas as "
                f"{', '.join(m.name for m in cand.group.members)} on ports "
                f"{', '.join(map(str, ports))}"
            )
        )
        return cand, _launch_and_prove(host, cand, settings, sink, gfx, device_root)

    cand, proven = on_spare_ports(host, group.router.port, len(group.members), launch, sink)
    assert cand.group is not None
    new_names = [m.name for m in cand.group.members]
    if not isinstance(proven, list):
        return _candidate_failed(host, name, proven, new_names)
    started = time.monotonic()
    write_config(host, name, haproxy_config(cand))
    try:
        old_workers = reload_router(docker, name)
    except InstinctError as exc:
        write_config(host, name, haproxy_config(old_plan))
        with contextlib.suppress(InstinctError):
            reload_router(docker, name)
        _remove(docker, new_names)
        journal.record(host, name, "upgrade_failed", why=exc.message, candidate=new_names)
        raise
    switch_s = round(time.monotonic() - started, 3)
    plans.save(host, cand, last_good=old_plan)  # the router serves it from now on
    sink(Note(message=f"{name} routes to the new replicas ({switch_s} s); draining the old"))
    drained = wait_drained(docker, name, old_workers)
    drain_s = round(time.monotonic() - started - switch_s, 3)
    _remove(docker, [n for n in old_names if n not in new_names])
    final = GroupDeployer(host, cand, settings, sink=sink, gfx=gfx, device_root=device_root)
    try:
        outcome = final.reuse()
    finally:
        final.close()
    if outcome is None:  # the router or a replica went away meanwhile
        raise InstinctError(
            f"{name} was switched to the new replicas, but the group does not answer now",
            fix=f"`instinct ps` and `instinct logs {name}`; `instinct rollback {name}` "
            "returns to the old plan",
            id="router_unhealthy",
        )
    if outcome.status == "reused":
        outcome.status = "ready"
    figures = {"switch_s": switch_s, "drain_s": drain_s, "drained": drained}
    journal.record(
        host,
        name,
        kind,
        **figures,
        replicas=new_names,
        image=plan.image,
        previous_image=old_plan.image,
    )
    outcome.figures = {**outcome.figures, **figures}
    outcome.notes.append(
        f"switched over behind the router: {name} kept listening; the old replicas "
        + ("finished their requests" if drained else "were stopped after the drain limit")
        + f" and were removed; `instinct rollback {name}` returns to the old plan"
    )
    return outcome


def _can_roll(old: LaunchPlan, new: LaunchPlan) -> bool:
    """Replica by replica on the same GPUs: two or more of them, on the same GPU sets."""
    if old.group is None or new.group is None or len(old.group.members) < 2:
        return False
    return [m.gpus for m in old.group.members] == [m.gpus for m in new.group.members]


class _Roller:
    """One replica at a time behind the router, when the GPUs cannot hold old and new
    together: replica I is taken out of rotation (a reload, its requests drained), removed,
    and the new replica I started on its GPUs, proven and put in rotation; the others
    serve meanwhile (one replica less of capacity, both plans answering for a while)."""

    def __init__(
        self,
        host: Host,
        base: LaunchPlan,
        settings: ServeSettings,
        sink: EventSink,
        gfx: str | None,
        device_root: str,
    ) -> None:
        from instinct_serve.runtime.docker import Docker

        assert base.group is not None
        self.host, self.base, self.settings, self.sink = host, base, settings, sink
        self.gfx, self.device_root = gfx, device_root
        self.docker = Docker(host)
        # what the router routes to, by index (None: a slot out of rotation, empty)
        self.slots: list[Replica | None] = list(base.group.members)

    def route(self, plan: LaunchPlan | None = None) -> None:
        """Point the router at ``plan``'s replicas (else the slots' that are filled) and
        wait until the old worker has finished its requests."""
        from instinct_serve.runtime.group import reload_router, wait_drained, write_config

        if plan is None:
            plan = copy.deepcopy(self.base)
            assert plan.group is not None
            plan.group.members = [m for m in self.slots if m is not None]
        write_config(self.host, self.base.container_name, haproxy_config(plan))
        old = reload_router(self.docker, self.base.container_name)
        wait_drained(self.docker, self.base.container_name, old)

    def replace(self, index: int, to: LaunchPlan, *, spare: bool = False) -> ServeOutcome | None:
        """Slot ``index`` to ``to``'s replica; None when done, else the failed outcome
        (the slot is then empty and out of rotation). With ``spare`` (a new replica) its
        port is a spare one chosen now (``on_spare_ports``: one bound since an earlier
        choice is passed over) and written back into ``to``; else it is ``to``'s own (the
        old plan's, free since its replica went)."""
        group = to.group
        assert group is not None and group.router is not None
        current = self.slots[index]
        if current is not None:
            self.slots[index] = None
            self.route()
            _remove(self.docker, [current.name])

        def launch(ports: list[int]) -> tuple[Replica, list[ServeOutcome] | ServeOutcome]:
            member = group.members[index]
            if ports:
                member = Replica(member.index, member.name, ports[0], member.gpus)
            one = copy.deepcopy(to)
            assert one.group is not None
            one.group.members = [member]
            self.sink(
                Note(
                    message=f"replica {index}: {member.name} on port {member.port} "
                    "in place of the old one"
                )
            )
            return member, _launch_and_prove(
                self.host, one, self.settings, self.sink, self.gfx, self.device_root
            )

        if spare:  # not an old replica's port: a failed new one keeps its container
            old_ports = [m.port for m in self.base.group.members] if self.base.group else []
            member, proven = on_spare_ports(
                self.host, group.router.port, 1, launch, self.sink, old_ports
            )
            group.members[index] = member
        else:
            member, proven = launch([])
        if not isinstance(proven, list):
            return proven
        self.slots[index] = member
        self.route()
        return None


def _roll(
    host: Host,
    old_plan: LaunchPlan,
    cand: LaunchPlan,
    settings: ServeSettings,
    sink: EventSink,
    gfx: str | None,
    device_root: str,
    kind: str,
) -> ServeOutcome:
    """``_swap`` one replica at a time (``_Roller``); a failed new replica puts the old
    plan back the same way (each replica relaunched as it was)."""
    from instinct_serve.runtime.group import GroupDeployer

    name = cand.container_name
    assert old_plan.group is not None and cand.group is not None
    sink(
        Note(
            message=f"the GPUs cannot hold the old and new replicas of {name} together: "
            "replacing them one at a time behind the router"
        )
    )
    roller = _Roller(host, old_plan, settings, sink, gfx, device_root)
    started = time.monotonic()
    for index in range(len(cand.group.members)):
        failed = roller.replace(index, cand, spare=True)
        if failed is None:
            continue
        culprit = failed.plan.container_name
        left = roller.docker.get(culprit)
        if left is not None and left.managed and left.state.running:
            with contextlib.suppress(InstinctError):
                roller.docker.stop(left.id, remove=False)
        restored = roller.replace(index, old_plan)  # the empty slot: the old replica again
        for back in reversed(range(index)):
            restored = restored or roller.replace(back, old_plan)
        if restored is None:
            roller.route(old_plan)
            note = f"{name} serves the old plan again (each replaced replica relaunched)"
        else:
            note = (
                f"{name} could not be put back on the old plan: "
                f"{restored.plan.container_name} failed too; `instinct ps` shows what serves"
            )
        failed.notes.append(note)
        sink(Note(message=note))
        journal.record(
            host,
            name,
            "upgrade_failed",
            why=failed.failure.cause if failed.failure else failed.status,
            candidate=culprit,
            rolled=True,
        )
        return failed
    roller.route(cand)
    plans.save(host, cand, last_good=old_plan)
    roll_s = round(time.monotonic() - started, 3)
    final = GroupDeployer(host, cand, settings, sink=sink, gfx=gfx, device_root=device_root)
    try:
        outcome = final.reuse()
    finally:
        final.close()
    if outcome is None:
        raise InstinctError(
            f"{name} was moved to the new replicas, but the group does not answer now",
            fix=f"`instinct ps` and `instinct logs {name}`; `instinct rollback {name}` "
            "returns to the old plan",
            id="router_unhealthy",
        )
    outcome.status = "ready"
    figures = {"roll_s": roll_s, "rolled": True}
    journal.record(
        host,
        name,
        kind,
        **figures,
        replicas=[m.name for m in cand.group.members],
        image=cand.image,
        previous_image=old_plan.image,
    )
    outcome.figures = {**outcome.figures, **figures}
    outcome.notes.append(
        f"replaced one replica at a time behind the router ({roll_s} s): {name} kept "
        f"listening; `instinct rollback {name}` returns to the old plan"
    )
    return outcome


def _candidate_failed(
    host: Host, name: str, failed: ServeOutcome, new_names: list[str]
) -> ServeOutcome:
    """A new replica failed: the failed one is kept (stopped) for its log, the other new
    ones are removed; the old group was never touched."""
    from instinct_serve.runtime.docker import Docker

    docker = Docker(host)
    culprit = failed.plan.container_name
    _remove(docker, [n for n in new_names if n != culprit])
    left = docker.get(culprit)
    if left is not None and left.managed and left.state.running:  # a timeout leaves it running
        with contextlib.suppress(InstinctError):
            docker.stop(left.id, remove=False)
    note = f"{name} still serves the old plan, untouched"
    failed.notes.append(note)
    failed.status = "failed" if failed.status in ("ready", "reused") else failed.status
    journal.record(
        host,
        name,
        "upgrade_failed",
        why=failed.failure.cause if failed.failure else failed.status,
        candidate=culprit,
    )
    return failed


def _remove(docker: Docker, names: list[str]) -> None:
    """Stop and remove these replicas (ours only), and forget their keys and proofs."""
    for member in names:
        info = docker.get(member)
        if info is not None and info.managed:
            with contextlib.suppress(InstinctError):
                docker.stop(info.id)
        _forget_candidate(docker.host, member)


def _forget_candidate(host: Host, name: str) -> None:
    """The candidate's records (key, proof) are of no use once it is gone."""
    from instinct_serve.runtime.endpoints import _forget_key, _forget_record

    _forget_key(host, name)
    _forget_record(host, name)


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
        return _swap(
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
    outcome = _deploy(host, record.last_good, backend, settings, clock)
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
    if plan.engine == "native":
        from instinct_serve.engine.discovery import discover, require_usable
        from instinct_serve.runtime.native import NativeBackend

        return NativeBackend(host, require_usable(discover(host)).vllm_command)
    from instinct_serve.runtime.docker_backend import DockerBackend

    return DockerBackend(host, device_root=device_root)
