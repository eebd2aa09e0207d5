"""One model across nodes (issue 20): the ranks of one ``vllm serve`` spread over hosts.

When one node cannot hold a model, vLLM splits it over several with its own rendezvous
(the ``mp`` executor): every node runs the same ``vllm serve`` with ``--nnodes N
--node-rank R --master-addr HEAD --master-port P``, rank 0 serves the API, the others run
``--headless``. Ray (``--backend ray``) is the older way: a Ray cluster first (``ray
start --head`` on rank 0, ``ray start --address`` on the others), then ``vllm serve
--distributed-executor-backend ray`` on the head; on ROCm Ray must not rewrite the GPU
visibility variables vLLM sets (``RAY_EXPERIMENTAL_NOSET_*_VISIBLE_DEVICES``, vLLM
PR 15246), so those are set and the plan's own visibility variables dropped.

How the model is split comes from the recipe's multi-node strategy (upstream's
``strategies/multi_node_*.yaml``, read through ``Catalog.strategies``): ``multi_node_tp_pp``
keeps TP inside a node and pipelines across nodes (what vLLM's docs recommend for
multi-node: TP = GPUs per node, PP = nodes), ``multi_node_tp``/``multi_node_tep`` run one
TP group over every GPU (plus expert parallelism), ``multi_node_dep`` runs data + expert
parallelism with vLLM's DP rendezvous (``--data-parallel-address/-rpc-port/-start-rank``).
Each strategy's ``env`` names the interface Gloo and RCCL bootstrap over
(``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``, ``$IFACE_NAME`` upstream).

Pure: a single-node ``LaunchPlan`` (planned for the GPUs of all nodes together, as
``plan --format k8s --nodes`` does) in, one ``LaunchPlan`` and ``docker run`` argv per rank
out; the runtime (``runtime.multinode``) checks the nodes and starts them in rank order.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from instinct_serve import vllm_args
from instinct_serve.errors import UsageError
from instinct_serve.plan.builder import PlanBuilder
from instinct_serve.plan.labels import (
    LABEL_GROUP,
    LABEL_NODE_RANK,
    LABEL_NODES,
    LABEL_ROLE,
    ROLE_HEAD,
    ROLE_WORKER,
)
from instinct_serve.plan.model import LOOPBACK, LaunchPlan, Reason
from instinct_serve.plan.render import docker_argv, publish_arg

BACKENDS = ("mp", "ray")
# upstream's multi-node strategies, in the order tried when the recipe allows several
STRATEGIES = ("multi_node_tp_pp", "multi_node_dep", "multi_node_tep", "multi_node_tp")
DEFAULT_MASTER_PORT = 29501  # vLLM's ParallelConfig.master_port default
DEFAULT_DP_RPC_PORT = 13345  # vLLM's data_parallel_rpc_port default
RAY_PORT = 6379
DEFAULT_IFNAME = "eth0"
IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
VISIBILITY_VARS = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
# Ray on ROCm sets ROCR/HIP_VISIBLE_DEVICES per actor, which clashes with the
# CUDA_VISIBLE_DEVICES vLLM's workers use: tell it not to.
RAY_ROCM_ENV = {
    "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES": "1",
    "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES": "1",
}
# Flags this module decides for every rank: any the plan or the user carried are replaced.
_RANK_FLAGS = (
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--data-parallel-size-local",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-start-rank",
    "--data-parallel-hybrid-lb",
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
    "--distributed-executor-backend",
)


@dataclass(frozen=True)
class MultiNodeOptions:
    """What the user said about the nodes (``serve --hosts``)."""

    hosts: tuple[str, ...]  # host specs, rank order
    gpus_per_node: int
    backend: str = "mp"
    strategy: str | None = None  # a multi_node_* strategy; None: the recipe's
    ifname: str = DEFAULT_IFNAME
    network: str | None = None  # a docker network the ranks share; None: host networking
    master_addr: str | None = None  # None: rank 0's container (network) or host address
    master_port: int = DEFAULT_MASTER_PORT


@dataclass
class NodeLaunch:
    """One rank: where it runs, its plan, and the exact ``docker run`` argv."""

    rank: int
    host: str
    role: str  # head | worker
    plan: LaunchPlan
    argv: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "role": self.role,
            "container": self.plan.container_name,
            "env": dict(self.plan.env),
            "vllm_args": list(self.plan.vllm_args),
            "argv": list(self.argv),
        }


@dataclass
class MultiNodePlan:
    """All ranks of one endpoint, and why the model is split this way."""

    group: str
    strategy: str
    backend: str
    nodes: list[NodeLaunch]
    gpus_per_node: int
    master_addr: str
    master_port: int
    ifname: str
    network: str | None
    reasons: list[Reason] = field(default_factory=list)

    @property
    def head(self) -> NodeLaunch:
        return self.nodes[0]

    @property
    def rendezvous_port(self) -> int:
        """The TCP port the other ranks connect to on rank 0."""
        if self.backend == "ray":
            return RAY_PORT
        return DEFAULT_DP_RPC_PORT if self.strategy == "multi_node_dep" else self.master_port

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "strategy": self.strategy,
            "backend": self.backend,
            "gpus_per_node": self.gpus_per_node,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "rendezvous_port": self.rendezvous_port,
            "ifname": self.ifname,
            "network": self.network,
            "nodes": [n.to_dict() for n in self.nodes],
            "reasons": [r.to_dict() for r in self.reasons],
        }


def choose_strategy(compatible: Sequence[str], moe: bool, requested: str | None) -> tuple[str, str]:
    """The multi-node strategy and why: the one asked for, else the recipe's first of
    ``STRATEGIES`` (TP inside a node and PP across first: the cross-node link then carries
    activations between stages, not every layer's all-reduce); MoE strategies only for MoE
    models; ``multi_node_tp`` when the recipe names none (every model can be split so)."""
    if requested is not None:
        if requested not in STRATEGIES:
            raise UsageError(
                f"unknown multi-node strategy {requested!r}",
                fix=f"use one of {', '.join(STRATEGIES)}",
                id="bad_strategy",
                details={"option": "strategy"},
            )
        if requested in ("multi_node_dep", "multi_node_tep") and not moe:
            raise UsageError(
                f"{requested} splits experts: the model is not a mixture of experts",
                fix="use multi_node_tp_pp or multi_node_tp",
                id="bad_strategy",
                details={"option": "strategy"},
            )
        return requested, "asked for (--strategy)"
    for name in STRATEGIES:
        if name in compatible and (moe or name not in ("multi_node_dep", "multi_node_tep")):
            return name, "the recipe's compatible_strategies lists it"
    return "multi_node_tp", "the recipe names no multi-node strategy: plain TP over all GPUs"


def parallel_args(strategy: str, gpus_per_node: int, nodes: int) -> list[str]:
    """The parallelism flags every rank shares."""
    total = gpus_per_node * nodes
    if strategy == "multi_node_tp_pp":
        return [
            "--tensor-parallel-size",
            str(gpus_per_node),
            "--pipeline-parallel-size",
            str(nodes),
        ]
    if strategy == "multi_node_dep":
        return [
            "--data-parallel-size",
            str(total),
            "--data-parallel-size-local",
            str(gpus_per_node),
            "--enable-expert-parallel",
        ]
    args = ["--tensor-parallel-size", str(total)]
    return [*args, "--enable-expert-parallel"] if strategy == "multi_node_tep" else args


def rank_args(
    *,
    strategy: str,
    backend: str,
    rank: int,
    nodes: int,
    gpus_per_node: int,
    master_addr: str,
    master_port: int,
) -> list[str]:
    """The rendezvous flags of one rank (vLLM's mp executor or DP coordinator)."""
    if backend == "ray":
        return ["--distributed-executor-backend", "ray"] if rank == 0 else []
    if strategy == "multi_node_dep":
        args = [
            "--data-parallel-address",
            master_addr,
            "--data-parallel-rpc-port",
            str(DEFAULT_DP_RPC_PORT),
        ]
        if rank > 0:
            args += ["--data-parallel-start-rank", str(rank * gpus_per_node), "--headless"]
        return args
    args = ["--distributed-executor-backend", "mp", "--nnodes", str(nodes)]
    args += ["--node-rank", str(rank), "--master-addr", master_addr]
    args += ["--master-port", str(master_port)]
    return [*args, "--headless"] if rank > 0 else args


def strategy_env(doc: Mapping[str, Any] | None, ifname: str) -> dict[str, str]:
    """The strategy's env with ``$IFACE_NAME`` filled in (both socket variables at least)."""
    env = {var: ifname for var in IFNAME_VARS}
    for key, value in ((doc or {}).get("env") or {}).items():
        env[str(key)] = str(value).replace("$IFACE_NAME", ifname)
    return env


def worker_name(group: str, rank: int) -> str:
    return f"{group}-node{rank}"


def plan_multinode(
    base: LaunchPlan,
    opts: MultiNodeOptions,
    *,
    compatible: Sequence[str] = (),
    moe: bool = False,
    strategies: Mapping[str, Mapping[str, Any]] | None = None,
    why: str,
    tp_problems: Callable[[int], list[tuple[str, str]]] | None = None,
) -> MultiNodePlan:
    """Split ``base`` (planned for every GPU of every node) over ``opts.hosts``.

    ``why``: why one node is not enough (or that it was asked for); it leads the reasons.
    ``tp_problems``: the kernel and sharding rules the base plan's TP was checked with
    (``plan.constraints``), applied to the split's own TP before anything starts.
    """
    _check_request(base, opts)
    strategy, strategy_why = choose_strategy(compatible, moe, opts.strategy)
    shared = parallel_args(strategy, opts.gpus_per_node, len(opts.hosts))
    _check_split(strategy, shared, opts, tp_problems)
    if strategy == "multi_node_dep" and opts.backend == "ray":
        raise UsageError(
            "multi_node_dep uses vLLM's data-parallel rendezvous, not Ray",
            fix="drop --backend ray, or use --strategy multi_node_tp_pp",
            id="bad_backend",
            details={"option": "backend"},
        )
    group = base.container_name
    if opts.master_addr:
        master = opts.master_addr
    elif opts.network:
        master = group  # docker's DNS on a user-defined network resolves container names
    else:
        master = _host_address(opts.hosts[0])
    doc = (strategies or {}).get(strategy)
    cleaned = list(base.vllm_args)
    for flag in (*_RANK_FLAGS, "--enable-expert-parallel"):
        cleaned = vllm_args.remove(cleaned, flag)
    ranks = _Ranks(
        base=base,
        opts=opts,
        strategy=strategy,
        master=master,
        env=strategy_env(doc, opts.ifname),
        # the strategy's flags, the plan's own without those a rank decides, the split
        args=[
            *cleaned,
            *(a for a in (doc or {}).get("vllm_args") or [] if a != "--data-parallel-hybrid-lb"),
        ],
        shared=shared,
    )
    reasons = ranks.reasons(why, strategy_why)
    return MultiNodePlan(
        group=group,
        strategy=strategy,
        backend=opts.backend,
        nodes=[ranks.launch(rank, host, reasons) for rank, host in enumerate(opts.hosts)],
        gpus_per_node=opts.gpus_per_node,
        master_addr=master,
        master_port=opts.master_port,
        ifname=opts.ifname,
        network=opts.network,
        reasons=reasons,
    )


def _check_split(
    strategy: str,
    shared: list[str],
    opts: MultiNodeOptions,
    tp_problems: Callable[[int], list[tuple[str, str]]] | None,
) -> None:
    """Refuse a split whose TP the model cannot start with (heads that do not divide by it,
    AITER's MLA heads per rank...), naming the rule: rank 0 would die at load while the
    others wait on the rendezvous."""
    tp = int(vllm_args.value(shared, "--tensor-parallel-size") or 1)
    found = tp_problems(tp) if tp_problems is not None else []
    if not found:
        return
    rule, why = found[0]
    per_node = [n for n in range(opts.gpus_per_node, 0, -1) if tp_problems and not tp_problems(n)]
    fix = (
        f"use {per_node[0]} GPU(s) per node (--gpu-count {per_node[0]}) with --strategy "
        "multi_node_tp_pp, so that each node runs a TP the model takes"
        if per_node
        else "use a --strategy that splits the model another way"
    )
    raise UsageError(
        f"{strategy} over {len(opts.hosts)} nodes runs TP {tp}: {why}",
        fix=fix,
        id="split_not_allowed",
        details={"constraint": rule, "tp": tp, "strategy": strategy},
    )


def _check_request(base: LaunchPlan, opts: MultiNodeOptions) -> None:
    """Refuse what cannot be split: one host, an unknown backend, the native engine."""
    if len(opts.hosts) < 2:
        raise UsageError(
            "--hosts needs at least two hosts to split a model across",
            fix="name every node: --hosts user@node1,user@node2",
            id="bad_hosts",
            details={"option": "hosts"},
        )
    if opts.backend not in BACKENDS:
        raise UsageError(
            f"unknown --backend {opts.backend!r}",
            fix="use mp (vLLM's own rendezvous) or ray",
            id="bad_backend",
            details={"option": "backend"},
        )
    if base.launcher != "docker":
        raise UsageError(
            "--hosts runs one container per node: the native engine is not supported",
            fix="drop --engine native",
            id="bad_hosts",
            details={"option": "engine"},
        )


@dataclass
class _Ranks:
    """What every rank shares: the plan, the strategy, rank 0's address, the strategy's
    environment, the arguments (``args`` then the split, ``shared``)."""

    base: LaunchPlan
    opts: MultiNodeOptions
    strategy: str
    master: str
    env: dict[str, str]
    args: list[str]
    shared: list[str]

    def reasons(self, why: str, strategy_why: str) -> list[Reason]:
        """Why the model is split this way (every rank's plan carries them too)."""
        opts, strategy, b = self.opts, self.strategy, PlanBuilder()
        b.reason("multi-node", "fit", why)
        b.reason(f"strategy {strategy}", "recipe", strategy_why)
        b.reason(
            " ".join(self.shared),
            f"strategy {strategy}",
            f"{opts.gpus_per_node} GPUs on each of {len(opts.hosts)} nodes",
        )
        b.reason(
            f"backend {opts.backend}",
            "option",
            "vLLM's own rendezvous (--nnodes/--node-rank/--master-addr, --headless on ranks > 0)"
            if opts.backend == "mp"
            else "a Ray cluster (ray start on every node), vLLM's ray executor on the head",
        )
        b.reason(
            ", ".join(f"{k}={v}" for k, v in self.env.items()),
            f"strategy {strategy}",
            "the interface Gloo and RCCL bootstrap over",
        )
        return b.reasons

    def launch(self, rank: int, host: str, reasons: list[Reason]) -> NodeLaunch:
        """One rank's plan: its name, the strategy's environment (no GPU visibility
        variables: every rank uses its node's GPUs), its flags, labels and network."""
        base, opts = self.base, self.opts
        group = base.container_name
        role = ROLE_HEAD if rank == 0 else ROLE_WORKER
        plan = copy.deepcopy(base)
        plan.container_name = group if rank == 0 else worker_name(group, rank)
        plan.env = {k: v for k, v in plan.env.items() if k not in VISIBILITY_VARS}
        plan.env.update(self.env)
        if opts.backend == "ray":
            plan.env.update(RAY_ROCM_ENV)
        plan.gpu_indices = None
        plan.gpu_count = opts.gpus_per_node
        plan.tensor_parallel_size = int(vllm_args.value(self.shared, "--tensor-parallel-size") or 1)
        own = rank_args(
            strategy=self.strategy,
            backend=opts.backend,
            rank=rank,
            nodes=len(opts.hosts),
            gpus_per_node=opts.gpus_per_node,
            master_addr=self.master,
            master_port=opts.master_port,
        )
        plan.vllm_args = vllm_args.dedupe([*self.args, *self.shared, *own])
        if rank == 0 and opts.network is None and not base.public:
            # host networking: the API must stay on the node's loopback, as -p 127.0.0.1 keeps it
            plan.vllm_args = vllm_args.set_flag(plan.vllm_args, "--host", LOOPBACK)
        plan.labels = {
            **base.labels,
            LABEL_GROUP: group,
            LABEL_ROLE: role,
            LABEL_NODE_RANK: str(rank),
            LABEL_NODES: ",".join(opts.hosts),
        }
        plan.docker_flags = _network_flags(base.docker_flags, opts.network)
        plan.reasons = [*base.reasons, *reasons]
        return NodeLaunch(rank, host, role, plan, _docker_argv(plan, rank, opts, self.master))


def _host_address(spec: str) -> str:
    """The address in ``[user@]host[:port]``: what the other nodes connect to."""
    host = spec.rpartition("@")[2]
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.partition(":")[0] if host.count(":") == 1 else host


def _network_flags(flags: Sequence[str], network: str | None) -> list[str]:
    """The plan's docker flags on the group's network: host networking between real nodes
    (the ranks reach each other, and the interface named for Gloo/RCCL, by host address),
    or a user-defined docker network (its DNS resolves rank 0's container name)."""
    out: list[str] = []
    skip = False
    for flag in flags:
        if skip:
            skip = False
            continue
        if flag in ("--network", "--net"):
            skip = True
            continue
        if flag.startswith(("--network=", "--net=")):
            continue
        out.append(flag)
    return [*out, f"--network={network or 'host'}"]


def _docker_argv(plan: LaunchPlan, rank: int, opts: MultiNodeOptions, master: str) -> list[str]:
    """``docker run`` for one rank: only rank 0 publishes the API port (a headless rank
    serves none); with Ray, the container runs the Ray node first."""
    argv = docker_argv(plan)
    if rank > 0 or opts.network is None:  # host networking publishes nothing
        at = argv.index(publish_arg(plan))
        del argv[at - 1 : at + 1]
    if opts.backend != "ray":
        return argv
    image_at = argv.index(plan.image, argv.index("--name") + 2)
    head, tail = argv[:image_at], argv[image_at + 1 :]
    if rank == 0:
        script = f"ray start --head --port={RAY_PORT} && exec vllm serve {shlex.join(tail)}"
    else:
        script = f"exec ray start --block --address={shlex.quote(f'{master}:{RAY_PORT}')}"
    return [*head, "--entrypoint", "/bin/sh", plan.image, "-c", script]
