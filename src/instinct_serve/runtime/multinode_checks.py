"""The checks every node of a multi-node group passes before anything starts
(``serve --hosts``): docker answers, the same GPUs as rank 0 (gfx, count, VRAM), the same
image by id (a different build on one node breaks the collective ops in ways no log
explains), the model in its cache or a cache to download it into, and the interface named
for Gloo/RCCL (host networking) or the group's docker network."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host
from instinct_serve.plan.multinode import MultiNodePlan, NodeLaunch
from instinct_serve.runtime.docker import Docker


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


def check_nodes(
    plan: MultiNodePlan,
    hosts: Sequence[Host],
    dockers: Sequence[Docker],
    detect: Callable[[Host], Any] | None,
    event: Callable[..., None],
) -> list[NodeReport]:
    """Every node's checks; ``NotReadyError`` naming each failing node and check."""
    reports = [NodeReport(n.rank, n.host) for n in plan.nodes]
    head_gpus: tuple[str, int, int | None] | None = None
    image_ids: dict[int, str] = {}
    for node, host, docker, report in zip(plan.nodes, hosts, dockers, reports, strict=True):
        event("phase", phase="checking", message=f"rank {node.rank} on {host.name}")
        ok, why = docker.available()
        report.checks["docker"] = "ok" if ok else why
        if not ok:
            continue
        if detect is not None:
            try:
                sig = gpu_signature(detect(host))
            except InstinctError as exc:
                report.checks["gpus"] = f"detection failed: {exc.message}"
            else:
                report.facts["gpus"] = {"gfx": sig[0], "count": sig[1], "vram_bytes": sig[2]}
                if head_gpus is None:
                    head_gpus = sig
                if sig[1] < plan.gpus_per_node:
                    report.checks["gpus"] = (
                        f"{sig[1]} GPUs, the plan needs {plan.gpus_per_node} per node"
                    )
                elif sig != head_gpus:
                    report.checks["gpus"] = f"{sig} differs from rank 0's {head_gpus}"
                else:
                    report.checks["gpus"] = "ok"
        image = node.plan.image
        image_id = docker.image_id(image)
        if image_id is None:
            event("phase", phase="pulling_image", message=f"{image} on {host.name}")
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
        report.checks["model"] = _model_check(host, node, report)
        report.checks["interface"] = _interface_check(plan, host, docker)
    failing = [r for r in reports if r.problems]
    for report in reports:
        event("node_checked", **report.to_dict())
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


def _model_check(host: Host, node: NodeLaunch, report: NodeReport) -> str:
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


def _interface_check(plan: MultiNodePlan, host: Host, docker: Docker) -> str:
    network = plan.network
    if network is not None:
        return "ok" if docker.network_exists(network) else f"no docker network {network}"
    wanted = plan.ifname
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
