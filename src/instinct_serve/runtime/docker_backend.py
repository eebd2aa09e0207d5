"""Docker containers as a serve ``Backend``, through the docker CLI on the host."""

from __future__ import annotations

import contextlib
import copy
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import LABEL_PLAN_HASH
from instinct_serve.plan.model import LOOPBACK, LaunchPlan
from instinct_serve.runtime.backend import (
    LABEL_FIXES,
    ExitInfo,
    Occupant,
    Target,
    launch_labels,
    same_command,
)
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.docker_data import ContainerInfo, PortHolder
from instinct_serve.runtime.follower import LogFollower
from instinct_serve.runtime.native import native_on_port
from instinct_serve.runtime.owner import LABEL_OWNER, caller

PULL_TIMEOUT_S = 3 * 3600.0
STOP_GRACE_S = 5


class DockerBackend:
    """Containers through the docker CLI on the host."""

    engine = "docker"

    def __init__(self, host: Host, docker: Docker | None = None, device_root: str = "") -> None:
        self.host = host
        self.docker = docker or Docker(host)
        # the check root (hidden --root: tests, chroots) also prefixes the devices passed
        # to the container, so a stand-in tree is used instead of the host's /dev
        self.device_root = device_root.rstrip("/")
        self._cidfile: str | None = None  # the launch in progress writes its id there

    def target(self, name: str) -> Target | None:
        info = self.docker.get(name)
        if info is None:
            return None
        return _target(info)

    def verify(self, plan: LaunchPlan, target: Target) -> str | None:
        info = self.docker.get(target.handle)
        if info is None:
            return "it is gone"
        return self._mismatch(plan, info)

    def _mismatch(self, plan: LaunchPlan, info: ContainerInfo) -> str | None:
        """Why the container does not run ``plan`` (image, entrypoint, command, environment,
        published address), or None when it does."""
        from instinct_serve.plan.render import container_args

        if info.image != plan.image:
            return f"it runs the image {info.image}, not {plan.image}"
        entrypoint = self.docker.image_entrypoint(plan.image)
        if entrypoint is not None and info.entrypoint != entrypoint:
            return f"its entrypoint is {list(info.entrypoint)}, not the image's {list(entrypoint)}"
        relaunched = bool(info.labels.get(LABEL_FIXES))
        if not same_command(container_args(plan), info.cmd, relaunched=relaunched):
            return "its command is not the plan's vllm serve arguments"
        env = dict(item.partition("=")[::2] for item in info.env)
        for key, value in plan.env.items():
            if env.get(key) != value and not relaunched:
                return f"its environment differs from the plan's ({key})"
        published = [p for p in info.ports if p.host_port == plan.port and p.protocol == "tcp"]
        if not published:
            return f"it does not publish port {plan.port}"
        addresses = {p.host_ip for p in published}
        if plan.public:
            listens = bool(addresses & {"0.0.0.0", "::", ""})
        else:
            listens = addresses <= {LOOPBACK}
        if not listens:
            return f"it listens on {', '.join(sorted(addresses))}, not {plan.bind_address}"
        return None

    def same_plan(self, plan: LaunchPlan) -> Target | None:
        """A running container labelled with the plan's hash: one that really runs the
        plan if there is one, else the first found (``verify`` then says why not)."""
        wanted = plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)
        found = self.docker.list_managed(labels={LABEL_PLAN_HASH: wanted}, include_stopped=False)
        running = [info for info in found if info.state.running]
        for info in running:
            if self._mismatch(plan, info) is None:
                return _target(info)
        return _target(running[0]) if running else None

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
        """``docker run -d``; the container's id (written to a cidfile as docker creates
        it, so an interrupted launch still knows what it created: ``launching``)."""
        from instinct_serve.plan.render import docker_argv

        labelled = copy.copy(plan)  # who started it: at launch, never in the plan (its hash)
        labelled.labels = {**launch_labels(plan, fixes), LABEL_OWNER: caller()}
        for mount in plan.mounts:
            if not mount.read_only and not self.host.exists(mount.host_path):
                # Docker would create it as root: make it as the host's user instead.
                self.host.run(["mkdir", "-p", "--", mount.host_path], timeout=30)
        argv = docker_argv(labelled, restart=None)  # set once proven: ``supervise``
        if self.device_root:
            argv = rooted_devices(argv, self.device_root)
        cidfile = self._cidfile = self.docker.new_cidfile()
        # on an exception the cidfile stays for ``launching`` (an interrupted run), then goes
        cid = self.docker.run(argv, env=dict(secrets) or None, cidfile=cidfile)
        self._forget()
        return cid

    def launching(self) -> str | None:
        if self._cidfile is None:
            return None
        found = self.docker.created_id(self._cidfile)
        if found is not None:
            self._forget()
        return found

    def _forget(self) -> None:
        cidfile, self._cidfile = self._cidfile, None
        if cidfile is not None:
            with contextlib.suppress(InstinctError):
                self.docker.forget_cidfile(cidfile)

    def supervise(self, handle: str) -> None:
        """Hand a proven endpoint to the daemon's restart policy (``RESTART_POLICY``).

        Not at launch: while it starts, serve is its supervisor (a failed start is
        diagnosed and relaunched once with a fix; a blind restart would reload the weights
        and fail the same way). Best effort: without it only ``instinct watch`` restarts."""
        from instinct_serve.plan.render import RESTART_POLICY

        with contextlib.suppress(InstinctError):
            self.docker.set_restart(handle, RESTART_POLICY)

    def follow(self, handle: str, since: float | None = None) -> subprocess.Popen[str]:
        return self.docker.follow(handle, since=since)

    def exit_info(self, handle: str) -> ExitInfo | None:
        state = self.docker.inspect_state(handle)
        if state is None:
            return ExitInfo(None, status="removed")
        if state.running or state.status in ("created", "restarting"):
            return None
        return ExitInfo(state.exit_code, state.oom_killed, state.status)

    def log_text(self, handle: str, tail: int) -> str:
        try:
            return self.docker.logs(handle, tail=tail)
        except InstinctError:
            return ""

    def secret_values(self, handle: str, names: Sequence[str]) -> dict[str, str]:
        """From the container's ``Config.Env`` (ours only; it holds what ``--env NAME``
        copied in at its launch)."""
        from instinct_serve.runtime.secret_env import pick

        info = self.docker.get(handle) if names else None
        return pick(info.env, names) if info is not None and info.managed else {}

    def discard(self, handle: str, *, keep: bool) -> bool:
        """Stop (and unless ``keep`` remove) the container ``handle`` (an id: exactly the
        one meant, whatever now carries its name); refused unless it is managed."""
        try:
            self.docker.stop(handle, remove=not keep, grace_s=STOP_GRACE_S)
        except InstinctError as exc:
            if exc.id == "container_not_found":
                return False
            raise
        return True


def _target(info: ContainerInfo) -> Target:
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
        id=info.id or None,
        instance=container_instance(info),
        fixes=tuple(f for f in info.labels.get(LABEL_FIXES, "").split(",") if f),
    )


def container_instance(info: ContainerInfo) -> str | None:
    """This run of the container: its id and when it last started (a restart by the
    daemon's policy or by hand is a new run)."""
    if not info.id:
        return None
    started = info.state.started_at
    return f"{info.id}:{started.isoformat() if started else info.restart_count}"


def rooted_devices(argv: list[str], root: str) -> list[str]:
    """``--device /dev/X`` -> ``--device ROOT/dev/X:/dev/X`` (the container still sees
    /dev/X): the devices of a stand-in root, for tests and chroots."""
    out: list[str] = []
    take = False
    for token in argv:
        if take and token.startswith("/dev/") and ":" not in token:
            token = f"{root}{token}:{token}"
        elif token.startswith("--device=/dev/") and ":" not in token:
            path = token.split("=", 1)[1]
            token = f"--device={root}{path}:{path}"
        take = token == "--device"
        out.append(token)
    return out
