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

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import (
    LABEL_GROUP,
)
from instinct_serve.plan.multinode import MultiNodePlan
from instinct_serve.runtime import health, keys
from instinct_serve.runtime.deploying import deploy_to_end
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.follower import LogFollower
from instinct_serve.runtime.multinode_checks import NodeReport, check_nodes
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
REACH_SLICE_S = 5.0  # one rendezvous probe: between probes, the started ranks are checked
POLL_S = 0.5
UNANSWERED_POLLS = 10  # after a failed first completion: how long a dying rank is awaited
Sink = Callable[[dict[str, Any]], None]


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
    api_key_file: str | None = None  # --public: where the key is (never the key)

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
            "api_key_file": self.api_key_file,
        }

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1


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
        self.key_file: str | None = None  # a generated key's file on the head's host
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
        """Every node's checks (``runtime.multinode_checks``); ``NotReadyError`` naming each
        failing node and check."""
        return check_nodes(self.plan, self.hosts, self.docker, self.detect, self.event)

    def _reachable(self, rank: int) -> str | None:
        """None when rank ``rank``'s node reaches rank 0's rendezvous port, else why not.
        Probed in slices, so that a rank already started that dies meanwhile (rank 0 at
        load) ends the wait at once: the caller then blames it, not this node."""
        node, docker = self.plan.nodes[rank], self.docker[rank]
        end = time.monotonic() + REACH_TIMEOUT_S
        while True:
            left = max(min(REACH_SLICE_S, end - time.monotonic()), 1.0)
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
                f"{left:g}",
            ]
            result = docker.run_once(args, timeout=left + 60)
            if result.ok:
                return None
            self._pump_logs()
            if time.monotonic() >= end or self._dead():
                return (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]

    def generated_key(self) -> None:
        """``--public`` without a key of yours: one made for the group and kept in a file
        only you can read on the head's host (``runtime.keys``), handed to the head only."""
        head = self.plan.head.plan
        found = keys.endpoint_key(self.hosts[0], head, create=True)
        if found is not None:
            self.key_file, self.api_key = found
            self.secrets = {**self.secrets, head.api_key_env or "": self.api_key}

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

    def seed_caches(self) -> None:
        """Each other node's empty compile caches from the head's (``runtime.cache_seed``):
        said as a note each, and one ``cache_seeded`` event with the figures."""
        from instinct_serve.runtime.cache_seed import seed_nodes

        pairs = list(zip(self.plan.nodes, self.hosts, strict=True))
        head = next(((n, h) for n, h in pairs if n.rank == 0), None)
        nodes = [(n.rank, h, n.plan.cache) for n, h in pairs if n.rank > 0 and n.plan.cache]
        if head is None or head[0].plan.cache is None or not nodes:
            return
        seeded = seed_nodes(
            head[1], head[0].plan.cache, nodes, lambda m: self.event("note", message=m)
        )
        if seeded:
            self.event("cache_seeded", seeded=[s.to_dict() for s in seeded])

    def start(self) -> GroupOutcome | None:
        """Rank 0, then each other rank once its node reaches the rendezvous port."""
        self.seed_caches()
        for node, host, docker in zip(self.plan.nodes, self.hosts, self.docker, strict=True):
            if node.rank > 0:
                why = self._reachable(node.rank)
                if why is not None and (dead := self._dead()):
                    return self._rank_failed(self._culprit(dead))
                if why is not None:
                    return self.fail(
                        node.rank,
                        "rendezvous_unreachable",
                        f"rank {node.rank} on {host.name} cannot reach rank 0's rendezvous port "
                        f"{self.plan.master_addr}:{self.plan.rendezvous_port}: {why}",
                    )
            key_env = node.plan.api_key_env if node.rank > 0 else None  # headless: no API
            env = {
                k: v for k, v in self.secrets.items() if k in node.plan.secret_env and k != key_env
            }
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
        """The started ranks no longer running, with when they finished (docker's clock)."""
        dead = []
        started = {s["rank"] for s in self.started}
        for node, docker in zip(self.plan.nodes, self.docker, strict=True):
            if node.rank not in started:
                continue
            state = docker.inspect_state(node.plan.container_name)
            if state is None or not state.running:
                finished = state.finished_at if state is not None else None
                dead.append((node.rank, finished.timestamp() if finished else None))
        return dead

    def _culprit(self, dead: list[tuple[int, float | None]]) -> int:
        """The rank to blame: a dead worker takes the head down with it (and a dead head
        its workers), within milliseconds, so the one whose log names a known failure
        wins, then the first to finish. A rank still running counts too when its log names
        one (a headless rank may outlive the head its failure killed)."""
        from instinct_serve.diagnose import diagnose

        for n, docker in zip(self.plan.nodes, self.docker, strict=True):
            with contextlib.suppress(InstinctError):  # the whole logs: the streams may lag
                self.logs[n.rank] = (
                    docker.logs(n.plan.container_name, tail=400).splitlines() or self.logs[n.rank]
                )
        started: set[int] = {int(s["rank"]) for s in self.started}
        alive = sorted(started - {r for r, _ in dead})
        candidates: list[tuple[int, float | None]] = [*dead, *((r, None) for r in alive)]

        def key(item: tuple[int, float | None]) -> tuple[bool, float, int]:
            rank, finished = item
            found = diagnose("\n".join(self.logs[rank])).primary
            known = found is not None and not found.generic
            return (not known, finished if finished is not None else float("inf"), rank)

        return min(candidates, key=key)[0]

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
                return self._prove(base_url, t0)
            time.sleep(POLL_S)
        return self.fail(0, "startup_timeout", f"not healthy within {self.timeout_s:g} s")

    def _prove(self, base_url: str, t0: float) -> GroupOutcome:
        """Healthy: the head must answer a completion. The first request is where a rank
        can still die (a pipeline rank without its warm-up): then the rank to blame, with
        its host, its line and every rank's saved log, not a bare completion error."""
        ready = time.time()
        self.event("healthy", elapsed_s=round(ready - t0, 3))
        try:
            answer = health.complete(
                base_url,
                self.plan.head.plan.served_model_name,
                "Say hello in one word.",
                use_chat=False,
                max_tokens=8,
                timeout=self.warmup_timeout_s,
                api_key=self.api_key,
            )
        except InstinctError as exc:
            return self._unanswered(exc)
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

    def _unanswered(self, exc: InstinctError) -> GroupOutcome:
        """The first completion failed: the rank whose log names a known failure (dead or
        not), else a rank that exits within a few seconds, else the head."""
        dead: list[tuple[int, float | None]] = []
        for _ in range(UNANSWERED_POLLS):
            self._pump_logs()
            if dead := self._dead():
                break
            time.sleep(POLL_S)
        rank = self._culprit(dead)
        if rank in {r for r, _ in dead}:
            return self._rank_failed(rank)
        from instinct_serve.diagnose import diagnose

        found = diagnose("\n".join(self.logs[rank])).primary
        line = found.line if found is not None and found.line else exc.message
        return self.fail(
            rank,
            found.id if found is not None and not found.generic else exc.id,
            f"the first completion failed ({exc.message}); rank {rank} "
            f"({self.plan.nodes[rank].role}) on {self.hosts[rank].name}: {line}",
            line=line,
            log_tail=self.logs[rank][-20:],
        )

    def _rank_failed(self, rank: int) -> GroupOutcome:
        node = self.plan.nodes[rank]
        state = self.docker[rank].inspect_state(node.plan.container_name)
        text = "\n".join(self.logs[rank])
        with contextlib.suppress(InstinctError):  # the whole log: the stream may lag behind
            text = self.docker[rank].logs(node.plan.container_name, tail=400) or text
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
            log_tail=text.splitlines()[-20:],
        )

    def fail(
        self,
        rank: int,
        failure_id: str,
        message: str,
        log_tail: list[str] | None = None,
        **extra: Any,
    ) -> GroupOutcome:
        """Save every started rank's whole log on its host, then stop and remove every
        rank, and say which one failed, where, why, and where its evidence is."""
        from instinct_serve.runtime.multinode_groups import save_rank_logs

        self._pump_logs()
        started = {s["rank"] for s in self.started}
        ranks = [
            (n.rank, h, d, n.plan.container_name, self.logs[n.rank])
            for n, h, d in zip(self.plan.nodes, self.hosts, self.docker, strict=True)
            if n.rank in started
        ]
        saved = save_rank_logs(self.plan.group, ranks)
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
                "log_tail": log_tail if log_tail is not None else self.logs[rank][-20:],
                "saved_logs": saved,
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
            address = head.bind_address
            if head.public:
                from instinct_serve.runtime.address import public_address

                address = public_address(self.hosts[0])
            outcome.base_url = f"http://{address}:{head.port}/v1"
            outcome.api_key_file = self.key_file
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
        tp_problems=result.tp_problems,
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
    keys.caller_key(head, secrets)  # --env VLLM_API_KEY must be set before anything starts
    runner = GroupRunner(
        hosts,
        plan,
        sink=sink,
        secrets=secrets,
        detect=lambda host: detect(host, sysfs_root=opts.root or "/"),
        timeout_s=opts.timeout_s or startup_timeout_s(head),
        warmup_timeout_s=opts.warmup_timeout_s or health.DEFAULT_WARMUP_TIMEOUT_S,
        api_key=secrets.get(head.api_key_env or "") or None,
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
    runner.generated_key()
    return deploy_to_end(runner)
