"""``serve --upgrade`` and ``rollback``: a new plan proven beside the old one, then swapped.

What "switch the port over" can honestly mean with docker port publishing: a running
container's published ports cannot be changed, and two containers cannot publish the same
host port. So the switch is a *relaunch of the proven plan on the real port*:

1. the new plan is launched beside the old one as ``NAME-next`` on a spare port and goes
   through everything serve does (pull, start-up, /health, warm-up, coherence probe; a
   known failure relaunched once with its fix). If it fails, it is stopped (kept for its
   log) and the old endpoint is never touched: same container, still answering;
2. once proven, the candidate is stopped (its GPU memory freed), and the plan is served
   on the real port in place of the old endpoint (serve's ``--replace`` path). The image
   is pulled and the weights are on disk and in the page cache by then, so the outage is
   one warm start of the server (measured and reported as ``downtime_s``), not a cold one;
3. the old plan is kept as ``last_good`` (``runtime.plans``); ``rollback`` serves it again
   the same way. Should the real-port launch itself fail, the old plan is served again at
   once (an automatic rollback).

Not zero-downtime: that needs something in front of the port that can move (a proxy, a
client-side switch to the spare port). Keeping the new server on the spare port behind a
forwarder would leave a forwarder in every request's path for the endpoint's life; a
start from warm caches is the smaller, honest step.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from instinct_serve import vllm_args
from instinct_serve.errors import InstinctError, UsageError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import LABEL_PLAN_HASH, LABEL_PORT
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import journal, plans
from instinct_serve.runtime.backend import Backend
from instinct_serve.runtime.documents import ServeOutcome
from instinct_serve.runtime.events import EventSink, Healthy, Note, ServeEvent
from instinct_serve.runtime.settings import ServeSettings

if TYPE_CHECKING:
    from instinct_serve.runtime.serve import Deployer

CANDIDATE_SUFFIX = "-next"
SPARE_PORTS = range(1, 200)  # offsets from the real port tried for the candidate


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


def spare_port(host: Host, port: int) -> int:
    """A port near ``port`` that nothing listens on, on the endpoint's host."""
    from instinct_serve.runtime.docker import Docker

    docker = Docker(host)
    for offset in SPARE_PORTS:
        candidate = port + offset
        if candidate < 65536 and not docker.listeners(candidate):
            return candidate
    raise InstinctError(
        f"no free port near {port} on {host.name} for the new plan to start beside the old",
        fix="free a port above it, or upgrade with `serve --replace` (with an outage)",
        id="port_in_use",
    )


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
    deployer = _deployer(host, plan, backend, replace(settings, replace=True, detach=False), sink)
    try:
        return deployer.deploy()
    except BaseException:
        deployer.abandon()
        raise
    finally:
        deployer.close()


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
    cand = candidate_of(plan, spare_port(host, plan.port))
    sink(
        Note(
            message=f"starting the new plan beside {name} as {cand.container_name} on port "
            f"{cand.port}"
        )
    )
    proven = _deploy(host, cand, backend, settings, sink)
    from instinct_serve.runtime.serve import discard_target

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
