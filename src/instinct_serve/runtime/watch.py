"""``instinct watch NAME``: keep one endpoint serving after ``serve`` has returned.

Who restarts what (docs/supervision.md): a docker endpoint, once proven, carries the
daemon's bounded restart policy (``plan.render.RESTART_POLICY``), so a crash is restarted
even with nobody watching; Kubernetes restarts pods itself; a native process has no
daemon. ``watch`` covers the rest, for both engines: a clean exit the policy leaves alone,
a crash the policy gave up on, a hang (a running server whose ``/health`` fails), and the
proof the daemon cannot give: after any restart it warms the endpoint up and probes its
coherence again (``runtime.verified``: a restart is a new instance, no longer proven).

The decision is pure (``decide``: an observation, what was seen before, the clock); the
``Watcher`` observes through the engine's ``Backend`` over the ``Host`` and acts through
``runtime.serve.Deployer`` (``adopt``/``prove``/``restart``), so a restart is serve's own
relaunch: under the host's launch lock, with the known fix of its diagnosis once (serve's
retry mapping), then waited for, warmed up and probed. Every event is appended to the
endpoint's journal on its host (``runtime.journal``), which ``ps`` reads.

The loop is bounded on request (``max_checks``, ``duration_s``) and ends by itself when
the endpoint is removed (``instinct stop``) or after ``max_restarts`` restarts in a row
that did not bring it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal

from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.runtime import intent, journal, plans, verified
from instinct_serve.runtime.backend import Backend, Target
from instinct_serve.runtime.secret_env import inherit
from instinct_serve.runtime.settings import ServeSettings

Action = Literal["ok", "wait", "prove", "restart", "gone", "give_up"]


@dataclass(frozen=True)
class WatchSettings:
    interval_s: float = 10.0
    unhealthy_after: int = 3  # failed /health checks in a row of a loaded server: a hang
    backoff_s: float = 5.0  # before the first restart of a series; doubles each time
    max_backoff_s: float = 300.0
    max_restarts: int = 5  # restarts in a row that did not bring it back: give up
    stable_s: float = 600.0  # proven this long: the next failure starts a new series
    startup_s: float = 1800.0  # a new run of the server may load this long (/health fails)
    max_checks: int | None = None  # bounded loops (tests, cron)
    duration_s: float | None = None
    canary_s: float = 300.0  # between fingerprint checks of a healthy endpoint; 0: none
    canary_tokens: int = 8192  # what one check may cost
    serve: ServeSettings = field(default_factory=ServeSettings)


@dataclass(frozen=True)
class Seen:
    """One look at the endpoint."""

    exists: bool
    running: bool = False
    restarting: bool = False  # the daemon's restart policy is bringing it back
    instance: str | None = None
    health: str | None = None  # "healthy", "loading", or why not (running ones only)
    proven: bool = False  # warm-up and coherence recorded for this very instance


@dataclass
class Memory:
    """What the watcher remembers between looks."""

    instance: str | None = None
    instance_since: float = 0.0  # when this instance was first seen (or launched)
    failed_checks: int = 0
    restarts_in_a_row: int = 0
    last_restart_at: float | None = None
    proven_since: float | None = None
    failed_proofs: int = 0  # warm-up/coherence failures of healthy runs in a row
    last_canary_at: float | None = None  # the last fingerprint check (runtime.canary)
    fallback_done: bool = False  # the one kernel fallback for wrong numbers was applied
    gave_up_on: str | None = None  # the instance whose wrong numbers were left as they are
    canary_error_said: bool = False  # a check that could not be taken was journaled


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str = ""
    failed_check: bool = False  # a loaded server's /health failed this time


def backoff_s(settings: WatchSettings, restarts_in_a_row: int) -> float:
    """The pause before restart number ``restarts_in_a_row + 1`` of a series."""
    return min(settings.max_backoff_s, settings.backoff_s * 2.0**restarts_in_a_row)


def decide(seen: Seen, memory: Memory, now: float, settings: WatchSettings) -> Decision:
    """What to do about what was seen. Pure."""
    if not seen.exists:
        return Decision("gone", "the endpoint was removed (instinct stop)")
    if seen.restarting:
        return Decision("wait", "the daemon's restart policy is restarting it")
    if seen.running and seen.health == "healthy":
        if seen.proven:
            return Decision("ok")
        if memory.failed_proofs >= settings.max_restarts:
            why = f"healthy, but its warm-up or coherence probe failed {memory.failed_proofs} times"
            return Decision("give_up", why)
        return Decision("prove", "not proven since it started")
    if memory.restarts_in_a_row >= settings.max_restarts:
        why = f"{memory.restarts_in_a_row} restarts in a row did not bring it back"
        return Decision("give_up", why)
    if seen.running:
        young = now - memory.instance_since < settings.startup_s
        if young and not seen.proven:
            return Decision("wait", f"loading ({seen.health})")
        if memory.failed_checks + 1 < settings.unhealthy_after:
            return Decision("wait", f"/health: {seen.health}", failed_check=True)
        why = f"/health failed {memory.failed_checks + 1} times in a row: {seen.health}"
    else:
        why = "the server exited"
    pause = backoff_s(settings, memory.restarts_in_a_row)
    if memory.last_restart_at is not None and now - memory.last_restart_at < pause:
        return Decision("wait", f"{why}; backing off {pause:g} s", failed_check=seen.running)
    return Decision("restart", why, failed_check=seen.running)


Sink = Callable[[dict[str, Any]], None]


class Watcher:
    """Watches one endpoint on one host (see the module docstring)."""

    def __init__(
        self,
        host: Host,
        name: str,
        backend: Backend,
        settings: WatchSettings | None = None,
        *,
        sink: Sink | None = None,
    ) -> None:
        self.host = host
        self.name = name
        self.backend = backend
        self.settings = settings or WatchSettings()
        self.sink = sink or (lambda _doc: None)
        self.memory = Memory()
        self.checks = 0

    def record(self, kind: str, **fields: Any) -> None:
        doc = journal.record(self.host, self.name, kind, **fields)
        self.sink({"event": kind, **doc})

    # -- looking

    def _target(self) -> Target | None:
        target = self.backend.target(self.name)
        if target is None or not target.managed:
            return None
        if self.backend.engine == "native" and not target.running:
            from instinct_serve.engine import launcher

            status = launcher.status(self.host, self.name)
            if status is None or status.stopped:  # `instinct stop` ended it: not a failure
                return None
        return target

    def observe(self) -> tuple[Seen, Target | None]:
        from instinct_serve.runtime.endpoints import probe

        target = self._target()
        if target is None:
            return Seen(exists=False), None
        restarting = target.status == "restarting"
        health = probe(self.host, target.port) if target.running and target.port else None
        proven = verified.load(self.host, target.name, target.instance) is not None
        seen = Seen(True, target.running, restarting, target.instance, health, proven)
        return seen, target

    # -- the loop

    def run(self) -> int:
        """Watch until the endpoint is removed, given up on, or the bounds are reached:
        0, or 1 after giving up."""
        from instinct_serve.runtime.recover import resolve

        settings = self.settings
        for found in resolve(self.host):  # changes cut short: finished or undone first
            self.sink({"event": "interrupted", "kind": "interrupted", "at": found["at"], **found})
        target = self._target()
        if target is None:
            raise InstinctError(
                f"no endpoint named {self.name} started by instinct-serve on {self.host.name}",
                fix="list them with `instinct ps`",
                id="not_found",
            )
        self.memory.instance = target.instance
        self.memory.instance_since = time.monotonic()
        self.record("watch_started", id=target.handle, engine=self.backend.engine)
        deadline = None if settings.duration_s is None else time.monotonic() + settings.duration_s
        while True:
            try:
                code = self.step()
            except InstinctError as exc:
                self.record("gave_up", why=exc.message)
                raise
            except KeyboardInterrupt:
                self.record("watch_stopped", why="interrupted")
                raise
            if code is not None:
                return code
            self.checks += 1
            if settings.max_checks is not None and self.checks >= settings.max_checks:
                self.record("watch_stopped", why=f"{self.checks} checks done (--checks)")
                return 0
            if deadline is not None and time.monotonic() >= deadline:
                self.record("watch_stopped", why="--for elapsed")
                return 0
            time.sleep(settings.interval_s)

    def step(self) -> int | None:
        """One look and what follows from it; an exit code when the watch is over."""
        now = time.monotonic()
        seen, target = self.observe()
        memory = self.memory
        if not seen.exists and self._reappears():
            seen, target = self.observe()
        if seen.exists and seen.instance != memory.instance and seen.instance is not None:
            if memory.instance is not None and not seen.restarting:
                handle = target.handle if target else None
                same = seen.instance.split(":", 1)[0] == memory.instance.split(":", 1)[0]
                if self.backend.engine == "docker" and same:
                    # the same container run again: the daemon's restart policy
                    self.record("restarted", by="docker", id=handle)
                else:  # another serve replaced it (--replace, --upgrade, rollback)
                    self.record("replaced", id=handle)
            memory.instance, memory.instance_since = seen.instance, now
            memory.failed_checks = 0
        decision = decide(seen, memory, now, self.settings)
        if decision.failed_check:
            memory.failed_checks += 1
            if memory.failed_checks == 1:
                self.record("unhealthy", why=decision.why, health=seen.health)
        if decision.action == "ok":
            memory.failed_checks = 0
            if memory.proven_since is None:
                memory.proven_since = now
            elif now - memory.proven_since >= self.settings.stable_s:
                memory.restarts_in_a_row = 0
            if target is not None and self._canary_due(now):
                self._canary(target)
            return None
        memory.proven_since = None
        if decision.action == "gone":
            self.record("watch_stopped", why=decision.why)
            return 0
        if decision.action == "give_up":
            self.record("gave_up", why=decision.why)
            return 1
        if decision.action == "prove" and target is not None:
            self._prove(target)
        elif decision.action == "restart" and target is not None:
            self._restart(target, seen, decision.why)
        return None

    def _reappears(self) -> bool:
        """Gone, or being replaced? A serve that replaces an endpoint (``--replace``,
        ``--upgrade``, ``rollback``) removes it and launches its successor under the host's
        launch lock: once the lock is free, the successor is there if there is one."""
        from instinct_serve.runtime.lock import HostLock

        deadline = time.monotonic() + self.settings.startup_s
        while time.monotonic() < deadline and any(  # an upgrade or rollback switching it
            i.name == self.name and i.alive() for i in intent.load_all(self.host)
        ):
            time.sleep(min(1.0, self.settings.interval_s))
        with HostLock(self.host):
            pass
        return self._target() is not None

    # -- acting (through serve's Deployer)

    def _deployer(self, target: Target, *, relaunch: bool = False) -> Any:
        from instinct_serve.runtime.serve import Deployer

        plan = plans.load(self.host, self.name).current
        if (
            plan is not None
            and plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash) != target.plan_hash
        ):
            raise NotReadyError(
                f"the plan recorded for {self.name} on {self.host.name} is not the one it "
                "runs (it was replaced by hand, or its last serve did not finish proving it)",
                fix=f"serve its plan again (`instinct serve ... --name {self.name}`), then "
                f"`instinct watch {self.name}`",
                id="plan_not_recorded",
            )
        if plan is None:
            raise NotReadyError(
                f"no recorded plan for {self.name} on {self.host.name}: it was served by an "
                "earlier version of instinct-serve",
                fix=f"serve it again (`instinct serve ... --replace`), then `instinct watch "
                f"{self.name}`",
                id="plan_not_recorded",
            )
        if relaunch:  # the values it was given pass on to the relaunch (by name)
            inherit(self.backend.secret_values(target.handle, plan.secret_env))
        deployer = Deployer(self.host, plan, self.backend, self.settings.serve)
        deployer.following = True  # a watch waits for the endpoint, never detaches
        deployer.adopt(target)
        return deployer

    def _prove(self, target: Target) -> None:
        deployer = self._deployer(target)
        try:
            outcome = deployer.prove(target)
        finally:
            deployer.close()
        self._after(outcome, started=None)

    def _canary_due(self, now: float) -> bool:
        every = self.settings.canary_s
        last = self.memory.last_canary_at
        return every > 0 and (last is None or now - last >= every)

    def _canary(self, target: Target) -> None:
        """Fingerprint the healthy endpoint (``runtime.canary``); on a failure, name it and
        relaunch once with the known kernel fallback (``_fallback``)."""
        from instinct_serve.runtime import canary

        plan = plans.load(self.host, self.name).current
        self.memory.last_canary_at = time.monotonic()
        if plan is None:
            return
        serve = self.settings.serve
        given = plan.api_key_env  # a key passed by name: the one the endpoint was given
        values = self.backend.secret_values(target.handle, [given]) if given else {}
        result = canary.check(
            self.host,
            self.name,
            plan,
            max_tokens=self.settings.canary_tokens,
            seconds=serve.fingerprint_s,
            api_key=values.get(given) if given else None,
        )
        if result.verdict is None:
            if not self.memory.canary_error_said:  # once until a check is taken again
                self.record("canary_error", **result.fields())
            self.memory.canary_error_said = True
            self.memory.last_canary_at = time.monotonic()
            return
        self.memory.canary_error_said = False
        if result.verdict.ok:
            self.sink(
                {
                    "event": "canary_passed",
                    "kind": "canary_passed",
                    "at": result.at,
                    **result.fields(),
                }
            )
        elif self.memory.gave_up_on != target.instance:  # journaled once an instance
            self.record("canary_failed", **result.fields())
            self._fallback(target, result.verdict.failure or "drift")
        else:
            self.sink(
                {
                    "event": "canary_failed",
                    "kind": "canary_failed",
                    "at": result.at,
                    **result.fields(),
                }
            )
        self.memory.last_canary_at = time.monotonic()

    def _fallback(self, target: Target, failure: str) -> None:
        """One relaunch with the kernel fallback diagnose names for ``failure`` (the
        validated-stack row's fix, the AITER switch, eager); never a second one."""
        if self.memory.fallback_done or "wrong_output" in target.fixes:
            if self.memory.gave_up_on == target.instance:
                return  # said once for this instance; each check stays on its record
            self.memory.fallback_done = True
            self.memory.gave_up_on = target.instance
            self.record(
                "canary_gave_up",
                failure=failure,
                why="its kernel fallback was applied already: no further relaunch for wrong "
                "numbers (see `instinct diagnose`, or roll back the image)",
            )
            return
        self.memory.fallback_done = True
        self._relaunch(target, frozenset({f"fingerprint_{failure}"}))

    def _restart(self, target: Target, seen: Seen, why: str) -> None:
        memory = self.memory
        exit_info = self.backend.exit_info(target.handle)
        self.record(
            "exited" if not seen.running else "hung",
            why=why if exit_info is None else f"it {exit_info.describe()}",
            id=target.handle,
            exit_code=exit_info.exit_code if exit_info else None,
        )
        memory.restarts_in_a_row += 1
        memory.last_restart_at = time.monotonic()
        self._relaunch(target, frozenset())

    def _relaunch(self, target: Target, signals: frozenset[Any]) -> None:
        """Serve's relaunch of ``target`` (with the fix its diagnosis under ``signals``
        names, once), kept aside first for its log; then proven."""
        memory = self.memory
        started = time.monotonic()
        deployer = self._deployer(target, relaunch=True)
        # a kill from here on leaves a record the next command settles (relaunches the plan)
        root = str(getattr(self.backend, "device_root", "") or "")
        change = intent.replacing(self.host, deployer.plan, target.name, root)
        crashed = self._keep_crashed(target)
        try:
            outcome = deployer.restart(target.handle, signals, keep=crashed is not None)
        finally:
            deployer.close()
        if outcome.status not in ("ready", "reused"):
            intent.clear(self.host, change)  # a failure reported: not one to finish later
        if crashed is not None:
            self._after_crashed(crashed, outcome.status in ("ready", "reused"))
        diagnosis = deployer.last_diagnosis
        finding = diagnosis.primary if diagnosis is not None else None
        kind = "relaunched" if deployer.relaunches else "restarted"
        self.record(
            kind,
            by="watch",
            finding=finding.id if finding else None,
            last_error=diagnosis.last_error if diagnosis else None,
            fixes=[r.finding for r in deployer.relaunches],
            status=outcome.status,
        )
        refreshed = self._target()
        memory.instance = refreshed.instance if refreshed else None
        memory.instance_since = time.monotonic()
        memory.failed_checks = 0
        self._after(outcome, started=started)

    def _keep_crashed(self, target: Target) -> str | None:
        """Before a relaunch: a crashed (or hung) container is renamed out of its name's
        way (``NAME-crashed-<time>``) and its log saved beside the journal, so neither is
        lost if the relaunch fails; its new name, or None (native: its log is a file)."""
        if self.backend.engine != "docker":
            return None
        from instinct_serve.runtime.docker import Docker

        docker = Docker(self.host)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        aside = f"{self.name}-crashed-{stamp}"[:128]
        try:
            text = docker.logs(target.handle, tail=None)
            docker.rename(target.handle, aside)
        except InstinctError as exc:
            self.record("crash_log", id=target.handle, saved=None, why=exc.message)
            return None
        path = journal.save_log(self.host, self.name, f"crashed-{stamp}", text)
        self.record("crash_log", id=target.handle, container=aside, saved=path)
        return target.handle

    def _after_crashed(self, handle: str, proven: bool) -> None:
        """The crashed container goes once its successor is proven; else it stays."""
        from instinct_serve.runtime.docker import Docker

        info = Docker(self.host).get(handle)
        if info is None:
            return
        if proven:
            try:
                Docker(self.host).stop(handle)
            except InstinctError as exc:
                self.record("crash_kept", container=info.name, why=exc.message)
            return
        why = "the relaunch was not proven: kept for its log"
        self.record("crash_kept", container=info.name, why=why)

    def _after(self, outcome: Any, *, started: float | None) -> None:
        if outcome.status in ("ready", "reused"):
            self.memory.failed_proofs = 0
            fields: dict[str, Any] = {}
            if started is not None:
                fields["restart_s"] = round(time.monotonic() - started, 3)
            endpoint = outcome.endpoint
            if endpoint is not None:
                fields["warmup_latency_s"] = endpoint.warmup_latency_s
                coherence = endpoint.coherence or {}
                fields["coherence"] = coherence.get("verdict")
            self.record("recovered" if started is not None else "proven", **fields)
            return
        self.memory.failed_proofs += 1
        failure = outcome.failure
        self.record(
            "unhealthy",
            why=failure.cause if failure is not None else f"status {outcome.status}",
            failure=failure.id if failure is not None else None,
        )


def backend_for(host: Host, name: str, device_root: str = "") -> Backend:
    """The engine ``name`` runs on: a container of ours, else a native process of ours
    (``device_root``: the stand-in device tree of ``--root``, as serve's)."""
    from instinct_serve.runtime.docker_backend import DockerBackend
    from instinct_serve.runtime.endpoints import find

    engine, found = find(host, name)
    if engine == "docker":
        backend: Backend = DockerBackend(host, device_root=device_root)
        if not found.managed:
            raise UsageError(
                f"{name} was not started by instinct-serve: refusing to supervise it",
                fix="watch only endpoints `instinct ps` lists",
                id="not_managed",
            )
        return backend
    from instinct_serve import servers
    from instinct_serve.runtime.native import backend_for_server

    server = found.meta.get("server") if isinstance(found.meta, dict) else None
    return backend_for_server(host, server if isinstance(server, str) else servers.DEFAULT)


def only_endpoint(host: Host) -> str:
    """``watch`` without a name: the one endpoint of the host, or a usage error."""
    from instinct_serve.runtime.endpoints import list_endpoints

    names = [row.name for row in list_endpoints(host, health=False).rows]
    if len(names) == 1:
        return names[0]
    raise UsageError(
        f"{len(names)} endpoints on {host.name}: say which to watch"
        + (f" ({', '.join(names)})" if names else ""),
        fix="instinct watch NAME (one watch per endpoint)",
        id="which_endpoint",
    )


def with_serve(settings: WatchSettings, serve: ServeSettings) -> WatchSettings:
    return replace(settings, serve=serve)
