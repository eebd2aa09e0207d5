"""``serve --upgrade`` of a replica group: the new replicas proven beside the old ones,
then swapped in behind the router without downtime. The router holds the public port and
never lets go of it:

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

The swap announces its steps in an intent record (``runtime.intent``: ``candidate``,
``routing``, ``switched``); ``settle_group`` finishes or undoes one cut short. The
one-at-a-time roll writes none yet.
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import replace
from typing import Any

from instinct_serve import vllm_args
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.plan.replicas import Replica, haproxy_config, moved
from instinct_serve.runtime import intent, journal, plans
from instinct_serve.runtime.deploying import reuse_once
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.documents import ServeOutcome
from instinct_serve.runtime.events import EventSink, Note
from instinct_serve.runtime.group import (
    GroupDeployer,
    config_path,
    is_router,
    reload_router,
    reloadable,
    wait_drained,
    write_config,
)
from instinct_serve.runtime.settings import ServeSettings
from instinct_serve.runtime.upgrade import (
    CANDIDATE_SUFFIX,
    differs,
    forget_candidate,
    on_spare_ports,
)


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

    unproven = replace(settings, replace=True, fingerprint_reference=False)  # compared first
    deployer = GroupDeployer(host, plan, unproven, sink=sink, gfx=gfx, device_root=device_root)
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
        reused = reuse_once(deployer)
        if reused is not None:
            return reused
    return swap(host, old_plan, plan, settings, sink, gfx=gfx, device_root=device_root)


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


def swap(
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

    # the candidates' names are known now; their ports once a launch got them
    named = moved(plan, [m.port for m in group.members], suffix)
    assert named.group is not None
    with _group_change(host, kind, "candidate", old_plan, named, device_root) as change:
        cand, proven = on_spare_ports(host, group.router.port, len(group.members), launch, sink)
        assert cand.group is not None
        new_names = [m.name for m in cand.group.members]
        if not isinstance(proven, list):
            return _candidate_failed(host, name, proven, new_names)
        running = replace(old_plan, port=old_group.router.port) if old_group.router else old_plan
        for outcome in proven:  # each computes what the group serves now (upgrade_gate)
            if differs(host, running, outcome.plan, outcome, settings, sink):
                return _candidate_failed(host, name, outcome, new_names)
        change.advance("routing", new=cand)
        figures = _switch(docker, old_plan, cand, sink)
        change.advance("switched")
        remove_replicas(docker, [n for n in old_names if n not in new_names])
    outcome = _settled(host, cand, settings, sink, gfx, device_root, "switched")
    if outcome.status == "reused":
        outcome.status = "ready"
    drained = figures["drained"]
    _journal(host, kind, outcome, figures, cand, old_plan, image=plan.image)
    outcome.notes.append(
        f"switched over behind the router: {name} kept listening; the old replicas "
        + ("finished their requests" if drained else "were stopped after the drain limit")
        + f" and were removed; `instinct rollback {name}` returns to the old plan"
    )
    return outcome


def _group_change(
    host: Host, kind: str, step: str, old: LaunchPlan, new: LaunchPlan, device_root: str
) -> contextlib.AbstractContextManager[intent.Intent]:
    """The intent record of a group's upgrade or rollback (``swap``: from ``candidate``;
    ``_roll``: ``rolling``), its new replicas as candidates, settled by ``settle_group``."""
    assert old.group is not None and new.group is not None
    old_names = {m.name for m in old.group.members}
    return intent.change(
        host,
        "upgrade" if kind == "upgraded" else "rollback",
        new.container_name,
        step=step,
        old=old,
        new=new,
        candidates=[m.name for m in new.group.members if m.name not in old_names],
        extra={"group": True, **({"rolling": True} if step == "rolling" else {})},
        device_root=device_root,
        settle=lambda change: settle_group(host, change),
    )


def _switch(
    docker: Docker, old_plan: LaunchPlan, cand: LaunchPlan, sink: EventSink
) -> dict[str, Any]:
    """Point the router at ``cand``'s proven replicas (a graceful reload; back to the old
    configuration if the reload fails) and wait for the old worker to drain: the figures."""
    host, name = docker.host, cand.container_name
    assert cand.group is not None
    new_names = [m.name for m in cand.group.members]
    started = time.monotonic()
    write_config(host, name, haproxy_config(cand))
    try:
        old_workers = reload_router(docker, name)
    except InstinctError as exc:
        write_config(host, name, haproxy_config(old_plan))
        with contextlib.suppress(InstinctError):
            reload_router(docker, name)
        remove_replicas(docker, new_names)
        journal.record(host, name, "upgrade_failed", why=exc.message, candidate=new_names)
        raise
    switch_s = round(time.monotonic() - started, 3)
    plans.save(host, cand, last_good=old_plan)  # the router serves it from now on
    sink(Note(message=f"{name} routes to the new replicas ({switch_s} s); draining the old"))
    drained = wait_drained(docker, name, old_workers)
    drain_s = round(time.monotonic() - started - switch_s, 3)
    return {"switch_s": switch_s, "drain_s": drain_s, "drained": drained}


def _settled(
    host: Host,
    cand: LaunchPlan,
    settings: ServeSettings,
    sink: EventSink,
    gfx: str | None,
    device_root: str,
    how: str,
) -> ServeOutcome:
    """The group runs ``cand`` now: proven through its router (serve's reuse path)."""
    name = cand.container_name
    final = GroupDeployer(host, cand, settings, sink=sink, gfx=gfx, device_root=device_root)
    outcome = reuse_once(final)
    if outcome is None:  # the router or a replica went away meanwhile
        raise InstinctError(
            f"{name} was {how} to the new replicas, but the group does not answer now",
            fix=f"`instinct ps` and `instinct logs {name}`; `instinct rollback {name}` "
            "returns to the old plan",
            id="router_unhealthy",
        )
    return outcome


def _journal(
    host: Host,
    kind: str,
    outcome: ServeOutcome,
    figures: dict[str, Any],
    cand: LaunchPlan,
    old_plan: LaunchPlan,
    *,
    image: str,
) -> None:
    """The switch in the endpoint's journal and in its outcome's figures."""
    assert cand.group is not None
    journal.record(
        host,
        cand.container_name,
        kind,
        **figures,
        replicas=[m.name for m in cand.group.members],
        image=image,
        previous_image=old_plan.image,
    )
    outcome.figures = {**outcome.figures, **figures}


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

        assert base.group is not None
        self.host, self.base, self.settings, self.sink = host, base, settings, sink
        self.gfx, self.device_root = gfx, device_root
        self.docker = Docker(host)
        # what the router routes to, by index (None: a slot out of rotation, empty)
        self.slots: list[Replica | None] = list(base.group.members)

    def route(self, plan: LaunchPlan | None = None) -> None:
        """Point the router at ``plan``'s replicas (else the slots' that are filled) and
        wait until the old worker has finished its requests."""

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
            remove_replicas(self.docker, [current.name])

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
    """``swap`` one replica at a time (``_Roller``); a failed new replica puts the old
    plan back the same way (each replica relaunched as it was)."""
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
    # a kill mid-roll: the next command puts the old plan back whole
    with _group_change(host, kind, "rolling", old_plan, cand, device_root):
        for index in range(len(cand.group.members)):
            failed = roller.replace(index, cand, spare=True)
            if failed is not None:
                return _roll_back(roller, index, failed, old_plan, name)
        roller.route(cand)
        plans.save(host, cand, last_good=old_plan)
    roll_s = round(time.monotonic() - started, 3)
    outcome = _settled(host, cand, settings, sink, gfx, device_root, "moved")
    outcome.status = "ready"
    _journal(
        host, kind, outcome, {"roll_s": roll_s, "rolled": True}, cand, old_plan, image=cand.image
    )
    outcome.notes.append(
        f"replaced one replica at a time behind the router ({roll_s} s): {name} kept "
        f"listening; `instinct rollback {name}` returns to the old plan"
    )
    return outcome


def _roll_back(
    roller: _Roller, index: int, failed: ServeOutcome, old_plan: LaunchPlan, name: str
) -> ServeOutcome:
    """New replica ``index`` failed: it is kept stopped for its log, and the old plan's
    replicas go back into the slots replaced so far (``index`` and those before it)."""
    culprit = failed.plan.container_name
    _keep_stopped(roller.docker, culprit)
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
    roller.sink(Note(message=note))
    journal.record(
        roller.host,
        name,
        "upgrade_failed",
        why=failed.failure.cause if failed.failure else failed.status,
        candidate=culprit,
        rolled=True,
    )
    return failed


def _keep_stopped(docker: Docker, name: str) -> None:
    """A failed new replica is stopped, kept for its log (a timeout leaves it running)."""
    left = docker.get(name)
    if left is not None and left.managed and left.state.running:
        with contextlib.suppress(InstinctError):
            docker.stop(left.id, remove=False)


def _candidate_failed(
    host: Host, name: str, failed: ServeOutcome, new_names: list[str]
) -> ServeOutcome:
    """A new replica failed: the failed one is kept (stopped) for its log, the other new
    ones are removed; the old group was never touched."""

    docker = Docker(host)
    culprit = failed.plan.container_name
    remove_replicas(docker, [n for n in new_names if n != culprit])
    _keep_stopped(docker, culprit)
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


def remove_replicas(docker: Docker, names: list[str]) -> None:
    """Stop and remove these replicas (ours only), and forget their keys and proofs."""
    for member in names:
        info = docker.get(member)
        if info is not None and info.managed:
            with contextlib.suppress(InstinctError):
                docker.stop(info.id)
        forget_candidate(docker.host, member)


def settle_group(host: Host, change: intent.Intent) -> str:
    """Finish or undo the group's switch ``change`` names, whose process is gone
    (``runtime.recover``): what was done."""
    old, new, name = change.old, change.new, change.name
    assert old is not None and new is not None and old.group and new.group
    if change.extra.get("rolling") and change.step == "rolling":
        return _unroll(host, change, old)
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


def _unroll(host: Host, change: intent.Intent, old: LaunchPlan) -> str:
    """A roll cut short: its slots hold old and new replicas, some maybe none, and the GPUs
    hold one plan only. The old plan is served whole again (``GroupDeployer`` with
    ``replace``: the new replicas go first, the running old ones are reused, the missing
    ones relaunched, the router pointed at them) and recorded as current."""
    from instinct_serve.runtime.deploying import deploy_to_end
    from instinct_serve.runtime.group import GroupDeployer
    from instinct_serve.runtime.upgrade import device_root

    assert old.group is not None
    root = device_root(change)
    outcome = deploy_to_end(GroupDeployer(host, old, ServeSettings(replace=True), device_root=root))
    if not outcome.ok:
        raise InstinctError(
            f"the group {change.name} could not be put back on its old plan: {outcome.status}",
            fix=f"`instinct ps`, `instinct logs {change.name}`; serve it again with --replace",
            id="recovery_failed",
        )
    plans.save(host, old, last_good=change.old_last_good)
    return f"undone: {change.name} serves its old plan again ({len(old.group.members)} replicas)"
