"""Several copies of one model behind one OpenAI-compatible endpoint (issue 16).

A host with more GPUs than one endpoint needs (Qwen3-8B at TP 1 on 8x MI300X) serves more
with more copies: AMD's tuning guide ("Maximizing instances per node", ROCm docs, vLLM V1
performance optimization) says the total throughput of N single-GPU instances usually
exceeds one instance stretched across N GPUs. ``decide_group`` fills the GPUs asked for
(``--objective throughput``, or ``--replicas N``) in one of two ways, and says why in a
``reasons`` entry:

* ``replicas``, for dense models: N independent ``vllm serve`` containers of TP ``t`` on
  disjoint GPU sets (the sets of ``hardware.partitions.replicas``: a TP group stays on one
  GPU's partitions, never a GPU split between groups), each on its own loopback port and
  name (``NAME-r0``...), behind HAProxy on the plan's port. AMD's data-parallel section:
  for dense models, fully independent instances behind your own load balancer avoid the
  RPC coordination of vLLM's data parallelism entirely.
* ``data_parallel``, for mixture-of-experts models: one ``vllm serve`` with
  ``--data-parallel-size N`` and vLLM's internal load balancer (one endpoint, vLLM routes),
  with AMD's ROCm settings (``VLLM_ALL2ALL_BACKEND=allgather_reducescatter``,
  ``--disable-nccl-for-dp-synchronization``) and ``--enable-expert-parallel`` when at
  least 3% of the experts are active per token (AMD: EP helps standard MoE, and is 7-12%
  slower for ultra-sparse ones under 1%). The experts are then sharded over the ranks
  instead of copied on every GPU, which frees memory for the KV cache.

The router is HAProxy (``docs/replicas.md`` has the comparison): an active ``/health``
check drops a dead replica within seconds and adds it back once it answers again, a
connection refused is retried on another replica (``option redispatch``), ``leastconn``
suits long generations, and it runs as the official ``haproxy`` image or the distribution's
package. It listens where the plan would (127.0.0.1 unless ``--public``, and then the
replicas still listen on loopback only: the router is the only way in).

Pure: plans in, plans out; the runtime (``runtime.group``) launches what this decides.
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from instinct_serve import vllm_args
from instinct_serve.errors import UsageError
from instinct_serve.hardware.partitions import Layout, replicas
from instinct_serve.names import CONTAINER_NAME
from instinct_serve.plan.builder import PlanBuilder
from instinct_serve.plan.labels import (
    LABEL_GROUP,
    LABEL_PLAN_HASH,
    LABEL_REPLICA,
    LABEL_ROLE,
    ROLE_REPLICA,
    ROLE_ROUTER,
    managed_labels,
)
from instinct_serve.plan.model import (
    LOOPBACK,
    RESTART_POLICY,
    LaunchPlan,
    docker_argv,
)

if TYPE_CHECKING:
    from instinct_serve.options import PlanOptions

# The official HAProxy image (Docker Hub library/haproxy), the 3.0 long-term branch.
ROUTER_IMAGE = "haproxy:3.0"
ROUTER_CONFIG = "/usr/local/etc/haproxy/haproxy.cfg"  # where the official image reads it
# AMD's data-parallel settings for ROCm (vLLM V1 performance optimization, Data parallelism)
DP_ENV = {"VLLM_ALL2ALL_BACKEND": "allgather_reducescatter"}
DP_FLAG = "--disable-nccl-for-dp-synchronization"
EP_DENSITY = 0.03  # AMD: "standard MoE (>=3% activation density): EP flag"
SPARSE_DENSITY = 0.01  # AMD: "ultra-sparse MoE (<1%): DP or TP without EP"
# Health checks: every 2 s, 0.5 s while a state changes; 2 failures drop a replica, 2
# successes bring it back. A refused connection is retried on another replica meanwhile.
CHECK = "inter 2s fastinter 500ms downinter 2s fall 2 rise 2"
# dockerd restarts a replica that dies with the endpoints' own policy (``plan.model.
# RESTART_POLICY``), given once the replica is proven healthy (``runtime.group``), so one that
# fails at startup is diagnosed, not looped. The router holds no weights and no GPU: it is
# restarted whatever ends it, after a daemon restart too.
ROUTER_RESTART_POLICY = "unless-stopped"
# HAProxy's master-worker mode in the foreground (as the official image runs it): the master
# re-reads the configuration on SIGUSR2 and starts a new worker, which takes over the
# listening socket from the old one (2.6+: over the master's socketpair, ``-x sockpair@``),
# while the old worker finishes its connections and exits. ``serve --upgrade`` swaps a
# group's replicas that way without refusing a connection (``runtime.group.reload_router``).
ROUTER_MODE = ("-W", "-db")
ROUTER_RELOAD_SIGNAL = "USR2"

Mode = Literal["replicas", "data_parallel"]


@dataclass(frozen=True)
class Replica:
    """One copy: its index, container name, loopback port and GPUs (HIP indices)."""

    index: int
    name: str
    port: int
    gpus: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "port": self.port,
            "gpus": list(self.gpus),
            "hip_visible_devices": ",".join(map(str, self.gpus)),
            "base_url": f"http://{LOOPBACK}:{self.port}/v1",
        }


@dataclass(frozen=True)
class Router:
    """HAProxy in front of the replicas: the group's name, port and bind address."""

    name: str
    port: int
    bind: str
    image: str = ROUTER_IMAGE
    kind: str = "haproxy"
    balance: str = "leastconn"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "image": self.image,
            "name": self.name,
            "listen": f"{self.bind}:{self.port}",
            "balance": self.balance,
            "health_check": f"GET /health, {CHECK}",
            "config_path": ROUTER_CONFIG,
        }


@dataclass
class GroupPlan:
    """How the plan fills its GPUs: ``replicas`` behind a router, or vLLM's own DP."""

    mode: Mode
    count: int
    tp: int
    why: str
    members: list[Replica] = field(default_factory=list)  # replicas mode only
    router: Router | None = None  # replicas mode only
    gpus: tuple[int, ...] = ()  # every GPU the group uses
    expert_parallel: bool = False  # data_parallel mode: --enable-expert-parallel

    @property
    def name(self) -> str:
        return self.router.name if self.router is not None else ""

    def identity(self) -> dict[str, Any]:
        """What makes two groups the same (part of the plan hash)."""
        return {
            "mode": self.mode,
            "count": self.count,
            "tp": self.tp,
            "members": [[m.name, m.port, list(m.gpus)] for m in self.members],
            "router": None
            if self.router is None
            else [self.router.image, self.router.bind, self.router.port, self.router.balance],
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "count": self.count,
            "tp": self.tp,
            "gpus": list(self.gpus),
            "why": self.why,
            "expert_parallel": self.expert_parallel,
            "members": [m.to_dict() for m in self.members],
            "router": self.router.to_dict() if self.router is not None else None,
        }

    def record(self) -> dict[str, Any]:
        """What ``runtime.plans`` keeps of the group (``group_from_record`` reads it)."""
        return {
            "mode": self.mode,
            "count": self.count,
            "tp": self.tp,
            "why": self.why,
            "gpus": list(self.gpus),
            "expert_parallel": self.expert_parallel,
            "members": [[m.index, m.name, m.port, list(m.gpus)] for m in self.members],
            "router": None
            if self.router is None
            else [self.router.name, self.router.port, self.router.bind, self.router.image],
        }

    def document(self, plan: LaunchPlan) -> dict[str, Any] | None:
        """``plan --json``'s ``replicas`` (``group_document``); a method, so that the plan
        model reaches it without importing this module (which imports the model)."""
        return group_document(plan)


def group_from_record(doc: Any) -> GroupPlan | None:
    """The group of a plan record (``GroupPlan.record``), or None for anything else."""
    if not isinstance(doc, dict) or doc.get("mode") not in ("replicas", "data_parallel"):
        return None
    try:
        members = [
            Replica(int(i), str(n), int(p), tuple(int(g) for g in gpus))
            for i, n, p, gpus in doc.get("members") or []
        ]
        router_doc = doc.get("router")
        router = None
        if router_doc is not None:
            name, port, bind, image = router_doc
            router = Router(str(name), int(port), str(bind), str(image))
        return GroupPlan(
            mode=doc["mode"],
            count=int(doc["count"]),
            tp=int(doc["tp"]),
            why=str(doc.get("why") or ""),
            members=members,
            router=router,
            gpus=tuple(int(g) for g in doc.get("gpus") or ()),
            expert_parallel=bool(doc.get("expert_parallel")),
        )
    except (TypeError, ValueError, KeyError):
        return None


# ----------------------------------------------------------------------------- deciding


@dataclass
class GroupInputs:
    """What the decision needs beyond the plan: the options, the GPUs and the model."""

    options: PlanOptions
    gpu_count: int
    layout: Layout | None = None
    is_moe: bool = False
    moe_density: float | None = None  # experts active per token / experts


def gpu_sets(inputs: GroupInputs, tp: int) -> list[list[int]]:
    """The disjoint GPU sets of TP ``tp`` among the GPUs asked for (``--gpus``, else all):
    within one physical GPU's partitions when a set fits there, else whole GPUs."""
    if inputs.layout is not None and inputs.layout.groups:
        groups = [list(g) for g in inputs.layout.groups]
    else:
        groups = [[i] for i in range(inputs.gpu_count)]
    asked = inputs.options.gpus
    if asked is not None:
        allowed = set(asked)
        groups = [[i for i in g if i in allowed] for g in groups]
        groups = [g for g in groups if g]
    return replicas(groups, tp)


def decide_group(plan: LaunchPlan, inputs: GroupInputs) -> None:
    """Fill the GPUs asked for with copies of ``plan`` (see the module doc), in place: a
    ``group`` for replicas, or vLLM's DP flags; a ``replicas`` reason either way (also
    when one endpoint leaves GPUs idle: the issue's "seven GPUs idle without a word")."""
    opts = inputs.options
    tp = plan.tensor_parallel_size
    wanted = getattr(opts, "replicas", None)
    if not getattr(opts, "local_group", True):
        return  # the cluster replicates (Kubernetes): one endpoint per pod
    b = PlanBuilder.extending(plan)
    if vllm_args.has(plan.vllm_args, "--data-parallel-size", "-dp"):
        b.reason("replicas", "arguments after --", "--data-parallel-size given: vLLM's own")
        return
    sets = gpu_sets(inputs, tp)
    throughput = opts.objective == "throughput"
    if wanted is None and getattr(opts, "router", False) and not throughput:
        wanted = 1
    if wanted is None:
        if not throughput:
            if len(sets) > 1:
                idle = sum(len(s) for s in sets[1:])
                b.reason(
                    "replicas",
                    "planner",
                    f"one endpoint of TP {tp} leaves {idle} GPU(s) idle: "
                    f"{len(sets)} copies fit; --objective throughput (or --replicas "
                    f"{len(sets)}) serves them all behind one endpoint",
                )
            return
        count = len(sets)
    else:
        count = wanted
    if count > len(sets):
        have = sum(len(s) for s in sets)
        raise UsageError(
            f"{count} replicas of TP {tp} need {count * tp} GPUs"
            + (" in whole sets" if inputs.layout is not None and inputs.layout.partitioned else "")
            + f"; the GPUs asked for hold {len(sets)} ({have} GPU(s))",
            fix=f"use --replicas {max(len(sets), 1)} or fewer, a smaller --tp, or more GPUs",
            id="too_many_replicas",
            details={"replicas": count, "tp": tp, "fit": len(sets)},
        )
    if count <= 1 and getattr(opts, "router", False) and sets:
        _replicas(plan, b, 1, sets[:1], "--router")
        return
    if count <= 1:
        b.reason(
            "replicas",
            "--replicas" if wanted is not None else "--objective throughput",
            f"one copy of TP {tp}: "
            + ("as asked" if wanted is not None else "no GPUs left for a second one"),
        )
        return
    used = sets[:count]
    asked = "--replicas" if wanted is not None else "--objective throughput"
    if inputs.is_moe:
        _data_parallel(plan, b, inputs, count, used, asked)
        b.finish(plan)
    else:
        _replicas(plan, b, count, used, asked)


def _all_gpus(inputs: GroupInputs) -> list[int]:
    if inputs.layout is not None and inputs.layout.groups:
        return sorted(i for g in inputs.layout.groups for i in g)
    return list(range(inputs.gpu_count))


def _restrict(plan: LaunchPlan, b: PlanBuilder, gpus: list[int], source: str, why: str) -> None:
    plan.gpu_indices = list(gpus)
    b.set_env("HIP_VISIBLE_DEVICES", ",".join(map(str, gpus)), source, why)
    for other in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        b.env.pop(other, None)


def _data_parallel(
    plan: LaunchPlan,
    b: PlanBuilder,
    inputs: GroupInputs,
    count: int,
    used: list[list[int]],
    asked: str,
) -> None:
    tp = plan.tensor_parallel_size
    gpus = sorted(i for s in used for i in s)
    density = inputs.moe_density
    ep = density is not None and density >= EP_DENSITY
    if density is None:
        ep_why = "the share of active experts is unknown: no expert parallelism"
    elif ep:
        ep_why = (
            f"{density:.1%} of the experts are active per token (>= 3%): "
            "--enable-expert-parallel shards the experts over the ranks"
        )
    elif density < SPARSE_DENSITY:
        ep_why = (
            f"{density:.1%} of the experts are active per token: ultra-sparse, where AMD "
            "measured EP 7-12% slower; no expert parallelism"
        )
    else:
        ep_why = f"{density:.1%} of the experts are active per token (< 3%): no expert parallelism"
    why = (
        f"{asked}: a mixture-of-experts model, so vLLM's own data parallelism: "
        f"--data-parallel-size {count} ({count} ranks of TP {tp} on {len(gpus)} GPUs) "
        "behind vLLM's internal load balancer on one port; the ranks step together "
        "for the expert layers; " + ep_why
    )
    args = ["--data-parallel-size", str(count), DP_FLAG]
    if ep and not vllm_args.has(plan.vllm_args, "--enable-expert-parallel"):
        args.append("--enable-expert-parallel")
    b.flag(args, "replicas", why)  # after the plan's own arguments
    for key, value in DP_ENV.items():
        if key not in b.env:
            b.set_env(
                key,
                value,
                "replicas",
                "AMD's setting for data parallelism on ROCm (vLLM V1 performance "
                "optimization guide)",
            )
    if gpus != _all_gpus(inputs):
        _restrict(plan, b, gpus, "replicas", f"the {count} data-parallel ranks' GPUs")
    plan.group = GroupPlan(
        mode="data_parallel",
        count=count,
        tp=tp,
        why=why,
        gpus=tuple(gpus),
        expert_parallel=ep,
    )


def _replicas(
    plan: LaunchPlan, b: PlanBuilder, count: int, used: list[list[int]], asked: str
) -> None:
    tp = plan.tensor_parallel_size
    name = plan.container_name
    members = []
    for index, gpus in enumerate(used):
        member_name = f"{name}-r{index}"
        if not CONTAINER_NAME.fullmatch(member_name):
            raise UsageError(
                f"the replica name {member_name} is not a container name (128 characters at most)",
                fix="choose a shorter --name",
                id="bad_name",
            )
        port = plan.port + 1 + index
        if port > 65535:
            raise UsageError(
                f"replica {index} would listen on port {port}, past 65535",
                fix="choose a lower --port (the replicas take the ports after it)",
                id="bad_port",
            )
        members.append(Replica(index, member_name, port, tuple(gpus)))
    why = (
        f"{asked}: one vllm serve of TP {tp} (port {members[0].port} on {LOOPBACK}) behind "
        f"HAProxy on port {plan.port}, which holds the port while `serve --upgrade` swaps "
        "the replica behind it (no downtime)"
        if count == 1
        else f"{asked}: {count} copies of TP {tp} on disjoint GPUs, each its own vllm serve "
        f"(ports {members[0].port}-{members[-1].port} on {LOOPBACK}), behind HAProxy on port "
        f"{plan.port}: a dense model, so independent instances with no coordination between "
        "them (AMD: N single-GPU instances usually beat one across N GPUs); HAProxy drops a "
        "replica that fails its /health check and retries a refused connection on another"
    )
    plan.group = GroupPlan(
        mode="replicas",
        count=count,
        tp=tp,
        why=why,
        members=members,
        router=Router(name=name, port=plan.port, bind=plan.bind_address),
        gpus=tuple(i for s in used for i in s),
    )
    b.reason(f"{count} replicas", "replicas", why)


def moved(plan: LaunchPlan, ports: list[int], suffix: str) -> LaunchPlan:
    """``plan``'s group with its replicas on other ports and names (``NAME{suffix}-ri``),
    the same GPUs and router: where ``serve --upgrade`` starts the new replicas beside the
    old ones. The plan hash in its labels stays the one of the plan as asked (``serve`` of
    the same plan later finds the group where the upgrade put it: ``runtime.plans``)."""
    group = plan.group
    assert group is not None and group.router is not None and len(ports) == group.count
    out = copy.deepcopy(plan)
    out.labels = {**plan.labels, LABEL_PLAN_HASH: plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash)}
    assert out.group is not None
    out.group.members = [
        Replica(m.index, f"{group.name}{suffix}-r{m.index}", port, m.gpus)
        for m, port in zip(group.members, ports, strict=True)
    ]
    return out


def with_router_image(plan: LaunchPlan, image: str | None) -> None:
    """``--router-image``: another HAProxy image (a mirror, an air-gapped registry)."""
    group = plan.group
    if image and group is not None and group.router is not None:
        group.router = Router(group.router.name, group.router.port, group.router.bind, image)


# ----------------------------------------------------------------------------- members


def _with_port(args: list[str], port: int) -> list[str]:
    out: list[str] = []
    for unit in vllm_args.units(args):
        if unit.name == "--port":
            out += ["--port", str(port)]
        else:
            out += unit.tokens
    return out


def member_plan(plan: LaunchPlan, member: Replica) -> LaunchPlan:
    """The single-endpoint plan of one replica: its name, port and GPUs; loopback only
    (the router is the way in), the group's API key; labelled with the group, its role and
    index, and its own plan hash (so ``serve`` again reuses exactly the healthy ones)."""
    group = plan.group
    assert group is not None and group.router is not None
    out = copy.deepcopy(plan)
    out.group = None
    out.container_name = member.name
    out.port = member.port
    out.vllm_args = _with_port(plan.vllm_args, member.port)
    out.public = False
    out.env = dict(plan.env)
    for other in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        out.env.pop(other, None)
    out.env["HIP_VISIBLE_DEVICES"] = ",".join(map(str, member.gpus))
    out.gpu_indices = list(member.gpus)
    out.labels = {
        **managed_labels(model=plan.model, port=member.port, plan_hash=out.plan_hash),
        **group_labels(group.name, ROLE_REPLICA),
        LABEL_REPLICA: str(member.index),
    }
    return out


def group_labels(name: str, role: str) -> dict[str, str]:
    return {LABEL_GROUP: name, LABEL_ROLE: role}


def router_labels(plan: LaunchPlan) -> dict[str, str]:
    """The router's labels: managed, the group's model, port and plan hash, its role."""
    group = plan.group
    assert group is not None and group.router is not None
    return {
        **managed_labels(
            model=plan.model,
            port=group.router.port,
            plan_hash=plan.labels.get(LABEL_PLAN_HASH, plan.plan_hash),
        ),
        **group_labels(group.name, ROLE_ROUTER),
    }


# ----------------------------------------------------------------------------- the router


def haproxy_config(plan: LaunchPlan) -> str:
    """HAProxy's configuration: the plan's address in front, the replicas behind."""
    group = plan.group
    assert group is not None and group.router is not None
    router = group.router
    servers = "\n".join(
        f"    server r{m.index} {LOOPBACK}:{m.port} check  # {m.name}, GPUs "
        + ",".join(map(str, m.gpus))
        for m in group.members
    )
    return f"""\
# instinct-serve: the router of {group.name}, {group.count} replicas of {plan.model}
# (written by `instinct serve`; `instinct stop {group.name}` stops the group)
global
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    option dontlognull
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout http-request 60s
    timeout http-keep-alive 60s
    # a replica that dies or restarts: the request goes to another one (the whole request
    # is buffered so it can be sent again; a new connection each time, never a dead one)
    retries 3
    retry-on conn-failure empty-response
    option redispatch 1
    option http-buffer-request
    http-reuse never
    # a reload (upgrade, rollback): the old worker keeps its idle keep-alive connections
    # and answers their next request with "Connection: close", instead of closing them
    # under a client that is sending one (a keep-alive client saw a RemoteProtocolError)
    option idle-close-on-response

frontend openai
    bind {router.bind}:{router.port}
    default_backend replicas

backend replicas
    balance {router.balance}
    option httpchk GET /health
    http-check expect status 200
    default-server {CHECK}
{servers}
"""


def router_argv(plan: LaunchPlan, config_path: str) -> list[str]:
    """``docker run -d`` of the router: host networking (it reaches the replicas on the
    host's loopback and listens on the plan's address itself), the configuration mounted
    read-only, HAProxy in the foreground."""
    group = plan.group
    assert group is not None and group.router is not None
    router = group.router
    argv = ["docker", "run", "-d", "--restart", ROUTER_RESTART_POLICY, "--name", router.name]
    for key, value in router_labels(plan).items():
        argv += ["--label", f"{key}={value}"]
    argv += ["--network", "host", "-v", f"{config_path}:{ROUTER_CONFIG}:ro"]
    argv += ["--entrypoint", "haproxy", router.image, *ROUTER_MODE, "-f", ROUTER_CONFIG]
    return argv


def group_script(plan: LaunchPlan, member_argv: Any) -> str:
    """The whole group as shell lines: each replica's ``docker run``, the router's
    configuration (a here-document) and its ``docker run``. ``member_argv(plan)`` renders
    one replica (``plan.model.docker_argv`` without a restart policy: the ``docker update``
    line gives it once every replica answers)."""
    group = plan.group
    assert group is not None and group.router is not None
    lines = [f"# {group.why}"]
    for member in group.members:
        lines.append(shlex.join(member_argv(member_plan(plan, member))))
    names = [m.name for m in group.members]
    lines.append("# once every replica answers /health: dockerd restarts one that dies")
    lines.append(shlex.join(restart_argv(names)))
    config_file = f"{group.name}-haproxy.cfg"
    lines.append(f"cat > {shlex.quote(config_file)} <<'EOF'")
    lines.append(haproxy_config(plan).rstrip("\n"))
    lines.append("EOF")
    argv = router_argv(plan, "@CONFIG@")
    at = argv.index(f"@CONFIG@:{ROUTER_CONFIG}:ro")
    mount = '"$PWD"/' + shlex.quote(f"{config_file}:{ROUTER_CONFIG}:ro")
    lines.append(shlex.join(argv[:at]) + " " + mount + " " + shlex.join(argv[at + 1 :]))
    return "\n".join(lines) + "\n"


def restart_argv(names: list[str]) -> list[str]:
    """``docker update`` giving proven replicas docker's restart policy."""
    return ["docker", "update", "--restart", RESTART_POLICY, *names]


def group_document(plan: LaunchPlan) -> dict[str, Any] | None:
    """``plan --json``'s ``replicas``: the group, each replica's exact ``docker run``, the
    ``docker update`` that follows, the router's configuration and ``docker run`` (with
    ``config_file`` mounted: ``serve`` keeps it in the tool's data directory)."""
    group = plan.group
    if group is None:
        return None
    doc = group.to_dict()
    if group.mode != "replicas" or group.router is None:
        return doc
    config_file = f"{group.name}-haproxy.cfg"
    for entry, member in zip(doc["members"], group.members, strict=True):
        entry["docker_argv"] = docker_argv(member_plan(plan, member), restart=None)
    doc["restart_argv"] = restart_argv([m.name for m in group.members])
    doc["router"]["config_file"] = config_file
    doc["router"]["config"] = haproxy_config(plan)
    doc["router"]["docker_argv"] = router_argv(plan, config_file)
    return doc
