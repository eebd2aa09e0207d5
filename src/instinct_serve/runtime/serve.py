"""From a ``LaunchPlan`` to a healthy, warmed-up endpoint, or to a diagnosed failure.

``Deployer`` drives one ``instinct serve``: reuse a healthy managed endpoint of the same
plan (or attach to one still loading), clear the port and the name (only ever removing what
the tool created), pull the image, launch, follow the log through the ``PhaseTracker``
while polling ``/health``, warm up, probe coherence, and print the connection details. The
known failures are handled here: a dead server is diagnosed from its log tail and, when
the finding says a retry is safe (``auto_retry``: ``--enforce-eager`` after a graph-capture
OOM, an env override for garbage output, ...), relaunched once with that fix; a silent log
while capturing graphs is a ``graph_capture_hang`` and gets the same treatment.

The engine behind it is a ``Backend`` (``runtime.backend``): Docker containers
(``runtime.docker_backend``) or the supervised native ``vllm serve`` (``runtime.native``).
Both run through a ``Host``, so ``--host`` is the same code path; HTTP goes through
``runtime.tunnel`` (a no-op locally). The pieces it uses live next to it: ``settings``
(patience), ``retry`` (a hint applied to the plan), ``secret_env``, ``follower`` (the log
stream) and ``documents`` (what it returns). Progress is reported as typed events
(``runtime.events``) to a sink the CLI renders as a status line or JSON Lines.
"""

from __future__ import annotations

import copy
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from instinct_serve import vllm_args
from instinct_serve.credentials import Redactor
from instinct_serve.diagnose import DiagnoseContext, Diagnosis, Finding, diagnose
from instinct_serve.diagnose.phases import PHASE_ORDER, PhaseTracker
from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.hosts import Host, SshHost
from instinct_serve.plan.model import API_KEY_ENV, LOOPBACK, LaunchPlan
from instinct_serve.runtime import health, keys, plans, verified
from instinct_serve.runtime.backend import Backend, ExitInfo, Occupant, Target, launch_labels
from instinct_serve.runtime.docker_backend import DockerBackend
from instinct_serve.runtime.documents import (
    MODEL_NOT_LISTED,
    STARTUP_FAILED,
    STARTUP_TIMEOUT,
    Endpoint,
    Failure,
    Relaunch,
    ServeOutcome,
    Status,
)
from instinct_serve.runtime.events import (
    Attached,
    CoherenceChecked,
    EventSink,
    Healthy,
    Launched,
    Note,
    PhaseUpdate,
    Relaunching,
    Replaced,
    Reused,
    ServeEvent,
    Stalled,
    WarmedUp,
    phase_words,
)
from instinct_serve.runtime.follower import LogFollower
from instinct_serve.runtime.native import NativeBackend
from instinct_serve.runtime.retry import apply_retry
from instinct_serve.runtime.secret_env import local_secrets
from instinct_serve.runtime.settings import ServeSettings, detaches, startup_timeout_s

FAST_POLL_S = 0.25  # /health cadence once the log says the API server is starting
ALIVE_CHECK_S = 5.0  # backup liveness check while the log follower runs
DIAGNOSE_TAIL = 2000  # log lines handed to diagnose
SHOWN_TAIL = 30  # log lines shown with a failure
FOLLOWER_RESTARTS = 3
HANG_PHASES = frozenset({"capturing_graphs"})
SUCCESSOR_WAIT_S = 60.0  # a followed endpoint died: how long its owner may take to relaunch
SUCCESSOR_DECIDE_S = 10.0  # stopped but still there this long: its owner kept it, gave up
# After a strong failure line, how long the server may take to exit by itself (vLLM 0.32
# exits 2.5-9 s after it, tests/fixtures/logs/real-vllm-cpu/capture.json; its root-cause
# traceback may follow the line). Some failures leave the API server up (log 16: still
# running 30 s later): then serve ends the wait anyway, diagnoses and stops it.
FAILED_GRACE_S = 15.0

Confirm = Callable[[str], bool]


def discard_target(host: Host, target: Target, *, keep: bool) -> bool:
    """Stop (and unless ``keep`` remove) one of our endpoints, whatever its engine."""
    if target.engine == "docker":
        return DockerBackend(host).discard(target.handle, keep=keep)
    return NativeBackend(host, "vllm").discard(target.name, keep=keep)


# --------------------------------------------------------------------------- waiting

# "failed": the log said the start-up failed for good, and the server did not exit
WaitKind = Literal["healthy", "exited", "failed", "stalled", "timeout", "detached"]


@dataclass
class WaitResult:
    kind: WaitKind
    exit: ExitInfo | None = None
    elapsed_s: float = 0.0


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) during serve, after cleanup; carries what was cleaned up."""

    def __init__(self, outcome: ServeOutcome, signum: int = signal.SIGINT) -> None:
        super().__init__("interrupted")
        self.outcome = outcome
        self.signum = signum


def public_address(host: Host) -> str:
    """The name clients on the network use for the host: this machine's own address (the
    one its default route leaves from), or the ssh config's HostName."""
    if host.is_local:
        return local_address()
    if isinstance(host, SshHost):
        argv = ["ssh"]
        if host.ssh_config:
            argv += ["-F", host.ssh_config]
        if host.port:
            argv += ["-p", str(host.port)]
        try:
            out = subprocess.run(
                [*argv, "-G", host.target], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return host.address
        for line in out.stdout.splitlines():
            key, _, value = line.partition(" ")
            if key == "hostname" and value.strip():
                return value.strip()
    return host.address


def local_address() -> str:
    """This machine's address on its network (no packet is sent), else its host name."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: a route lookup, nothing sent
            address = str(sock.getsockname()[0])
    except OSError:
        address = ""
    if address and not address.startswith("127.") and address != "0.0.0.0":
        return address
    return socket.gethostname() or LOOPBACK


def _ssh_words(host: Host) -> list[str]:
    """``ssh [-F CONFIG] [-p PORT] TARGET`` as a user would type it for this host."""
    if not isinstance(host, SshHost):
        return []
    argv = ["ssh"]
    if host.ssh_config:
        argv += ["-F", host.ssh_config]
    if host.port:
        argv += ["-p", str(host.port)]
    return [*argv, host.target]


class Deployer:
    """One ``serve`` run of one plan on one host (see the module docstring).

    Safe under concurrency: the look for an endpoint of the same plan, the clearing of the
    way and the launch happen under the host's launch lock (``runtime.lock``), so a second
    serve of the same plan waits, then reuses what the first launched. Everything this run
    stops or removes is what it launched, by the handle the backend returned (a
    container's id), never something found by name."""

    def __init__(
        self,
        host: Host,
        plan: LaunchPlan,
        backend: Backend,
        settings: ServeSettings | None = None,
        *,
        sink: EventSink | None = None,
        confirm: Confirm | None = None,
        gfx: str | None = None,
    ) -> None:
        self.host = host
        self.plan = plan
        self.backend = backend
        # The plan-hash label names the plan the user asked for, also on relaunches.
        plan.labels = launch_labels(plan, [])
        self.settings = settings or ServeSettings()
        self.sink = sink or (lambda _doc: None)
        self.confirm = confirm
        self.gfx = gfx or (plan.gfx_version if plan.gfx_version != "unknown" else None)
        self.secrets = local_secrets(plan.secret_env)
        self.launched: str | None = None  # the handle of the endpoint to clean up on abort
        self.own: str | None = None  # the handle of the endpoint this run launched last
        self._launching = False  # inside backend.launch: the endpoint may appear late
        self.following = False  # waiting for an endpoint of this plan another run started
        self.api_key: str | None = None  # sent by our probes (Authorization: Bearer)
        self.key_file: str | None = None  # where a generated key is kept on the host
        self.redact = Redactor.default(self.secrets.values())
        self.fixes: list[str] = []
        self.last_diagnosis: Diagnosis | None = None  # of the endpoint ``restart`` replaced
        self.relaunches: list[Relaunch] = []
        self.replaced: list[str] = []
        self.notes: list[str] = []
        self.use_chat = True
        self.tracker = PhaseTracker()
        self.started = time.monotonic()
        self._base_url: str | None = None
        self._tunnel: Any = None
        self.address = public_address(host)

    # -- events

    def emit(self, event: ServeEvent) -> None:
        self.sink(event)

    def phase(self, phase: str, message: str, attempt: int | None = None) -> None:
        self.emit(PhaseUpdate(phase=phase, message=message, attempt=attempt))

    def note(self, message: str) -> None:
        self.notes.append(message)
        self.emit(Note(message=message))

    # -- HTTP through the tunnel (opened once, lazily)

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            from instinct_serve.runtime.tunnel import Tunnel

            tun = Tunnel(self.host, self.plan.port)
            self._base_url = tun.open()
            self._tunnel = tun
        return self._base_url

    def close(self) -> None:
        if self._tunnel is not None:
            self._tunnel.close()
            self._tunnel = None
            self._base_url = None

    # -- the whole run

    def reuse(self) -> ServeOutcome | None:
        """An endpoint of this very plan already runs: report it, or wait for it to load."""
        self._check_own_key()
        existing = self.backend.same_plan(self.plan)
        if existing is None:
            return None
        return self._reuse(existing)

    def _reuse(self, existing: Target) -> ServeOutcome:
        """Reuse ``existing`` once it proves to run this plan; an impostor is an error that
        names it, and it is left untouched."""
        problem = self.backend.verify(self.plan, existing)
        if problem is not None:
            raise self._impostor(existing, problem)
        self.plan = self._with_name(existing.name)
        self._load_key(create=False)
        sample = health.probe_health(self.base_url, timeout=3.0)
        if sample.ok:
            endpoint = self._endpoint(warmup_s=None, coherence=None)
            try:
                models = health.list_models(self.base_url, api_key=self.api_key)
            except InstinctError as exc:
                raise self._impostor(existing, f"/v1/models failed: {exc.message}") from None
            match = next((m for m in models if m.id == endpoint.model), None)
            if match is None:
                names = ", ".join(m.id for m in models) or "nothing"
                raise self._impostor(existing, f"/v1/models lists {names}, not {endpoint.model}")
            if match.max_model_len:
                endpoint.max_model_len = match.max_model_len
            record = verified.load(self.host, existing.name, existing.instance)
            if record is None:
                # left loading by a detached serve (a large model), or started before this
                # was recorded: healthy means /health only until a warm-up and the probe
                self.emit(
                    Reused(
                        container=existing.name,
                        message=f"{existing.name} is healthy, not yet warmed up and probed: "
                        "doing it now",
                    )
                )
                proven = self._after_healthy(existing.handle)
                if proven is None:  # it died meanwhile
                    return self._failed(
                        existing.handle,
                        WaitResult("exited", self.backend.exit_info(existing.handle)),
                        self._diagnose(existing.handle, frozenset()),
                    )
                if proven.status == "ready":
                    proven.status = "reused"
                return proven
            endpoint.warmup_latency_s = record.get("warmup_latency_s")
            endpoint.coherence = record.get("coherence")
            self.emit(Reused(container=existing.name, message=f"{existing.name} is healthy"))
            outcome = self._outcome("reused", endpoint=endpoint)
            outcome.phase = "ready"
            return outcome
        self.emit(
            Attached(
                container=existing.name,
                message=f"{existing.name} (same plan) is still starting: following it",
            )
        )
        self.following = True  # asked again: wait for it (no automatic detach this time)
        return self._wait_and_finish(existing.handle)

    # -- after ready: ``instinct watch`` and ``serve --upgrade`` (``runtime.watch``)

    def adopt(self, target: Target) -> None:
        """Take ``target``, a running or dead endpoint of this plan found after its serve
        ended, as this run's own: a relaunch may replace it, and the fixes its launch
        applied stay applied (each known fix is tried once per endpoint, not per run)."""
        self.own = target.handle
        self.plan = self._with_name(target.name)
        self.fixes = list(target.fixes)
        self._load_key(create=False)

    def prove(self, target: Target) -> ServeOutcome:
        """The adopted ``target`` answers /health: warm it up and probe it (serve's reuse
        path), which records it as proven or diagnoses it (an incoherent answer with a
        known fix relaunches it with the fix)."""
        return self._reuse(target)

    def restart(self, handle: str, signals: frozenset[Any] = frozenset()) -> ServeOutcome:
        """The adopted endpoint ``handle`` died or hangs after it was ready: relaunch it
        under the launch lock with the known fix of its diagnosis when one applies and was
        not tried yet (serve's retry mapping), else as planned; then wait, warm up and
        probe it like any serve. Its log goes with it: the caller keeps the diagnosis."""
        from instinct_serve.runtime.lock import HostLock

        diagnosis = self._diagnose(handle, signals)
        self.last_diagnosis = diagnosis
        retry = self._relaunch_plan(diagnosis)
        if retry is not None:
            finding, new_plan, changes = retry
            self._relaunch(handle, finding, new_plan, changes)
        else:
            with HostLock(self.host, on_wait=self.note):
                self.backend.discard(handle, keep=False)  # adopted: ours
                self.launched = None
                self._launch()
        assert self.launched is not None
        return self._wait_and_finish(self.launched)

    def _impostor(self, target: Target, why: str) -> NotReadyError:
        """An endpoint labelled as this plan's that does not run it: named, not touched."""
        plan = self.plan
        holds_name = target.name == plan.container_name
        what = f"{target.describe()} carries the labels of this plan, but {why}"
        return NotReadyError(
            f"{what}: not reused, and left as it is",
            fix=(
                "choose another name with --name"
                if holds_name
                else f"choose another port, e.g. --port {_suggest_port(plan.port)}"
            )
            + "; inspect it with `docker inspect "
            + target.name
            + "` (labels can be copied: instinct-serve only reuses what runs the plan)",
            id="container_name_conflict" if holds_name else "port_in_use",
            details={
                "name": target.name,
                "port": plan.port,
                "why": why,
                "holder": {"name": target.name, "engine": target.engine, "managed": False},
            },
        )

    def deploy(self) -> ServeOutcome:
        """Clear the way, launch and wait (after the user confirmed the plan).

        The image is pulled first (a pull may take an hour; two serves may pull at once).
        Then, under the host's launch lock: an endpoint of the same plan that appeared
        meanwhile (another serve) is reused; else the way is cleared and this run launches.
        """
        from instinct_serve.runtime.caches import prepare_caches
        from instinct_serve.runtime.lock import HostLock

        self._check_own_key()
        if self.backend.engine == "docker":
            self.phase("pulling_image", f"checking image {self.plan.image}")
        if self.settings.prefetch:
            self._prefetch()
        else:
            self.backend.prepare(self.plan, self._feed_pull)
        # the compile caches: keyed by the digest the pull brought, created, AITER seeded
        prepare_caches(self.host, self.plan, self.note)
        with HostLock(self.host, on_wait=self.note):
            existing = self.backend.same_plan(self.plan)
            if existing is None:
                self._clear_the_way()
                self._load_key(create=True)
                self._launch()
        if existing is not None:
            return self._reuse(existing)
        assert self.launched is not None
        return self._wait_and_finish(self.launched)

    def _prefetch(self) -> None:
        """The image and the weights at once (``runtime.fetch``); a failed weight download
        is only a note: vLLM fetches what is missing itself."""
        from instinct_serve.runtime.fetch import Fetcher, Span

        def progress(what: str, span: Span) -> None:
            if what == "weights" and span.status == "running":
                total = f" of {span.total_bytes / 1e9:.2f} GB" if span.total_bytes else ""
                self.phase(
                    "downloading_weights",
                    f"prefetching weights: {span.done_bytes / 1e9:.2f} GB{total}",
                )

        fetcher = Fetcher(self.host, self.plan, self.backend)
        report = fetcher.run(progress, self._feed_pull, strict_weights=False)
        weights = report.weights
        if weights.error is not None:
            self.note(f"weights not prefetched ({weights.error.message}): vLLM downloads them")
        elif weights.status == "done":
            self.note(
                f"prefetched {weights.done_bytes / 1e9:.2f} GB of weights in "
                f"{weights.seconds or 0:.1f} s, {report.overlap_s:.1f} s of it beside the pull"
            )

    def abandon(self) -> str | None:
        """After an unexpected error: stop and remove what this run launched, if anything."""
        self.close()
        if self._launching:
            self.launched = self.backend.launching()
            self._launching = False
        handle, self.launched = self.launched, None
        if handle is None:
            return None
        try:
            return self.plan.container_name if self.backend.discard(handle, keep=False) else None
        except InstinctError:
            return None

    # -- the API key

    def _check_own_key(self) -> None:
        """``--env VLLM_API_KEY``: the caller's key must be there before anything starts."""
        if self.plan.api_key != "environment":
            return
        value = self.secrets.get(API_KEY_ENV, "")
        if not keys.valid_key(value):
            raise UsageError(
                f"--env {API_KEY_ENV} passes your {API_KEY_ENV} by name, and it is not set "
                "in your environment (or holds a newline)",
                fix=f"export {API_KEY_ENV}=<your key> first, or drop --env {API_KEY_ENV} "
                "(with --public a key is generated)",
                id="api_key_missing",
            )
        self.api_key = value

    def _load_key(self, *, create: bool) -> None:
        """A generated key: read from (or, at launch, made in) the key file on the host."""
        if self.plan.api_key != "generated":
            return
        path = keys.key_path(self.host, self.plan.container_name)
        self.key_file = path
        key = keys.ensure_key(self.host, path) if create else keys.read_key(self.host, path)
        if key is None:
            raise NotReadyError(
                f"{self.plan.container_name} requires an API key and its key file {path} "
                f"is missing on {self.host.name}",
                fix=f"stop it (`instinct stop {self.plan.container_name}`) and serve again: "
                "a new key is made",
                id="api_key_missing",
                details={"key_file": path},
            )
        self.api_key = key
        self.secrets[API_KEY_ENV] = key
        self.redact = Redactor.default([*self.secrets.values()])

    def interrupted(self, signum: int = signal.SIGINT) -> Interrupted:
        """Cleanup after Ctrl-C: stop and remove what this run launched (nothing else)."""
        self.close()
        removed = None
        if self._launching:
            self.launched = self._created_while_launching()
            self._launching = False
        if self.launched is not None:
            try:
                if self.backend.discard(self.launched, keep=False):
                    removed = self.plan.container_name
            except InstinctError as exc:
                self.notes.append(f"could not remove {self.plan.container_name}: {exc.message}")
            self.launched = None
        outcome = self._outcome("interrupted")
        if removed:
            outcome.notes.append(f"stopped and removed {removed}, which this run had launched")
        else:
            outcome.notes.append("nothing was launched by this run; nothing was removed")
        return Interrupted(outcome, signum)

    def _created_while_launching(self) -> str | None:
        """Interrupted inside the launch: the engine may still be creating the endpoint.
        Ask the backend what its launch created (docker's cidfile), again for a moment
        before concluding there is nothing."""
        for attempt in range(15):
            found = self.backend.launching()
            if found is not None or self.backend.engine != "docker":
                return found
            if attempt < 14:
                time.sleep(0.2)
        return None

    # -- steps

    def _with_name(self, name: str) -> LaunchPlan:
        if name == self.plan.container_name:
            return self.plan
        renamed = copy.copy(self.plan)
        renamed.container_name = name
        return renamed

    def preflight(self) -> None:
        """Fail before any question when something foreign holds the port or the name."""
        self._refuse_foreign(self.backend.occupants(self.plan))

    def _refuse_foreign(self, occupants: list[Occupant]) -> None:
        """Stop with an error naming whatever foreign thing holds the port or the name."""
        plan = self.plan
        on_port = [o for o in occupants if not o.managed and o.target is None]
        by_name = [o for o in occupants if not o.managed and o.target is not None]
        if on_port:
            raise NotReadyError(
                f"port {plan.port} on {self.host.name} is held by {on_port[0].description}",
                fix=f"choose another port, e.g. --port {_suggest_port(plan.port)}, or stop "
                "what holds it; instinct-serve never touches what it did not start",
                id="port_in_use",
                details={"port": plan.port, "holder": on_port[0].to_dict()},
            )
        if by_name:
            raise NotReadyError(
                f"the name {plan.container_name} is taken on {self.host.name} by "
                f"{by_name[0].description}",
                fix="choose another name with --name; instinct-serve never touches what it did "
                "not start",
                id="container_name_conflict",
                details={"name": plan.container_name, "holder": by_name[0].to_dict()},
            )

    def _clear_the_way(self) -> None:
        plan = self.plan
        occupants = self.backend.occupants(plan)
        self._refuse_foreign(occupants)
        for occ in occupants:
            target = occ.target
            assert target is not None
            if not target.running:
                if discard_target(self.host, target, keep=False):
                    self.note(f"removed {target.name}, a stopped endpoint of an earlier run")
                continue
            same_model = target.model == plan.model
            if not self.settings.replace:
                question = (
                    f"{target.describe()} runs on port {target.port or plan.port}. Replace it?"
                )
                if same_model and self.confirm is not None and self.confirm(question):
                    pass
                else:
                    raise InstinctError(
                        f"{target.describe()} already holds "
                        + (f"port {plan.port}" if target.port == plan.port else "the name")
                        + f" on {self.host.name}"
                        + (" with a different configuration" if same_model else ""),
                        fix="pass --replace to stop it and launch this plan instead, or use "
                        "another --port"
                        + ("" if target.name != plan.container_name else " and --name"),
                        id="endpoint_exists" if same_model else "port_in_use_managed",
                        details={"occupant": occ.to_dict()},
                    )
            discard_target(self.host, target, keep=False)
            self.replaced.append(target.name)
            self.emit(Replaced(container=target.name, message=f"stopped and removed {target.name}"))

    def _feed_pull(self, line: str) -> None:
        event = self.tracker.feed(line)
        if event is not None:
            self.emit(PhaseUpdate.of(event))

    def _launch(self) -> None:
        attempt = len(self.relaunches) + 1
        self.tracker = PhaseTracker()
        self.phase("launching", self.plan.container_name, attempt=attempt)
        name = self.plan.container_name
        self._launching = True  # a Ctrl-C inside the call must still clean up
        handle = self.backend.launch(self.plan, self.secrets, self.fixes)
        self.launched = self.own = handle
        self._launching = False
        self.emit(Launched(container=name, engine=self.backend.engine, attempt=attempt))

    def _wait_and_finish(self, handle: str) -> ServeOutcome:
        """Wait for ``handle`` (ours, or one we attached to) and finish: ready, diagnosed,
        or relaunched once with a fix (only what this run launched is relaunched)."""
        for _round in range(self.settings.max_relaunches + 2):
            result = self._wait(handle)
            if result.kind == "detached":
                return self._detached(handle)
            if result.kind == "timeout":
                return self._timed_out(handle, result)
            if result.kind == "healthy":
                finished = self._after_healthy(handle)
                if finished is not None:
                    return finished
                result = WaitResult("exited", self.backend.exit_info(handle))
            signals: frozenset[Any] = frozenset()
            if result.kind == "stalled":
                signals = frozenset({"graph_capture_hang"})
            if handle != self.own and result.kind == "exited":
                successor = self._successor(handle)  # the serve that launched it relaunches
                if successor is not None:
                    self.emit(
                        Attached(
                            container=self.plan.container_name,
                            message=f"{self.plan.container_name} was relaunched by the serve "
                            "that launched it: following it",
                        )
                    )
                    handle = successor
                    continue
            diagnosis = self._diagnose(handle, signals)
            retry = self._relaunch_plan(diagnosis) if handle == self.own else None
            if retry is None:
                return self._failed(handle, result, diagnosis)
            finding, new_plan, changes = retry
            self._relaunch(handle, finding, new_plan, changes)
            assert self.launched is not None
            handle = self.launched
        return self._failed(handle, WaitResult("exited"), self._diagnose(handle, frozenset()))

    def _relaunch(
        self, handle: str, finding: Finding, new_plan: LaunchPlan, changes: list[str]
    ) -> None:
        """Replace this run's failed endpoint with one launched with the fix, under the
        launch lock (no other serve launches the plan in between)."""
        from instinct_serve.runtime.lock import HostLock

        with HostLock(self.host, on_wait=self.note):
            self.backend.discard(handle, keep=False)  # ours: _wait_and_finish checked
            self.launched = None
            self.fixes.append(finding.id)
            self.relaunches.append(Relaunch(finding.id, finding.title, changes))
            self.emit(
                Relaunching(
                    finding=finding.id,
                    title=finding.title,
                    changes=changes,
                    message=f"{finding.title}: relaunching once with {', '.join(changes)}",
                )
            )
            self.plan = new_plan
            self._launch()

    def _successor(self, handle: str) -> str | None:
        """The endpoint another serve relaunched in place of ``handle`` (which this run only
        followed), once it appears; None when that serve gave up (it keeps its failed
        endpoint for the log) or nothing appears in time."""
        deadline = time.monotonic() + SUCCESSOR_WAIT_S
        kept_since: float | None = None
        while time.monotonic() < deadline:
            found = self.backend.same_plan(self.plan)
            genuine = found is not None and self.backend.verify(self.plan, found) is None
            if found is not None and genuine:
                running_again = self.backend.exit_info(found.handle) is None
                if found.handle != handle or running_again:
                    return found.handle
            gone = self.backend.exit_info(handle)
            if gone is not None and gone.status != "removed":
                kept_since = kept_since or time.monotonic()
                if time.monotonic() - kept_since > SUCCESSOR_DECIDE_S:
                    return None  # stopped and kept: its owner is not relaunching it
            time.sleep(0.5)
        return None

    def _relaunch_plan(self, diagnosis: Diagnosis) -> tuple[Finding, LaunchPlan, list[str]] | None:
        if len(self.relaunches) >= self.settings.max_relaunches:
            return None
        specific = [f for f in diagnosis.findings if not f.generic] or list(diagnosis.findings)
        if not specific:
            return None
        finding = specific[0]
        if not finding.auto_retry or not finding.retry or finding.id in self.fixes:
            return None
        new_plan, changes = apply_retry(self.plan, finding.retry)
        if not changes:
            return None
        return finding, new_plan, changes

    def _context(self, signals: frozenset[Any]) -> DiagnoseContext:
        args = list(self.plan.vllm_args)
        if not vllm_args.has(args, "--tensor-parallel-size", "-tp"):
            args += ["--tensor-parallel-size", str(self.plan.tensor_parallel_size)]
        return DiagnoseContext(
            gfx=self.gfx,
            model=self.plan.model,
            image=self.plan.image if self.backend.engine == "docker" else None,
            args=args,
            env=dict(self.plan.env),
            gpu_count=self.plan.gpu_count,
            hf_token_set=bool(self.secrets) or None,
            signals=signals,
        )

    def _log_text(self, handle: str, tail: int) -> str:
        """The endpoint's log, with every secret value redacted (what serve relays)."""
        return self.redact.text(self.backend.log_text(handle, tail))

    def _diagnose(self, handle: str, signals: frozenset[Any]) -> Diagnosis:
        text = self._log_text(handle, DIAGNOSE_TAIL)
        return diagnose(text, self._context(signals))

    # -- the wait loop

    def _wait(self, handle: str) -> WaitResult:
        settings = self.settings
        timeout = settings.timeout_s or startup_timeout_s(self.plan)
        start = time.monotonic()
        deadline = start + timeout
        detach = bool(settings.detach) if self.following else detaches(self.plan, settings)
        follower = LogFollower(self.backend.follow(handle))
        restarts = 0
        next_health = start
        next_alive = start + ALIVE_CHECK_S
        last_phase_key: tuple[str, str] | None = None
        failed_at: float | None = None  # when the log said the start-up failed for good
        import httpx

        http = httpx.Client(timeout=3.0, trust_env=False)
        try:
            while True:
                now = time.monotonic()
                wake = min(next_health, next_alive, deadline, now + 1.0)
                if follower.ended:  # nothing to wake us up early: sleep, bounded
                    time.sleep(max(0.0, min(wake - now, 0.5)))
                line = follower.get(wake - now)
                while line is not None:
                    event = self.tracker.feed(self.redact.text(line))
                    if event is not None:
                        key = (event.phase, event.message)
                        if key != last_phase_key:
                            last_phase_key = key
                            self.emit(PhaseUpdate.of(event))
                        if event.phase in ("starting_server", "ready"):
                            next_health = min(next_health, time.monotonic())
                    line = follower.get(0) if not follower.ended else None
                now = time.monotonic()
                if failed_at is None and self.tracker.failed_for_good:
                    failed_at = now
                    next_health = deadline  # a server whose engine failed is not polled
                    next_alive = min(next_alive, now + 1.0)
                if detach and self._loading_confirmed():
                    return WaitResult("detached", elapsed_s=now - start)
                if follower.ended:
                    gone = self.backend.exit_info(handle)
                    if gone is not None:
                        return WaitResult("exited", gone, now - start)
                    if restarts >= FOLLOWER_RESTARTS:
                        next_alive = min(next_alive, now + 1.0)
                    else:
                        restarts += 1
                        follower.close()
                        follower = LogFollower(self.backend.follow(handle, since=time.time()))
                if now >= next_alive:
                    gone = self.backend.exit_info(handle)
                    if gone is not None:
                        follower.drain(2.0)
                        return WaitResult("exited", gone, now - start)
                    next_alive = now + ALIVE_CHECK_S
                if failed_at is not None:
                    if now >= min(failed_at + FAILED_GRACE_S, deadline):
                        return WaitResult("failed", self.backend.exit_info(handle), now - start)
                    next_alive = min(next_alive, now + 1.0)
                    continue  # nor waited healthy: only its exit, for the grace
                if now >= next_health:
                    sample = health.probe_health(self.base_url, timeout=3.0, client=http)
                    if sample.ok:
                        if self.tracker.phase != "ready":  # /health beat the log line to us
                            self.phase("ready", "API server answers /health")
                        self.emit(Healthy(elapsed_s=round(time.monotonic() - start, 2)))
                        return WaitResult("healthy", elapsed_s=time.monotonic() - start)
                    fast = PHASE_ORDER.get(self.tracker.phase, 0) >= PHASE_ORDER["starting_server"]
                    next_health = time.monotonic() + (FAST_POLL_S if fast else settings.poll_s)
                if self.tracker.stalled(time.monotonic(), settings.stall_timeout_s, HANG_PHASES):
                    self.emit(
                        Stalled(
                            phase=self.tracker.phase,
                            message=f"no log line for {settings.stall_timeout_s:g} s while "
                            "capturing graphs",
                        )
                    )
                    return WaitResult("stalled", elapsed_s=time.monotonic() - start)
                if time.monotonic() >= deadline:
                    return WaitResult("timeout", elapsed_s=time.monotonic() - start)
        finally:
            http.close()
            follower.close()

    def _loading_confirmed(self) -> bool:
        phase = self.tracker.phase
        return phase != "failed" and PHASE_ORDER.get(phase, 0) >= PHASE_ORDER["loading_weights"]

    # -- after /health

    def _after_healthy(self, handle: str) -> ServeOutcome | None:
        """Models, warm-up, coherence. None when the server died meanwhile (diagnose it)."""
        endpoint = self._endpoint(warmup_s=None, coherence=None)
        listed = self._check_listed(endpoint, handle)
        if isinstance(listed, ServeOutcome):
            return listed
        self.phase("warming_up", "first request (compiles kernels: may take minutes)")
        try:
            first = self._warmup(endpoint)
        except InstinctError as exc:
            if self.backend.exit_info(handle) is not None:
                return None
            return self._http_failure(handle, exc)
        endpoint.warmup_latency_s = round(first.latency_s, 3)
        self.emit(WarmedUp(latency_s=endpoint.warmup_latency_s, endpoint=first.endpoint))
        if not self.settings.coherence:
            self._record(endpoint)
            return self._outcome("ready", endpoint=endpoint)
        self.phase("coherence_probe", "greedy known-answer probe")
        try:
            probe = health.coherence_probe(
                self.base_url,
                endpoint.model,
                use_chat=self.use_chat,
                timeout=self.settings.probe_timeout_s,
                api_key=self.api_key,
            )
        except InstinctError as exc:
            if self.backend.exit_info(handle) is not None:
                return None
            return self._http_failure(handle, exc)
        endpoint.coherence = probe.to_dict()
        self.emit(CoherenceChecked(verdict=probe.verdict.verdict, text=probe.completion.text[:200]))
        if probe.ok:
            self._record(endpoint)
            return self._outcome("ready", endpoint=endpoint)
        diagnosis = self._diagnose(handle, frozenset({"incoherent_output"}))
        retry = self._relaunch_plan(diagnosis) if handle == self.own else None
        if retry is None:
            finding = diagnosis.get("incoherent_output")
            failure = self._failure_from(diagnosis, finding, None)
            failure.cause += f" Probe answer: {self.redact.text(probe.completion.text[:200])!r}."
            failure.left = self._stop_kept(handle)
            return self._outcome("failed", failure=failure, endpoint=endpoint)
        finding, new_plan, changes = retry
        self._relaunch(handle, finding, new_plan, changes)
        assert self.launched is not None
        return self._wait_and_finish(self.launched)

    def _record(self, endpoint: Endpoint) -> None:
        """Keep what was proven (warm-up, coherence) for the next serve and ``ps``."""
        target = self.backend.target(self.plan.container_name)
        if target is not None and target.running:
            self.backend.supervise(target.handle)
            plans.save(self.host, self.plan)
            verified.save(
                self.host,
                target.name,
                target.instance,
                plan_hash=self.plan.plan_hash,
                warmup_latency_s=endpoint.warmup_latency_s,
                coherence=endpoint.coherence,
            )

    def _check_listed(self, endpoint: Endpoint, handle: str) -> ServeOutcome | None:
        try:
            models = health.list_models(self.base_url, api_key=self.api_key)
        except InstinctError as exc:
            return self._http_failure(handle, exc)
        names = [m.id for m in models]
        match = next((m for m in models if m.id == endpoint.model), None)
        if match is None:
            failure = Failure(
                id=MODEL_NOT_LISTED,
                title="The server does not list the model",
                cause=f"/v1/models lists {', '.join(names) or 'nothing'}, not {endpoint.model}: "
                "another server may answer on this port",
                fix="check `instinct ps` and the port; pass --port to use another one",
                container=endpoint.container,
                left=self._stop_kept(handle),
            )
            return self._outcome("failed", failure=failure, endpoint=endpoint)
        if match.max_model_len:
            endpoint.max_model_len = match.max_model_len
        return None

    def _warmup(self, endpoint: Endpoint) -> health.CompletionResult:
        timeout = self.settings.warmup_timeout_s
        key = self.api_key
        try:
            return health.warmup(
                self.base_url, endpoint.model, use_chat=True, timeout=timeout, api_key=key
            )
        except InstinctError as exc:
            if exc.details.get("status_code") != 400:
                raise
        # vLLM answers 400 to chat requests for base models without a chat template.
        self.use_chat = False
        endpoint.use_chat = False
        self.note("the model has no chat template: using /v1/completions")
        return health.warmup(
            self.base_url, endpoint.model, use_chat=False, timeout=timeout, api_key=key
        )

    # -- outcomes

    def _endpoint(self, *, warmup_s: float | None, coherence: dict[str, Any] | None) -> Endpoint:
        plan = self.plan
        tunnel = None
        if plan.public:
            address = self.address  # the host's own address: it listens on every interface
        else:
            address = LOOPBACK  # here, or at our end of an ssh tunnel to the host's loopback
            ssh = _ssh_words(self.host)
            if ssh:
                forward = f"{plan.port}:{LOOPBACK}:{plan.port}"
                tunnel = shlex.join([*ssh[:-1], "-N", "-L", forward, ssh[-1]])
        key_command = None
        if self.key_file is not None:
            read = ["cat", "--", self.key_file]
            ssh = _ssh_words(self.host)
            key_command = shlex.join([*ssh, shlex.join(read)] if ssh else read)
        return Endpoint(
            base_url=f"http://{address}:{plan.port}/v1",
            model=plan.served_model_name,
            container=plan.container_name,
            engine=self.backend.engine,
            host=self.host.name,
            port=plan.port,
            tensor_parallel_size=plan.tensor_parallel_size,
            max_model_len=plan.max_model_len,
            image=plan.image if self.backend.engine == "docker" else None,
            use_chat=self.use_chat,
            warmup_latency_s=warmup_s,
            coherence=coherence,
            api_key_env=plan.api_key_env,
            api_key_source=plan.api_key,
            api_key_file=self.key_file,
            api_key_command=key_command,
            bind_address=plan.bind_address,
            tunnel=tunnel,
        )

    def _outcome(
        self,
        status: Status,
        *,
        endpoint: Endpoint | None = None,
        failure: Failure | None = None,
    ) -> ServeOutcome:
        return ServeOutcome(
            status=status,
            host=self.host.name,
            engine=self.backend.engine,
            plan=self.plan,
            endpoint=endpoint,
            failure=failure,
            relaunches=list(self.relaunches),
            replaced=list(self.replaced),
            notes=list(self.notes),
            phase=self.tracker.phase,
            figures=self.tracker.figures,
            elapsed_s=time.monotonic() - self.started,
        )

    def _detached(self, handle: str) -> ServeOutcome:
        self.launched = None  # loading on purpose: Ctrl-C from now on must not remove it
        name = self.plan.container_name
        where = "" if self.host.is_local else f" --host {self.host.name}"
        self.note(
            f"{name} is loading ({self.tracker.message}); follow it with "
            f"`instinct logs -f {name}{where}` and check `instinct ps{where}`"
        )
        return self._outcome("loading", endpoint=self._endpoint(warmup_s=None, coherence=None))

    def _timed_out(self, handle: str, result: WaitResult) -> ServeOutcome:
        self.launched = None  # not known to be broken: left running
        name = self.plan.container_name
        where = "" if self.host.is_local else f" --host {self.host.name}"
        tail = _tail(self._log_text(handle, SHOWN_TAIL))
        failure = Failure(
            id=STARTUP_TIMEOUT,
            title="Not healthy in time",
            cause=f"{name} did not answer /health within {result.elapsed_s:.0f} s "
            f"(last phase: {phase_words(self.tracker.phase, self.tracker.message)})",
            fix="it is still running: follow it with `instinct logs -f "
            f"{name}{where}`, wait longer next time with --timeout, or stop it with "
            f"`instinct stop {name}{where}`",
            log_tail=tail,
            container=name,
            left="running",
        )
        return self._outcome("timeout", failure=failure)

    def _stop_kept(self, handle: str) -> str:
        """Stop a failed endpoint this run launched but keep it (its log) for ``instinct
        logs``/``diagnose``; one this run only followed (another serve launched it) is left
        to the run that owns it."""
        self.launched = None
        if handle != self.own:
            return "left as it is (another serve launched it)"
        try:
            self.backend.discard(handle, keep=True)
        except InstinctError as exc:
            return f"could not stop it: {exc.message}"
        return "stopped, kept for its log"

    def _failed(self, handle: str, result: WaitResult, diagnosis: Diagnosis) -> ServeOutcome:
        specific = [f for f in diagnosis.findings if not f.generic] or list(diagnosis.findings)
        finding = specific[0] if specific else None
        alive = result.kind == "failed" and result.exit is None
        failure = self._failure_from(diagnosis, finding, result.exit, alive=alive)
        failure.left = self._stop_kept(handle)
        return self._outcome("failed", failure=failure)

    def _failure_from(
        self,
        diagnosis: Diagnosis,
        finding: Finding | None,
        gone: ExitInfo | None,
        *,
        alive: bool = False,
    ) -> Failure:
        """``alive``: the log said the start-up failed, and the server had not exited
        ``FAILED_GRACE_S`` later (vLLM 0.32's API server may outlive its engine core)."""
        name = self.plan.container_name
        where = "" if self.host.is_local else f" --host {self.host.name}"
        tail = list(diagnosis.tail[-SHOWN_TAIL:])
        how = f"{name} {gone.describe()}" if gone is not None else f"{name} failed"
        if alive:
            how = f"{name} failed (its server process was still up {FAILED_GRACE_S:g} s later)"
        commands = [f"instinct diagnose --container {name}{where}", f"instinct logs {name}{where}"]
        if finding is None:
            last = [line for line in tail if line.strip() and not line.startswith("# instinct:")]
            if diagnosis.last_error:
                said = f"; the last error line: {diagnosis.last_error}"
            elif last:
                said = f"; no error line, the last line: {last[-1].strip()}"
            else:
                said = " without logging anything"
            return Failure(
                id=STARTUP_FAILED,
                title="The server failed and no known failure pattern matched",
                cause=how + said,
                fix="read the log tail below; search upstream with the command shown",
                log_tail=tail,
                exit_code=gone.exit_code if gone else None,
                container=name,
                commands=[*diagnosis.commands, *commands],
            )
        retried = ""
        if finding.id in self.fixes:
            retried = " (the automatic relaunch with this fix did not help)"
        return Failure(
            id=finding.id,
            title=finding.title + retried,
            cause=f"{how}: {finding.cause}" if gone is not None or alive else finding.cause,
            fix=finding.fix,
            line=finding.line,
            log_tail=tail,
            exit_code=gone.exit_code if gone else None,
            container=name,
            commands=[*finding.commands, *commands],
            finding=finding.to_dict(),
        )

    def _http_failure(self, handle: str, exc: InstinctError) -> ServeOutcome:
        name = self.plan.container_name
        failure = Failure(
            id=exc.id,
            title="The endpoint is up but a request failed",
            cause=self.redact.text(exc.message),
            fix=exc.fix or "read the server log",
            log_tail=_tail(self._log_text(handle, SHOWN_TAIL)),
            container=name,
            commands=[f"instinct logs {name}"],
        )
        if exc.id.endswith("_timeout"):
            failure.left = "running"
            self.launched = None
        else:
            failure.left = self._stop_kept(handle)
        return self._outcome("failed", failure=failure)


def _tail(text: str) -> list[str]:
    return text.splitlines()[-SHOWN_TAIL:]


def _suggest_port(port: int) -> int:
    """A nearby port free on this machine (a hint only)."""
    import socket

    for candidate in range(port + 1, min(port + 50, 65535)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    return port + 1
