"""One serve run's state and what it reports: the plan as it stands, the endpoint this
run launched (and the cleanup of it after an error or Ctrl-C), its API key, the events,
and the endpoint and outcome documents (``runtime.proof``).

``runtime.serve.Deployer`` is a ``ServeRun`` that decides: reuse, claim, launch, follow the
start-up, prove, relaunch with a fix.
"""

from __future__ import annotations

import copy
import shlex
import signal
import time
from typing import Any

from instinct_serve import servers
from instinct_serve.credentials import Redactor
from instinct_serve.diagnose import Diagnosis
from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.plan.model import LOOPBACK, LaunchPlan
from instinct_serve.runtime import keys
from instinct_serve.runtime.address import public_address, ssh_words
from instinct_serve.runtime.backend import Backend, launch_labels
from instinct_serve.runtime.claim import Confirm
from instinct_serve.runtime.deploying import Interrupted
from instinct_serve.runtime.documents import Endpoint, Failure, Relaunch, ServeOutcome, Status
from instinct_serve.runtime.events import (
    EventSink,
    Launched,
    Note,
    PhaseUpdate,
    ServeEvent,
)
from instinct_serve.runtime.proof import (
    SHOWN_TAIL,
    endpoint_of,
    failure_from,
    host_flag,
    http_failure,
    serve_outcome,
    timed_out,
)
from instinct_serve.runtime.secret_env import local_secrets
from instinct_serve.runtime.settings import ServeSettings
from instinct_serve.runtime.startup import WaitResult
from instinct_serve.runtime.tunnel import LazyTunnel


class ServeRun:
    """The state of one ``serve`` of one plan on one host, the events it emits and the
    documents it ends with; the cleanup removes only what this run launched (by the
    handle the backend returned), never something found by name."""

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
        self.foreign_ok = True  # a foreign endpoint of the model on the port may be reused
        self.api_key: str | None = None  # sent by our probes (Authorization: Bearer)
        self.key_file: str | None = None  # where a generated key is kept on the host
        self.redact = Redactor.default(self.secrets.values())
        self.fixes: list[str] = []
        self.last_diagnosis: Diagnosis | None = None  # of the endpoint ``restart`` replaced
        self.relaunches: list[Relaunch] = []
        self.replaced: list[str] = []
        self.notes: list[str] = []
        self.use_chat = True
        self.tracker = servers.of(plan).tracker()  # the server's own start-up log
        self.started = time.monotonic()
        self._tunnel = LazyTunnel(host)
        self.address = public_address(host)

    def emit(self, event: ServeEvent) -> None:
        self.sink(event)

    def phase(self, phase: str, message: str, attempt: int | None = None) -> None:
        self.emit(PhaseUpdate(phase=phase, message=message, attempt=attempt))

    def note(self, message: str) -> None:
        self.notes.append(message)
        self.emit(Note(message=message))

    @property
    def base_url(self) -> str:
        return self._tunnel.url(self.plan.port)

    def close(self) -> None:
        self._tunnel.close()

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

    def _check_own_key(self) -> None:
        """``--env VLLM_API_KEY``: the caller's key must be there before anything starts."""
        key = keys.caller_key(self.plan, self.secrets)
        if key is not None:
            self.api_key = key

    def _load_key(self, *, create: bool) -> None:
        """A generated key: read from (or, at launch, made in) the key file on the host."""
        found = keys.endpoint_key(self.host, self.plan, create=create)
        if found is None:
            return
        self.key_file, key = found
        self.api_key = key
        self.secrets[servers.of(self.plan).api_key_env] = key
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

    def _with_name(self, name: str) -> LaunchPlan:
        if name == self.plan.container_name:
            return self.plan
        renamed = copy.copy(self.plan)
        renamed.container_name = name
        return renamed

    def _feed_pull(self, line: str) -> None:
        event = self.tracker.feed(line)
        if event is not None:
            self.emit(PhaseUpdate.of(event))

    def _launch(self) -> None:
        attempt = len(self.relaunches) + 1
        self.tracker = servers.of(self.plan).tracker()
        self.phase("launching", self.plan.container_name, attempt=attempt)
        name = self.plan.container_name
        self._launching = True  # a Ctrl-C inside the call must still clean up
        handle = self.backend.launch(self.plan, self.secrets, self.fixes)
        self.launched = self.own = handle
        self._launching = False
        self.emit(Launched(container=name, engine=self.backend.engine, attempt=attempt))

    def _log_text(self, handle: str, tail: int) -> str:
        """The endpoint's log, with every secret value redacted (what serve relays)."""
        return self.redact.text(self.backend.log_text(handle, tail))

    def _endpoint(self, *, warmup_s: float | None, coherence: dict[str, Any] | None) -> Endpoint:
        plan = self.plan
        tunnel = None
        ssh = ssh_words(self.host)
        if plan.public:
            address = self.address  # the host's own address: it listens on every interface
        else:
            address = LOOPBACK  # here, or at our end of an ssh tunnel to the host's loopback
            if ssh:
                forward = f"{plan.port}:{LOOPBACK}:{plan.port}"
                tunnel = shlex.join([*ssh[:-1], "-N", "-L", forward, ssh[-1]])
        key_command = None
        if self.key_file is not None:
            read = ["cat", "--", self.key_file]
            key_command = shlex.join([*ssh, shlex.join(read)] if ssh else read)
        return endpoint_of(
            plan,
            self.host,
            self.backend.engine,
            container=plan.container_name,
            address=address,
            use_chat=self.use_chat,
            max_model_len=plan.max_model_len,
            warmup_s=warmup_s,
            coherence=coherence,
            key_file=self.key_file,
            key_command=key_command,
            tunnel=tunnel,
        )

    def _outcome(
        self,
        status: Status,
        *,
        endpoint: Endpoint | None = None,
        failure: Failure | None = None,
    ) -> ServeOutcome:
        return serve_outcome(
            status,
            host=self.host,
            engine=self.backend.engine,
            plan=self.plan,
            started=self.started,
            endpoint=endpoint,
            failure=failure,
            notes=self.notes,
            relaunches=self.relaunches,
            replaced=self.replaced,
            tracker=self.tracker,
        )

    def _detached(self, handle: str) -> ServeOutcome:
        self.launched = None  # loading on purpose: Ctrl-C from now on must not remove it
        name = self.plan.container_name
        where = host_flag(self.host)
        self.note(
            f"{name} is loading ({self.tracker.message}); follow it with "
            f"`instinct logs -f {name}{where}` and check `instinct ps{where}`"
        )
        return self._outcome("loading", endpoint=self._endpoint(warmup_s=None, coherence=None))

    def _timed_out(self, handle: str, result: WaitResult) -> ServeOutcome:
        self.launched = None  # not known to be broken: left running
        text = self._log_text(handle, SHOWN_TAIL)
        failure = timed_out(self.plan, self.host, self.tracker, result.elapsed_s, text)
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
        failure = failure_from(
            self.plan, self.host, diagnosis, finding, result.exit, fixes=self.fixes, alive=alive
        )
        failure.left = self._stop_kept(handle)
        return self._outcome("failed", failure=failure)

    def _http_failure(self, handle: str, exc: InstinctError) -> ServeOutcome:
        failure = http_failure(self.plan, exc, self.redact, self._log_text(handle, SHOWN_TAIL))
        if exc.id.endswith("_timeout"):
            failure.left = "running"
            self.launched = None
        else:
            failure.left = self._stop_kept(handle)
        return self._outcome("failed", failure=failure)
