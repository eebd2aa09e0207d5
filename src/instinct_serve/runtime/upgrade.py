"""``serve --upgrade`` of one endpoint (no router): a new plan proven beside the old one,
then a relaunch on the real port; and what the group's upgrade (``runtime.upgrade_group``)
shares with it: the spare ports, the candidate's name, the switch clock.

A running container's published ports cannot be changed, and two containers cannot
publish the same host port:

1. the new plan is launched beside the old one as ``NAME-next`` on a spare port and goes
   through everything serve does. If it fails, it is stopped (kept for its log) and the
   old endpoint is never touched: same container, still answering;
2. once proven, the candidate is removed (its GPU memory freed), the old endpoint is
   stopped and kept aside as ``NAME-prev`` (``park``: the last working copy is never
   removed before its replacement is proven), and the plan is served on the real port
   (serve's ``--replace`` path). The image is pulled and the weights are on disk and in
   the page cache by then, so the outage is one warm start of the server (measured and
   reported as ``downtime_s``), not a cold one. Proven there, the old container is
   removed (``finish_switch``); failed, the new one is kept stopped as ``NAME-next`` for
   its log and the old one renamed back and started again (``undo_switch``);
3. the old plan is kept as ``last_good`` (``runtime.plans``); ``rollback``
   (``runtime.rollback``) goes to it the same way (``kind="rolled_back"``).

Each step is announced in an intent record first (``runtime.intent``): a change cut short
is finished or undone by the next command (``runtime.recover``).

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
from instinct_serve.runtime import intent, journal, plans
from instinct_serve.runtime.backend import Backend, Target
from instinct_serve.runtime.claim import discard_target
from instinct_serve.runtime.deploying import deploy_to_end, reuse_once
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.documents import Failure, ServeOutcome
from instinct_serve.runtime.events import EventSink, Healthy, Note, ServeEvent
from instinct_serve.runtime.secret_env import inherit
from instinct_serve.runtime.settings import ServeSettings

if TYPE_CHECKING:
    from instinct_serve.runtime.serve import Deployer

CANDIDATE_SUFFIX = "-next"
PARKED_SUFFIX = "-prev"  # the old endpoint, stopped and kept aside during the switch
CHANGE = {"upgraded": "upgrade", "rolled_back": "rollback"}  # journal kind -> change
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


def recorded_plan(
    host: Host, name: str, backend: Backend, verb: str = "upgrade"
) -> tuple[Target, LaunchPlan]:
    """The running endpoint ``name`` and the plan it was proven with; ``UsageError`` when
    there is nothing of ours to upgrade, a group, or no record to roll back to."""
    old = backend.target(name)
    if old is None or not old.managed or not old.running:
        raise UsageError(
            f"nothing to {verb}: no running instinct-serve endpoint named {name} on {host.name}",
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
    *,
    kind: str = "upgraded",
) -> ServeOutcome:
    """Serve ``plan`` in place of the running endpoint of the same name (module docstring);
    ``kind``: ``rolled_back`` for ``rollback``, which goes the same way to the last good plan."""
    name = plan.container_name
    old, old_plan = recorded_plan(host, name, backend, CHANGE[kind])
    inherit(backend.secret_values(old.handle, plan.secret_env))  # what it was given
    wanted = plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)
    if wanted == old.plan_hash:
        sink(Note(message=f"{name} already runs this plan: nothing to {CHANGE[kind]}"))
        reused = reuse_once(_deployer(host, plan, backend, settings, sink))
        if reused is not None:
            return reused
    cand_name = name + CANDIDATE_SUFFIX
    with intent.change(
        host,
        CHANGE[kind],
        name,
        step="candidate",
        old=old_plan,
        new=plan,
        candidates=[cand_name],
        device_root=getattr(backend, "device_root", ""),
        settle=lambda change: settle_switch(host, change),
    ) as change:

        def launch(ports: list[int]) -> tuple[LaunchPlan, ServeOutcome]:
            cand = candidate_of(plan, ports[0])
            sink(
                Note(
                    message=f"starting the new plan beside {name} as {cand.container_name} on "
                    f"port {cand.port}"
                )
            )
            unproven = replace(settings, fingerprint_reference=False)
            return cand, deploy_replacing(host, cand, backend, unproven, sink)

        cand, proven = on_spare_ports(host, plan.port, 1, launch, sink)
        if proven.status not in ("ready", "reused"):
            return _candidate_failed(host, backend, kind, cand, proven)
        if differs(host, old_plan, cand, proven, settings, sink):
            return _candidate_failed(host, backend, kind, cand, proven)
        cand_target = backend.target(cand.container_name)
        if cand_target is not None:
            discard_target(host, cand_target, keep=False)
        forget_candidate(host, cand.container_name)
        change.advance("switching", candidates=[])
        return _switch(host, change, old, backend, settings, sink, kind)


def differs(
    host: Host,
    old_plan: LaunchPlan,
    cand: LaunchPlan,
    proven: ServeOutcome,
    settings: ServeSettings,
    sink: EventSink,
) -> bool:
    """The proven candidate computes something else than the running endpoint
    (``runtime.upgrade_gate``): it does not get the port (``proven`` says why)."""
    if not (settings.fingerprint and settings.coherence):
        return False
    from instinct_serve.diagnose.rules.fingerprint import fallback_words
    from instinct_serve.runtime.upgrade_gate import compare

    gate = compare(host, old_plan, cand, seconds=settings.fingerprint_s)
    where = "now" if gate.live else "as recorded"
    sink(
        Note(
            message=f"fingerprint of {cand.container_name} against the running one ({where}): "
            f"{gate.why}"
        )
    )
    if not gate.refused:
        return False
    assert gate.verdict is not None
    proven.failure = Failure(
        id="wrong_output",
        title=f"The new plan computes something else than the running endpoint: "
        f"{gate.verdict.failure}",
        cause=f"{cand.container_name} is healthy and passed its own checks, but its "
        f"fingerprint differs from the running endpoint's ({where}): {gate.why}.",
        fix="keep the running plan; try the new image or flags with the kernel switches "
        f"({fallback_words(cand.server)}), or report the image",
        container=cand.container_name,
        finding={"id": "wrong_output", "details": {"failure": gate.verdict.failure}},
    )
    return True


def _candidate_failed(
    host: Host, backend: Backend, kind: str, cand: LaunchPlan, proven: ServeOutcome
) -> ServeOutcome:
    """The new plan failed beside the old one: kept (stopped) for its log; the old
    endpoint and the records are untouched."""
    name = cand.container_name.removesuffix(CANDIDATE_SUFFIX)
    left = backend.target(cand.container_name)
    if left is not None and left.running:  # a timeout leaves it running: not here
        discard_target(host, left, keep=True)
    note = f"{name} still serves the {'old' if kind == 'upgraded' else 'current'} plan, untouched"
    if kind != "upgraded":
        note += "; its records are unchanged"
    proven.notes.append(note)
    if proven.status in ("ready", "reused"):
        proven.status = "failed"
    why = proven.failure.cause if proven.failure else proven.status
    journal.record(host, name, f"{CHANGE[kind]}_failed", why=why, candidate=cand.container_name)
    return proven


def _switch(
    host: Host,
    change: intent.Intent,
    old: Target,
    backend: Backend,
    settings: ServeSettings,
    sink: EventSink,
    kind: str,
) -> ServeOutcome:
    """The proven plan on the real port: the old endpoint is stopped and kept aside
    (``park``; a native one is stopped), the new one launched and proven in its place;
    then the old one is removed (``finish_switch``), or, should the new one fail, put
    back (``undo_switch``)."""
    assert change.new is not None and change.old is not None
    name, plan = change.name, change.new
    clock = Clock(sink)
    if old.engine == "docker":
        change.advance("switching", parked=old.handle)
        park(Docker(host), old.handle, name)
    else:
        discard_target(host, old, keep=False)
    final = deploy_replacing(host, plan, backend, settings, clock)
    if final.status != "ready":
        sink(Note(message=f"the new plan failed on port {plan.port}: serving the old one again"))
        why = final.failure.cause if final.failure else final.status
        journal.record(host, name, f"{CHANGE[kind]}_failed", why=why)
        back = undo_switch(host, change, keep_failed=True, prove=(backend, settings, sink))
        if change.parked is None:  # a native endpoint is stopped, not kept: served again
            back = deploy_replacing(host, change.old, backend, settings, sink).status
        journal.record(host, name, "rolled_back", status=back, automatic=True)
        final.notes.append(f"rolled back to the old plan: {back}")
        return final
    change.advance("switched")
    sink(Note(message=f"{name} serves the new plan on port {plan.port}: removing the old one"))
    finish_switch(host, change, downtime_s=clock.downtime_s)
    final.notes.append(
        f"switched over: {name} was down {clock.downtime_s} s (old stopped → new healthy); "
        f"the old plan is kept: `instinct rollback {name}` returns to it"
    )
    final.figures = {**final.figures, "downtime_s": clock.downtime_s}
    return final


def park(docker: Docker, handle: str, name: str) -> None:
    """Keep the old endpoint aside, stopped, as ``NAME-prev``: its name and port are free
    for the new one, and it can be started again as it was until the new one is proven."""
    aside = name + PARKED_SUFFIX
    stale = docker.get(aside)
    if stale is not None and stale.managed and stale.id != handle:
        docker.stop(stale.id)
    info = docker.get(handle)
    if info is None:
        return
    if info.name != aside:
        docker.rename(handle, aside)
    docker.stop(handle, remove=False)


def unpark(docker: Docker, handle: str, name: str) -> bool:
    """The old endpoint back under its name, started again; False when it is gone."""
    info = docker.get(handle)
    if info is None or not info.managed:
        return False
    if info.name != name:
        docker.rename(handle, name)
    if not info.state.running:
        docker.start(handle)
    return True


def finish_switch(host: Host, change: intent.Intent, *, downtime_s: float | None = None) -> None:
    """The new plan is proven on the real port: record it (the old one as last good),
    remove the old endpoint kept aside and the candidate's records, journal it."""
    assert change.new is not None
    name = change.name
    kind = "upgraded" if change.change == "upgrade" else "rolled_back"
    plans.save(host, change.new, last_good=change.old)
    if change.parked is not None:
        parked = Docker(host).get(change.parked)
        if parked is not None and parked.managed and parked.name != name:
            Docker(host).stop(parked.id)
    forget_candidate(host, name + CANDIDATE_SUFFIX)
    fields: dict[str, object] = {"image": change.new.image}
    if change.old is not None:
        fields["previous_image"] = change.old.image
    journal.record(host, name, kind, downtime_s=downtime_s, **fields)


def undo_switch(
    host: Host,
    change: intent.Intent,
    *,
    keep_failed: bool,
    prove: tuple[Backend, ServeSettings, EventSink] | None = None,
) -> str:
    """The new plan is not proven on the real port: it is removed (or, ``keep_failed``,
    stopped and kept as ``NAME-next`` for its log), the old endpoint started again under
    its name, and the records put back as they were. With ``settings`` the old endpoint
    is then waited for and proven (``prove``: serve's reuse path): its status."""
    name = change.name
    if change.old is not None:
        plans.save(host, change.old, last_good=change.old_last_good)
    if change.parked is None:  # native: nothing was kept aside
        return "the old endpoint is gone"
    docker = Docker(host)
    for attempt in (1, 2):  # a launch still in flight may take the name meanwhile
        _set_aside_new(docker, change, keep_failed=keep_failed)
        try:
            if not unpark(docker, change.parked, name):
                return "the old endpoint is gone"
            break
        except InstinctError:
            if attempt == 2:
                raise
    if prove is None or change.old is None:
        return "started again"
    back = reuse_once(_deployer(host, change.old, *prove))
    return back.status if back is not None else "started again, not answering yet"


def _set_aside_new(docker: Docker, change: intent.Intent, *, keep_failed: bool) -> None:
    """The unproven new endpoint on the real name: removed, or (``keep_failed``) stopped
    and kept as ``NAME-next`` for its log."""
    name = change.name
    current = docker.get(name)
    if current is None or not current.managed or current.id == change.parked:
        return
    if not keep_failed:
        docker.stop(current.id)
        return
    stale = docker.get(name + CANDIDATE_SUFFIX)
    if stale is not None and stale.managed:
        docker.stop(stale.id)
    docker.stop(current.id, remove=False)
    docker.rename(current.id, name + CANDIDATE_SUFFIX)


def forget_candidate(host: Host, name: str) -> None:
    """The candidate's records (key, proof, plan) are of no use once it is gone."""
    from instinct_serve.runtime.endpoints import _forget_key, _forget_record

    _forget_key(host, name)
    _forget_record(host, name)
    plans.forget(host, name)


def proven_new(host: Host, change: intent.Intent) -> bool:
    """The endpoint runs the change's new plan on its real port, proven there."""
    from instinct_serve.runtime import verified
    from instinct_serve.runtime.docker_backend import container_instance

    info = Docker(host).get(change.name)
    if info is None or not info.state.running or info.id == change.parked:
        return False
    doc = verified.load(host, change.name, container_instance(info))
    wanted = {change.new_hash, change.new.plan_hash if change.new else None} - {None}
    return doc is not None and doc.get("plan_hash") in wanted


def _remove_candidates(host: Host, change: intent.Intent) -> list[str]:
    docker = Docker(host)
    removed = []
    for name in change.candidates:
        info = docker.get(name)
        if info is not None and info.managed and info.id != change.parked:
            docker.stop(info.id)
            removed.append(name)
        forget_candidate(host, name)
    return removed


def settle_switch(host: Host, change: intent.Intent) -> str:
    """Finish or undo the switch ``change`` names, whose process is gone
    (``runtime.recover``): what was done."""
    name = change.name
    if change.step == "candidate":
        removed = _remove_candidates(host, change)
        what = f"removed the unproven {', '.join(removed)}" if removed else "nothing launched"
        return f"undone before the switch: {what}; {name} still serves the old plan"
    if change.step == "switched" or proven_new(host, change):
        finish_switch(host, change)
        return f"finished: {name} serves the new plan, the old one is kept as last good"
    back = undo_switch(host, change, keep_failed=False)
    if back == "the old endpoint is gone" and change.old is not None:
        return "undone: " + serve_again(host, change, change.old)
    return f"undone: the unproven new plan removed, {name}'s old plan {back}"


def serve_again(host: Host, change: intent.Intent, plan: LaunchPlan) -> str:
    """Serve ``plan`` again (a relaunch; its running endpoint is reused): its status."""
    backend = backend_for_plan(host, plan, device_root(change))
    outcome = deploy_replacing(host, plan, backend, ServeSettings(), lambda _event: None)
    if not outcome.ok:
        raise InstinctError(
            f"{plan.container_name} could not be served again: {outcome.status}",
            fix=f"`instinct logs {plan.container_name}`, then serve it again",
            id="recovery_failed",
        )
    return f"{plan.container_name} served again ({plan.image})"


def device_root(change: intent.Intent) -> str:
    """The stand-in device tree (``--root``) the change's launches used: a relaunch needs
    it again."""
    root = change.extra.get("device_root")
    return root if isinstance(root, str) else ""


def backend_for_plan(host: Host, plan: LaunchPlan, device_root: str = "") -> Backend:
    """The backend a recorded plan runs on (``device_root``: the stand-in device tree of
    ``--root``, as serve's)."""
    if plan.launcher == "native":
        from instinct_serve.runtime.native import backend_for_server

        return backend_for_server(host, plan.server)
    from instinct_serve.runtime.docker_backend import DockerBackend

    return DockerBackend(host, device_root=device_root)
