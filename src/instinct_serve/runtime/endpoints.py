"""The endpoints this tool started on a host: list, probe, find, read the log of, stop.

Docker containers are found by the ``instinct-serve.managed`` label, native processes by
the launcher's state directory; nothing else is ever listed as ours or stopped. A host
without Docker (the native route) lists and stops its native processes only. The CLI
(``ps``/``logs``/``stop``) and the MCP tools are both views over these functions, so a log
is redacted here, once, for both (``log_redactor``: the caller's secrets, the token file,
token-shaped text and the endpoint's own API key). Labels are read defensively: a
container with garbage in them is listed, never a crash.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve import servers
from instinct_serve.errors import InstinctError, NotReadyError, UsageError

if TYPE_CHECKING:
    from instinct_serve.credentials import Redactor
    from instinct_serve.engine.launcher import StopResult
    from instinct_serve.hosts import Host

HEALTH_TIMEOUT_S = 2.0


@dataclass
class Row:
    """One endpoint as ``ps`` shows it."""

    name: str
    engine: str
    model: str | None
    port: int | None
    status: str
    running: bool
    uptime_s: float | None
    health: str | None
    image: str | None = None
    plan_hash: str | None = None
    id: str | None = None
    fixes: str | None = None
    instance: str | None = None  # this run of it (``runtime.verified``)
    verified: dict[str, Any] | None = None  # serve's warm-up and coherence, when proven
    # a replica group (``runtime.group``): its name, this one's role and replica index; a
    # router's row holds its replicas (``fold_rows``)
    group: str | None = None
    role: str | None = None
    replica: int | None = None
    members: list[Row] = field(default_factory=list)
    daemon_restarts: int = 0  # docker's restart count of this container (its policy)
    restarts: int = 0  # ``runtime.journal.summary``: by watch and by the daemon
    last_failure: dict[str, Any] | None = None
    server: str = servers.DEFAULT  # the kind of server (``servers``): which route ``probe`` asks
    # processes of an ended native endpoint that still run (``add_survivors``)
    survivors: list[dict[str, Any]] = field(default_factory=list)
    owner: str | None = None  # ``user@host`` who started it (``runtime.owner``); None: nobody

    @property
    def alive(self) -> bool:
        """Running, or a replica of it, or processes it left behind (``ps`` without -a
        lists these, as ``docker ps`` lists running containers)."""
        return any(r.running or r.survivors for r in (self, *self.members))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "engine": self.engine,
            "model": self.model,
            "port": self.port,
            "status": self.status,
            "running": self.running,
            "uptime_s": None if self.uptime_s is None else round(self.uptime_s, 1),
            "health": self.health,
            "image": self.image,
            "server": self.server,
            "plan_hash": self.plan_hash,
            "id": self.id,
            "owner": self.owner,
            "fixes": self.fixes.split(",") if self.fixes else [],
            "verified": self.verified,
            "restarts": self.restarts,
            "last_failure": self.last_failure,
            "survivors": self.survivors,
        } | (
            {
                "group": self.group,
                "role": self.role,
                "replica": self.replica,
                "members": [m.to_dict() for m in self.members],
            }
            if self.group is not None
            else {}
        )


def docker_rows(host: Host) -> tuple[list[Row], str | None]:
    """Managed containers, or (no rows, why) when Docker is not usable on the host."""
    from instinct_serve.runtime import owner
    from instinct_serve.runtime.backend import LABEL_FIXES
    from instinct_serve.runtime.docker import Docker
    from instinct_serve.runtime.docker_backend import container_instance
    from instinct_serve.runtime.group import group_name, replica_index, role

    try:
        found = Docker(host).list_managed()
    except NotReadyError as exc:
        return [], exc.message
    from instinct_serve.plan.labels import LABEL_NODE_RANK, LABEL_ROLE, LABEL_SERVER, ROLE_WORKER

    # a multi-node group is one endpoint, its head: headless ranks serve nothing themselves
    found = [
        c
        for c in found
        if not (c.labels.get(LABEL_ROLE) == ROLE_WORKER and LABEL_NODE_RANK in c.labels)
    ]
    rows = [
        Row(
            name=c.name,
            engine="docker",
            model=c.model,
            port=c.port,
            status=c.state.status,
            running=c.state.running,
            uptime_s=c.uptime_s,
            health=None,
            image=c.image,
            plan_hash=c.plan_hash,
            id=c.short_id,
            fixes=c.labels.get(LABEL_FIXES),
            instance=container_instance(c),
            group=group_name(c),
            role=role(c),
            replica=replica_index(c.labels),
            daemon_restarts=c.restart_count,
            server=c.labels.get(LABEL_SERVER, servers.DEFAULT),
            owner=owner.of_labels(c.labels),
        )
        for c in found
    ]
    return rows, None


def native_rows(host: Host) -> list[Row]:
    """Native vLLM processes ``serve --engine native`` launched (not other launches)."""
    from instinct_serve.engine import launcher
    from instinct_serve.runtime.native import process_instance
    from instinct_serve.runtime.owner import of_meta

    try:
        found = launcher.list_processes(host)
    except InstinctError:
        return []
    rows = []
    now = dt.datetime.now(dt.UTC)
    for status in found:
        meta = status.process.meta
        if meta.get("engine") != "instinct-serve":
            continue  # a launch of another command (e.g. `engine acceptance`)
        uptime = None
        if status.running:
            try:
                started = dt.datetime.fromisoformat(status.process.started_at)
                uptime = max(0.0, (now - started).total_seconds())
            except ValueError:
                uptime = None
        port = meta.get("port")
        rows.append(
            Row(
                name=status.process.name,
                engine="native",
                model=str(meta.get("model") or "") or None,
                port=port if isinstance(port, int) else None,
                status=status.describe(),
                running=status.running,
                uptime_s=uptime,
                health=None,
                plan_hash=str(meta.get("plan_hash") or "") or None,
                id=str(status.process.pid),
                fixes=",".join(meta.get("fixes") or []) or None,
                instance=process_instance(status.process),
                server=str(meta.get("server") or servers.DEFAULT),
                owner=of_meta(meta),
            )
        )
    return rows


def probe(host: Host, port: int, server: str = servers.DEFAULT) -> str:
    """``/health`` (the ``server`` kind's health route) of one endpoint: healthy, loading, an
    HTTP status, or why no answer."""
    from instinct_serve import servers
    from instinct_serve.runtime.health import probe_health
    from instinct_serve.runtime.tunnel import tunnel

    try:
        routes = servers.get(server).routes
        with tunnel(host, port) as base_url:
            sample = probe_health(base_url, timeout=HEALTH_TIMEOUT_S, routes=routes)
    except InstinctError as exc:
        return f"unknown ({exc.message})"
    if sample.ok:
        return "healthy"
    if sample.status_code == 503:
        return "loading"
    return sample.describe()


@dataclass
class Listing:
    """``ps``: the endpoints (at most ``limit``), how many there were, and Docker's state;
    whose (``caller``'s own unless ``everyone``) and how many of others were ``hidden``."""

    host: str
    rows: list[Row]
    total: int
    docker_problem: str | None
    caller: str = ""
    everyone: bool = True
    hidden: int = 0

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "host": self.host,
            "endpoints": [r.to_dict() for r in self.rows],
            "docker": None
            if self.docker_problem is None
            else {"available": False, "why": self.docker_problem},
            "caller": self.caller,
            "everyone": self.everyone,
            "hidden": self.hidden,
        }
        if self.total > len(self.rows):
            doc["truncated"] = {"shown": len(self.rows), "total": self.total}
        return doc


def list_endpoints(
    host: Host, *, health: bool = True, limit: int | None = None, everyone: bool = False
) -> Listing:
    """The caller's managed containers and native processes (everyone's with ``everyone``;
    a replica group counts as its router's); ``/health`` probed for running ones."""
    from instinct_serve.runtime.group import fold_rows
    from instinct_serve.runtime.owner import caller, is_mine

    rows, docker_problem = docker_rows(host)
    rows = fold_rows(rows) + native_rows(host)
    me = caller()
    mine = rows if everyone else [r for r in rows if is_mine(r.owner, me)]
    hidden, rows = len(rows) - len(mine), mine
    shown = rows if limit is None else rows[:limit]
    every = [r for row in shown for r in (row, *row.members)]
    if any(row.running for row in every):
        _add_verified(host, every)
    if every:
        _add_history(host, every)
    add_survivors(host, every)
    if health:
        for row in every:
            if row.running and row.port:
                row.health = probe(host, row.port, row.server)
    return Listing(host.name, shown, len(rows), docker_problem, me, everyone, hidden)


def _add_verified(host: Host, rows: list[Row]) -> None:
    """What serve proved about each running endpoint (this very instance of it)."""
    from instinct_serve.runtime import fingerprints, verified

    records = verified.load_all(host)
    prints = fingerprints.load_all(host)
    for row in rows:
        record = records.get(row.name)
        if row.running and record is not None and record["instance"] == row.instance:
            row.verified = verified.summary(record)
            # its fingerprint: when it last passed (watch's canary), what last failed
            row.verified["fingerprint"] = fingerprints.summary(prints.get(row.name))


def _add_history(host: Host, rows: list[Row]) -> None:
    """Restarts and the last failure of each endpoint (``runtime.journal``)."""
    from instinct_serve.runtime import journal

    try:
        history = journal.read_all(host)
    except InstinctError:
        history = {}
    for row in rows:
        instance_id = (row.instance or "").split(":", 1)[0] or None
        doc = journal.summary(
            history.get(row.name, []),
            instance_id=instance_id,
            daemon_restarts=row.daemon_restarts,
        )
        row.restarts, row.last_failure = doc["restarts"], doc["last_failure"]


def add_survivors(host: Host, rows: Sequence[Row]) -> None:
    """The processes each ended (stopped or crashed) native endpoint left running, with
    pid and command: a killed vLLM's engine processes hold GPU memory (one scan for all)."""
    from instinct_serve.engine import launcher

    ended = [r for r in rows if r.engine == "native" and not r.running]
    if not ended:
        return
    try:
        procs = [p for p in (launcher.load(host, r.name) for r in ended) if p is not None]
        found = launcher.survivors_of(host, procs)
    except InstinctError:
        return
    for row in ended:
        row.survivors = [s.to_dict() for s in found.get(row.name, [])]


def _stop_native(host: Host, name: str, model: Any) -> tuple[dict[str, Any], StopResult]:
    """Stop a native endpoint's whole launch (``launcher.stop``): what it ended, and the
    processes that survive (``stop_one`` then fails, naming them)."""
    from instinct_serve.engine import launcher

    result = launcher.stop(host, name)
    _forget_record(host, name)
    doc = {
        "name": name,
        "engine": "native",
        "model": model,
        "was_running": result.was_running,
        "removed": False,
        "processes": result.members,  # the pids it ended (``members``: a group's replicas)
        "survivors": [s.to_dict() for s in result.survivors],
        "stop_s": round(result.elapsed_s, 3),
    }
    return doc, result


def _require_gone(host: Host, results: list[StopResult], stopped: list[dict[str, Any]]) -> None:
    """``processes_survive``, naming each survivor of what was stopped (pid and command)."""
    from instinct_serve.engine import launcher

    left = [(r.name, s) for r in results for s in r.survivors]
    if left:
        raise launcher.survivors_error(host, left, {"host": host.name, "stopped": stopped})


def find(host: Host, name: str) -> tuple[str, Any]:
    """("docker", ContainerInfo) or ("native", NativeProcess); a clear error otherwise.

    A container is returned whatever its labels: the caller decides what it may do with
    one it did not start (``Docker.require_managed``).
    """
    from instinct_serve.engine import launcher
    from instinct_serve.runtime.docker import Docker

    problem = None
    try:
        info = Docker(host).get(name)
    except NotReadyError as exc:
        info, problem = None, exc.message
    if info is not None:
        return "docker", info
    try:
        proc = launcher.load(host, name)
    except UsageError:
        proc = None
    if proc is not None:
        return "native", proc
    raise InstinctError(
        f"no container or native endpoint named {name} on {host.name}"
        + (f" (Docker: {problem})" if problem else ""),
        fix="list the endpoints with `instinct ps`",
        id="not_found",
    )


def log_redactor(host: Host, name: str, by_name: Sequence[str] = ()) -> Redactor:
    """What every relayed log line goes through (CLI and MCP alike): this process's secret
    values, the Hub token file, token-shaped text, endpoint ``name``'s API key, and the
    values here of the variables it got by name (``by_name``: ``passed_by_name``)."""
    from instinct_serve.credentials import Redactor
    from instinct_serve.runtime import keys
    from instinct_serve.runtime.secret_env import local_secrets

    extra: list[str] = []
    try:
        key = keys.read_key(host, keys.key_path(host, name))
    except InstinctError:
        key = None
    if key:
        extra.append(key)
    extra += local_secrets(list(by_name)).values()
    return Redactor.default(extra)


def passed_by_name(found: Any) -> list[str]:
    """The names an endpoint (a ``ContainerInfo`` or a native process, as ``find`` returns
    them) got variables by: its label, or the launcher's record. Names only, checked."""
    from instinct_serve.names import is_env_name
    from instinct_serve.runtime.backend import LABEL_BY_NAME

    labels = getattr(found, "labels", None)
    meta = getattr(found, "meta", None)
    names: list[str] = []
    if isinstance(labels, Mapping):
        names = str(labels.get(LABEL_BY_NAME, "")).split(",")
    elif isinstance(meta, Mapping) and isinstance(meta.get("secret_env"), list):
        names = [str(n) for n in meta["secret_env"]]
    return [n for n in names if is_env_name(n)][:64]


def read_log(host: Host, name: str, tail: int, *, managed_only: bool = False) -> tuple[str, str]:
    """(engine, the last ``tail`` lines of the endpoint's log), secrets redacted."""
    from instinct_serve.runtime.docker import Docker

    engine, found = find(host, name)
    if engine == "docker":
        docker = Docker(host)
        if managed_only:
            docker.require_managed(found.name, "read the log of")
        text = docker.logs(found.name, tail=tail)
    else:
        text = host.run(["tail", "-n", str(tail), found.log_path], timeout=60).stdout
    return engine, log_redactor(host, found.name, passed_by_name(found)).text(text)


def _forget_key(host: Host, name: str) -> None:
    """The API key of a stopped and removed endpoint is of no use any more."""
    from instinct_serve.runtime import keys

    with contextlib.suppress(InstinctError):
        keys.remove_key(host, keys.key_path(host, name))


def _forget_record(host: Host, name: str) -> None:
    """What serve proved about a stopped endpoint is about an instance that is gone."""
    from instinct_serve.runtime import fingerprints, verified

    with contextlib.suppress(InstinctError):
        verified.forget(host, name)
        fingerprints.forget(host, name)


def stop_one(host: Host, name: str) -> dict[str, Any]:
    """Stop one endpoint: a managed container is removed, a native process stopped."""
    engine, found = find(host, name)
    if engine == "docker":
        from instinct_serve.runtime.docker import Docker
        from instinct_serve.runtime.group import is_router, stop_group

        if is_router(found):
            members = stop_group(host, found.name)
            _forget_record(host, found.name)
            for member in members:
                _forget_record(host, member["name"])
            return {
                "name": found.name,
                "engine": "docker",
                "model": found.model,
                "removed": True,
                "members": members,
            }
        running = bool(found.state.running)
        info = Docker(host).stop(found.name)  # refuses (not_managed) what is not ours
        _forget_key(host, info.name)
        _forget_record(host, info.name)
        return {
            "name": info.name,
            "engine": "docker",
            "model": info.model,
            "removed": True,
            "was_running": running,
        }
    doc, result = _stop_native(host, found.name, found.meta.get("model"))
    _require_gone(host, [result], [doc])
    return doc


def stop_each(host: Host, names: Sequence[str], skipped: Sequence[dict[str, Any]] = ()) -> Any:
    """Stop ``names`` one by one (``runtime.confirm.stop_selection`` chose them; ``skipped``:
    the names it found nothing of ours for): ``{"host", "stopped", "not_stopped"}``, each
    name reported. When nothing at all was stopped, the first failure is raised (its
    ``details`` list every name), as for a single unknown name."""
    stopped: list[dict[str, Any]] = []
    failed = [dict(s) for s in skipped]
    raised: list[InstinctError] = []
    for name in names:
        try:
            stopped.append(stop_one(host, name))
        except InstinctError as exc:
            failed.append({"name": name, "status": exc.id, "message": exc.message})
            raised.append(exc)
    if len(failed) == 1 and raised and not stopped:
        raise raised[0]  # the one endpoint's own failure (e.g. processes_survive), as it was
    if failed and not stopped:
        first = failed[0]
        raise InstinctError(
            f"{first['message']}" + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""),
            fix="list the endpoints with `instinct ps --everyone`",
            id="not_managed" if first["status"] == "not_managed" else "not_found",
            details={"not_stopped": failed},
        )
    return {"host": host.name, "stopped": stopped, "not_stopped": failed}
