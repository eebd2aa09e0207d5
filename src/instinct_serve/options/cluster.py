"""The options of an endpoint beyond its plan: Kubernetes manifests, ``watch``, ``rollback``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from instinct_serve.errors import UsageError
from instinct_serve.options.jobs import ServeOptions
from instinct_serve.options.spec import JobOptions, _ifname, opt, option_of

# ----------------------------------------------------------------------------- kubernetes
# A Kubernetes object name (RFC 1123 label) and a StorageClass name (RFC 1123 subdomain).
K8S_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
K8S_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")
# The Prometheus Operator's own Service in front of every Prometheus it runs
# (prometheus-operated), in the namespace kube-prometheus-stack installs to by convention.
DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"


def _k8s_label(value: str) -> str | None:
    if not K8S_LABEL.fullmatch(value):
        return "is not a Kubernetes name (lowercase letters, digits and '-', 63 at most)"
    return None


def _k8s_subdomain(value: str) -> str | None:
    if not K8S_SUBDOMAIN.fullmatch(value):
        return "is not a StorageClass name (lowercase letters, digits, '-' and '.')"
    return None


def _http_url(value: str) -> str | None:
    if not re.fullmatch(r"https?://[^\s\"'{}]+", value):
        return "is not an http(s) URL"
    return None


@dataclass
class KubernetesOptions(JobOptions):
    """``instinct plan --format k8s``: how the manifests run the plan on a cluster.

    A separate type from ``PlanOptions`` because they shape the manifests, not the plan: the
    same plan (and plan hash) serves one pod or an autoscaled fleet. Command line only: the
    MCP ``plan`` tool answers with the plan document, which has no manifests.
    """

    job: ClassVar[str] = "plan"

    namespace: str | None = opt(
        kind="text",
        metavar="NS",
        help="With --format k8s: the namespace of every object (default: kubectl's current).",
        check=_k8s_label,
        max_length=63,
        mcp=False,
    )
    autoscale: bool = opt(
        False,
        kind="bool",
        help="With --format k8s: add a KEDA ScaledObject that scales on vLLM's queue "
        "(vllm:num_requests_waiting from Prometheus).",
        mcp=False,
    )
    max_replicas: int | None = opt(
        kind="int",
        metavar="N",
        help="With --autoscale: the most copies (default: twice --replicas).",
        low=1,
        high=1024,
        mcp=False,
    )
    nodes: int = opt(
        1,
        kind="int",
        metavar="N",
        help="With --format k8s: nodes one copy spans; more than 1 renders a LeaderWorkerSet "
        "(give --gpu-count as the GPUs of all nodes together).",
        low=1,
        high=64,
        mcp=False,
    )
    storage_class: str | None = opt(
        kind="text",
        metavar="CLASS",
        help="With --format k8s: StorageClass of the model and compile cache volume "
        "(default: the cluster's; several pods share it ReadWriteMany).",
        check=_k8s_subdomain,
        max_length=253,
        mcp=False,
    )
    socket_ifname: str = opt(
        "eth0",
        kind="text",
        metavar="IFACE",
        help="With --nodes: the pod interface RCCL and Gloo bootstrap over "
        "(NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME).",
        check=_ifname,
        max_length=256,
        mcp=False,
    )
    prometheus_url: str = opt(
        DEFAULT_PROMETHEUS_URL,
        kind="text",
        metavar="URL",
        help="With --autoscale: the Prometheus KEDA queries for vLLM's metrics.",
        check=_http_url,
        mcp=False,
    )
    # Set by a multi-node planner that knows the node size; by default the plan's TP x PP
    # split evenly over ``nodes``.
    gpus_per_node: int | None = None
    # copies of the endpoint (with --autoscale, the fewest): the plan's --replicas
    # (``PlanOptions.replicas``), which on this host means replicas behind a router
    replicas: int = 1

    def check(self) -> None:
        super().check()
        if self.max_replicas is not None and not self.autoscale:
            raise UsageError(
                "--max-replicas only bounds --autoscale",
                fix="add --autoscale, or set the fixed count with --replicas",
                id="bad_max_replicas",
                details={"option": "max_replicas"},
            )
        if self.max_replicas is not None and self.max_replicas < self.replicas:
            raise UsageError(
                f"--max-replicas {self.max_replicas} is below --replicas {self.replicas}",
                fix="--replicas is the fewest copies, --max-replicas the most",
                id="bad_max_replicas",
                details={"option": "max_replicas"},
            )

    @property
    def most_replicas(self) -> int:
        """The autoscaler's ceiling."""
        return self.max_replicas if self.max_replicas is not None else 2 * self.replicas

    @property
    def shared_cache(self) -> bool:
        """More than one pod mounts the cache (a ReadWriteMany volume)."""
        return self.replicas > 1 or self.autoscale or self.nodes > 1


def _relaunch_timeout() -> Any:
    """Serve's own ``--timeout`` (same bounds), for the relaunches watch and rollback make."""
    spec = option_of(ServeOptions, "timeout_s")._replace(
        help="Seconds a relaunch may take to /health (default: scaled to the weights).",
    )
    return field(default=None, metadata={"opt": spec})


@dataclass
class WatchOptions(JobOptions):
    """``instinct watch``: how often to look and how patiently to restart. Command line
    only (supervision runs beside the endpoint, not through an agent's MCP call)."""

    job: ClassVar[str] = "watch"

    interval_s: float = opt(
        10.0,
        kind="float",
        flag="--interval",
        metavar="SECONDS",
        help="Seconds between checks.",
        low=0.1,
        high=3600.0,
        mcp=False,
    )
    backoff_s: float = opt(
        5.0,
        kind="float",
        flag="--backoff",
        metavar="SECONDS",
        help="Seconds before the first restart of a series; doubles each time (at most 300).",
        low=0.0,
        high=300.0,
        mcp=False,
    )
    unhealthy_after: int = opt(
        3,
        kind="int",
        metavar="N",
        help="Failed /health checks in a row of a loaded server that count as a hang.",
        low=1,
        high=100,
        mcp=False,
    )
    max_restarts: int = opt(
        5,
        kind="int",
        metavar="N",
        help="Restarts in a row that did not bring it back before giving up (exit 1).",
        low=1,
        high=1000,
        mcp=False,
    )
    max_checks: int | None = opt(
        kind="int",
        flag="--checks",
        metavar="N",
        help="Stop after this many checks.",
        low=1,
        high=10**9,
        mcp=False,
    )
    duration_s: float | None = opt(
        kind="float",
        flag="--for",
        metavar="SECONDS",
        help="Stop after this many seconds.",
        low=0.0,
        low_open=True,
        mcp=False,
    )
    canary_s: float = opt(
        300.0,
        kind="float",
        flag="--canary",
        metavar="SECONDS",
        help="Seconds between fingerprint checks of a healthy endpoint (its arithmetic, "
        "against what it computed when proven); 0: none.",
        low=0.0,
        high=86400.0,
        mcp=False,
    )
    canary_tokens: int = opt(
        8192,
        kind="int",
        metavar="N",
        help="Tokens one fingerprint check may cost (its long prompt is shortened to fit).",
        low=128,
        high=10**6,
        mcp=False,
    )
    timeout_s: float | None = _relaunch_timeout()


@dataclass
class RollbackOptions(JobOptions):
    """``instinct rollback``: how long the relaunch of the last good plan may take."""

    job: ClassVar[str] = "rollback"

    timeout_s: float | None = _relaunch_timeout()
