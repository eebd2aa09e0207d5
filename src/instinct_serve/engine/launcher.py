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
``INSTINCT_NATIVE_NAME`` marker. The launch records the session and process group the leader
got, and a per-launch ``INSTINCT_NATIVE_RUN`` token every descendant inherits. Its *members*
are the live processes of that session or group started no earlier than the leader, whether
the leader still lives or not (a vLLM whose API server was killed leaves its engine
processes behind, holding GPU memory). ``stop`` signals those process groups and nothing
else: SIGTERM, a bounded wait, SIGKILL, another bounded wait, then a last look. What still
runs then is a *survivor*, reported with its pid and command: a member the kernel did not
let die (state D: a hung driver call), or a process carrying this launch's token that left
the session (never signalled: only the group is provably ours). ``ps`` names the survivors
of an endpoint that ended, and a relaunch under the same name is refused while they run.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.engine import hostfs
from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.hosts import Host

MARKER_ENV = "INSTINCT_NATIVE_NAME"
RUN_ENV = "INSTINCT_NATIVE_RUN"  # this launch's token: inherited by every descendant
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
    'echo $! > "$pidf"; echo "$! ${s:-nosetsid}"'
)
# vLLM's torch.distributed rendezvous file (vllm/utils/network_utils.py): created in the
# temp directory at every start and never removed by vLLM itself.
_VLLM_DIST_FILE = re.compile(r"distributed_init_method=file://(/\S*/vllm_dist_[0-9a-f]{32})\b")
# Every process's stat line, a separator, then the launcher's markers in every readable
# environment ("/proc/PID/environ:NAME=value", NUL-terminated): one round trip over ssh.
_SCAN = (
    'for f in /proc/[0-9]*/stat; do read -r l < "$f" && printf "%s\\n" "$l"; done 2>/dev/null; '
    'printf "@@MARKERS@@\\n"; '
    f"grep -H -z -o -x -E '({MARKER_ENV}|{RUN_ENV})=.*' /proc/[0-9]*/environ 2>/dev/null; exit 0"
)
# "PID<TAB>command line" of each pid given (the command of a survivor, for its report).
_COMMANDS = (
    'for p; do c=$(tr "\\000\\n" "  " < "/proc/$p/cmdline" 2>/dev/null) || continue; '
    'printf "%s\\t%s\\n" "$p" "$c"; done; exit 0'
)
_COMMAND_CHARS = 300  # a command line as reported: enough to recognise it


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
    sid: int = 0
    comm: str = ""

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def parse_stat(line: str) -> ProcStat | None:
    """Parse one ``/proc/PID/stat`` line (the command name may hold spaces and ')')."""
    head, sep, rest = line.rpartition(")")
    if not sep:
        return None
    fields = rest.split()
    pid_text, _, comm = head.partition("(")
    if len(fields) < 20 or not pid_text.strip().isdigit():
        return None
    try:
        return ProcStat(
            int(pid_text), fields[0], int(fields[2]), int(fields[19]), int(fields[3]), comm
        )
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
    run_id: str | None = None  # ``RUN_ENV``'s value (records of older launches: None)
    # the process group and session the launch leads: ``pid`` (setsid made the wrapper lead
    # its own), 0 where it leads none (no setsid on the host); None in records of older
    # launches, which used setsid where the host had it
    pgid: int | None = None
    sid: int | None = None

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
            "run_id": self.run_id,
            "pgid": self.pgid,
            "sid": self.sid,
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
            run_id=str(doc["run_id"]) if doc.get("run_id") else None,
            pgid=_int_or_none(doc.get("pgid")),
            sid=_int_or_none(doc.get("sid")),
        )

    def own_groups(self) -> tuple[int | None, int | None]:
        """(process group, session) this launch leads, None where it does not lead one
        (no setsid on the host: then only the leader itself is known to be ours)."""
        pgid = self.pid if self.pgid is None else self.pgid
        sid = self.pid if self.sid is None else self.sid
        return (pgid if pgid == self.pid else None), (sid if sid == self.pid else None)

    @property
    def marker(self) -> str:
        """The environment entry every process of this launch carries."""
        return f"{RUN_ENV}={self.run_id}" if self.run_id else f"{MARKER_ENV}={self.name}"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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
    _refuse_running(host, status(host, name, root=root))
    state_dir = hostfs.join(root, name)
    hostfs.makedirs(host, state_dir)
    run_id = secrets.token_hex(8)
    full_env = dict(env or {})
    full_env[MARKER_ENV] = name
    full_env[RUN_ENV] = run_id
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
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    pid_text, _, how = last.partition(" ")
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
        run_id=run_id,
        # setsid makes the wrapper lead its own session and group (read from /proc here,
        # setsid may not have run yet); without it, the launch leads none (0)
        pgid=pid if how == "setsid" else 0,
        sid=pid if how == "setsid" else 0,
    )
    hostfs.write_text(
        host, hostfs.join(state_dir, "state.json"), json.dumps(proc.to_dict(), indent=2) + "\n"
    )
    return proc


def _refuse_running(host: Host, existing: ProcessStatus | None) -> None:
    """A launch under a name whose last run still runs, or left processes behind, would
    lose track of them (the record is rewritten): refused."""
    if existing is None:
        return
    proc = existing.process
    if existing.running:
        raise UsageError(
            f"a native process named {proc.name} is already running (pid {proc.pid})",
            fix=f"stop it first (it logs to {proc.log_path}) or choose another name",
            id="name_in_use",
        )
    left = survivors_of(host, [proc]).get(proc.name, [])
    if left:
        raise UsageError(
            f"the last run of {proc.name} ended, but {len(left)} of its processes still run: "
            + "; ".join(s.describe() for s in left[:5]),
            fix=f"stop them first (`instinct stop {proc.name}`) or choose another name",
            id="name_in_use",
            details={"survivors": [s.to_dict() for s in left]},
        )


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


@dataclass(frozen=True)
class Scan:
    """One look at every process of the host: stat lines, and the launcher's markers in
    each readable environment (pid -> the ``NAME=value`` entries)."""

    stats: dict[int, ProcStat]
    markers: dict[int, frozenset[str]]


def parse_scan(text: str) -> Scan:
    """``_SCAN``'s output (pure)."""
    stat_text, _, marker_text = text.partition("@@MARKERS@@\n")
    stats = {s.pid: s for s in map(parse_stat, stat_text.splitlines()) if s is not None}
    markers: dict[int, set[str]] = {}
    for entry in marker_text.split("\0"):
        path, sep, value = entry.strip("\n").partition(":")
        pid_text = path.removeprefix("/proc/").removesuffix("/environ")
        if sep and pid_text.isdigit():
            markers.setdefault(int(pid_text), set()).add(value)
    return Scan(stats, {pid: frozenset(v) for pid, v in markers.items()})


def scan(host: Host) -> Scan:
    result = host.run(["sh", "-c", _SCAN], timeout=60)
    return parse_scan(result.stdout)


def members(proc: NativeProcess, seen: Scan) -> list[int]:
    """The live processes of the launch's process group or session (the leader gone or
    not), started no earlier than the leader. None if the leader's pid now belongs to
    another process: then the group id may be someone else's too."""
    if proc.start_ticks is None:
        return []
    leader = seen.stats.get(proc.pid)
    if leader is not None and leader.alive and leader.start_ticks != proc.start_ticks:
        return []
    pgid, sid = proc.own_groups()
    if pgid is None and sid is None:  # launched without setsid: the leader alone
        marked = proc.marker in seen.markers.get(proc.pid, frozenset())
        return [proc.pid] if leader is not None and leader.alive and marked else []
    return sorted(
        s.pid
        for s in seen.stats.values()
        if s.alive
        and s.start_ticks >= proc.start_ticks
        and ((pgid is not None and s.pgid == pgid) or (sid is not None and s.sid == sid))
    )


def strays(proc: NativeProcess, seen: Scan) -> list[int]:
    """Live processes outside the group that carry this launch's token (they left its
    session, or were started without setsid): never signalled, reported."""
    if proc.start_ticks is None or proc.run_id is None:
        return []  # older records: the name alone does not single out this launch
    inside = set(members(proc, seen))
    return sorted(
        pid
        for pid, found in seen.markers.items()
        if proc.marker in found
        and pid not in inside
        and (stat := seen.stats.get(pid)) is not None
        and stat.alive
        and stat.start_ticks >= proc.start_ticks
    )


@dataclass(frozen=True)
class Survivor:
    """A process of an ended (or stopped) launch that still runs."""

    pid: int
    command: str
    state: str  # the kernel's: D is uninterruptible sleep (a hung driver call)
    left_group: bool  # outside the session and group: found by the launch's token

    def describe(self) -> str:
        where = ", outside its process group" if self.left_group else ""
        state = ", uninterruptible (D)" if self.state == "D" else ""
        return f"pid {self.pid} ({self.command}{where}{state})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "command": self.command,
            "state": self.state,
            "left_group": self.left_group,
        }


def _commands(host: Host, pids: Sequence[int]) -> dict[int, str]:
    if not pids:
        return {}
    result = host.run(["sh", "-c", _COMMANDS, "sh", *map(str, pids)], timeout=30)
    found = {}
    for line in result.stdout.splitlines():
        pid_text, _, command = line.partition("\t")
        if pid_text.isdigit():
            found[int(pid_text)] = command.strip()[:_COMMAND_CHARS]
    return found


def survivors_of(
    host: Host, procs: Sequence[NativeProcess], seen: Scan | None = None
) -> dict[str, list[Survivor]]:
    """What still runs of each launch (its leader included, if alive: the caller asks
    about launches that ended or were stopped), by name; one scan for all of them."""
    seen = scan(host) if seen is None else seen
    found = {p.name: (members(p, seen), strays(p, seen)) for p in procs}
    commands = _commands(host, [pid for a, b in found.values() for pid in (*a, *b)])
    out: dict[str, list[Survivor]] = {}
    for name, (inside, outside) in found.items():
        listed = [(pid, False) for pid in inside] + [(pid, True) for pid in outside]
        out[name] = [
            Survivor(
                pid,
                commands.get(pid) or seen.stats[pid].comm,
                seen.stats[pid].state,
                left,
            )
            for pid, left in listed
            if pid in seen.stats
        ]
    return {name: found for name, found in out.items() if found}


def group_pids(host: Host, proc: NativeProcess) -> list[int]:
    """The pids of the launched process group (the wrapper, vLLM, its workers)."""
    if not _is_ours(host, proc):
        return []
    return members(proc, scan(host))


def read_log(host: Host, name: str) -> str:
    proc = load(host, name)
    return (host.read_text(proc.log_path) or "") if proc else ""


@dataclass
class StopResult:
    name: str
    was_running: bool  # the leader (the wrapper of the command) was alive
    stopped: bool  # nothing of it runs any more
    signal: str | None  # the last signal sent to its groups (None: nothing to stop)
    members: list[int] = field(default_factory=list)  # found alive, the leader included
    survivors: list[Survivor] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "was_running": self.was_running,
            "stopped": self.stopped,
            "signal": self.signal,
            "members": list(self.members),
            "survivors": [s.to_dict() for s in self.survivors],
            "elapsed_s": round(self.elapsed_s, 3),
        }


def stop(
    host: Host,
    name: str,
    *,
    timeout: float = 30.0,
    kill_wait: float = 10.0,
    poll_s: float = 0.2,
) -> StopResult:
    """Stop every member of the recorded launch, its leader alive or not: SIGTERM to its
    process groups, ``timeout`` for them to end, SIGKILL, ``kill_wait`` more, then a last
    look; what still runs is in ``survivors``. Touches nothing outside the launch."""
    started = time.monotonic()
    proc = load(host, name)
    if proc is None:
        raise NotReadyError(
            f"no native process named {name} was started on {host.name}",
            fix="list them with `instinct ps`",
            id="not_found",
        )
    was_running = _is_ours(host, proc)
    seen = scan(host)
    found = members(proc, seen)
    if was_running and proc.pid not in found:  # its environment unreadable here
        found = sorted({proc.pid, *found})
    sent = None
    if found:
        stamp = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        hostfs.write_text(host, proc.stopped_path, stamp + "\n")
        # done when every member is gone, not only the leader: a vLLM engine process that
        # outlives the API server still holds its GPU memory
        left = found
        for sig, wait in (("TERM", timeout), ("KILL", kill_wait)):
            sent = sig
            _signal(host, proc, seen, left, sig)
            seen, left = _wait_gone(host, proc, wait, poll_s)
            if not left:
                break
        if was_running:
            _await_exit_file(host, proc)
    survivors = survivors_of(host, [proc]).get(name, [])
    if not survivors:
        remove_vllm_temp_files(host, proc)
    elapsed = time.monotonic() - started
    return StopResult(name, was_running, not survivors, sent, found, survivors, elapsed)


def _signal(host: Host, proc: NativeProcess, seen: Scan, pids: Sequence[int], sig: str) -> None:
    """``sig`` to each process group of the members (the launch's own, and any a member
    made inside its session); to the pids themselves where the launch leads no group."""
    pgid, sid = proc.own_groups()
    if pgid is None and sid is None:
        host.run(["kill", f"-{sig}", *map(str, pids)], timeout=30)
        return
    groups = sorted({seen.stats[p].pgid for p in pids if p in seen.stats})
    if groups:
        host.run(["kill", f"-{sig}", "--", *(f"-{g}" for g in groups)], timeout=30)


def _wait_gone(
    host: Host, proc: NativeProcess, wait: float, poll_s: float
) -> tuple[Scan, list[int]]:
    """Poll until no member is left or ``wait`` has passed: the last look, and the members
    still alive in it."""
    deadline = time.monotonic() + wait
    while True:
        seen = scan(host)
        left = members(proc, seen)
        if not left or time.monotonic() > deadline:
            return seen, left
        time.sleep(poll_s)


def _await_exit_file(host: Host, proc: NativeProcess, wait_s: float = 2.0) -> None:
    """The wrapper writes the exit file as its last act: give it a moment (bounded)."""
    for _ in range(int(wait_s / 0.1)):
        if _exit_code(host, proc) is not None:
            return
        time.sleep(0.1)


def survivors_error(
    host: Host, left: Sequence[tuple[str, Survivor]], details: dict[str, Any]
) -> InstinctError:
    """The failure of a stop that left processes running, each named (its launch's name,
    pid and command); ``details``: what the stop did."""
    names = sorted({name for name, _ in left})
    listed = "; ".join(f"{name}: {s.describe()}" for name, s in left[:5])
    more = f" and {len(left) - 5} more" if len(left) > 5 else ""
    return InstinctError(
        f"{len(left)} process{'es' if len(left) != 1 else ''} of native endpoint "
        f"{', '.join(names)} on {host.name} still run{'s' if len(left) == 1 else ''} after "
        f"SIGTERM and SIGKILL: {listed}{more}",
        fix="one in state D waits on the kernel (a hung GPU driver call: see `dmesg`; the GPU "
        "may need a reset); one outside its process group was not signalled: check it with "
        f"`ps -o pid,stat,args -p PID`, end it with `kill -9 PID`, then `instinct stop "
        f"{names[0] if len(names) == 1 else 'NAME'}` again",
        id="processes_survive",
        details=details,
    )


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
