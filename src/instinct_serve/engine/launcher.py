"""A supervised native ``vllm serve``: started detached on a ``Host``, found and stopped
again by what was recorded when it started, and by nothing else.

Each launch gets a state directory ``<data>/native/<name>/`` holding ``state.json``, the
``pid`` file, the merged ``log`` and, once the command has ended, its ``exit`` status (also
after ``stop``: the wrapper traps SIGTERM/SIGINT, waits for the command and records how it
ended; ``stop`` leaves a ``stopped`` file too). The command runs under ``setsid nohup``
(its own session and process group, immune to the hangup of an ssh session that started
it) inside a tiny ``sh`` wrapper that writes the exit status. ``stop`` also removes the
``vllm_dist_<hex>`` rendezvous files vLLM names in its log and leaves in the temp
directory. Secrets travel in ``env=`` (over ssh: on stdin), never in argv; the state
records variable *names* only.

A process counts as ours only while its pid is alive with the same kernel start time as
recorded (pids are reused) and, where ``/proc/PID/environ`` is readable, it carries the
``INSTINCT_NATIVE_NAME`` marker. ``stop`` signals that process group and nothing else.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.engine import hostfs
from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.hosts import Host

MARKER_ENV = "INSTINCT_NATIVE_NAME"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

# $1 log, $2 pid file, $3 exit file, then the argv. The inner sh records the exit status;
# it traps TERM/INT (a signal to the whole group, as `stop` sends) so that it survives to
# write it: a trapped signal is reset to its default in the command it runs, and the trap
# action waits for that command, after which $? is still the command's status.
_LAUNCH = (
    'log=$1; pidf=$2; exitf=$3; shift 3; rm -f "$exitf" "${exitf%/*}/stopped"; '
    "if command -v setsid >/dev/null 2>&1; then s=setsid; else s=; fi; "
    '$s nohup sh -c \'x=$1; shift; trap : TERM INT; "$@"; echo $? > "$x"\' sh "$exitf" "$@" '
    '</dev/null >>"$log" 2>&1 & '
    'echo $! > "$pidf"; echo $!'
)
# vLLM's torch.distributed rendezvous file (vllm/utils/network_utils.py): created in the
# temp directory at every start and never removed by vLLM itself.
_VLLM_DIST_FILE = re.compile(r"distributed_init_method=file://(/\S*/vllm_dist_[0-9a-f]{32})\b")
# Every process's stat line, to find the members of a process group.
_ALL_STATS = (
    'for f in /proc/[0-9]*/stat; do read -r l < "$f" && printf "%s\\n" "$l"; done 2>/dev/null'
)


def state_root(host: Host) -> str:
    return hostfs.join(hostfs.data_dir(host), "native")


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise UsageError(
            f"invalid process name {name!r}",
            fix="use letters, digits, '.', '_' or '-' (at most 64, starting alphanumeric)",
            id="bad_name",
        )
    return name


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` the launcher needs."""

    pid: int
    state: str
    pgid: int
    start_ticks: int


def parse_stat(line: str) -> ProcStat | None:
    """Parse one ``/proc/PID/stat`` line (the command name may hold spaces and ')')."""
    head, sep, rest = line.rpartition(")")
    if not sep:
        return None
    fields = rest.split()
    pid_text = head.split("(", 1)[0].strip()
    if len(fields) < 20 or not pid_text.isdigit():
        return None
    try:
        return ProcStat(int(pid_text), fields[0], int(fields[2]), int(fields[19]))
    except ValueError:
        return None


@dataclass
class NativeProcess:
    """What was recorded when a native command was started."""

    name: str
    host: str
    pid: int
    start_ticks: int | None
    argv: list[str]
    env_names: list[str]
    state_dir: str
    started_at: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def log_path(self) -> str:
        return hostfs.join(self.state_dir, "log")

    @property
    def pid_path(self) -> str:
        return hostfs.join(self.state_dir, "pid")

    @property
    def exit_path(self) -> str:
        return hostfs.join(self.state_dir, "exit")

    @property
    def stopped_path(self) -> str:
        return hostfs.join(self.state_dir, "stopped")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "argv": list(self.argv),
            "env_names": list(self.env_names),
            "state_dir": self.state_dir,
            "log": self.log_path,
            "started_at": self.started_at,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> NativeProcess:
        return cls(
            name=str(doc["name"]),
            host=str(doc.get("host", "")),
            pid=int(doc["pid"]),
            start_ticks=int(doc["start_ticks"]) if doc.get("start_ticks") is not None else None,
            argv=[str(a) for a in doc.get("argv", [])],
            env_names=[str(a) for a in doc.get("env_names", [])],
            state_dir=str(doc["state_dir"]),
            started_at=str(doc.get("started_at", "")),
            meta=dict(doc.get("meta") or {}),
        )


@dataclass
class ProcessStatus:
    process: NativeProcess
    running: bool
    exit_code: int | None = None
    stopped_at: str | None = None  # when `stop` ended it (None: it ended on its own)

    @property
    def stopped(self) -> bool:
        return not self.running and self.stopped_at is not None

    def describe(self) -> str:
        """``running``, ``stopped (exit 0)``, ``exited (1)`` or ``exited (unknown)``."""
        if self.running:
            return "running"
        code = "unknown" if self.exit_code is None else str(self.exit_code)
        return f"stopped (exit {code})" if self.stopped else f"exited ({code})"

    def to_dict(self) -> dict[str, Any]:
        doc = self.process.to_dict()
        doc.update(
            running=self.running,
            exit_code=self.exit_code,
            stopped_at=self.stopped_at,
            status=self.describe(),
        )
        return doc


# One round trip for both files (over ssh each command is a connection): stat, a separator
# line, then the environment (unreadable: nothing after the separator).
_PROC_INFO = (
    'cat "/proc/$1/stat" 2>/dev/null || exit 1; printf "\\n@@ENV@@\\n"; '
    'cat "/proc/$1/environ" 2>/dev/null; exit 0'
)


def _proc_info(host: Host, pid: int) -> tuple[ProcStat | None, list[str] | None]:
    """``/proc/PID/stat`` parsed, and the environment entries (None if unreadable)."""
    result = host.run(["sh", "-c", _PROC_INFO, "sh", str(pid)], timeout=30)
    if not result.ok:
        return None, None
    stat_text, sep, environ = result.stdout.partition("\n@@ENV@@\n")
    entries = [e for e in environ.split("\0") if e] if sep else []
    return parse_stat(stat_text.strip()), entries or None


def _stat(host: Host, pid: int) -> ProcStat | None:
    return _proc_info(host, pid)[0]


def _is_ours(host: Host, proc: NativeProcess) -> bool:
    stat, environ = _proc_info(host, proc.pid)
    if stat is None or stat.state in ("Z", "X") or proc.start_ticks is None:
        return False
    if stat.start_ticks != proc.start_ticks:
        return False  # the pid was reused by another process
    return environ is None or f"{MARKER_ENV}={proc.name}" in environ


def launch(
    host: Host,
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> NativeProcess:
    """Start ``argv`` detached on ``host`` under ``name``; refuse a name already running."""
    check_name(name)
    if not argv:
        raise UsageError("nothing to launch", id="bad_argv")
    root = state_root(host)
    existing = status(host, name, root=root)
    if existing is not None and existing.running:
        raise UsageError(
            f"a native process named {name} is already running (pid {existing.process.pid})",
            fix=f"stop it first (it logs to {existing.process.log_path}) or choose another name",
            id="name_in_use",
        )
    state_dir = hostfs.join(root, name)
    hostfs.makedirs(host, state_dir)
    full_env = dict(env or {})
    full_env[MARKER_ENV] = name
    log = hostfs.join(state_dir, "log")
    started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    hostfs.write_text(host, log, f"# instinct: started {started_at}: {' '.join(argv)}\n")
    result = host.run(
        [
            "sh",
            "-c",
            _LAUNCH,
            "sh",
            log,
            hostfs.join(state_dir, "pid"),
            hostfs.join(state_dir, "exit"),
            *argv,
        ],
        timeout=30,
        env=full_env,
    )
    pid_text = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if not result.ok or not pid_text.isdigit():
        raise InstinctError(
            f"could not start {argv[0]} on {host.name}: {result.stderr.strip() or 'no pid'}",
            fix="check that the command exists and the state directory is writable",
            id="launch_failed",
        )
    pid = int(pid_text)
    stat = _stat(host, pid)
    proc = NativeProcess(
        name=name,
        host=host.name,
        pid=pid,
        start_ticks=stat.start_ticks if stat else None,
        argv=list(argv),
        env_names=sorted(full_env),
        state_dir=state_dir,
        started_at=started_at,
        meta=dict(meta or {}),
    )
    hostfs.write_text(
        host, hostfs.join(state_dir, "state.json"), json.dumps(proc.to_dict(), indent=2) + "\n"
    )
    return proc


def load(host: Host, name: str, *, root: str | None = None) -> NativeProcess | None:
    """The recorded process ``name`` (``root``: the state root, if already known)."""
    check_name(name)
    text = host.read_text(hostfs.join(root or state_root(host), name, "state.json"))
    if not text:
        return None
    try:
        return NativeProcess.from_dict(json.loads(text))
    except (ValueError, KeyError, TypeError):
        return None


def _exit_code(host: Host, proc: NativeProcess) -> int | None:
    text = (host.read_text(proc.exit_path) or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def status(host: Host, name: str, *, root: str | None = None) -> ProcessStatus | None:
    """The recorded process and whether it is still running; None if never started here."""
    proc = load(host, name, root=root)
    if proc is None:
        return None
    running = _is_ours(host, proc)
    if running:
        return ProcessStatus(proc, True)
    stopped = (host.read_text(proc.stopped_path) or "").strip() or None
    return ProcessStatus(proc, False, _exit_code(host, proc), stopped)


def list_processes(host: Host) -> list[ProcessStatus]:
    root = state_root(host)
    result = host.run(["ls", "-1", root], timeout=30)
    found = []
    for name in sorted(result.stdout.split()) if result.ok else []:
        if _NAME.match(name):
            st = status(host, name, root=root)
            if st is not None:
                found.append(st)
    return found


def _members(host: Host, proc: NativeProcess) -> list[int]:
    """Live processes of the launched group, the leader gone or not: same process group,
    started no earlier than the leader (so a recycled group id cannot match)."""
    result = host.run(["sh", "-c", _ALL_STATS], timeout=60)
    pids = []
    for line in result.stdout.splitlines():
        stat = parse_stat(line)
        if (
            stat
            and stat.pgid == proc.pid
            and stat.state not in ("Z", "X")
            and proc.start_ticks is not None
            and stat.start_ticks >= proc.start_ticks
        ):
            pids.append(stat.pid)
    return sorted(pids)


def group_pids(host: Host, proc: NativeProcess) -> list[int]:
    """The pids of the launched process group (the wrapper, vLLM, its workers)."""
    if not _is_ours(host, proc):
        return []
    return _members(host, proc)


def read_log(host: Host, name: str) -> str:
    proc = load(host, name)
    return (host.read_text(proc.log_path) or "") if proc else ""


@dataclass
class StopResult:
    name: str
    was_running: bool
    stopped: bool
    signal: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "was_running": self.was_running,
            "stopped": self.stopped,
            "signal": self.signal,
        }


def stop(host: Host, name: str, *, timeout: float = 30.0, poll_s: float = 0.2) -> StopResult:
    """SIGTERM the recorded process group, SIGKILL it after ``timeout``; touch nothing else."""
    proc = load(host, name)
    if proc is None:
        raise NotReadyError(
            f"no native process named {name} was started on {host.name}",
            fix="list them with `instinct ps`",
            id="not_found",
        )
    if not _is_ours(host, proc):
        remove_vllm_temp_files(host, proc)
        return StopResult(name, False, True, None)
    stamp = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    hostfs.write_text(host, proc.stopped_path, stamp + "\n")
    sent = "TERM"
    # Done when the whole group is gone, not only its leader: a vLLM worker that outlives
    # the API server still holds its GPU memory.
    for sig, wait in (("TERM", timeout), ("KILL", 10.0)):
        sent = sig
        # the group first (setsid made pid the group id); the pid alone if setsid was absent
        if not host.run(["kill", f"-{sig}", "--", f"-{proc.pid}"], timeout=30).ok:
            host.run(["kill", f"-{sig}", str(proc.pid)], timeout=30)
        deadline = time.monotonic() + wait
        for _ in range(int(wait / poll_s) + 1):
            if not _is_ours(host, proc) and not _members(host, proc):
                _await_exit_file(host, proc)
                remove_vllm_temp_files(host, proc)
                return StopResult(name, True, True, sent)
            if time.monotonic() > deadline:
                break
            time.sleep(poll_s)
    gone = not _is_ours(host, proc) and not _members(host, proc)
    if gone:
        remove_vllm_temp_files(host, proc)
    return StopResult(name, True, gone, sent)


def _await_exit_file(host: Host, proc: NativeProcess, wait_s: float = 2.0) -> None:
    """The wrapper writes the exit file as its last act: give it a moment (bounded)."""
    for _ in range(int(wait_s / 0.1)):
        if _exit_code(host, proc) is not None:
            return
        time.sleep(0.1)


def vllm_temp_files(log_text: str) -> list[str]:
    """The ``vllm_dist_<hex>`` files a vLLM log names (pure; absolute paths only)."""
    return sorted(set(_VLLM_DIST_FILE.findall(log_text)))


def remove_vllm_temp_files(host: Host, proc: NativeProcess) -> list[str]:
    """Remove the rendezvous files this process's vLLM left (named in its log); the paths
    removed. Nothing else: the exact ``vllm_dist_<32 hex>`` names from its own log only.
    The log is searched where it lies (it grows with every request: not read whole)."""
    found = host.run(
        ["grep", "-o", "-E", r"distributed_init_method=file://[^ ]+", proc.log_path], timeout=60
    )
    paths = vllm_temp_files(found.stdout) if found.ok else []
    if paths:
        host.run(["rm", "-f", "--", *paths], timeout=30)
    return paths


def vllm_serve_argv(
    vllm_command: str,
    model: str,
    *,
    port: int,
    bind: str | None = None,
    tensor_parallel_size: int = 1,
    utilization: float | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``vllm serve MODEL --port P ...`` for a native launch.

    Graph capture stays on (no ``--enforce-eager``) unless ``extra_args`` carries it, as the
    plan does after a detected hang; tensor parallelism follows the ``--gpus`` group.
    """
    argv = [vllm_command, "serve", model, "--port", str(port)]
    if bind:
        argv += ["--host", bind]
    if tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if utilization is not None:
        argv += ["--gpu-memory-utilization", f"{utilization:g}"]
    return argv + list(extra_args)
