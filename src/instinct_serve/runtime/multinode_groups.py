"""A multi-node group as one endpoint across its nodes (``ps``/``logs``/``stop --hosts``),
and the evidence a failed group leaves.

Its ranks are found by their labels (``plan.labels``: the group, the node rank, the nodes)
on every node's docker; two host specs that reach one daemon list its containers twice, so
each container counts once (by id). A group whose head is gone while ranks still run is
``broken`` and names its survivors (a headless rank waits for a head that never comes back):
``stop`` removes them. When a group fails to start, every rank's whole log is saved beside
the journal on its host (``events/GROUP.rank<R>-<time>.log``) before the ranks are removed,
and ``logs --hosts`` reads those once the group is gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import (
    LABEL_GROUP,
    LABEL_NODE_RANK,
    LABEL_NODES,
    LABEL_ROLE,
    ROLE_HEAD,
    label_text,
)
from instinct_serve.runtime import journal
from instinct_serve.runtime.docker import Docker

SAVED_PREFIX = "rank"  # the saved logs' label: rank<R>-<time>


def _members(hosts: Sequence[Host], name: str | None = None) -> dict[str, list[tuple[Host, Any]]]:
    """The ranks of every group (or of ``name``) on ``hosts``, each container once."""
    members: dict[str, list[tuple[Host, Any]]] = {}
    seen: set[str] = set()
    for host in hosts:
        labels = {LABEL_GROUP: name} if name is not None else None
        for info in Docker(host).list_managed(labels=labels):
            group = label_text(info.labels, LABEL_GROUP)
            if group is None or label_text(info.labels, LABEL_NODE_RANK) is None:
                continue
            if info.id in seen:  # two specs of one machine list its containers twice
                continue
            seen.add(info.id)
            members.setdefault(group, []).append((host, info))
    for found in members.values():
        found.sort(key=lambda e: _rank(e[1].labels))
    return members


@dataclass
class GroupRow:
    """One multi-node group as ``ps --hosts`` shows it."""

    name: str
    model: str | None
    port: int | None
    status: str
    health: str | None
    nodes: list[dict[str, Any]]
    survivors: list[dict[str, Any]] = field(default_factory=list)  # broken: ranks still up

    @property
    def broken(self) -> bool:
        return bool(self.survivors)

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
            "broken": self.broken,
            "survivors": self.survivors,
            "nodes": self.nodes,
        }


def _status(found: list[tuple[Host, Any]], head: Any) -> tuple[str, list[dict[str, Any]]]:
    """``running``, ``R/N ranks``, or ``broken`` (the head gone, ranks still running: they
    wait for a head that will not come back), with the survivors."""
    expected = len((label_text(found[0][1].labels, LABEL_NODES) or "").split(","))
    running = [(h, i) for h, i in found if i.state.running]
    if (head is None or not head.state.running) and running:
        survivors = [
            {"rank": _rank(i.labels), "host": _rank_host(i.labels) or h.name, "container": i.name}
            for h, i in running
        ]
        names = ", ".join(f"rank {s['rank']} on {s['host']}" for s in survivors)
        return f"broken: head gone, {names} still running", survivors
    if len(running) == expected == len(found):
        return "running", []
    return f"{len(running)}/{expected} ranks", []


def group_rows(hosts: Sequence[Host], *, probe: bool = True) -> list[GroupRow]:
    """The multi-node groups on ``hosts``, one row each (their ranks inside it)."""
    rows = []
    for name, found in sorted(_members(hosts).items()):
        head = next((e for e in found if e[1].labels.get(LABEL_ROLE) == ROLE_HEAD), None)
        status, survivors = _status(found, head[1] if head else None)
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
                survivors=survivors,
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
    """Stop and remove every rank of group ``name`` on ``hosts`` (ours by label only; a
    broken group's survivors too)."""
    stopped = []
    for host, info in _members(hosts, name).get(name, []):
        with contextlib.suppress(InstinctError):
            Docker(host).stop(info.id)
            stopped.append(
                {
                    "name": info.name,
                    "host": _rank_host(info.labels) or host.name,
                    "model": info.model,
                    "removed": True,
                }
            )
    if stopped:  # a generated --public key goes with the group (runtime.keys)
        from instinct_serve.runtime import keys

        for host in hosts:
            with contextlib.suppress(InstinctError):
                keys.remove_key(host, keys.key_path(host, name))
    return stopped


def group_logs(hosts: Sequence[Host], name: str, tail: int) -> list[str]:
    """Every rank's log, each line prefixed with its rank and host (each container once);
    once the group is gone, the logs saved when it failed."""
    lines = []
    for host, info in _members(hosts, name).get(name, []):
        text = Docker(host).logs(info.name, tail=tail)
        where = _rank_host(info.labels) or host.name
        rank = _rank(info.labels)
        lines += [f"[rank {rank} {where}] {ln}" for ln in text.splitlines()]
    return lines or saved_group_logs(hosts, name, tail)


def saved_group_logs(hosts: Sequence[Host], name: str, tail: int) -> list[str]:
    """The rank logs a failed start saved on each host (``save_rank_logs``), each file once
    (two host specs may reach one machine), prefixed like live ones plus ``saved``."""
    lines: list[str] = []
    seen: set[str] = set()
    for host in hosts:
        for label, text in journal.saved_logs(host, name, SAVED_PREFIX, tail).items():
            if label in seen:
                continue
            seen.add(label)
            rank = label.removeprefix(SAVED_PREFIX).split("-", 1)[0]
            lines += [f"[rank {rank} {host.name} saved {label}] {ln}" for ln in text]
    return lines


def save_rank_logs(
    group: str, ranks: Sequence[tuple[int, Host, Docker, str, list[str]]]
) -> list[dict[str, Any]]:
    """Before a failed group's ranks are removed: each rank's whole log (docker's, else the
    lines streamed so far) saved on its own host; where each went."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    saved = []
    for rank, host, docker, container, streamed in ranks:
        text = "\n".join(streamed)
        with contextlib.suppress(InstinctError):
            text = docker.logs(container, tail=None) or text
        path = journal.save_log(host, group, f"{SAVED_PREFIX}{rank}-{stamp}", text)
        saved.append(
            {"rank": rank, "host": host.name, "path": path, "lines": len(text.splitlines())}
        )
    return saved
