"""Docker containers through a ``Host``: the docker CLI, locally or on ``--host`` over ssh.

Every call goes through ``Host.run``/``Host.spawn`` with the ``docker`` CLI, so the local
machine and a remote one are one code path and no Docker SDK or socket forwarding is
needed. The tool only ever destroys what it created: containers carry the labels of
``plan.labels`` (``LABEL_MANAGED`` et al.), ``list_managed`` filters on them, and
``stop``/``remove`` refuse (error id ``not_managed``) any container without them.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from instinct_serve import vllm_args
from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host, Result
from instinct_serve.plan.labels import (
    LABEL_MANAGED,
    LABEL_MODEL,
    LABEL_PLAN_HASH,
    LABEL_VERSION,
    MANAGED_VALUE,
    label_port,
    label_text,
)

# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class PublishedPort:
    """One ``-p HOST_IP:HOST_PORT:CONTAINER_PORT`` mapping of a container."""

    container_port: int
    protocol: str
    host_ip: str
    host_port: int


@dataclass(frozen=True)
class ContainerState:
    """What ``docker inspect`` says about a container's process."""

    status: str  # created | running | paused | restarting | removing | exited | dead
    running: bool
    exit_code: int | None
    oom_killed: bool
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    health: str | None  # starting | healthy | unhealthy, when the image has a HEALTHCHECK
    pid: int | None

    @property
    def exited(self) -> bool:
        """The process ran and is gone (``exit_code`` is meaningful)."""
        return self.status in ("exited", "dead")

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "running": self.running,
            "exit_code": self.exit_code,
            "oom_killed": self.oom_killed,
            "error": self.error or None,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "health": self.health,
        }


@dataclass(frozen=True)
class ContainerInfo:
    """A container as ``ps``, ``stop`` and port-conflict handling need it."""

    id: str
    name: str
    image: str
    state: ContainerState
    created_at: datetime | None
    labels: Mapping[str, str]
    ports: tuple[PublishedPort, ...]
    network_mode: str
    restart_count: int
    uptime_s: float | None  # seconds since start while running (daemon clock vs ours)
    # what it really runs (Config.Entrypoint, Config.Cmd, Config.Env): checked before reuse;
    # Env holds secret values (HF_TOKEN=...): never in ``to_dict``
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = field(default=(), repr=False)

    # Labels are data, not trust: read defensively (``plan.labels``), never an exception.

    @property
    def managed(self) -> bool:
        return self.labels.get(LABEL_MANAGED) == MANAGED_VALUE

    @property
    def model(self) -> str | None:
        return label_text(self.labels, LABEL_MODEL)

    @property
    def port(self) -> int | None:
        return label_port(self.labels)

    @property
    def plan_hash(self) -> str | None:
        return label_text(self.labels, LABEL_PLAN_HASH)

    @property
    def version(self) -> str | None:
        return label_text(self.labels, LABEL_VERSION)

    @property
    def short_id(self) -> str:
        return self.id[:12]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "image": self.image,
            "managed": self.managed,
            "model": self.model,
            "port": self.port,
            "plan_hash": self.plan_hash,
            "version": self.version,
            "status": self.state.status,
            "state": self.state.to_dict(),
            "health": self.state.health,
            "created_at": _iso(self.created_at),
            "uptime_s": None if self.uptime_s is None else round(self.uptime_s, 1),
            "ports": [
                {
                    "host_ip": p.host_ip,
                    "host_port": p.host_port,
                    "container_port": p.container_port,
                    "protocol": p.protocol,
                }
                for p in self.ports
            ],
            "network_mode": self.network_mode,
            "restart_count": self.restart_count,
            "labels": dict(self.labels),
        }


HolderKind = Literal["managed_container", "container", "process"]


@dataclass(frozen=True)
class PortHolder:
    """Who holds a TCP port on the host: one of our containers, someone else's, or a process."""

    kind: HolderKind
    port: int
    address: str | None = None
    container_id: str | None = None
    container_name: str | None = None
    model: str | None = None
    pid: int | None = None
    process: str | None = None

    @property
    def managed(self) -> bool:
        return self.kind == "managed_container"

    def describe(self) -> str:
        """One phrase for messages: what holds the port."""
        if self.kind == "managed_container":
            model = f" serving {self.model}" if self.model else ""
            return f"instinct-serve container {self.container_name}{model}"
        if self.kind == "container":
            if self.container_name:
                return f"container {self.container_name} (not started by instinct-serve)"
            return "a Docker container (docker-proxy; not started by instinct-serve)"
        if self.process:
            pid = f" (pid {self.pid})" if self.pid else ""
            return f"process {self.process}{pid}"
        return "a process (name not visible; run `ss -tlnp` as root on the host)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "port": self.port,
            "address": self.address,
            "container_id": self.container_id,
            "container_name": self.container_name,
            "model": self.model,
            "pid": self.pid,
            "process": self.process,
            "description": self.describe(),
        }


@dataclass(frozen=True)
class Listener:
    """A listening TCP socket, from ``ss -tlnp`` or ``/proc/net/tcp``."""

    address: str
    port: int
    processes: tuple[tuple[str, int | None], ...] = field(default_factory=tuple)


# --------------------------------------------------------------------------- parsers (pure)

_DOCKER_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def parse_docker_time(text: str | None) -> datetime | None:
    """Docker's RFC 3339 nano timestamps; the zero time ``0001-01-01T00:00:00Z`` is None."""
    if not text:
        return None
    match = _DOCKER_TIME.match(text.strip())
    if not match:
        return None
    base, frac, zone = match.groups()
    if base.startswith("0001-"):
        return None
    micro = (frac or "").ljust(6, "0")[:6]
    zone = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(f"{base}.{micro}{zone}")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def parse_inspect(doc: Mapping[str, Any], now: datetime | None = None) -> ContainerInfo:
    """One element of ``docker inspect`` (a container) to a ``ContainerInfo``."""
    state_doc: Mapping[str, Any] = doc.get("State") or {}
    config: Mapping[str, Any] = doc.get("Config") or {}
    host_config: Mapping[str, Any] = doc.get("HostConfig") or {}
    network: Mapping[str, Any] = doc.get("NetworkSettings") or {}
    health_doc = state_doc.get("Health") or {}
    status = str(state_doc.get("Status") or "unknown")
    started = parse_docker_time(state_doc.get("StartedAt"))
    running = bool(state_doc.get("Running"))
    exit_code = state_doc.get("ExitCode")
    state = ContainerState(
        status=status,
        running=running,
        exit_code=int(exit_code) if isinstance(exit_code, int) and status != "created" else None,
        oom_killed=bool(state_doc.get("OOMKilled")),
        error=str(state_doc.get("Error") or ""),
        started_at=started,
        finished_at=parse_docker_time(state_doc.get("FinishedAt")),
        health=(health_doc.get("Status") or None) if isinstance(health_doc, Mapping) else None,
        pid=_int(state_doc.get("Pid")) or None,
    )
    ports: list[PublishedPort] = []
    bindings = network.get("Ports") or host_config.get("PortBindings") or {}
    if not isinstance(bindings, Mapping):
        bindings = {}
    for spec, binds in sorted(bindings.items(), key=lambda item: str(item[0])):
        number, _, proto = str(spec).partition("/")
        for bind in binds if isinstance(binds, list) else []:
            if not isinstance(bind, Mapping):
                continue
            host_port = str(bind.get("HostPort") or "")
            if _is_port(number) and _is_port(host_port):
                ports.append(
                    PublishedPort(
                        container_port=int(number),
                        protocol=proto or "tcp",
                        host_ip=str(bind.get("HostIp") or "0.0.0.0"),
                        host_port=int(host_port),
                    )
                )
    uptime = None
    if running and started is not None:
        uptime = max(0.0, ((now or datetime.now(UTC)) - started).total_seconds())
    labels = config.get("Labels") or {}
    if not isinstance(labels, Mapping):
        labels = {}
    return ContainerInfo(
        id=str(doc.get("Id") or ""),
        name=str(doc.get("Name") or "").lstrip("/"),
        image=str(config.get("Image") or doc.get("Image") or ""),
        state=state,
        created_at=parse_docker_time(doc.get("Created")),
        labels={str(k): str(v) for k, v in labels.items()},
        ports=tuple(ports),
        network_mode=str(host_config.get("NetworkMode") or ""),
        restart_count=_int(doc.get("RestartCount")),
        uptime_s=uptime,
        entrypoint=_strings(config.get("Entrypoint")),
        cmd=_strings(config.get("Cmd")),
        env=_strings(config.get("Env")),
    )


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _strings(value: Any) -> tuple[str, ...]:
    """Docker's argv fields: a list of strings, a single string, or null."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return ()


_SS_USER = re.compile(r'\("([^"]*)",pid=(\d+)')


def _split_host_port(text: str) -> tuple[str, int] | None:
    address, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        return None
    address = address.split("%", 1)[0]  # 127.0.0.53%lo
    if address.startswith("[") and address.endswith("]"):
        address = address[1:-1]
    return address, int(port)


def parse_ss(text: str, port: int | None = None) -> list[Listener]:
    """``ss -H -t -l -n -p`` lines to listeners (optionally only those on ``port``)."""
    out: list[Listener] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5 or parts[0] != "LISTEN":
            continue
        local = _split_host_port(parts[3])
        if local is None or (port is not None and local[1] != port):
            continue
        users = " ".join(parts[5:])
        procs = tuple((name, int(pid)) for name, pid in _SS_USER.findall(users))
        out.append(Listener(address=local[0], port=local[1], processes=procs))
    return out


def _hex_address(text: str) -> str:
    if len(text) == 8:  # IPv4, little-endian
        return ".".join(str(int(text[i : i + 2], 16)) for i in (6, 4, 2, 0))
    if len(text) == 32:  # IPv6: four little-endian 32-bit words
        words = [text[i : i + 8] for i in range(0, 32, 8)]
        raw = "".join("".join(w[j : j + 2] for j in (6, 4, 2, 0)) for w in words)
        groups = [raw[i : i + 4].lstrip("0") or "0" for i in range(0, 32, 4)]
        return ":".join(groups)
    return text


def parse_proc_net_tcp(text: str, port: int | None = None) -> list[Listener]:
    """``/proc/net/tcp`` or ``tcp6`` to listeners (state 0A); no process names there."""
    out: list[Listener] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 4 or parts[3] != "0A":
            continue
        address_hex, _, port_hex = parts[1].partition(":")
        try:
            number = int(port_hex, 16)
        except ValueError:
            continue
        if port is None or number == port:
            out.append(Listener(address=_hex_address(address_hex), port=number))
    return out


_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
_FULL_ID = re.compile(r"[0-9a-f]{64}")


def container_id_from_cgroup(text: str) -> str | None:
    """The container id in ``/proc/PID/cgroup`` (cgroupfs ``/docker/ID`` or ``docker-ID.scope``)."""
    for line in text.splitlines():
        if "docker" in line or "containerd" in line or "libpod" in line:
            match = _CONTAINER_ID.search(line)
            if match:
                return match.group(0)
    return None


def _timestamp_key(stamp: str) -> tuple[str, str]:
    """Sort key for docker's ``--timestamps`` prefix (nanoseconds with zeros trimmed)."""
    base, _, frac = stamp.rstrip("Z").partition(".")
    return base, frac.ljust(9, "0")


def merge_timestamped(stdout: str, stderr: str) -> str:
    """Interleave ``docker logs --timestamps`` stdout and stderr by time, prefixes removed."""
    entries: list[tuple[tuple[str, str], int, str]] = []
    seq = 0
    for text in (stdout, stderr):
        last = ("", "")
        for line in text.splitlines():
            stamp, sep, rest = line.partition(" ")
            if sep and len(stamp) >= 20 and stamp[4] == "-" and stamp[10] == "T":
                last = _timestamp_key(stamp)
                entries.append((last, seq, rest))
            else:  # not a timestamped line: keep it after the previous one
                entries.append((last, seq, line))
            seq += 1
    entries.sort(key=lambda e: (e[0], e[1]))
    return "".join(text + "\n" for _, _, text in entries)


# --------------------------------------------------------------------------- errors


_CLI_NOISE = re.compile(r"^(Run|See) '\S+ .*--help'")


def _last_line(text: str) -> str:
    """Docker's reason, without its "Run 'docker run --help'" footer and error prefixes."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    lines = [ln for ln in lines if not _CLI_NOISE.match(ln)] or lines
    if not lines:
        return ""
    said = lines[-1]
    for prefix in ("docker: ", "Error: ", "Error response from daemon: "):
        said = said.removeprefix(prefix)
    return said


def _daemon_error(host: Host, result: Result) -> NotReadyError | None:
    """The failures that mean "no usable Docker here", whatever the command was."""
    err = result.stderr.lower()
    # 127 is also `docker run`'s code for a container that cannot start: only a shell's or
    # our LocalHost's "not found", without a word from the daemon, means a missing CLI.
    if result.returncode == 127 and "error response from daemon" not in err and "not found" in err:
        return NotReadyError(
            f"the docker CLI is not installed on {host.name}",
            fix="install Docker (docker.io or docker-ce) on the host",
            id="docker_missing",
        )
    if "cannot connect to the docker daemon" in err or "is the docker daemon running" in err:
        return NotReadyError(
            f"the Docker daemon is not running on {host.name}",
            fix="start it (systemctl start docker, or run dockerd)",
            id="docker_unavailable",
        )
    if "permission denied" in err and "docker" in err and ".sock" in err:
        return NotReadyError(
            f"permission denied on the Docker socket on {host.name}",
            fix="add the user to the docker group (sudo usermod -aG docker $USER), "
            "then log in again",
            id="docker_permission",
        )
    if result.timed_out:
        return NotReadyError(
            f"docker did not answer on {host.name}: {' '.join(result.argv[:3])} timed out",
            fix="check the Docker daemon (docker info) on the host",
            id="docker_timeout",
        )
    return None


def _run_error(host: Host, result: Result, name: str | None) -> InstinctError:
    """Map a failed ``docker run`` to an actionable error carrying docker's own words."""
    daemon = _daemon_error(host, result)
    if daemon is not None:
        return daemon
    stderr = result.stderr.strip()
    err = stderr.lower()
    said = _last_line(stderr) or f"exit status {result.returncode}"
    details: dict[str, Any] = {"stderr": stderr, "exit_code": result.returncode}
    if "port is already allocated" in err or "address already in use" in err:
        return InstinctError(
            f"docker could not publish the port: {said}",
            fix="pick another --port, or see what holds it with `instinct ps` / `ss -tlnp`",
            id="port_in_use",
            details=details,
        )
    if "is already in use by container" in err:
        return InstinctError(
            f"a container named {name} already exists: {said}",
            fix=f"choose another --name, or remove it (docker rm {name}) if it is yours",
            id="container_name_conflict",
            details=details,
        )
    if "error gathering device information" in err or (
        "no such file or directory" in err and "/dev/" in err
    ):
        return InstinctError(
            f"a GPU device is missing on {host.name}: {said}",
            fix="check that the amdgpu driver is loaded (ls /dev/kfd /dev/dri) and run "
            "`instinct check`",
            id="device_missing",
            details=details,
        )
    if "unable to find group" in err:
        return InstinctError(
            f"the image has no such group: {said}",
            fix="use a vLLM ROCm image (vllm/vllm-openai-rocm) or numeric --group-add GIDs",
            id="group_missing",
            details=details,
        )
    if any(
        s in err
        for s in ("pull access denied", "manifest unknown", "not found: manifest", "no such image")
    ):
        return InstinctError(
            f"the image could not be found: {said}",
            fix="check the image name and tag (e.g. vllm/vllm-openai-rocm:latest) and "
            "`docker login` for private registries",
            id="image_not_found",
            details=details,
        )
    if "registry" in err or "dial tcp" in err or "tls handshake" in err:
        return InstinctError(
            f"the image is not on {host.name} and the registry cannot be reached: {said}",
            fix="check the host's network or proxy (docker info | grep -i proxy), or bring the "
            "image over with `docker save | docker load`",
            id="image_pull_failed",
            details=details,
        )
    if "no space left on device" in err:
        return InstinctError(
            f"no disk space left on {host.name}: {said}",
            fix="free space under /var/lib/docker (docker system prune) or the HF cache",
            id="disk_full",
            details=details,
        )
    return InstinctError(
        f"docker run failed on {host.name}: {said}",
        fix="read docker's message above; `instinct plan --json` shows the exact argv",
        id="docker_run_failed",
        details=details,
    )


# --------------------------------------------------------------------------- adapter


class Docker:
    """The docker CLI on one host."""

    def __init__(self, host: Host, *, binary: str = "docker", timeout: float = 60.0) -> None:
        self.host = host
        self.binary = binary
        self.timeout = timeout
        self._cid_dir: str | None = None

    # -- plumbing

    def _run(
        self,
        args: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        return self.host.run(
            [self.binary, *args], timeout=self.timeout if timeout is None else timeout, env=env
        )

    def _check(self, result: Result, action: str) -> Result:
        if result.ok:
            return result
        daemon = _daemon_error(self.host, result)
        if daemon is not None:
            raise daemon
        raise InstinctError(
            f"docker {action} failed on {self.host.name}: "
            f"{_last_line(result.stderr) or f'exit status {result.returncode}'}",
            fix="check `docker info` on the host",
            id="docker_failed",
            details={"stderr": result.stderr.strip(), "exit_code": result.returncode},
        )

    # -- daemon and images

    def available(self) -> tuple[bool, str]:
        """(True, "Docker 20.10.24") when the CLI can talk to a daemon, else (False, why).

        An unreachable ssh host is not a Docker problem: its ``HostError`` propagates.
        """
        result = self._run(["version", "--format", "{{.Server.Version}}"], timeout=30)
        if result.ok and result.stdout.strip():
            return True, f"Docker {result.stdout.strip()}"
        problem = _daemon_error(self.host, result)
        if problem is not None:
            return False, problem.message
        return False, _last_line(result.stderr) or f"docker version exited {result.returncode}"

    def require(self) -> None:
        """Raise ``NotReadyError`` (exit 3) unless Docker is usable on the host."""
        ok, reason = self.available()
        if not ok:
            raise NotReadyError(
                reason, fix="run `instinct check` for the fix", id="docker_unavailable"
            )

    def image_present(self, image: str) -> bool:
        """Whether the image is already local (so ``run`` will not pull silently)."""
        result = self._run(["image", "inspect", "--format", "{{.Id}}", image], timeout=30)
        if result.ok:
            return True
        if _daemon_error(self.host, result) is not None:
            self._check(result, "image inspect")
        return False

    def image_id(self, image: str) -> str | None:
        """The local image's id (``sha256:...``), or None when it is not here: nodes of one
        group must run the very same build."""
        result = self._run(["image", "inspect", "--format", "{{.Id}}", image], timeout=30)
        return result.stdout.strip() or None if result.ok else None

    def network_exists(self, name: str) -> bool:
        return self._run(["network", "inspect", "--format", "{{.Name}}", name], timeout=30).ok

    def run_once(self, args: Sequence[str], *, timeout: float) -> Result:
        """A foreground ``docker run --rm ...`` (a probe), its exit status and output."""
        if list(args[:2]) != ["run", "--rm"]:
            raise ValueError("run_once takes `run --rm ...` arguments")
        return self._run(list(args), timeout=timeout)

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        """The image's ``Config.Entrypoint`` (what a container of it runs unless told
        otherwise), or None when the image is not here."""
        fmt = "{{json .Config.Entrypoint}}"
        result = self._run(["image", "inspect", "--format", fmt, image], timeout=30)
        if not result.ok:
            return None
        try:
            return _strings(json.loads(result.stdout.strip() or "null"))
        except json.JSONDecodeError:
            return None

    def pull(self, image: str) -> subprocess.Popen[str]:
        """Start ``docker pull`` and stream its progress (serve shows it as a phase)."""
        return self.host.spawn([self.binary, "pull", image])

    # -- containers

    def new_cidfile(self) -> str:
        """A path (not yet existing) in a private directory on the host, for ``run``'s
        ``--cidfile``: docker writes the id there the moment it creates the container."""
        import uuid

        from instinct_serve.engine import hostfs

        directory = self._cid_dir
        if directory is None:
            directory = hostfs.join(hostfs.data_dir(self.host), "run")
            script = 'umask 077; mkdir -p "$1"'
            self.host.run(["sh", "-c", script, "sh", directory], timeout=30)
            self._cid_dir = directory
        return hostfs.join(directory, f"{uuid.uuid4().hex}.cid")

    def created_id(self, cidfile: str) -> str | None:
        """The id docker wrote in ``cidfile`` (the container that ``run`` created), if any."""
        text = (self.host.read_text(cidfile) or "").strip()
        return text if _FULL_ID.fullmatch(text) else None

    def forget_cidfile(self, cidfile: str) -> None:
        self.host.run(["rm", "-f", "--", cidfile], timeout=30)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 300.0,
        cidfile: str | None = None,
    ) -> str:
        """Run a planner-made ``docker run -d ...`` argv; return the new container id.

        ``env`` carries secret values named by ``--env NAME`` in the argv (e.g. HF_TOKEN):
        they reach the docker CLI's environment, over ssh through stdin, never an argument.
        Pull first (``image_present``/``pull``): a missing image is pulled here, silently.

        The run writes the new container's id to ``cidfile`` (``--cidfile``; one is made
        and removed here unless the caller passes its own): on failure the container docker
        created but could not start (e.g. a port conflict) is removed by that id, so the
        next attempt does not hit a name conflict, and nothing that merely has the same
        name (another run's container) is ever touched.
        """
        args = list(argv)
        if len(args) < 3 or args[0].rsplit("/", 1)[-1] not in ("docker", self.binary):
            raise ValueError(f"not a docker argv: {args[:3]}")
        if args[1] != "run" or not any(a in ("-d", "--detach") for a in args):
            raise ValueError("Docker.run needs a detached `docker run -d ...` argv")
        args[0] = self.binary
        own_cidfile = cidfile is None
        path = self.new_cidfile() if cidfile is None else cidfile
        args[2:2] = ["--cidfile", path]
        try:
            result = self.host.run(args, timeout=timeout, env=env)
            # docker's own options come before the image: the first --name is the container's
            name = vllm_args.value(args, "--name", last=False) or None
            if not result.ok:
                error = _run_error(self.host, result, name)
                self._discard_unstarted(path, error)
                raise error
            lines = [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]
            if not lines or not re.fullmatch(r"[0-9a-f]{12,64}", lines[-1]):
                raise InstinctError(
                    f"docker run printed no container id on {self.host.name}",
                    fix="check `docker ps -a` on the host",
                    id="docker_run_failed",
                    details={"stdout": result.stdout, "stderr": result.stderr},
                )
            return lines[-1]
        finally:
            if own_cidfile:
                self.forget_cidfile(path)

    def _discard_unstarted(self, cidfile: str, error: InstinctError) -> None:
        """Remove the container this very run created and could not start (by its id)."""
        try:
            cid = self.created_id(cidfile)
            info = self.get(cid) if cid else None
        except InstinctError:
            return
        if info is not None and info.managed and not info.state.running:
            removed = self._run(["rm", "-f", info.id], timeout=60).ok
            error.details["removed_unstarted_container"] = info.name if removed else None

    def inspect(self, names: Iterable[str]) -> list[ContainerInfo]:
        """``docker inspect`` of several containers; missing ones are left out (races)."""
        wanted = list(names)
        if not wanted:
            return []
        result = self._run(["inspect", "--type", "container", *wanted])
        if not result.ok and "no such" not in result.stderr.lower():
            self._check(result, "inspect")
        try:
            docs = json.loads(result.stdout) if result.stdout.strip() else []
        except json.JSONDecodeError as exc:
            raise InstinctError(
                f"docker inspect printed invalid JSON on {self.host.name}: {exc}",
                fix="check the docker CLI on the host (docker inspect --help)",
                id="docker_failed",
            ) from exc
        now = datetime.now(UTC)
        return [parse_inspect(doc, now) for doc in docs if isinstance(doc, dict)]

    def get(self, name_or_id: str) -> ContainerInfo | None:
        """Any container (managed or not) by name or id, or None when there is none."""
        found = self.inspect([name_or_id])
        return found[0] if found else None

    def _ids(self, args: Sequence[str]) -> list[str]:
        result = self._check(self._run(["ps", "-q", "--no-trunc", *args]), "ps")
        return [ln.strip() for ln in result.stdout.splitlines() if ln.strip()]

    def list_managed(
        self, *, labels: Mapping[str, str] | None = None, include_stopped: bool = True
    ) -> list[ContainerInfo]:
        """Containers this tool started (label ``instinct-serve.managed=true``), by name.

        ``labels`` narrows further (e.g. ``{LABEL_MODEL: model}``).
        """
        filters = ["--filter", f"label={LABEL_MANAGED}={MANAGED_VALUE}"]
        for key, value in (labels or {}).items():
            filters += ["--filter", f"label={key}={value}"]
        if include_stopped:
            filters.insert(0, "-a")
        found = [c for c in self.inspect(self._ids(filters)) if c.managed]
        return sorted(found, key=lambda c: c.name)

    def list_running(self) -> list[ContainerInfo]:
        """Every running container, ours or not (to find who publishes a port)."""
        return self.inspect(self._ids([]))

    def inspect_state(self, name: str) -> ContainerState | None:
        info = self.get(name)
        return None if info is None else info.state

    def wait_state(self, name: str, *, timeout: float) -> ContainerState | None:
        """Block until the container is no longer running (``docker wait``), at most
        ``timeout`` seconds; return its state then (still running if the wait timed out)."""
        self._run(["wait", name], timeout=timeout)
        return self.inspect_state(name)

    def logs(self, name: str, *, tail: int | None = 200, since: str | float | None = None) -> str:
        """The container's output, stdout and stderr interleaved in time order.

        vLLM logs records on stdout and progress bars on stderr; ``--timestamps`` lets the
        two streams (which the CLI returns separately) be merged back in order.
        """
        args = ["logs", "--timestamps"]
        if tail is not None:
            args += ["--tail", str(tail)]
        if since is not None:
            args += ["--since", _since(since)]
        result = self._run([*args, name], timeout=max(self.timeout, 120))
        if not result.ok:
            if "no such container" in result.stderr.lower():
                raise InstinctError(
                    f"no container named {name} on {self.host.name}",
                    fix="list them with `instinct ps`",
                    id="container_not_found",
                )
            self._check(result, "logs")
        return merge_timestamped(result.stdout, result.stderr)

    def follow(
        self, name: str, *, since: str | float | None = None, tail: int | None = None
    ) -> subprocess.Popen[str]:
        """``docker logs -f`` as a process whose stdout streams the merged output.

        It ends by itself when the container stops; the caller terminates it otherwise.
        """
        args = [self.binary, "logs", "-f"]
        if since is not None:
            args += ["--since", _since(since)]
        if tail is not None:
            args += ["--tail", str(tail)]
        return self.host.spawn([*args, name])

    def require_managed(self, name: str, action: str) -> ContainerInfo:
        """The container, if this tool started it; ``container_not_found``/``not_managed``."""
        info = self.get(name)
        if info is None:
            raise InstinctError(
                f"no container named {name} on {self.host.name}",
                fix="list the endpoints with `instinct ps`",
                id="container_not_found",
            )
        if not info.managed:
            raise InstinctError(
                f"refusing to {action} container {info.name}: instinct-serve did not create it "
                f"(no {LABEL_MANAGED}={MANAGED_VALUE} label)",
                fix="it is not ours to touch; if you are sure, use docker on it yourself",
                id="not_managed",
                details={"container": info.name, "image": info.image},
            )
        return info

    def stop(self, name: str, *, remove: bool = True, grace_s: int = 10) -> ContainerInfo:
        """Stop (and by default remove) a container this tool started; refuse any other."""
        info = self.require_managed(name, "stop")
        if info.state.running or info.state.status in ("restarting", "paused"):
            result = self._run(["stop", "-t", str(grace_s), info.id], timeout=grace_s + 60)
            if not result.ok and "no such container" not in result.stderr.lower():
                self._check(result, "stop")
        if remove:
            result = self._run(["rm", "-f", info.id], timeout=60)
            if not result.ok and "no such container" not in result.stderr.lower():
                self._check(result, "rm")
        return info

    def set_restart(self, name: str, policy: str) -> None:
        """``docker update --restart POLICY`` of a container this tool started."""
        info = self.require_managed(name, "change the restart policy of")
        self._check(self._run(["update", "--restart", policy, info.id]), "update")

    def signal(self, name: str, signal: str) -> ContainerInfo:
        """``docker kill --signal SIGNAL`` to a container this tool started (a reload)."""
        info = self.require_managed(name, "signal")
        self._check(self._run(["kill", "--signal", signal, info.id], timeout=60), "kill")
        return info

    def children(self, name: str, pid: int) -> set[int]:
        """The host PIDs of ``pid``'s children in container ``name`` (``docker top``)."""
        result = self._run(["top", name, "-o", "pid,ppid"], timeout=30)
        self._check(result, "top")
        found = set()
        for line in result.stdout.splitlines()[1:]:
            words = line.split()
            if len(words) == 2 and words[0].isdigit() and words[1] == str(pid):
                found.add(int(words[0]))
        return found

    def start(self, name: str) -> ContainerInfo:
        """Start again a stopped container this tool started (same id, same writable layer)."""
        info = self.require_managed(name, "start")
        self._check(self._run(["start", info.id], timeout=max(self.timeout, 120)), "start")
        return info

    def remove(self, name: str) -> ContainerInfo:
        """Remove a stopped container this tool started (before a relaunch under its name)."""
        return self.stop(name, remove=True)

    def stop_all_managed(
        self, *, labels: Mapping[str, str] | None = None, grace_s: int = 10
    ) -> list[ContainerInfo]:
        """Stop and remove every managed container (``labels`` narrows the set)."""
        stopped = []
        for info in self.list_managed(labels=labels):
            try:
                stopped.append(self.stop(info.id, grace_s=grace_s))
            except InstinctError as exc:
                if exc.id != "container_not_found":  # gone meanwhile: fine
                    raise
        return stopped

    # -- ports

    def listeners(self, port: int) -> list[Listener]:
        """TCP listeners on ``port`` on the host (``ss``, else ``/proc/net/tcp``)."""
        result = self.host.run(
            ["ss", "-H", "-t", "-l", "-n", "-p", "sport", "=", f":{port}"], timeout=30
        )
        if result.ok:
            return parse_ss(result.stdout, port)
        found: list[Listener] = []
        for path in ("/proc/net/tcp", "/proc/net/tcp6"):
            text = self.host.read_text(path)
            if text:
                found += parse_proc_net_tcp(text, port)
        return found

    def port_holders(self, port: int) -> list[PortHolder]:
        """Who holds ``port``: our containers, foreign containers, or other processes.

        Containers are found by their published ports (and, with host networking, by our
        port label or the listener's cgroup); the rest come from the host's listeners.
        """
        try:
            running = self.list_running()
        except NotReadyError:
            running = []
        holders: list[PortHolder] = []
        seen: set[str] = set()

        def add_container(info: ContainerInfo, address: str | None) -> None:
            if info.id in seen:
                return
            seen.add(info.id)
            holders.append(
                PortHolder(
                    kind="managed_container" if info.managed else "container",
                    port=port,
                    address=address,
                    container_id=info.id,
                    container_name=info.name,
                    model=info.model if info.managed else None,
                )
            )

        for info in running:
            for published in info.ports:
                if published.host_port == port and published.protocol == "tcp":
                    add_container(info, published.host_ip)
            if info.network_mode == "host" and info.managed and info.port == port:
                add_container(info, None)

        by_id = {c.id: c for c in running}
        seen_procs: set[tuple[str, int | None]] = set()
        for listener in self.listeners(port):
            names = [name for name, _ in listener.processes]
            if "docker-proxy" in names:
                if not holders:  # published by a container we could not inspect
                    holders.append(
                        PortHolder(kind="container", port=port, address=listener.address)
                    )
                continue
            if not listener.processes:
                if not holders and ("?", None) not in seen_procs:
                    seen_procs.add(("?", None))
                    holders.append(PortHolder(kind="process", port=port, address=listener.address))
                continue
            for pname, pid in listener.processes:
                owner = self._container_of_pid(pid, by_id)
                if owner is not None:
                    add_container(owner, listener.address)
                elif (pname, pid) not in seen_procs:
                    seen_procs.add((pname, pid))
                    holders.append(
                        PortHolder(
                            kind="process",
                            port=port,
                            address=listener.address,
                            pid=pid,
                            process=pname,
                        )
                    )
        return holders

    def _container_of_pid(
        self, pid: int | None, by_id: Mapping[str, ContainerInfo]
    ) -> ContainerInfo | None:
        if pid is None or not by_id:
            return None
        text = self.host.read_text(f"/proc/{pid}/cgroup")
        cid = container_id_from_cgroup(text or "")
        return by_id.get(cid) if cid else None


def _since(value: str | float) -> str:
    return f"{value:.9f}" if isinstance(value, float | int) else value
