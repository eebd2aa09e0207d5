"""What docker says, as data: containers, who holds a port, listening sockets, and the
pure parsers of ``docker inspect``, ``ss``, ``/proc/net/tcp``, cgroups and timestamped logs.

No I/O here: ``runtime.docker`` (the CLI adapter) and ``runtime.docker_ports`` feed these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

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
        entrypoint=strings(config.get("Entrypoint")),
        cmd=strings(config.get("Cmd")),
        env=strings(config.get("Env")),
    )


def _is_port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def strings(value: Any) -> tuple[str, ...]:
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
FULL_ID = re.compile(r"[0-9a-f]{64}")


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
