"""Claim an endpoint's name and port: refuse what is foreign, clear what is ours.

The deployer's first concept (``runtime.serve``): before a launch, whatever holds the
plan's port or name is looked at. Something this tool did not start is never touched (an
error names it); a stopped endpoint of ours is removed, its log saved first; a running one
of ours is replaced only with ``--replace`` (or a yes to the question, for the same model).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import Host
from instinct_serve.plan.labels import LABEL_GROUP, LABEL_ROLE, ROLE_ROUTER, label_text
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import intent
from instinct_serve.runtime.address import suggest_port
from instinct_serve.runtime.backend import Backend, Occupant, Target
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.docker_backend import DockerBackend
from instinct_serve.runtime.docker_data import ContainerInfo
from instinct_serve.runtime.events import EventSink, Replaced
from instinct_serve.runtime.native import NativeBackend
from instinct_serve.runtime.settings import ServeSettings

Confirm = Callable[[str], bool]


def discard_target(host: Host, target: Target, *, keep: bool) -> bool:
    """Stop (and unless ``keep`` remove) one of our endpoints, whatever its engine."""
    if target.engine == "docker":
        return DockerBackend(host).discard(target.handle, keep=keep)
    return NativeBackend(host, "vllm").discard(target.name, keep=keep)


def keep_stopped_log(host: Host, target: Target) -> str | None:
    """A stopped container of ours is evidence (why it stopped): its log is saved beside
    the journal (``events/NAME.stopped-<time>.log``) before serve removes it to take its
    name or port; the path, or None (native: its log file stays anyway)."""
    if target.engine != "docker":
        return None
    from datetime import UTC, datetime

    from instinct_serve.runtime import journal

    try:
        text = Docker(host).logs(target.handle, tail=None)
    except InstinctError:
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    path = journal.save_log(host, target.name, f"stopped-{stamp}", text)
    journal.record(host, target.name, "removed_stopped", container=target.name, saved=path)
    return path


def routed_group(host: Host, target: Target) -> list[ContainerInfo]:
    """The replica group whose router ``target`` is (router first, then its replicas), or
    [] when it routes none. A group is one endpoint: replacing its router alone would leave
    its replicas holding their GPUs (and listed as endpoints of their own)."""
    if target.engine != "docker" or not target.managed:
        return []
    docker = Docker(host)
    try:
        info = docker.get(target.handle)
        if info is None or not info.managed:
            return []
        labels = info.labels
        if label_text(labels, LABEL_ROLE) != ROLE_ROUTER or label_text(labels, LABEL_GROUP) != (
            info.name
        ):
            return []
        members = docker.list_managed(labels={LABEL_GROUP: info.name})
    except NotReadyError:
        return []
    return sorted(members, key=lambda c: label_text(c.labels, LABEL_ROLE) != ROLE_ROUTER)


def remove_group(host: Host, members: list[ContainerInfo]) -> list[str]:
    """Stop and remove a replica group (``routed_group``: router first, no request in),
    and forget the keys of its members; the names removed."""
    from instinct_serve.runtime import keys

    backend, removed = DockerBackend(host), []
    for info in members:
        if backend.discard(info.id, keep=False):
            removed.append(info.name)
        with contextlib.suppress(InstinctError):
            keys.remove_key(host, keys.key_path(host, info.name))
    return removed


def refuse_foreign(host: Host, plan: LaunchPlan, occupants: list[Occupant]) -> None:
    """Stop with an error naming whatever foreign thing holds the port or the name."""
    on_port = [o for o in occupants if not o.managed and o.target is None]
    by_name = [o for o in occupants if not o.managed and o.target is not None]
    if on_port:
        raise NotReadyError(
            f"port {plan.port} on {host.name} is held by {on_port[0].description}",
            fix=f"choose another port, e.g. --port {suggest_port(plan.port)}, or stop "
            "what holds it; instinct-serve never touches what it did not start",
            agent_fix=f"choose another `port` (e.g. {suggest_port(plan.port)}), or stop what "
            "holds it; instinct-serve never touches what it did not start",
            id="port_in_use",
            details={"port": plan.port, "holder": on_port[0].to_dict()},
        )
    if by_name:
        raise NotReadyError(
            f"the name {plan.container_name} is taken on {host.name} by {by_name[0].description}",
            fix="choose another name with --name; instinct-serve never touches what it did "
            "not start",
            agent_fix="choose another `name`; instinct-serve never touches what it did not start",
            id="container_name_conflict",
            details={"name": plan.container_name, "holder": by_name[0].to_dict()},
        )


def impostor(plan: LaunchPlan, target: Target, why: str) -> NotReadyError:
    """An endpoint labelled as this plan's that does not run it: named, not touched."""
    holds_name = target.name == plan.container_name
    what = f"{target.describe()} carries the labels of this plan, but {why}"
    return NotReadyError(
        f"{what}: not reused, and left as it is",
        fix=(
            "choose another name with --name"
            if holds_name
            else f"choose another port, e.g. --port {suggest_port(plan.port)}"
        )
        + "; inspect it with `docker inspect "
        + target.name
        + "` (labels can be copied: instinct-serve only reuses what runs the plan)",
        id="container_name_conflict" if holds_name else "port_in_use",
        details={
            "name": target.name,
            "port": plan.port,
            "why": why,
            "holder": {"name": target.name, "engine": target.engine, "managed": False},
        },
    )


def clear_the_way(
    host: Host,
    plan: LaunchPlan,
    backend: Backend,
    settings: ServeSettings,
    confirm: Confirm | None,
    *,
    note: Callable[[str], None],
    emit: EventSink,
    replaced: list[str],
) -> None:
    """Free the plan's port and name for its launch: foreign holders refused, stopped
    endpoints of ours removed, running ones replaced when allowed (their names appended
    to ``replaced`` as they go)."""
    occupants = backend.occupants(plan)
    refuse_foreign(host, plan, occupants)
    for occ in occupants:
        target = occ.target
        assert target is not None
        if not target.running:
            kept = keep_stopped_log(host, target)
            if discard_target(host, target, keep=False):
                where = f" (its log kept at {kept})" if kept else ""
                note(f"removed {target.name}, a stopped endpoint of an earlier run{where}")
            continue
        same_model = target.model == plan.model
        group = routed_group(host, target)
        if not settings.replace:
            whole = f" (the router of {len(group) - 1} replicas: all go)" if group else ""
            question = (
                f"{target.describe()}{whole} runs on port {target.port or plan.port}. Replace it?"
            )
            if same_model and confirm is not None and confirm(question):
                pass
            else:
                raise InstinctError(
                    f"{target.describe()} already holds "
                    + (f"port {plan.port}" if target.port == plan.port else "the name")
                    + f" on {host.name}"
                    + (" with a different configuration" if same_model else ""),
                    fix="pass --replace to stop it and launch this plan instead, or use "
                    "another --port"
                    + ("" if target.name != plan.container_name else " and --name"),
                    id="endpoint_exists" if same_model else "port_in_use_managed",
                    details={"occupant": occ.to_dict()},
                )
        intent.replacing(host, plan, target.name, getattr(backend, "device_root", ""))
        if group:  # a replica group goes whole: its router and every replica
            gone = remove_group(host, group)
            replaced.extend(gone)
            message = f"stopped and removed the replica group {target.name}: {', '.join(gone)}"
            emit(Replaced(container=target.name, message=message))
            continue
        discard_target(host, target, keep=False)
        replaced.append(target.name)
        emit(Replaced(container=target.name, message=f"stopped and removed {target.name}"))
