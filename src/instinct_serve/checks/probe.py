"""Facts about the target host, gathered through its ``Host`` and parsed by pure functions.

Each probe is one small POSIX ``sh`` script run through ``Host.run``, so the local machine
and an ssh host take exactly the same path and a remote check costs one round trip per
probe, not one per file. Results are memoised per ``Probe`` (checks share them, and may run
in threads); build a new ``Probe`` to see the host again after a fix.

Secrets: the environment probe reports only *whether* HF_TOKEN and friends are set, from the
length of the variable inside the remote shell; their values never leave that shell, never
reach a process argument, and never reach this process.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from instinct_serve.credentials import HF_TOKEN_NAMES
from instinct_serve.hosts import Host, Result
from instinct_serve.names import is_env_name
from instinct_serve.paths import HF_ENV_NAMES

T = TypeVar("T")

# Environment variables of the target that checks read (not secrets: values are reported).
ENV_NAMES: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    *HF_ENV_NAMES,
    "DOCKER_HOST",
)
# Secrets: only their presence (non-empty) is ever reported.
SECRET_NAMES: tuple[str, ...] = HF_TOKEN_NAMES

# $@: secret names to test for presence (values never leave the shell: only the length
# is read), then the user and groups of the session. `eval` only ever sees validated names.
_IDENTITY_SCRIPT = r"""
for n in "$@"; do
  eval "l=\${#$n}"
  if [ "$l" -gt 0 ]; then printf 'secret:%s\0' "$n"; fi
done
u=$(id -un 2>/dev/null)
printf 'uid:%s\0' "$(id -u)"
printf 'user:%s\0' "$u"
printf 'groups:%s\0' "$(id -Gn 2>/dev/null)"
if [ -n "$u" ]; then printf 'dbgroups:%s\0' "$(id -Gn -- "$u" 2>/dev/null)"; fi
"""

# $1: the root prefix. One line per device path: present (with access bits and group) or not.
_DEVICES_SCRIPT = r"""
r=$1
for p in "$r/dev/kfd" "$r/dev/dri" "$r"/dev/dri/renderD*; do
  case $p in *'*') continue;; esac
  if [ -e "$p" ]; then
    a=; [ -r "$p" ] && a=r; [ -w "$p" ] && a="${a}w"
    printf 'node\t%s\t%s\t%s\n' "$p" "$a" "$(stat -c %G -- "$p" 2>/dev/null)"
  else
    printf 'none\t%s\n' "$p"
  fi
done
"""

# $1: a directory that may not exist yet. Walks up to the nearest existing parent (bounded:
# dirname reaches / or . within a path's depth), then reports it and its filesystem.
_DISK_SCRIPT = r"""
p=$1; i=0
while [ ! -e "$p" ] && [ "$i" -lt 128 ]; do p=$(dirname -- "$p"); i=$((i+1)); done
e=no; [ "$p" = "$1" ] && e=yes
d=no; [ -d "$p" ] && d=yes
w=no; [ -w "$p" ] && w=yes
printf '%s %s %s\n%s\n' "$e" "$d" "$w" "$p"
df -Pk -- "$p"
"""


@dataclass(frozen=True)
class TargetEnv:
    """The target's login environment (as commands run through the Host see it)."""

    values: Mapping[str, str]
    secrets_present: frozenset[str]
    uid: int | None
    user: str | None
    groups: tuple[str, ...]
    db_groups: tuple[str, ...]

    def get(self, name: str) -> str | None:
        return self.values.get(name)


@dataclass(frozen=True)
class Node:
    """A device path: present, and readable/writable by the user running the probe."""

    path: str
    present: bool
    readable: bool = False
    writable: bool = False
    group: str | None = None

    @property
    def accessible(self) -> bool:
        return self.present and self.readable and self.writable


@dataclass(frozen=True)
class DiskFacts:
    """Where a directory would live: its nearest existing parent and that filesystem."""

    path: str
    existing: str
    exists: bool
    is_dir: bool
    writable: bool
    total_bytes: int | None
    free_bytes: int | None
    mount: str | None


def parse_env(stdout: str, values: Mapping[str, str]) -> TargetEnv:
    """The environment (``Host.env``) and the NUL-separated records of the identity probe."""
    secrets: set[str] = set()
    fields: dict[str, str] = {}
    for record in stdout.split("\0"):
        kind, sep, rest = record.partition(":")
        if not sep:
            continue
        if kind == "secret":
            secrets.add(rest)
        else:
            fields[kind] = rest.strip()
    uid_text = fields.get("uid", "")
    return TargetEnv(
        values=dict(values),
        secrets_present=frozenset(secrets),
        uid=int(uid_text) if uid_text.isdigit() else None,
        user=fields.get("user") or None,
        groups=tuple(fields.get("groups", "").split()),
        db_groups=tuple(fields.get("dbgroups", "").split()),
    )


def _strip_root(path: str, root: str) -> str:
    return path[len(root) :] if root and path.startswith(root) else path


def parse_devices(stdout: str, root: str = "") -> dict[str, Node]:
    """Device probe lines to nodes keyed by their path without the root prefix."""
    nodes: dict[str, Node] = {}
    for line in stdout.splitlines():
        parts = line.split("\t")
        if parts[0] == "node" and len(parts) >= 3:
            path = _strip_root(parts[1], root)
            access = parts[2]
            group = parts[3].strip() if len(parts) > 3 and parts[3].strip() else None
            nodes[path] = Node(path, True, "r" in access, "w" in access, group)
        elif parts[0] == "none" and len(parts) >= 2:
            path = _strip_root(parts[1], root)
            nodes[path] = Node(path, False)
    return nodes


_DF_LINE = re.compile(
    r"^(?P<fs>.*?)\s+(?P<total>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+\S+\s+(?P<mount>/.*)$"
)


def parse_df(text: str) -> tuple[int, int, str] | None:
    """``df -Pk`` output to (total bytes, available bytes, mount point), or None."""
    for line in text.splitlines()[1:]:
        match = _DF_LINE.match(line.rstrip())
        if match:
            kib = 1024
            return int(match["total"]) * kib, int(match["avail"]) * kib, match["mount"]
    return None


def parse_disk(path: str, stdout: str) -> DiskFacts | None:
    """The disk probe's output (flags, nearest existing path, then df) to facts."""
    lines = stdout.splitlines()
    if len(lines) < 2:
        return None
    flags = lines[0].split()
    if len(flags) != 3:
        return None
    df = parse_df("\n".join(lines[2:]))
    return DiskFacts(
        path=path,
        existing=lines[1],
        exists=flags[0] == "yes",
        is_dir=flags[1] == "yes",
        writable=flags[2] == "yes",
        total_bytes=df[0] if df else None,
        free_bytes=df[1] if df else None,
        mount=df[2] if df else None,
    )


def parse_ss_listening(text: str) -> set[int]:
    """Ports in LISTEN state from ``ss -tln`` (any address: v4, v6, ``*``)."""
    ports: set[int] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "LISTEN":
            _, _, port = parts[3].rpartition(":")
            if port.isdigit():
                ports.add(int(port))
    return ports


def parse_proc_net_tcp(text: str) -> set[int]:
    """Ports in LISTEN state (st 0A) from /proc/net/tcp or /proc/net/tcp6."""
    ports: set[int] = set()
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 4 and parts[3] == "0A":
            _, _, port_hex = parts[1].rpartition(":")
            try:
                ports.add(int(port_hex, 16))
            except ValueError:
                continue
    return ports


class Probe:
    """Memoised facts about one host; safe to share between threads."""

    def __init__(self, host: Host, root: str = "") -> None:
        self.host = host
        self.root = root.rstrip("/")
        self._memo: dict[object, object] = {}
        self._locks: dict[object, threading.Lock] = {}
        self._guard = threading.Lock()

    def path(self, path: str) -> str:
        """A /dev, /proc or /sys path under the root prefix."""
        return f"{self.root}{path}"

    def _once(self, key: object, compute: Callable[[], T]) -> T:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._memo:
                self._memo[key] = compute()
            value: T = self._memo[key]  # type: ignore[assignment]
            return value

    def run(self, argv: list[str], timeout: float = 30) -> Result:
        return self.host.run(argv, timeout=timeout)

    def env(self) -> TargetEnv:
        """Non-secret variables, secret presence, and the user and groups of the session."""

        def compute() -> TargetEnv:
            values = self.host.env(ENV_NAMES)
            secrets = [n for n in SECRET_NAMES if is_env_name(n)]
            result = self.run(["sh", "-c", _IDENTITY_SCRIPT, "sh", *secrets])
            return parse_env(result.stdout, values)

        return self._once("env", compute)

    def devices(self) -> dict[str, Node]:
        """/dev/kfd, /dev/dri and its render nodes, keyed by path without the root."""

        def compute() -> dict[str, Node]:
            result = self.run(["sh", "-c", _DEVICES_SCRIPT, "sh", self.root])
            return parse_devices(result.stdout, self.root)

        return self._once("devices", compute)

    def disk(self, path: str) -> DiskFacts | None:
        """Free space for ``path`` (its nearest existing parent when it does not exist)."""

        def compute() -> DiskFacts | None:
            result = self.run(["sh", "-c", _DISK_SCRIPT, "sh", path])
            return parse_disk(path, result.stdout)

        return self._once(("disk", path), compute)

    def read(self, path: str) -> str | None:
        return self._once(("read", path), lambda: self.host.read_text(path))

    def exists(self, path: str) -> bool:
        return self._once(("exists", path), lambda: self.host.exists(path))

    def which(self, name: str) -> str | None:
        return self._once(("which", name), lambda: self.host.which(name))

    def listening_ports(self) -> tuple[set[int], str] | None:
        """TCP ports in LISTEN state and where they were read; None when nothing answered.

        /proc/net/tcp{,6} first (under the root prefix, no tool needed), else ``ss -tln``.
        """

        def compute() -> tuple[set[int], str] | None:
            texts = {n: self.read(self.path(f"/proc/net/{n}")) for n in ("tcp", "tcp6")}
            if any(text is not None for text in texts.values()):
                ports: set[int] = set()
                for text in texts.values():
                    ports |= parse_proc_net_tcp(text or "")
                return ports, self.path("/proc/net/tcp")
            result = self.run(["ss", "-tln"])
            if result.ok:
                return parse_ss_listening(result.stdout), "ss -tln"
            return None

        return self._once("listening", compute)
