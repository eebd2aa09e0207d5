"""The labels of the containers the tool starts (DESIGN.md contract).

Pure data: the planner writes them into every plan, and ``runtime.docker`` filters on them
so that ``ps``/``stop`` only ever touch what the tool created.

Labels are data, not trust: anyone can start a container with any labels (copied from
``instinct plan --json``, or garbage). So every value read back is parsed defensively
(``label_port``, ``label_text``: a bad value reads as absent, never as an exception), and
reusing an endpoint takes more than its labels (``runtime.docker_backend.verify``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from instinct_serve import __version__

LABEL_MANAGED = "instinct-serve.managed"
LABEL_MODEL = "instinct-serve.model"
LABEL_PORT = "instinct-serve.port"
LABEL_PLAN_HASH = "instinct-serve.plan-hash"
LABEL_VERSION = "instinct-serve.version"
# the host directory of the compile caches the container mounts (``instinct cache prune``
# keeps a key an endpoint still uses)
LABEL_COMPILE_CACHE = "instinct-serve.compile-cache"
# the server kind (``servers``) of an endpoint that is not vLLM: ps, watch and top ask its routes
LABEL_SERVER = "instinct-serve.server"
MANAGED_VALUE = "true"


def managed_labels(
    *, model: str, port: int, plan_hash: str, version: str = __version__
) -> dict[str, str]:
    """The labels every container the tool starts carries (DESIGN.md contract)."""
    return {
        LABEL_MANAGED: MANAGED_VALUE,
        LABEL_MODEL: model,
        LABEL_PORT: str(port),
        LABEL_PLAN_HASH: plan_hash,
        LABEL_VERSION: version,
    }


def label_args(labels: Mapping[str, str]) -> list[str]:
    """``--label k=v`` pairs for a ``docker run`` argv, in a stable order."""
    out: list[str] = []
    for key in sorted(labels):
        out += ["--label", f"{key}={labels[key]}"]
    return out


_PORT = re.compile(r"[0-9]{1,5}")
MAX_LABEL_TEXT = 512


def label_port(labels: Mapping[str, str], key: str = LABEL_PORT) -> int | None:
    """A TCP port label (1..65535, ASCII digits), or None for anything else (``²``, ``-1``,
    ``99999``, missing)."""
    text = str(labels.get(key) or "").strip()
    if not _PORT.fullmatch(text):
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def label_text(labels: Mapping[str, str], key: str) -> str | None:
    """A text label, or None when missing, empty, too long or with control characters."""
    value = labels.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_LABEL_TEXT:
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return None
    return value


# A replica group (``plan.replicas``): N endpoints behind one router, all labelled with the
# group's name (the router's container name); each carries its role, a replica its index.
LABEL_GROUP = "instinct-serve.group"
LABEL_ROLE = "instinct-serve.role"  # "replica" | "router"
LABEL_REPLICA = "instinct-serve.replica"  # the replica's index in its group: 0, 1, ...
ROLE_REPLICA = "replica"
ROLE_ROUTER = "router"

# One model across nodes (``plan.multinode``): every rank's container carries LABEL_GROUP
# (the group's name, rank 0's container name) and LABEL_ROLE (head or worker, so ps/stop
# treat it as one endpoint like a replica group), its vLLM node rank, and the group's hosts.
LABEL_NODE_RANK = "instinct-serve.node-rank"
LABEL_NODES = "instinct-serve.nodes"  # the group's host specs, comma-separated, rank order
ROLE_HEAD = "head"
ROLE_WORKER = "worker"
