"""From a ``LaunchPlan`` to a healthy, warmed-up endpoint, or to a diagnosed failure.

``Deployer`` drives one ``instinct serve``: reuse a healthy managed endpoint of the same
plan (or attach to one still loading), clear the port and the name (only ever removing what
the tool created), pull the image, launch, follow the log through the ``PhaseTracker``
while polling ``/health``, warm up, probe coherence, and print the connection details. The
known failures are handled here: a dead server is diagnosed from its log tail and, when
the finding says a retry is safe (``auto_retry``: ``--enforce-eager`` after a graph-capture
OOM, an env override for garbage output, ...), relaunched once with that fix; a silent log
while capturing graphs is a ``graph_capture_hang`` and gets the same treatment.

The engine behind it is a ``Backend``: Docker here, the supervised native ``vllm serve`` in
``runtime.native``. Both run through a ``Host``, so ``--host`` is the same code path; HTTP
goes through ``runtime.tunnel`` (a no-op locally). Progress is reported as event dicts
(``{"event": "phase", ...}``) to a sink the CLI renders as a status line or JSON lines.
"""

from __future__ import annotations

import copy
import os
import queue
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from instinct_serve import vllm_args
from instinct_serve.diagnose import DiagnoseContext, Diagnosis, Finding, RetryHint, diagnose
from instinct_serve.diagnose.phases import PHASE_ORDER, PhaseEvent, PhaseTracker
from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host, SshHost
from instinct_serve.paths import hf_token_file
from instinct_serve.plan.labels import (
    LABEL_MANAGED,
    LABEL_MODEL,
    LABEL_PLAN_HASH,
    LABEL_PORT,
    MANAGED_VALUE,
    managed_labels,
)
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import health
from instinct_serve.runtime.docker import Docker, PortHolder

LARGE_MODEL_GB = 100.0  # from here on, serve returns once loading is confirmed
DEFAULT_STALL_S = 300.0  # silence while capturing graphs that counts as a hang
FAST_POLL_S = 0.25  # /health cadence once the log says the API server is starting
ALIVE_CHECK_S = 5.0  # backup liveness check while the log follower runs
DIAGNOSE_TAIL = 2000  # log lines handed to diagnose
SHOWN_TAIL = 30  # log lines shown with a failure
PULL_TIMEOUT_S = 3 * 3600.0
STOP_GRACE_S = 5
FOLLOWER_RESTARTS = 3
MAX_RELAUNCHES = 2
LABEL_FIXES = "instinct-serve.fixes"  # finding ids whose retry hint a relaunch applied
HANG_PHASES = frozenset({"capturing_graphs"})

EventSink = Callable[[dict[str, Any]], None]
Confirm = Callable[[str], bool]
Status = Literal["ready", "reused", "loading", "failed", "timeout", "interrupted"]


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ServeSettings:
    """How patient and how forceful one ``serve`` is (the CLI's flags)."""

    replace: bool = False
    detach: bool | None = None  # None: detach for models of LARGE_MODEL_GB or more
    timeout_s: float | None = None  # None: scaled to the weight size
    stall_timeout_s: float = DEFAULT_STALL_S
    warmup_timeout_s: float = health.DEFAULT_WARMUP_TIMEOUT_S
    probe_timeout_s: float = health.DEFAULT_PROBE_TIMEOUT_S
    poll_s: float = health.DEFAULT_POLL_S
    coherence: bool = True
    max_relaunches: int = MAX_RELAUNCHES


def startup_timeout_s(plan: LaunchPlan) -> float:
    """Seconds a fresh start may take: download and load scale with the weights."""
    from instinct_serve.plan.render import startup_budget_s

    return float(startup_budget_s(plan))


def detaches(plan: LaunchPlan, settings: ServeSettings) -> bool:
    if settings.detach is not None:
        return settings.detach
    return (plan.weight_memory_gb or 0.0) >= LARGE_MODEL_GB


# --------------------------------------------------------------------------- retry hints


def apply_retry(plan: LaunchPlan, hint: RetryHint) -> tuple[LaunchPlan, list[str]]:
    """A copy of ``plan`` with a diagnose retry hint applied, and what changed (words).

    Flags already present are not duplicated; an option with a value is replaced.
    Pure: the original plan is untouched. No change at all means the hint cannot help.
    """
    new = copy.deepcopy(plan)
    changes: list[str] = []
    for unit in vllm_args.units(hint.get("add_args", [])):
        if unit.name is None:
            continue  # a hint names options, never positional arguments
        flag, wanted = unit.name, unit.value or None
        current = vllm_args.value(new.vllm_args, flag)  # "" for a bare flag, None if absent
        if current is not None and (current or None) == wanted:
            continue
        new.vllm_args = vllm_args.set_flag(new.vllm_args, flag, wanted)
        changes.append(flag if wanted is None else f"{flag} {wanted}")
    for key, env_value in hint.get("set_env", {}).items():
        if new.env.get(key) != env_value:
            new.env[key] = env_value
            changes.append(f"{key}={env_value}")
    options: list[tuple[str, str]] = []
    if "max_model_len" in hint:
        options.append(("--max-model-len", str(hint["max_model_len"])))
        new.max_model_len = int(hint["max_model_len"])
    if "gpu_memory_utilization" in hint:
        options.append(("--gpu-memory-utilization", f"{hint['gpu_memory_utilization']:g}"))
    if "max_num_seqs" in hint:
        options.append(("--max-num-seqs", str(hint["max_num_seqs"])))
    if "tensor_parallel_size" in hint:
        options.append(("--tensor-parallel-size", str(hint["tensor_parallel_size"])))
        new.tensor_parallel_size = int(hint["tensor_parallel_size"])
    for flag, text in options:
        if vllm_args.value(new.vllm_args, flag) != text:
            new.vllm_args = vllm_args.set_flag(new.vllm_args, flag, text)
            changes.append(f"{flag} {text}")
    return new, changes


# --------------------------------------------------------------------------- secrets

TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def local_secrets(names: Sequence[str]) -> dict[str, str]:
    """Values for the plan's secret names: this process's environment, else (for the Hub
    token) the file ``huggingface-cli login`` writes. Never printed, never in an argv."""
    found: dict[str, str] = {}
    for name in names:
        value = os.environ.get(name, "").strip()
        if not value and name in TOKEN_NAMES:
            try:
                with open(hf_token_file(), encoding="utf-8") as fh:
                    value = fh.read().strip()
            except OSError:
                value = ""
        if value and "\n" not in value:
            found[name] = value
    return found


# --------------------------------------------------------------------------- log follower


class LogFollower:
    """A streaming process (``docker logs -f``, ``tail -F``) read by a thread into a queue.

    ``get(timeout)`` wakes the moment a line arrives, which is what lets serve react to
    "Application startup complete" at once instead of on the next poll.
    """

    _EOF = object()

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self._queue: queue.Queue[object] = queue.Queue()
        self.ended = False
        self._thread = threading.Thread(target=self._pump, name="log-follower", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        stream = self.proc.stdout
        try:
            if stream is not None:
                for line in stream:
                    self._queue.put(line.rstrip("\n"))
        except (OSError, ValueError):  # closed under us by close()
            pass
        finally:
            self._queue.put(self._EOF)

    def get(self, timeout: float) -> str | None:
        """The next line, or None after ``timeout`` (or once the stream has ended)."""
        if self.ended:
            return None
        try:
            item = self._queue.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if item is self._EOF:
            self.ended = True
            return None
        assert isinstance(item, str)
        return item

    def drain(self, timeout: float) -> list[str]:
        """Whatever arrives until the stream ends or ``timeout`` passes (after an exit)."""
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        while not self.ended and (left := deadline - time.monotonic()) > 0:
            line = self.get(left)
            if line is not None:
                lines.append(line)
        return lines

    def close(self) -> None:
        """Stop the process and everything it started (it leads its own session)."""
        proc = self.proc
        if proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    proc.send_signal(sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._thread.join(timeout=2.0)
        # Closing the pipe under a reader still blocked in read() would block on the
        # reader's lock; a daemon thread stuck there ends with the process instead.
        if proc.stdout is not None and not self._thread.is_alive():
            with suppress(OSError):
                proc.stdout.close()


# --------------------------------------------------------------------------- backends


@dataclass(frozen=True)
class Target:
    """An endpoint process the engine knows by name: ours (managed) or not."""

    name: str
    engine: str
    managed: bool
    running: bool
    status: str
    model: str | None = None
    port: int | None = None
    plan_hash: str | None = None
    image: str | None = None

    def describe(self) -> str:
        what = "container" if self.engine == "docker" else "native vLLM process"
        owner = "instinct-serve " if self.managed else ""
        model = f" serving {self.model}" if self.model else ""
        foreign = "" if self.managed else " (not started by instinct-serve)"
        return f"{owner}{what} {self.name}{model}{foreign}"


@dataclass(frozen=True)
class Occupant:
    """Something that holds the plan's port or name."""

    description: str
    managed: bool
    target: Target | None = None  # for ours: what to stop to free it

    def to_dict(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "managed": self.managed,
            "name": self.target.name if self.target else None,
            "model": self.target.model if self.target else None,
        }


@dataclass(frozen=True)
class ExitInfo:
    """How a server process ended."""

    exit_code: int | None
    oom_killed: bool = False
    status: str = "exited"

    def describe(self) -> str:
        if self.oom_killed:
            return "was killed by the kernel's out-of-memory killer"
        if self.exit_code is None:
            return "is gone"
        if self.exit_code > 128:
            try:
                name = signal.Signals(self.exit_code - 128).name
            except ValueError:
                name = f"signal {self.exit_code - 128}"
            return f"exited with code {self.exit_code} ({name})"
        return f"exited with code {self.exit_code}"


class Backend(Protocol):
    """The engine an endpoint runs on: Docker containers or native processes."""

    engine: str
    host: Host

    def target(self, name: str) -> Target | None: ...

    def same_plan(self, plan: LaunchPlan) -> Target | None:
        """A running managed endpoint launched from the same plan (hash), if any."""
        ...

    def occupants(self, plan: LaunchPlan) -> list[Occupant]:
        """Whatever holds the plan's port or name, ours or not."""
        ...

    def prepare(self, plan: LaunchPlan, on_line: Callable[[str], None]) -> None:
        """Everything before the launch itself (pulling the image)."""
        ...

    def launch(self, plan: LaunchPlan, secrets: Mapping[str, str], fixes: Sequence[str]) -> str:
        """Start the endpoint; return its name."""
        ...

    def follow(self, name: str, since: float | None = None) -> subprocess.Popen[str]: ...

    def exit_info(self, name: str) -> ExitInfo | None:
        """None while the endpoint runs, else how it ended."""
        ...

    def log_text(self, name: str, tail: int) -> str: ...

    def discard(self, name: str, *, keep: bool) -> bool:
        """Stop the endpoint (ours only); remove it unless ``keep``. True if it existed."""
        ...


class DockerBackend:
    """Containers through the docker CLI on the host."""

    engine = "docker"

    def __init__(self, host: Host, docker: Docker | None = None) -> None:
        self.host = host
        self.docker = docker or Docker(host)

    def target(self, name: str) -> Target | None:
        info = self.docker.get(name)
        if info is None:
            return None
        return Target(
            name=info.name,
            engine="docker",
            managed=info.managed,
            running=info.state.running,
            status=info.state.status,
            model=info.model,
            port=info.port,
            plan_hash=info.plan_hash,
            image=info.image,
        )

    def same_plan(self, plan: LaunchPlan) -> Target | None:
        wanted = plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)
        found = self.docker.list_managed(labels={LABEL_PLAN_HASH: wanted}, include_stopped=False)
        for info in found:
            if info.state.running:
                return self.target(info.name)
        return None

    def occupants(self, plan: LaunchPlan) -> list[Occupant]:
        out: list[Occupant] = []
        seen: set[str] = set()
        named = self.target(plan.container_name)
        if named is not None:
            seen.add(named.name)
            out.append(Occupant(named.describe(), named.managed, named))
        for holder in self.docker.port_holders(plan.port):
            if holder.container_name and holder.container_name in seen:
                continue
            out.append(self._occupant(holder))
            if holder.container_name:
                seen.add(holder.container_name)
        return out

    def _occupant(self, holder: PortHolder) -> Occupant:
        if holder.managed and holder.container_name:
            target = self.target(holder.container_name)
            if target is not None:
                return Occupant(target.describe(), True, target)
        if holder.kind == "process":
            native = native_on_port(self.host, holder.port)
            if native is not None:
                return Occupant(native.describe(), True, native)
        return Occupant(holder.describe(), False)

    def prepare(self, plan: LaunchPlan, on_line: Callable[[str], None]) -> None:
        if self.docker.image_present(plan.image):
            return
        on_line(f"Unable to find image '{plan.image}' locally")
        follower = LogFollower(self.docker.pull(plan.image))
        tail: list[str] = []
        deadline = time.monotonic() + PULL_TIMEOUT_S
        try:
            while not follower.ended and time.monotonic() < deadline:
                line = follower.get(0.5)
                if line is not None:
                    tail = [*tail[-19:], line]
                    on_line(line)
            code = follower.proc.wait(timeout=30) if follower.ended else None
        finally:
            follower.close()
        if code != 0:
            said = next((ln for ln in reversed(tail) if ln.strip()), "no output")
            raise InstinctError(
                f"docker pull {plan.image} failed on {self.host.name}: {said.strip()}",
                fix="check the image name and tag, the host's network or proxy "
                "(docker info | grep -i proxy), `docker login` for private registries, or "
                "bring the image over with `docker save | docker load`",
                id="image_pull_failed",
                details={"output_tail": tail},
            )

    def launch(self, plan: LaunchPlan, secrets: Mapping[str, str], fixes: Sequence[str]) -> str:
        from instinct_serve.plan.render import docker_argv

        labelled = copy.copy(plan)
        labelled.labels = launch_labels(plan, fixes)
        for mount in plan.mounts:
            if not mount.read_only and not self.host.exists(mount.host_path):
                # Docker would create it as root: make it as the host's user instead.
                self.host.run(["mkdir", "-p", "--", mount.host_path], timeout=30)
        self.docker.run(docker_argv(labelled), env=dict(secrets) or None)
        return plan.container_name

    def follow(self, name: str, since: float | None = None) -> subprocess.Popen[str]:
        return self.docker.follow(name, since=since)

    def exit_info(self, name: str) -> ExitInfo | None:
        state = self.docker.inspect_state(name)
        if state is None:
            return ExitInfo(None, status="removed")
        if state.running or state.status in ("created", "restarting"):
            return None
        return ExitInfo(state.exit_code, state.oom_killed, state.status)

    def log_text(self, name: str, tail: int) -> str:
        try:
            return self.docker.logs(name, tail=tail)
        except InstinctError:
            return ""

    def discard(self, name: str, *, keep: bool) -> bool:
        try:
            self.docker.stop(name, remove=not keep, grace_s=STOP_GRACE_S)
        except InstinctError as exc:
            if exc.id == "container_not_found":
                return False
            raise
        return True


def native_on_port(host: Host, port: int) -> Target | None:
    """A running native endpoint of ours that was launched on ``port``, if any."""
    from instinct_serve.engine import launcher
    from instinct_serve.runtime.native import target_of

    for status in launcher.list_processes(host):
        if status.running and status.process.meta.get("port") == port:
            return target_of(status)
    return None


def discard_target(host: Host, target: Target, *, keep: bool) -> bool:
    """Stop (and unless ``keep`` remove) one of our endpoints, whatever its engine."""
    if target.engine == "docker":
        return DockerBackend(host).discard(target.name, keep=keep)
    from instinct_serve.runtime.native import NativeBackend

    return NativeBackend(host, "vllm").discard(target.name, keep=keep)


def launch_labels(plan: LaunchPlan, fixes: Sequence[str]) -> dict[str, str]:
    """The plan's labels with the managed ones guaranteed, and the fixes applied.

    The plan-hash label stays the one of the plan the user asked for, also after a
    relaunch with a fix: the next identical ``serve`` then finds and reuses the endpoint.
    """
    labels = dict(plan.labels)
    labels.update(
        managed_labels(
            model=plan.labels.get(LABEL_MODEL, plan.model),
            port=plan.port,
            plan_hash=plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash),
        )
    )
    labels[LABEL_MANAGED] = MANAGED_VALUE
    labels[LABEL_PORT] = str(plan.port)
    if fixes:
        labels[LABEL_FIXES] = ",".join(fixes)
    return labels


# --------------------------------------------------------------------------- documents


@dataclass
class Failure:
    """Why serve gave up, what to do, and the evidence."""

    id: str
    title: str
    cause: str
    fix: str
    line: str | None = None
    log_tail: list[str] = field(default_factory=list)
    exit_code: int | None = None
    container: str | None = None
    left: str | None = None  # what happened to the endpoint: stopped and kept, running, ...
    commands: list[str] = field(default_factory=list)
    finding: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "cause": self.cause,
            "fix": self.fix,
            "line": self.line,
            "exit_code": self.exit_code,
            "container": self.container,
            "left": self.left,
            "commands": list(self.commands),
            "log_tail": list(self.log_tail),
            "finding": self.finding,
        }


@dataclass
class Endpoint:
    """The connection details of a serving endpoint."""

    base_url: str
    model: str
    container: str
    engine: str
    host: str
    port: int
    tensor_parallel_size: int
    max_model_len: int | None
    image: str | None
    use_chat: bool
    warmup_latency_s: float | None = None
    coherence: dict[str, Any] | None = None
    api_key_env: str | None = None

    @property
    def curl(self) -> str:
        return curl_command(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "model": self.model,
            "container": self.container,
            "engine": self.engine,
            "host": self.host,
            "port": self.port,
            "tp": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "image": self.image,
            "api": "chat" if self.use_chat else "completions",
            "warmup_latency_s": self.warmup_latency_s,
            "coherence": self.coherence,
            "curl": self.curl,
        }


def curl_command(endpoint: Endpoint) -> str:
    """A ready-to-run request with the endpoint's exact URL and model name."""
    import json

    if endpoint.use_chat:
        path = "/chat/completions"
        body: dict[str, Any] = {
            "model": endpoint.model,
            "messages": [{"role": "user", "content": "Hello! Who are you?"}],
            "max_tokens": 64,
        }
    else:
        path = "/completions"
        body = {"model": endpoint.model, "prompt": "The capital of France is", "max_tokens": 32}
    parts = ["curl", "-sS", endpoint.base_url + path, "-H", "Content-Type: application/json"]
    line = shlex.join(parts)
    if endpoint.api_key_env:
        line += f' -H "Authorization: Bearer ${endpoint.api_key_env}"'
    return line + " -d " + shlex.quote(json.dumps(body))


@dataclass
class Relaunch:
    """One automatic relaunch: which finding, and what changed in the plan."""

    finding: str
    title: str
    changes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"finding": self.finding, "title": self.title, "changes": list(self.changes)}


@dataclass
class ServeOutcome:
    """The final document of ``serve``."""

    status: Status
    host: str
    engine: str
    plan: LaunchPlan
    endpoint: Endpoint | None = None
    failure: Failure | None = None
    relaunches: list[Relaunch] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    phase: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status in ("ready", "reused", "loading")

    @property
    def exit_code(self) -> int:
        if self.ok:
            return 0
        return 130 if self.status == "interrupted" else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": "result",
            "ok": self.ok,
            "status": self.status,
            "host": self.host,
            "engine": self.engine,
            "model": self.plan.model,
            "plan_hash": self.plan.labels.get(LABEL_PLAN_HASH, self.plan.plan_hash),
            "endpoint": self.endpoint.to_dict() if self.endpoint else None,
            "failure": self.failure.to_dict() if self.failure else None,
            "relaunches": [r.to_dict() for r in self.relaunches],
            "replaced": list(self.replaced),
            "notes": list(self.notes),
            "phase": self.phase,
            "figures": dict(self.figures),
            "elapsed_s": round(self.elapsed_s, 2),
        }


# --------------------------------------------------------------------------- waiting

WaitKind = Literal["healthy", "exited", "stalled", "timeout", "detached"]


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
    """The name clients use for the host: ``localhost``, or the ssh config's HostName."""
    if host.is_local:
        return "localhost"
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


class Deployer:
    """One ``serve`` run of one plan on one host (see the module docstring)."""

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
        self.launched: str | None = None  # the endpoint this run started and still owns
        self._launching = False  # inside backend.launch: the endpoint may appear late
        self.fixes: list[str] = []
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

    def event(self, kind: str, **fields: Any) -> None:
        self.sink({"event": kind, "ts": round(time.time(), 3), **fields})

    def phase(self, phase: str, message: str, **fields: Any) -> None:
        self.event("phase", phase=phase, message=message, progress=None, figures={}, **fields)

    def _phase_event(self, event: PhaseEvent) -> None:
        doc = event.to_dict()
        doc.pop("event", None)
        self.event("phase", **doc)

    def note(self, message: str) -> None:
        self.notes.append(message)
        self.event("note", message=message)

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
        existing = self.backend.same_plan(self.plan)
        if existing is None:
            return None
        self.plan = self._with_name(existing.name)
        sample = health.probe_health(self.base_url, timeout=3.0)
        if sample.ok:
            self.event("reused", container=existing.name, message=f"{existing.name} is healthy")
            endpoint = self._endpoint(warmup_s=None, coherence=None)
            failed = self._check_listed(endpoint)
            if failed is not None:
                return failed
            outcome = self._outcome("reused", endpoint=endpoint)
            outcome.phase = "ready"
            return outcome
        self.event(
            "attached",
            container=existing.name,
            message=f"{existing.name} (same plan) is still starting: following it",
        )
        return self._wait_and_finish(existing.name)

    def deploy(self) -> ServeOutcome:
        """Clear the way, launch and wait (after the user confirmed the plan)."""
        self._clear_the_way()
        if self.backend.engine == "docker":
            self.phase("pulling_image", f"checking image {self.plan.image}")
        self.backend.prepare(self.plan, self._feed_pull)
        self._launch()
        assert self.launched is not None
        return self._wait_and_finish(self.launched)

    def abandon(self) -> str | None:
        """After an unexpected error: stop and remove what this run launched, if anything."""
        self.close()
        name, self.launched = self.launched, None
        if name is None:
            return None
        try:
            return name if self.backend.discard(name, keep=False) else None
        except InstinctError:
            return None

    def interrupted(self, signum: int = signal.SIGINT) -> Interrupted:
        """Cleanup after Ctrl-C: stop and remove what this run launched (nothing else)."""
        self.close()
        removed = None
        if self.launched is not None:
            try:
                if self._discard_launched():
                    removed = self.launched
            except InstinctError as exc:
                self.notes.append(f"could not remove {self.launched}: {exc.message}")
            self.launched = None
        outcome = self._outcome("interrupted")
        if removed:
            outcome.notes.append(f"stopped and removed {removed}, which this run had launched")
        else:
            outcome.notes.append("nothing was launched by this run; nothing was removed")
        return Interrupted(outcome, signum)

    def _discard_launched(self) -> bool:
        """Remove this run's endpoint. Interrupted inside the launch, the engine may still
        be creating it: look again for a moment before concluding there is none."""
        assert self.launched is not None
        attempts = 15 if self._launching else 1
        for attempt in range(attempts):
            if self.backend.discard(self.launched, keep=False):
                return True
            if attempt + 1 < attempts:
                time.sleep(0.2)
        return False

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
            self.event(
                "replaced", container=target.name, message=f"stopped and removed {target.name}"
            )

    def _feed_pull(self, line: str) -> None:
        event = self.tracker.feed(line)
        if event is not None:
            self._phase_event(event)

    def _launch(self) -> None:
        attempt = len(self.relaunches) + 1
        self.tracker = PhaseTracker()
        self.phase("launching", self.plan.container_name, attempt=attempt)
        name = self.plan.container_name
        self.launched = name  # before the call: a Ctrl-C inside it must still clean up
        self._launching = True
        self.backend.launch(self.plan, self.secrets, self.fixes)
        self._launching = False
        self.event("launched", container=name, engine=self.backend.engine, attempt=attempt)

    def _wait_and_finish(self, name: str) -> ServeOutcome:
        for _round in range(self.settings.max_relaunches + 2):
            result = self._wait(name)
            if result.kind == "detached":
                return self._detached(name)
            if result.kind == "timeout":
                return self._timed_out(name, result)
            if result.kind == "healthy":
                finished = self._after_healthy(name)
                if finished is not None:
                    return finished
                result = WaitResult("exited", self.backend.exit_info(name))
            signals: frozenset[Any] = frozenset()
            if result.kind == "stalled":
                signals = frozenset({"graph_capture_hang"})
            diagnosis = self._diagnose(name, signals)
            retry = self._relaunch_plan(diagnosis)
            if retry is None:
                return self._failed(name, result, diagnosis)
            finding, new_plan, changes = retry
            self._relaunch(name, finding, new_plan, changes)
            name = self.plan.container_name
        return self._failed(name, WaitResult("exited"), self._diagnose(name, frozenset()))

    def _relaunch(
        self, name: str, finding: Finding, new_plan: LaunchPlan, changes: list[str]
    ) -> None:
        self.backend.discard(name, keep=False)
        self.launched = None
        self.fixes.append(finding.id)
        self.relaunches.append(Relaunch(finding.id, finding.title, changes))
        self.event(
            "relaunch",
            finding=finding.id,
            title=finding.title,
            changes=changes,
            message=f"{finding.title}: relaunching once with {', '.join(changes)}",
        )
        self.plan = new_plan
        self._launch()

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

    def _diagnose(self, name: str, signals: frozenset[Any]) -> Diagnosis:
        text = self.backend.log_text(name, DIAGNOSE_TAIL)
        return diagnose(text, self._context(signals))

    # -- the wait loop

    def _wait(self, name: str) -> WaitResult:
        settings = self.settings
        timeout = settings.timeout_s or startup_timeout_s(self.plan)
        start = time.monotonic()
        deadline = start + timeout
        detach = detaches(self.plan, settings)
        follower = LogFollower(self.backend.follow(name))
        restarts = 0
        next_health = start
        next_alive = start + ALIVE_CHECK_S
        last_phase_key: tuple[str, str] | None = None
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
                    event = self.tracker.feed(line)
                    if event is not None:
                        key = (event.phase, event.message)
                        if key != last_phase_key:
                            last_phase_key = key
                            self._phase_event(event)
                        if event.phase in ("starting_server", "ready"):
                            next_health = min(next_health, time.monotonic())
                    line = follower.get(0) if not follower.ended else None
                now = time.monotonic()
                if detach and self._loading_confirmed():
                    return WaitResult("detached", elapsed_s=now - start)
                if follower.ended:
                    gone = self.backend.exit_info(name)
                    if gone is not None:
                        return WaitResult("exited", gone, now - start)
                    if restarts >= FOLLOWER_RESTARTS:
                        next_alive = min(next_alive, now + 1.0)
                    else:
                        restarts += 1
                        follower.close()
                        follower = LogFollower(self.backend.follow(name, since=time.time()))
                if now >= next_alive:
                    gone = self.backend.exit_info(name)
                    if gone is not None:
                        follower.drain(2.0)
                        return WaitResult("exited", gone, now - start)
                    next_alive = now + ALIVE_CHECK_S
                if now >= next_health:
                    sample = health.probe_health(self.base_url, timeout=3.0, client=http)
                    if sample.ok:
                        if self.tracker.phase != "ready":  # /health beat the log line to us
                            self.phase("ready", "API server answers /health")
                        self.event("healthy", elapsed_s=round(time.monotonic() - start, 2))
                        return WaitResult("healthy", elapsed_s=time.monotonic() - start)
                    fast = PHASE_ORDER.get(self.tracker.phase, 0) >= PHASE_ORDER["starting_server"]
                    next_health = time.monotonic() + (FAST_POLL_S if fast else settings.poll_s)
                if self.tracker.stalled(time.monotonic(), settings.stall_timeout_s, HANG_PHASES):
                    self.event(
                        "stalled",
                        phase=self.tracker.phase,
                        message=f"no log line for {settings.stall_timeout_s:g} s while "
                        "capturing graphs",
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

    def _after_healthy(self, name: str) -> ServeOutcome | None:
        """Models, warm-up, coherence. None when the server died meanwhile (diagnose it)."""
        endpoint = self._endpoint(warmup_s=None, coherence=None)
        listed = self._check_listed(endpoint)
        if isinstance(listed, ServeOutcome):
            return listed
        self.phase("warming_up", "first request (compiles kernels: may take minutes)")
        try:
            first = self._warmup(endpoint)
        except InstinctError as exc:
            if self.backend.exit_info(name) is not None:
                return None
            return self._http_failure(name, exc)
        endpoint.warmup_latency_s = round(first.latency_s, 3)
        self.event("warmup", latency_s=endpoint.warmup_latency_s, endpoint=first.endpoint)
        if not self.settings.coherence:
            return self._outcome("ready", endpoint=endpoint)
        self.phase("coherence_probe", "greedy known-answer probe")
        try:
            probe = health.coherence_probe(
                self.base_url,
                endpoint.model,
                use_chat=self.use_chat,
                timeout=self.settings.probe_timeout_s,
            )
        except InstinctError as exc:
            if self.backend.exit_info(name) is not None:
                return None
            return self._http_failure(name, exc)
        endpoint.coherence = probe.to_dict()
        self.event("coherence", verdict=probe.verdict.verdict, text=probe.completion.text[:200])
        if probe.ok:
            return self._outcome("ready", endpoint=endpoint)
        diagnosis = self._diagnose(name, frozenset({"incoherent_output"}))
        retry = self._relaunch_plan(diagnosis)
        if retry is None:
            finding = diagnosis.get("incoherent_output")
            failure = self._failure_from(name, diagnosis, finding, None)
            failure.cause += f" Probe answer: {probe.completion.text[:200]!r}."
            failure.left = self._stop_kept(name)
            return self._outcome("failed", failure=failure, endpoint=endpoint)
        finding, new_plan, changes = retry
        self._relaunch(name, finding, new_plan, changes)
        return self._wait_and_finish(self.plan.container_name)

    def _check_listed(self, endpoint: Endpoint) -> ServeOutcome | None:
        try:
            models = health.list_models(self.base_url)
        except InstinctError as exc:
            return self._http_failure(endpoint.container, exc)
        names = [m.id for m in models]
        match = next((m for m in models if m.id == endpoint.model), None)
        if match is None:
            failure = Failure(
                id="model_not_listed",
                title="The server does not list the model",
                cause=f"/v1/models lists {', '.join(names) or 'nothing'}, not {endpoint.model}: "
                "another server may answer on this port",
                fix="check `instinct ps` and the port; pass --port to use another one",
                container=endpoint.container,
            )
            return self._outcome("failed", failure=failure, endpoint=endpoint)
        if match.max_model_len:
            endpoint.max_model_len = match.max_model_len
        return None

    def _warmup(self, endpoint: Endpoint) -> health.CompletionResult:
        timeout = self.settings.warmup_timeout_s
        try:
            return health.warmup(self.base_url, endpoint.model, use_chat=True, timeout=timeout)
        except InstinctError as exc:
            if exc.details.get("status_code") != 400:
                raise
        # vLLM answers 400 to chat requests for base models without a chat template.
        self.use_chat = False
        endpoint.use_chat = False
        self.note("the model has no chat template: using /v1/completions")
        return health.warmup(self.base_url, endpoint.model, use_chat=False, timeout=timeout)

    # -- outcomes

    def _endpoint(self, *, warmup_s: float | None, coherence: dict[str, Any] | None) -> Endpoint:
        plan = self.plan
        api_key = "VLLM_API_KEY" if vllm_args.has(plan.vllm_args, "--api-key") else None
        return Endpoint(
            base_url=f"http://{self.address}:{plan.port}/v1",
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
            api_key_env=api_key,
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

    def _detached(self, name: str) -> ServeOutcome:
        self.launched = None  # loading on purpose: Ctrl-C from now on must not remove it
        where = "" if self.host.is_local else f" --host {self.host.name}"
        self.note(
            f"{name} is loading ({self.tracker.message}); follow it with "
            f"`instinct logs -f {name}{where}` and check `instinct ps{where}`"
        )
        return self._outcome("loading", endpoint=self._endpoint(warmup_s=None, coherence=None))

    def _timed_out(self, name: str, result: WaitResult) -> ServeOutcome:
        self.launched = None  # not known to be broken: left running
        where = "" if self.host.is_local else f" --host {self.host.name}"
        tail = _tail(self.backend.log_text(name, SHOWN_TAIL))
        failure = Failure(
            id="startup_timeout",
            title="Not healthy in time",
            cause=f"{name} did not answer /health within {result.elapsed_s:.0f} s "
            f"(last phase: {self.tracker.phase}: {self.tracker.message})",
            fix="it is still running: follow it with `instinct logs -f "
            f"{name}{where}`, wait longer next time with --timeout, or stop it with "
            f"`instinct stop {name}{where}`",
            log_tail=tail,
            container=name,
            left="running",
        )
        return self._outcome("timeout", failure=failure)

    def _stop_kept(self, name: str) -> str:
        """Stop a failed endpoint but keep it (its log) for ``instinct logs``/``diagnose``."""
        self.launched = None
        try:
            self.backend.discard(name, keep=True)
        except InstinctError as exc:
            return f"could not stop it: {exc.message}"
        return "stopped, kept for its log"

    def _failed(self, name: str, result: WaitResult, diagnosis: Diagnosis) -> ServeOutcome:
        specific = [f for f in diagnosis.findings if not f.generic] or list(diagnosis.findings)
        finding = specific[0] if specific else None
        failure = self._failure_from(name, diagnosis, finding, result.exit)
        failure.left = self._stop_kept(name)
        return self._outcome("failed", failure=failure)

    def _failure_from(
        self, name: str, diagnosis: Diagnosis, finding: Finding | None, gone: ExitInfo | None
    ) -> Failure:
        where = "" if self.host.is_local else f" --host {self.host.name}"
        tail = list(diagnosis.tail[-SHOWN_TAIL:])
        how = f"{name} {gone.describe()}" if gone is not None else f"{name} failed"
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
                id="startup_failed",
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
            cause=f"{how}: {finding.cause}" if gone is not None else finding.cause,
            fix=finding.fix,
            line=finding.line,
            log_tail=tail,
            exit_code=gone.exit_code if gone else None,
            container=name,
            commands=[*finding.commands, *commands],
            finding=finding.to_dict(),
        )

    def _http_failure(self, name: str, exc: InstinctError) -> ServeOutcome:
        failure = Failure(
            id=exc.id,
            title="The endpoint is up but a request failed",
            cause=exc.message,
            fix=exc.fix or "read the server log",
            log_tail=_tail(self.backend.log_text(name, SHOWN_TAIL)),
            container=name,
            commands=[f"instinct logs {name}"],
        )
        if exc.id.endswith("_timeout"):
            failure.left = "running"
            self.launched = None
        else:
            failure.left = self._stop_kept(name)
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
