"""A replica group on one host (``plan.replicas``): launch, list and stop it as one endpoint.

``GroupDeployer`` has the ``Deployer``'s interface (``reuse``/``preflight``/``deploy``/
``abandon``/``interrupted``/``close``), so ``serve`` runs a group like one endpoint:

1. every replica is launched by its own ``Deployer`` (a single-endpoint plan:
   ``plan.replicas.member_plan``), detached once it is loading, so the N copies load at
   once; one of the same plan that already runs is reused, as for any endpoint;
2. each replica is then waited for, warmed up and probed by a fresh ``Deployer``
   (``reuse`` follows a loading endpoint): a replica that fails is diagnosed like any
   endpoint, and the group fails with it;
3. the replicas get the endpoints' restart policy (``plan.model.RESTART_POLICY``, by
   ``docker update``) only now: a replica that fails at startup is diagnosed, not
   restarted in a loop; one that dies later is restarted by dockerd, and HAProxy drops
   it meanwhile (its health check) and takes it back once ``/health`` answers again
   (``instinct watch`` takes over what the bounded policy leaves);
4. HAProxy (``plan.replicas.haproxy_config``, kept in the tool's data directory on the
   host and mounted read-only) starts with ``--restart unless-stopped``
   (``ROUTER_RESTART_POLICY``) on the group's name and port; the group is ready once
   ``/health`` answers through it and a warm-up completion comes back through it.

5. ``serve --upgrade`` keeps the router and swaps the replicas behind it
   (``runtime.upgrade_group``): the configuration rewritten in place
   (``write_config``), a graceful reload (``reload_router``), the old worker drained
   (``wait_drained``). The group's plan is recorded under the router's name
   (``runtime.plans``), with where its replicas run after such a swap.

All containers carry ``LABEL_GROUP`` (the router's name) and ``LABEL_ROLE``; ``ps`` folds a
group into one row (``fold_rows``) and ``stop NAME`` of a router stops the whole group
(``stop_group``). A replica may still be stopped alone (HAProxy drops it).
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from instinct_serve.credentials import Redactor
from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.plan.labels import (
    LABEL_GROUP,
    LABEL_PLAN_HASH,
    LABEL_REPLICA,
    LABEL_ROLE,
    ROLE_REPLICA,
    ROLE_ROUTER,
    label_text,
)
from instinct_serve.plan.model import LOOPBACK, RESTART_POLICY, LaunchPlan
from instinct_serve.plan.replicas import (
    ROUTER_MODE,
    ROUTER_RELOAD_SIGNAL,
    haproxy_config,
    member_plan,
    restart_argv,
    router_argv,
)
from instinct_serve.runtime import health, intent, keys, plans, verified
from instinct_serve.runtime.cache_seed import cache_is_warm
from instinct_serve.runtime.deploying import Interrupted
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.docker_backend import DockerBackend, container_instance, rooted_devices
from instinct_serve.runtime.docker_data import ContainerInfo
from instinct_serve.runtime.documents import Endpoint, ServeOutcome, Status
from instinct_serve.runtime.events import EventSink, Launched, Note, PhaseUpdate, Reused
from instinct_serve.runtime.owner import LABEL_OWNER, caller
from instinct_serve.runtime.proof import (
    endpoint_of,
    probe_coherence,
    record_proof,
    serve_outcome,
    warm_up,
)
from instinct_serve.runtime.serve import Deployer
from instinct_serve.runtime.settings import ServeSettings
from instinct_serve.runtime.tunnel import LazyTunnel

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.runtime.endpoints import Row

ROUTER_HEALTH_S = 60.0  # HAProxy's first check passes within seconds of the replicas'


def config_path(host: Host, name: str) -> str:
    """Where the router of group ``name`` reads its configuration on ``host``."""
    from instinct_serve.engine import hostfs

    keys.key_path(host, name)  # the same name check as the key file's
    return hostfs.join(hostfs.data_dir(host), "groups", f"{name}.haproxy.cfg")


def group_name(info: ContainerInfo) -> str | None:
    return label_text(info.labels, LABEL_GROUP)


def role(info: ContainerInfo) -> str | None:
    return label_text(info.labels, LABEL_ROLE)


class GroupDeployer:
    """One ``serve`` of a replica group (module docstring)."""

    def __init__(
        self,
        host: Host,
        plan: LaunchPlan,
        settings: ServeSettings | None = None,
        *,
        sink: EventSink | None = None,
        confirm: Callable[[str], bool] | None = None,
        gfx: str | None = None,
        device_root: str = "",
    ) -> None:
        group = plan.group
        assert group is not None and group.router is not None and group.members
        self.host = host
        self.plan = plan
        self.group = group
        self.router = group.router
        self.settings = settings or ServeSettings()
        self.sink = sink or (lambda _doc: None)
        self.confirm = confirm
        self.gfx = gfx
        self.device_root = device_root
        self.docker = Docker(host)
        self.members = [member_plan(plan, m) for m in group.members]
        self.launched: list[str] = []  # container ids this run started (removed on abort)
        self.notes: list[str] = []
        self.fresh: set[str] = set()  # the replicas this run launched (not reused)
        self.started = time.monotonic()
        self.api_key: str | None = None
        self._current: Deployer | None = None
        self._tunnel = LazyTunnel(host)

    # -- plumbing

    def _deployer(self, plan: LaunchPlan, settings: ServeSettings) -> Deployer:
        backend = DockerBackend(self.host, self.docker, device_root=self.device_root)
        deployer = Deployer(
            self.host, plan, backend, settings, sink=self.sink, confirm=self.confirm, gfx=self.gfx
        )
        deployer.foreign_ok = False  # a replica is ours: a stranger on its port is refused
        self._current = deployer
        return deployer

    @property
    def redact(self) -> Redactor:
        """What the CLI's output goes through: the current replica's secrets and key."""
        if self._current is not None:
            return self._current.redact
        return Redactor.default([])

    def note(self, message: str) -> None:
        self.notes.append(message)
        self.sink(Note(message=message))

    @property
    def base_url(self) -> str:
        return self._tunnel.url(self.router.port)

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
        self._tunnel.close()

    # -- the Deployer's interface

    def reuse(self) -> ServeOutcome | None:
        """The whole group already runs this plan: wait for its replicas, then report."""
        self._adopt_placement()
        router = self._router()
        if router is None or not self._same_router(router) or not router.state.running:
            return None
        for plan in self.members:
            if DockerBackend(self.host, self.docker).same_plan(plan) is None:
                return None
        return self._finish(reused=True)

    def preflight(self) -> None:
        """Fail before any question when something foreign holds a replica's or the
        router's name or port."""
        for plan in self.members:
            self._deployer(plan, self.settings).preflight()
        router = self._router()
        if router is not None and not self._ours(router):
            raise self._conflict(f"container {router.name} (not this group's router)")
        strays = self._strays()
        if strays and not self.settings.replace:
            names = ", ".join(s.name for s in strays)
            raise NotReadyError(
                f"the group {self.router.name} runs other replicas ({names}, where `serve "
                "--upgrade` put them) than this plan's",
                fix="change its plan with `serve ... --upgrade` (no downtime), or add "
                "--replace to stop them first",
                id="container_name_conflict",
                details={"replicas": [s.name for s in strays]},
            )
        for holder in self.docker.port_holders(self.router.port):
            if holder.container_name != self.router.name:
                raise self._conflict(holder.describe())

    def deploy(self) -> ServeOutcome:
        change = self._resizing()
        for stray in self._strays():  # --replace: the group's replicas of another plan
            self.docker.stop(stray.id)
            forget_records(self.host, stray.name)
        failed = self.launch_members()
        if failed is not None and change is not None:
            intent.clear(self.host, change)  # a failure reported: not one to finish later
        return failed if failed is not None else self._finish(reused=False)

    def _resizing(self) -> intent.Intent | None:
        """Served again with ``--replace`` over its router (a resize, another plan): the
        intent, cleared once this plan is proven (``_finish``), else finished later."""
        router = self._router()
        if not self.settings.replace or router is None or not self._ours(router):
            return None
        root = {"device_root": self.device_root}  # "" when none: the host's devices
        return intent.begin(
            self.host, "resize", self.router.name, step="replacing", new=self.plan, extra=root
        )

    def launch_members(self) -> ServeOutcome | None:
        """Launch (or reuse) every replica, detached once loading so they load together (on
        a cold compile cache the first alone before them, to fill it); the first failure."""
        share_key(self.host, self.plan, self.router.name, self.members)
        members = list(self.members)
        if len(members) > 1 and not cache_is_warm(self.host, members[0]):
            self.note(f"cold compile cache: replica 1 fills it, then {len(members) - 1} more")
            failed = self._launch(members.pop(0), replace(self.settings, detach=False))
            if failed is not None:
                return failed
        for plan in members:  # the rest loading at once
            failed = self._launch(plan, replace(self.settings, detach=True))
            if failed is not None:
                return failed
        return None

    def _launch(self, plan: LaunchPlan, settings: ServeSettings) -> ServeOutcome | None:
        deployer = self._deployer(plan, settings)
        outcome = deployer.reuse() or deployer.deploy()
        if deployer.own is not None:
            self.launched.append(deployer.own)
            self.fresh.add(plan.container_name)
        return None if outcome.ok else self._member_failed(outcome)

    def prove_members(self) -> list[ServeOutcome] | ServeOutcome:
        """Wait for every replica, warm it up and probe it (one by one), then give them
        docker's restart policy: their outcomes, or the first failed one."""
        outcomes = []
        for plan in self.members:
            deployer = self._deployer(plan, replace(self.settings, detach=False))
            outcome = deployer.reuse()
            if outcome is None:  # gone meanwhile
                outcome = deployer._outcome("failed")
            if not outcome.ok:
                return self._member_failed(outcome)
            outcomes.append(outcome)
            self.api_key = self.api_key or deployer.api_key
        ids = [o.endpoint.container for o in outcomes if o.endpoint is not None]
        result = self.host.run(restart_argv(ids), timeout=60)
        if not result.ok:
            self.note(f"docker update --restart {RESTART_POLICY} failed: {result.stderr.strip()}")
        return outcomes

    def abandon(self) -> str | None:
        """After an unexpected error: remove what this run launched (by container id)."""
        self.close()
        if self._current is not None and self._current.launched not in (None, *self.launched):
            self._current.abandon()
        removed = []
        for cid in self.launched:
            with contextlib.suppress(InstinctError):
                removed.append(self.docker.stop(cid).name)
        self.launched = []
        return ", ".join(removed) or None

    def interrupted(self, signum: int = signal.SIGINT) -> Interrupted:
        removed = self.abandon()
        outcome = self._outcome("interrupted")
        outcome.notes.append(
            f"stopped and removed {removed}, which this run had launched"
            if removed
            else "nothing was launched by this run; nothing was removed"
        )
        return Interrupted(outcome, signum)

    # -- steps

    def _finish(self, *, reused: bool) -> ServeOutcome:
        """Wait for every replica (proven one by one), give them docker's restart policy,
        start the router if needed, and prove the group through it."""
        states: list[dict[str, Any]] = []
        outcomes = self.prove_members()
        if not isinstance(outcomes, list):
            return outcomes
        router_reused = self._start_router()
        self.sink(
            PhaseUpdate(phase="ready", message=f"checking /health through {self.router.name}")
        )
        waited = health.wait_healthy(
            self.base_url, timeout=ROUTER_HEALTH_S, still_running=self._router_running
        )
        if not waited.healthy:
            tail = self.docker.logs(self.router.name, tail=20).strip().splitlines()
            said = next((ln for ln in reversed(tail) if "ALERT" in ln), tail[-1] if tail else "")
            raise NotReadyError(
                f"the router {self.router.name} does not answer /health on port "
                f"{self.router.port} ({waited.outcome.value}) while its replicas are healthy"
                + (f": {said.strip()}" if said else ""),
                fix=f"read its log: `instinct logs {self.router.name}`",
                id="router_unhealthy",
                details={"router": self.router.name, "log_tail": tail},
            )
        self.sink(
            PhaseUpdate(phase="warming_up", message=f"first request through {self.router.name}")
        )
        model = self.plan.served_model_name
        use_chat = all(o.endpoint is None or o.endpoint.use_chat for o in outcomes)
        first = warm_up(self.base_url, model, self.settings, self.api_key, use_chat=use_chat)
        for outcome in outcomes:
            name = outcome.plan.container_name
            states.append(
                {
                    "name": name,
                    "status": "launched" if name in self.fresh else "reused",
                    "port": outcome.endpoint.port if outcome.endpoint else None,
                    "gpus": outcome.plan.gpu_indices,
                    "warmup_latency_s": outcome.endpoint.warmup_latency_s
                    if outcome.endpoint
                    else None,
                }
            )
        endpoint = self._endpoint(outcomes[0].endpoint, first)
        if self.settings.coherence:
            self._prove_router(endpoint)
        status: Status = "reused" if reused and router_reused else "ready"
        outcome = self._outcome(status, endpoint=endpoint)
        outcome.group = {
            **self.group.to_dict(),
            "router_reused": router_reused,
            "restart_policy": RESTART_POLICY,
            "member_states": states,
        }
        outcome.phase = "ready"
        plans.save(self.host, self.plan)  # what `serve --upgrade` and `rollback` start from
        intent.settled(self.host, self.plan)  # a resize bringing this plan is over
        return outcome

    def _prove_router(self, endpoint: Endpoint) -> None:
        """The coherence probe through the router (each replica passed its own): what
        clients get; kept, with the warm-up, as what ``ps`` shows proven for the router."""
        self.sink(PhaseUpdate(phase="coherence_probe", message=f"through {self.router.name}"))
        probe = probe_coherence(self.base_url, endpoint, self.settings, self.api_key)
        if not probe.ok:
            raise NotReadyError(
                f"the replicas answer coherently, but not through the router {self.router.name}: "
                f"{self.redact.text(probe.completion.text[:200])!r}",
                fix=f"see which server answers on port {self.router.port}: `instinct ps`, "
                f"`instinct logs {self.router.name}`",
                id="router_incoherent",
            )
        router = self._router()
        if router is not None and router.state.running:
            instance = container_instance(router)
            record_proof(self.host, router.name, instance, self.plan.plan_hash, endpoint)

    def _router(self) -> ContainerInfo | None:
        return self.docker.get(self.router.name)

    def _ours(self, info: ContainerInfo) -> bool:
        return info.managed and group_name(info) == self.router.name and role(info) == ROLE_ROUTER

    def _same_router(self, info: ContainerInfo) -> bool:
        """This group's router, routing this plan: by its label, or (after ``serve
        --upgrade``, which keeps the router and reloads it) by the group's record."""
        wanted = self.plan.labels.get(LABEL_PLAN_HASH, self.plan.plan_hash)
        if not self._ours(info):
            return False
        return (
            info.labels.get(LABEL_PLAN_HASH) == wanted
            or recorded_hash(self.host, self.router.name) == wanted
        )

    def _strays(self) -> list[ContainerInfo]:
        """This group's running replicas that are not this plan's (where an upgrade put
        them): they hold GPUs the plan's replicas need."""
        wanted = {m.name for m in self.group.members}
        return [
            info
            for info in group_members(self.docker, self.router.name)
            if role(info) == ROLE_REPLICA and info.name not in wanted and info.state.running
        ]

    def _adopt_placement(self) -> None:
        """After ``serve --upgrade``, the group's replicas run where the upgrade put them
        (other names and ports: ``plan.replicas.moved``): a serve of the same plan finds
        them there (the record says where), instead of launching a second copy."""
        wanted = self.plan.labels.get(LABEL_PLAN_HASH, self.plan.plan_hash)
        current = plans.load(self.host, self.router.name).current
        if (
            current is None
            or current.group is None
            or current.labels.get(LABEL_PLAN_HASH) != wanted
            or [m.gpus for m in current.group.members] != [m.gpus for m in self.group.members]
        ):
            return
        self.plan.group = self.group = replace(self.group, members=current.group.members)
        self.members = [member_plan(self.plan, m) for m in self.group.members]

    def _router_running(self) -> bool:
        """Running and never restarted: a router that exits at once (a bad configuration)
        is restarted by its policy, which must end the wait, not prolong it."""
        info = self._router()
        return info is not None and info.state.running and info.restart_count == 0

    def _start_router(self) -> bool:
        """Start HAProxy unless this very group's runs; True when it was reused."""
        from instinct_serve.engine import hostfs

        existing = self._router()
        path = config_path(self.host, self.router.name)
        text = haproxy_config(self.plan)
        if (
            existing is not None
            and self._same_router(existing)
            and existing.state.running
            and (self.host.read_text(path) or "") == text
        ):
            self.sink(Reused(container=existing.name, message=f"{existing.name} routes"))
            return True
        if existing is not None:
            if not self._ours(existing):
                raise self._conflict(f"container {existing.name} (not this group's router)")
            self.docker.stop(existing.id)  # this group's router of another plan
        hostfs.makedirs(self.host, hostfs.join(hostfs.data_dir(self.host), "groups"))
        # HAProxy's image runs as its own user: the file must be readable (no secret in it)
        hostfs.write_text(self.host, path, text, "644")
        argv = router_argv(self.plan, path)
        argv[2:2] = ["--label", f"{LABEL_OWNER}={caller()}"]  # who started it (runtime.owner)
        if self.device_root:
            argv = rooted_devices(argv, self.device_root)
        self.sink(PhaseUpdate(phase="launching", message=f"router {self.router.name}"))
        cid = self.docker.run(argv)
        self.launched.append(cid)
        self.sink(Launched(container=self.router.name, engine="docker", attempt=1))
        return False

    def _conflict(self, what: str) -> NotReadyError:
        return NotReadyError(
            f"{what} holds the name or port {self.router.port} of the group's router",
            fix=f"choose another --name or --port, or stop it first (`instinct stop "
            f"{self.router.name}` if it is an instinct-serve endpoint)",
            id="port_in_use",
            details={"name": self.router.name, "port": self.router.port},
        )

    def _endpoint(self, member: Endpoint | None, first: health.CompletionResult) -> Endpoint:
        plan = self.plan
        address = self._current.address if plan.public and self._current is not None else LOOPBACK
        key_file = (
            keys.key_path(self.host, self.router.name) if plan.api_key == "generated" else None
        )
        return endpoint_of(
            plan,
            self.host,
            "docker",
            container=self.router.name,
            address=address,
            use_chat=first.endpoint.endswith("chat/completions"),
            max_model_len=member.max_model_len if member is not None else plan.max_model_len,
            warmup_s=round(first.latency_s, 3),
            coherence=member.coherence if member is not None else None,
            key_file=key_file,
            key_command=None if key_file is None else f"cat -- {key_file}",
            tunnel=member.tunnel if member is not None else None,
        )

    def _member_failed(self, outcome: ServeOutcome) -> ServeOutcome:
        name = outcome.plan.container_name
        outcome.notes.append(
            f"{name} is a replica of {self.router.name}: the group is not ready; fix the "
            f"failure and serve again (the healthy replicas are reused)"
        )
        outcome.group = self.group.to_dict() | {"failed_member": name}
        return outcome

    def _outcome(self, status: Status, *, endpoint: Endpoint | None = None) -> ServeOutcome:
        return serve_outcome(
            status,
            host=self.host,
            engine="docker",
            plan=self.plan,
            started=self.started,
            endpoint=endpoint,
            notes=self.notes,
        )


# ----------------------------------------------------------------------------- reload

RELOAD_S = 30.0  # the new worker is up within a second; a master that fails to re-read waits
DRAIN_S = 300.0  # the old worker finishes its requests (a long generation) at most this long


def share_key(host: Host, plan: LaunchPlan, router: str, members: Sequence[LaunchPlan]) -> None:
    """A generated API key: the group's (kept under the router's name), copied to each
    replica's key file, so a client's one key passes HAProxy to any replica."""
    if plan.api_key != "generated":
        return
    key = keys.ensure_key(host, keys.key_path(host, router))
    for member in members:
        path = keys.key_path(host, member.container_name)
        if keys.read_key(host, path) != key:
            keys.write_key(host, path, key)


def recorded_hash(host: Host, name: str) -> str | None:
    """The plan hash of group ``name``'s recorded plan (``runtime.plans``)."""
    current = plans.load(host, name).current
    return None if current is None else current.labels.get(LABEL_PLAN_HASH)


def reloadable(info: ContainerInfo) -> bool:
    """A router that reloads gracefully: HAProxy in master-worker mode (``ROUTER_MODE``;
    one started by an earlier version runs without it)."""
    return all(flag in info.cmd for flag in ROUTER_MODE)


def write_config(host: Host, name: str, text: str) -> None:
    """Rewrite the running router's configuration *in place*: the file is bind-mounted
    alone, so a new file renamed over it would stay unseen by the container (the mount
    holds the old inode). HAProxy reads it only when told to reload, after this returns."""
    path = config_path(host, name)
    result = host.run(["sh", "-c", 'cat > "$1"', "sh", path], timeout=30, input=text)
    if not result.ok:
        raise InstinctError(
            f"cannot rewrite {path} on {host.name}: {result.stderr.strip()}",
            fix="check the permissions of the tool's data directory",
            id="write_failed",
        )


def reload_router(docker: Docker, name: str, *, timeout: float = RELOAD_S) -> set[int]:
    """Tell group ``name``'s HAProxy to re-read its configuration (``ROUTER_RELOAD_SIGNAL``
    to the master) and wait for the new worker: the old workers' PIDs, which finish their
    connections and exit (``wait_drained``). The listening socket passes from the old
    worker to the new one: no connection is refused meanwhile."""
    info = docker.get(name)
    if info is None or info.state.pid is None:
        raise InstinctError(f"the router {name} is not running", id="router_unhealthy")
    master = info.state.pid
    old = docker.children(name, master)
    docker.signal(name, ROUTER_RELOAD_SIGNAL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if docker.children(name, master) - old:
            return old
        time.sleep(0.1)
    tail = docker.logs(name, tail=20).strip().splitlines()
    said = next((ln for ln in reversed(tail) if "ALERT" in ln), "")
    raise NotReadyError(
        f"the router {name} did not start a worker on the new configuration within "
        f"{timeout:g} s" + (f": {said.strip()}" if said else ""),
        fix=f"read its log: `instinct logs {name}`",
        id="router_unhealthy",
        details={"router": name, "log_tail": tail},
    )


def wait_drained(docker: Docker, name: str, old: set[int], *, timeout: float = DRAIN_S) -> bool:
    """Wait until the old workers ``old`` have exited (their last response sent)."""
    info = docker.get(name)
    if info is None or info.state.pid is None:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not docker.children(name, info.state.pid) & old:
            return True
        time.sleep(0.2)
    return False


# ----------------------------------------------------------------------------- ps and stop


def fold_rows(rows: Sequence[Row]) -> list[Row]:
    """``ps``: a group is one row (its router's), with its replicas as ``members``; a
    replica whose router is gone stays a row of its own."""
    routers = {r.name: r for r in rows if r.role == ROLE_ROUTER and r.group == r.name}
    out: list[Row] = []
    for row in rows:
        router = routers.get(row.group or "") if row.role == ROLE_REPLICA else None
        if router is not None:
            router.members.append(row)
        else:
            out.append(row)
    for router in routers.values():
        router.members.sort(key=lambda r: r.replica if r.replica is not None else 1 << 30)
    return out


def is_router(info: ContainerInfo) -> bool:
    """A group's router, started by this tool (its group is its own name)."""
    return info.managed and role(info) == ROLE_ROUTER and group_name(info) == info.name


def forget_records(host: Host, name: str) -> None:
    """A removed replica's key, proof and plan records are of no use any more."""
    keys.remove_key(host, keys.key_path(host, name))
    verified.forget(host, name)
    plans.forget(host, name)


def forget_config(host: Host, name: str) -> None:
    """The router's configuration is of no use once the router is gone."""
    with contextlib.suppress(InstinctError):
        host.run(["rm", "-f", "--", config_path(host, name)], timeout=30)


def group_members(docker: Docker, name: str) -> list[ContainerInfo]:
    """The managed containers of group ``name`` (router and replicas)."""
    return docker.list_managed(labels={LABEL_GROUP: name})


def stop_group(host: Host, name: str) -> list[dict[str, Any]]:
    """Stop and remove the router of group ``name`` first (no more requests in), then
    its replicas; forget the keys and the router's configuration."""
    docker = Docker(host)
    found = group_members(docker, name)
    found.sort(key=lambda c: role(c) != ROLE_ROUTER)
    stopped = []
    for info in found:
        with contextlib.suppress(InstinctError):
            docker.stop(info.id)
            stopped.append(
                {
                    "name": info.name,
                    "engine": "docker",
                    "model": info.model,
                    "removed": True,
                    "group": name,
                    "role": role(info),
                }
            )
        with contextlib.suppress(InstinctError):
            keys.remove_key(host, keys.key_path(host, info.name))
    forget_config(host, name)
    return stopped


def replica_index(labels: Mapping[str, str]) -> int | None:
    """A replica's index label, or None when absent or not a small number."""
    text = label_text(labels, LABEL_REPLICA)
    return int(text) if text is not None and re.fullmatch(r"[0-9]{1,5}", text) else None
