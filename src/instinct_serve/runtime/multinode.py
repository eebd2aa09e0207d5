"""Serve one model across nodes (``serve --hosts``): check every node, start rank 0 then the
others, follow every node's log, and call the group healthy only when the head answers a
completion. ``ps``/``logs``/``stop --hosts`` treat the group as one endpoint.

The plan is ``plan.multinode``'s (one container per rank, all labelled with the group);
this module only runs it, through each node's ``Host`` (ssh) and its docker CLI, so every
node is the same code path as ``serve --host``. Before anything starts, each node must
have the same GPUs as rank 0 (gfx, count, VRAM), the same image (by id: a different build
on one node breaks the collective ops in ways no log explains), the model in its cache or
a cache to download it into, and the interface named for Gloo/RCCL (host networking) or
the group's docker network; after rank 0 starts, each other node must reach its
rendezvous port (probed from a throwaway container of the same image, on the same
network) before its rank starts. Any rank exiting fails the whole group: every rank is
stopped and removed, and the failure names the rank, its host and its log line.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import (
    LABEL_GROUP,
    LABEL_NODE_RANK,
    LABEL_NODES,
    LABEL_ROLE,
    ROLE_HEAD,
    label_text,
)
from instinct_serve.plan.multinode import MultiNodePlan, NodeLaunch
from instinct_serve.runtime import health
from instinct_serve.runtime.deploying import deploy_to_end
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.follower import LogFollower
from instinct_serve.runtime.owner import LABEL_OWNER, caller

if TYPE_CHECKING:
    from instinct_serve.options import PlanOptions
    from instinct_serve.plan.model import PlanResult
    from instinct_serve.runtime.confirm import Change

PROBE_SCRIPT = (
    "import socket,sys,time\n"
    "end=time.monotonic()+float(sys.argv[3])\n"
    "while True:\n"
    "    try:\n"
    "        socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=3).close()\n"
    "        break\n"
    "    except OSError as e:\n"
    "        if time.monotonic()>end: sys.exit(f'cannot reach {sys.argv[1]}:{sys.argv[2]}: {e}')\n"
    "        time.sleep(0.2)\n"
)
REACH_TIMEOUT_S = 60.0
POLL_S = 0.5
Sink = Callable[[dict[str, Any]], None]


@dataclass
class NodeReport:
    """What the pre-start checks found on one node."""

    rank: int
    host: str
    checks: dict[str, str] = field(default_factory=dict)  # check -> "ok" or the problem
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        return [f"{k}: {v}" for k, v in self.checks.items() if v != "ok"]

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "checks": self.checks, "facts": self.facts}


@dataclass
class GroupOutcome:
    """How ``serve --hosts`` ended (the result line of ``--json``)."""

    ok: bool
    status: str  # ready | failed | timeout
    group: str
    base_url: str | None = None
    started: list[dict[str, Any]] = field(default_factory=list)  # rank, host, at (epoch s)
    ready_s: float | None = None
    completion: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    nodes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": "result",
            "ok": self.ok,
            "status": self.status,
            "group": self.group,
            "base_url": self.base_url,
            "started": self.started,
            "ready_s": self.ready_s,
            "completion": self.completion,
            "failure": self.failure,
            "nodes": self.nodes,
        }

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


def gpu_signature(inventory: Any) -> tuple[str, int, int | None]:
    """What must match between nodes: gfx, GPU count, VRAM per GPU."""
    return (inventory.gfx_version, inventory.gpu_count, inventory.vram_bytes)


def _model_dirs(plan: Any) -> list[str]:
    """Where the model would be in the node's Hugging Face cache (the plan's mount)."""
    from instinct_serve.plan.model import CONTAINER_HF_CACHE

    repo = "models--" + plan.model.replace("/", "--")
    out = []
    for mount in plan.mounts:
        if mount.container_path == CONTAINER_HF_CACHE:
            out += [f"{mount.host_path}/hub/{repo}", f"{mount.host_path}/{repo}"]
    return out


class GroupRunner:
    """Checks, starts, follows and stops the ranks of one ``MultiNodePlan``."""

    def __init__(
        self,
        hosts: Sequence[Host],
        plan: MultiNodePlan,
        *,
        sink: Sink,
        secrets: dict[str, str] | None = None,
        detect: Callable[[Host], Any] | None = None,
        timeout_s: float = 600.0,
        warmup_timeout_s: float = 300.0,
        api_key: str | None = None,
        device_root: str = "",
    ) -> None:
        if len(hosts) != len(plan.nodes):
            raise ValueError("one host per rank")
        self.hosts = list(hosts)
        self.plan = plan
        self.sink = sink
        self.secrets = secrets or {}
        self.detect = detect
        self.timeout_s = timeout_s
        self.warmup_timeout_s = warmup_timeout_s
        self.api_key = api_key
        self.device_root = device_root.rstrip("/")  # the hidden --root (tests, chroots)
        self.docker = [Docker(h) for h in self.hosts]
        self.followers: list[LogFollower | None] = [None] * len(self.hosts)
        self.logs: list[list[str]] = [[] for _ in self.hosts]
        self.started: list[dict[str, Any]] = []

    # -- events

    def event(self, kind: str, **fields: Any) -> None:
        self.sink({"event": kind, **fields, "ts": round(time.time(), 6)})

    # -- checks

    def preflight(self) -> list[NodeReport]:
        """Every node's checks; ``NotReadyError`` naming each failing node and check."""
        reports = [NodeReport(n.rank, n.host) for n in self.plan.nodes]
        head_gpus: tuple[str, int, int | None] | None = None
        image_ids: dict[int, str] = {}
        for node, host, docker, report in zip(
            self.plan.nodes, self.hosts, self.docker, reports, strict=True
        ):
            self.event("phase", phase="checking", message=f"rank {node.rank} on {host.name}")
            ok, why = docker.available()
            report.checks["docker"] = "ok" if ok else why
            if not ok:
                continue
            if self.detect is not None:
                try:
                    sig = gpu_signature(self.detect(host))
                except InstinctError as exc:
                    report.checks["gpus"] = f"detection failed: {exc.message}"
                else:
                    report.facts["gpus"] = {"gfx": sig[0], "count": sig[1], "vram_bytes": sig[2]}
                    if head_gpus is None:
                        head_gpus = sig
                    if sig[1] < self.plan.gpus_per_node:
                        report.checks["gpus"] = (
                            f"{sig[1]} GPUs, the plan needs {self.plan.gpus_per_node} per node"
                        )
                    elif sig != head_gpus:
                        report.checks["gpus"] = f"{sig} differs from rank 0's {head_gpus}"
                    else:
                        report.checks["gpus"] = "ok"
            image = node.plan.image
            image_id = docker.image_id(image)
            if image_id is None:
                self.event("phase", phase="pulling_image", message=f"{image} on {host.name}")
                pulled = host.run([docker.binary, "pull", image], timeout=3600)
                image_id = docker.image_id(image)
                if image_id is None:
                    said = pulled.stderr.strip().splitlines() or ["no output"]
                    report.checks["image"] = f"{image} is missing and pulling failed: {said[-1]}"
                    continue
            image_ids[node.rank] = image_id
            report.facts["image_id"] = image_ids[node.rank]
            first = image_ids.get(0)
            report.checks["image"] = (
                "ok"
                if first is None or image_ids[node.rank] == first
                else f"{image} is {image_ids[node.rank][:19]} here, {first[:19]} on rank 0"
            )
            report.checks["model"] = self._model_check(host, node, report)
            report.checks["interface"] = self._interface_check(host, docker)
        failing = [r for r in reports if r.problems]
        for report in reports:
            self.event("node_checked", **report.to_dict())
        if failing:
            lines = "; ".join(f"rank {r.rank} ({r.host}): {', '.join(r.problems)}" for r in failing)
            raise NotReadyError(
                f"the nodes are not ready to serve one model together: {lines}",
                fix="make every node match rank 0 (same GPUs, same image id, the interface "
                "named by --ifname), then serve again",
                id="nodes_not_ready",
                details={"nodes": [r.to_dict() for r in reports]},
            )
        return reports

    def _model_check(self, host: Host, node: NodeLaunch, report: NodeReport) -> str:
        dirs = _model_dirs(node.plan)
        present = next((d for d in dirs if host.exists(d)), None)
        report.facts["model"] = "present" if present else "downloads at start"
        if present:
            return "ok"
        if node.plan.env.get("HF_HUB_OFFLINE") == "1":
            return f"{node.plan.model} is not in the cache and HF_HUB_OFFLINE=1"
        from instinct_serve.plan.model import CONTAINER_HF_CACHE

        cache = next(
            (m.host_path for m in node.plan.mounts if m.container_path == CONTAINER_HF_CACHE),
            None,
        )
        writable = ["sh", "-c", 'mkdir -p "$1" && test -w "$1"', "sh", cache or "/"]
        if cache and not host.run(writable, timeout=30).ok:
            return f"{node.plan.model} is not cached and {cache} is not writable"
        return "ok"

    def _interface_check(self, host: Host, docker: Docker) -> str:
        network = self.plan.network
        if network is not None:
            return "ok" if docker.network_exists(network) else f"no docker network {network}"
        wanted = self.plan.ifname
        if wanted.startswith("^"):  # an exclusion list: RCCL picks among the others
            return "ok"
        listing = host.run(["ls", "-1", "/sys/class/net"], timeout=30)
        have = listing.stdout.split()
        names = [n for n in wanted.lstrip("=").split(",") if n]
        exact = wanted.startswith("=")  # NCCL's syntax: exact names, else name prefixes
        if any(h == n or (not exact and h.startswith(n)) for n in names for h in have):
            return "ok"
        return (
            f"no interface {wanted} among {', '.join(have) or 'none'} "
            "(GLOO/NCCL_SOCKET_IFNAME): pass --ifname"
        )

    def _reachable(self, rank: int) -> str | None:
        """None when rank ``rank``'s node reaches rank 0's rendezvous port, else why not."""
        node, docker = self.plan.nodes[rank], self.docker[rank]
        args = [
            "run",
            "--rm",
            f"--network={self.plan.network or 'host'}",
            "--entrypoint",
            "python3",
            node.plan.image,
            "-c",
            PROBE_SCRIPT,
            self.plan.master_addr,
            str(self.plan.rendezvous_port),
            str(REACH_TIMEOUT_S),
        ]
        result = docker.run_once(args, timeout=REACH_TIMEOUT_S + 60)
        if result.ok:
            return None
        return (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]

    # -- start, follow, stop

    def earlier(self) -> Change:
        """What ``--replace`` would stop and remove: this group's earlier containers on
        every node (ours by label), each once (two nodes may share a daemon), named
        ``HOST:NAME`` with the host its rank runs on."""
        from instinct_serve.runtime.confirm import Change, Item
        from instinct_serve.runtime.owner import of_labels

        nodes = zip(self.plan.nodes, self.hosts, strict=True)
        ranks = {node.plan.container_name: host.name for node, host in nodes}
        touch: dict[str, Item] = {}
        for host, docker in zip(self.hosts, self.docker, strict=True):
            for info in docker.list_managed(labels={LABEL_GROUP: self.plan.group}):
                where = ranks.get(info.name, host.name)
                owner = of_labels(info.labels)
                name = f"{where}:{info.name}"
                item = Item("container", name, info.short_id, owner, info.model, info.port)
                touch.setdefault(info.id, item)
        hosts = ",".join(host.name for host in self.hosts)
        return Change("replace", hosts, tuple(touch.values()))

    def clear(self) -> list[str]:
        """Remove this group's earlier containers (ours by label only; a foreign container
        holding a rank's name is refused by ``docker run``'s name conflict)."""
        removed = []
        for docker in self.docker:
            for info in docker.list_managed(labels={LABEL_GROUP: self.plan.group}):
                with contextlib.suppress(InstinctError):
                    docker.stop(info.id, grace_s=5)
                    removed.append(info.name)
        return removed

    def start(self) -> GroupOutcome | None:
        """Rank 0, then each other rank once its node reaches the rendezvous port."""
        for node, host, docker in zip(self.plan.nodes, self.hosts, self.docker, strict=True):
            if node.rank > 0:
                why = self._reachable(node.rank)
                if why is not None:
                    return self.fail(
                        node.rank,
                        "rendezvous_unreachable",
                        f"rank {node.rank} on {host.name} cannot reach rank 0's rendezvous port "
                        f"{self.plan.master_addr}:{self.plan.rendezvous_port}: {why}",
                    )
            env = {k: v for k, v in self.secrets.items() if k in node.plan.secret_env}
            for mount in node.plan.mounts:
                if not mount.read_only and not host.exists(mount.host_path):
                    host.run(["mkdir", "-p", "--", mount.host_path], timeout=30)
            argv = [*node.argv[:2], "--label", f"{LABEL_OWNER}={caller()}", *node.argv[2:]]
            if self.device_root:
                from instinct_serve.runtime.docker_backend import rooted_devices

                argv = rooted_devices(argv, self.device_root)
            docker.run(argv, env=env or None)
            at = time.time()
            self.started.append({"rank": node.rank, "host": host.name, "at": round(at, 6)})
            self.event(
                "launched",
                rank=node.rank,
                host=host.name,
                container=node.plan.container_name,
                role=node.role,
            )
            self.followers[node.rank] = LogFollower(docker.follow(node.plan.container_name))
        return None

    def _pump_logs(self) -> None:
        for rank, follower in enumerate(self.followers):
            while follower is not None and (line := follower.get(0)) is not None:
                self.logs[rank].append(line)
                self.sink({"event": "log", "rank": rank, "line": line})

    def _dead(self) -> list[tuple[int, float | None]]:
        """The ranks no longer running, with when they finished (docker's clock)."""
        dead = []
        for node, docker in zip(self.plan.nodes, self.docker, strict=True):
            state = docker.inspect_state(node.plan.container_name)
            if state is None or not state.running:
                finished = state.finished_at if state is not None else None
                dead.append((node.rank, finished.timestamp() if finished else None))
        return dead

    def _culprit(self, dead: list[tuple[int, float | None]]) -> int:
        """The rank to blame: a dead worker takes the head down with it (and a dead head
        its workers), within milliseconds, so the one whose log names a known failure
        wins, then the first to finish."""
        from instinct_serve.diagnose import diagnose

        def key(item: tuple[int, float | None]) -> tuple[bool, float, int]:
            rank, finished = item
            found = diagnose("\n".join(self.logs[rank])).primary
            known = found is not None and not found.generic
            return (not known, finished if finished is not None else float("inf"), rank)

        return min(dead, key=key)[0]

    def wait(self, base_url: str) -> GroupOutcome:
        """Follow every rank until the head is healthy and answers a completion, a rank
        exits (the group fails with its log line), or the timeout."""
        t0 = self.started[0]["at"] if self.started else time.time()
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            self._pump_logs()
            if self._dead():
                time.sleep(POLL_S)  # the last lines, and the ranks it takes down with it
                self._pump_logs()
                return self._rank_failed(self._culprit(self._dead()))
            if health.probe_health(base_url, timeout=2.0).ok:
                ready = time.time()
                self.event("healthy", elapsed_s=round(ready - t0, 3))
                answer = health.complete(
                    base_url,
                    self.plan.head.plan.served_model_name,
                    "Say hello in one word.",
                    use_chat=False,
                    max_tokens=8,
                    timeout=self.warmup_timeout_s,
                    api_key=self.api_key,
                )
                self._pump_logs()
                return GroupOutcome(
                    ok=True,
                    status="ready",
                    group=self.plan.group,
                    base_url=base_url,
                    started=self.started,
                    ready_s=round(ready - t0, 3),
                    completion=answer.to_dict(),
                    nodes=[n.to_dict() for n in self.plan.nodes],
                )
            time.sleep(POLL_S)
        return self.fail(0, "startup_timeout", f"not healthy within {self.timeout_s:g} s")

    def _rank_failed(self, rank: int) -> GroupOutcome:
        node = self.plan.nodes[rank]
        state = self.docker[rank].inspect_state(node.plan.container_name)
        text = "\n".join(self.logs[rank])
        if not text:
            with contextlib.suppress(InstinctError):
                text = self.docker[rank].logs(node.plan.container_name, tail=200)
        from instinct_serve.diagnose import diagnose

        found = diagnose(text)
        primary = found.primary
        line = (
            (primary.line if primary else None)
            or found.last_error
            or (text.strip().splitlines() or [""])[-1]
        )
        code = state.exit_code if state is not None else None
        return self.fail(
            rank,
            primary.id if primary else "rank_exited",
            f"rank {rank} ({node.role}) on {self.hosts[rank].name} exited"
            + (f" with code {code}" if code is not None else "")
            + f": {line}",
            line=line,
            exit_code=code,
        )

    def fail(self, rank: int, failure_id: str, message: str, **extra: Any) -> GroupOutcome:
        """Stop and remove every rank, and say which one failed and why."""
        self._pump_logs()
        removed = self.stop()
        return GroupOutcome(
            ok=False,
            status="timeout" if failure_id == "startup_timeout" else "failed",
            group=self.plan.group,
            started=self.started,
            failure={
                "id": failure_id,
                "rank": rank,
                "host": self.hosts[rank].name,
                "message": message,
                "removed": removed,
                "log_tail": self.logs[rank][-20:],
                **extra,
            },
            nodes=[n.to_dict() for n in self.plan.nodes],
        )

    def deploy(self) -> GroupOutcome:
        """Start every rank and follow them until the head answers (through a tunnel to
        its port), or the group fails (``runtime.deploying.Launches``)."""
        from instinct_serve.runtime.tunnel import tunnel

        failed = self.start()
        if failed is not None:
            return failed
        head = self.plan.head.plan
        with tunnel(self.hosts[0], head.port) as base_url:
            outcome = self.wait(base_url)
        if outcome.ok:
            outcome.base_url = f"http://127.0.0.1:{head.port}/v1"
        return outcome

    def abandon(self) -> list[str]:
        """Ctrl-C or an error: nothing of this run is left half-started."""
        return self.stop()

    def close(self) -> None:
        """Stop following the logs (the ranks keep running)."""
        for follower in self.followers:
            if follower is not None:
                follower.close()
        self.followers = [None] * len(self.hosts)

    def stop(self) -> list[str]:
        """Close the log streams, then stop and remove every rank this group started."""
        self.close()
        return self.clear()


# --------------------------------------------------------------------------- the group as one


@dataclass
class GroupRow:
    """One multi-node group as ``ps --hosts`` shows it."""

    name: str
    model: str | None
    port: int | None
    status: str
    health: str | None
    nodes: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "engine": "docker",
            "kind": "multi-node",
            "model": self.model,
            "port": self.port,
            "status": self.status,
            "running": self.status == "running",
            "health": self.health,
            "nodes": self.nodes,
        }


def group_rows(hosts: Sequence[Host], *, probe: bool = True) -> list[GroupRow]:
    """The multi-node groups on ``hosts``, one row each (their ranks inside it)."""
    members: dict[str, list[tuple[Host, Any]]] = {}
    seen: set[str] = set()
    for host in hosts:
        for info in Docker(host).list_managed():
            group = label_text(info.labels, LABEL_GROUP)
            if group is None or label_text(info.labels, LABEL_NODE_RANK) is None:
                continue
            if info.id in seen:  # two specs of one machine list its containers twice
                continue
            seen.add(info.id)
            members.setdefault(group, []).append((host, info))
    rows = []
    for name, found in sorted(members.items()):
        found.sort(key=lambda e: _rank(e[1].labels))
        head = next((e for e in found if e[1].labels.get(LABEL_ROLE) == ROLE_HEAD), None)
        expected = len((label_text(found[0][1].labels, LABEL_NODES) or "").split(","))
        running = sum(1 for _, i in found if i.state.running)
        status = "running" if running == expected == len(found) else f"{running}/{expected} ranks"
        health_text = None
        if probe and head is not None and head[1].port is not None and head[1].state.running:
            from instinct_serve.runtime.endpoints import probe as probe_endpoint

            health_text = probe_endpoint(head[0], head[1].port)
        rows.append(
            GroupRow(
                name=name,
                model=head[1].model if head else found[0][1].model,
                port=head[1].port if head else None,
                status=status,
                health=health_text,
                nodes=[
                    {
                        "rank": _rank(i.labels),
                        "host": _rank_host(i.labels) or h.name,
                        "container": i.name,
                        "status": i.state.status,
                    }
                    for h, i in found
                ],
            )
        )
    return rows


def _rank(labels: Any) -> int:
    """A container's node rank (its label; garbage reads as 0)."""
    text = label_text(labels, LABEL_NODE_RANK) or "0"
    return int(text) if text.isdigit() and len(text) < 4 else 0


def _rank_host(labels: Any) -> str | None:
    """The host spec the group's plan put this rank on (its ``nodes`` label)."""
    nodes = (label_text(labels, LABEL_NODES) or "").split(",")
    rank = _rank(labels)
    return nodes[rank] if rank < len(nodes) and nodes[rank] else None


def stop_group(hosts: Sequence[Host], name: str) -> list[dict[str, Any]]:
    """Stop and remove every rank of group ``name`` on ``hosts`` (ours by label only)."""
    stopped = []
    for host in hosts:
        docker = Docker(host)
        for info in docker.list_managed(labels={LABEL_GROUP: name}):
            if label_text(info.labels, LABEL_NODE_RANK) is None:
                continue
            with contextlib.suppress(InstinctError):
                docker.stop(info.id)
                stopped.append(
                    {
                        "name": info.name,
                        "host": _rank_host(info.labels) or host.name,
                        "model": info.model,
                        "removed": True,
                    }
                )
    return stopped


def group_logs(hosts: Sequence[Host], name: str, tail: int) -> list[str]:
    """Every rank's log, each line prefixed with its rank and host."""
    lines = []
    for host in hosts:
        docker = Docker(host)
        for info in docker.list_managed(labels={LABEL_GROUP: name}):
            rank = label_text(info.labels, LABEL_NODE_RANK)
            if rank is None:
                continue
            text = docker.logs(info.name, tail=tail)
            where = _rank_host(info.labels) or host.name
            lines += [f"[rank {rank} {where}] {ln}" for ln in text.splitlines()]
    return lines


# --------------------------------------------------------------------------- serve --hosts


def parse_hosts(text: str) -> list[Host]:
    """``--hosts h1,h2``: each ``[user@]host[:port]`` (or an ssh config alias), rank order."""
    from instinct_serve.errors import UsageError
    from instinct_serve.hosts import resolve_host

    specs = [part.strip() for part in text.split(",") if part.strip()]
    if len(specs) < 2:
        raise UsageError(
            f"--hosts {text!r} names {len(specs)} host(s): a group needs two or more",
            fix="name every node, rank 0 first: --hosts user@node1,user@node2",
            id="bad_hosts",
            details={"option": "hosts"},
        )
    return [resolve_host(spec) for spec in specs]


@dataclass
class Decision:
    """Whether the model needs the nodes, and why (the planner's word on it)."""

    multi_node: bool
    why: str
    gpus_per_node: int


def _plan_part(opts: PlanOptions) -> PlanOptions:
    """A copy of the plan options (``serve``'s without its own settings)."""
    import copy

    from instinct_serve.options import ServeOptions

    return opts.plan_options() if isinstance(opts, ServeOptions) else copy.copy(opts)


def decide(opts: PlanOptions, head: Host, node_inventory: Any, *, connect: bool = True) -> Decision:
    """Plan for one node first: multi-node only when that plan is refused for memory
    (``does_not_fit``/``needs_tp``), or when ``--multi-node`` asks for it. ``connect=False``:
    a preview (``plan --hosts`` with ``--gpu``) that reads nothing from the nodes."""
    from instinct_serve.gather.plan import make_plan

    one = _plan_part(opts)
    gpus = node_inventory.gpu_count
    try:
        result = make_plan(one, head if connect else None, inventory=node_inventory)
    except InstinctError as exc:
        if exc.id not in ("does_not_fit", "needs_tp"):
            raise
        return Decision(True, f"one node cannot hold it: {exc.message}", gpus)
    weights = result.plan.weight_memory_gb
    held = f"{weights:.0f} GB of weights fit" if weights else "it fits"
    if opts.multi_node:
        return Decision(True, f"asked for (--multi-node); {held} one node", gpus)
    return Decision(False, f"{held} one node of {gpus} GPUs: {head.name} alone runs it", gpus)


def plan_across(
    opts: PlanOptions, hosts: Sequence[Host], node_inventory: Any, why: str, *, connect: bool = True
) -> tuple[PlanResult, MultiNodePlan]:
    """The plan for every GPU of every node together, split into ranks (``connect=False``:
    the head's cache settings are not read, the defaults are shown)."""
    from instinct_serve.catalog import load_catalog
    from instinct_serve.gather.plan import make_plan
    from instinct_serve.hardware.inventory import GpuInventory
    from instinct_serve.plan.multinode import MultiNodeOptions, plan_multinode
    from instinct_serve.runtime.address import public_address

    total = _plan_part(opts)
    gpus = node_inventory.gpu_count
    total.gpu_count = gpus * len(hosts)  # a named GPU's profile, or the nodes' inventory
    total.nodes = len(hosts)
    together = GpuInventory(
        gpus=[g for _ in hosts for g in node_inventory.gpus],
        rocm_version=node_inventory.rocm_version,
        source=node_inventory.source,
    )
    result = make_plan(total, hosts[0] if connect else None, inventory=together)
    recipe = result.match.recipe
    compatible = list(recipe.compatible_strategies) if recipe is not None else []
    moe = recipe is not None and (recipe.architecture or "") == "moe"
    mopts = MultiNodeOptions(
        hosts=tuple(h.name for h in hosts),
        gpus_per_node=gpus,
        backend=opts.backend,
        strategy=opts.strategy,
        ifname=opts.ifname,
        network=opts.network,
        # what the other nodes connect to: given, rank 0's container (its docker network's
        # DNS), or the head's address on its network (an ssh alias resolved to its HostName)
        master_addr=opts.master_addr or (None if opts.network else public_address(hosts[0])),
    )
    return result, plan_multinode(
        result.plan,
        mopts,
        compatible=compatible,
        moe=moe,
        strategies=load_catalog().strategies,
        why=why,
    )


def serve_group(
    opts: Any,
    hosts: Sequence[Host],
    *,
    sink: Sink,
    confirm: Callable[[MultiNodePlan, Change], None] | None = None,
) -> GroupOutcome | Decision:
    """``serve --hosts``: decide, check every node, plan, start, follow, prove.

    Returns the ``Decision`` when one node holds the model (the caller serves it there)."""
    from instinct_serve.gather.detect import detect
    from instinct_serve.gather.plan import resolve_hardware
    from instinct_serve.runtime.prepare import require_ready
    from instinct_serve.runtime.secret_env import local_secrets
    from instinct_serve.runtime.settings import startup_timeout_s

    def event(kind: str, **fields: Any) -> None:
        sink({"event": kind, **fields, "ts": round(time.time(), 6)})

    event("phase", phase="planning", message=f"{opts.model} on {len(hosts)} nodes")
    node_inventory = resolve_hardware(opts.plan_options(), hosts[0]).inventory
    decision = decide(opts, hosts[0], node_inventory)
    event("note", message=f"multi-node: {decision.why}")
    if not decision.multi_node:
        return decision
    for host in hosts:
        event("phase", phase="checking", message=f"host {host.name}")
        require_ready(host, opts.model, opts.port, opts.hf_cache, opts.root, "docker")
    _result, plan = plan_across(opts, hosts, node_inventory, decision.why)
    event("plan", **plan.to_dict())
    head = plan.head.plan
    secrets = local_secrets(head.secret_env)
    runner = GroupRunner(
        hosts,
        plan,
        sink=sink,
        secrets=secrets,
        detect=lambda host: detect(host, sysfs_root=opts.root or "/"),
        timeout_s=opts.timeout_s or startup_timeout_s(head),
        warmup_timeout_s=opts.warmup_timeout_s or health.DEFAULT_WARMUP_TIMEOUT_S,
        api_key=secrets.get("VLLM_API_KEY"),
        device_root=opts.root,
    )
    change = runner.earlier()
    if not change.empty and not opts.replace:
        names = sorted({item.name for item in change.touch})
        raise InstinctError(
            f"group {plan.group} already has containers: {', '.join(names)}",
            fix=f"stop it (instinct stop {plan.group} --hosts ...) or pass --replace",
            id="group_exists",
            details={"change": change.to_dict()},
        )
    if confirm is not None:
        confirm(plan, change)
    runner.preflight()
    if not change.empty:
        event("replacing", message="; ".join(change.lines()), change=change.to_dict())
        runner.clear()
    return deploy_to_end(runner)
