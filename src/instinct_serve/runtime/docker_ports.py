"""Who holds a TCP port on a host: our containers, someone else's, or a process.

Containers are found by their published ports (and, with host networking, by our port
label or the listener's cgroup); the rest come from the host's listeners (``ss``, else
``/proc/net/tcp``). ``runtime.docker.Docker.port_holders`` hands in the running containers.
"""

from __future__ import annotations

from collections.abc import Mapping

from instinct_serve.hosts import Host
from instinct_serve.runtime.docker_data import (
    ContainerInfo,
    Listener,
    PortHolder,
    container_id_from_cgroup,
    parse_proc_net_tcp,
    parse_ss,
)


def listeners(host: Host, port: int) -> list[Listener]:
    """TCP listeners on ``port`` on the host (``ss``, else ``/proc/net/tcp``)."""
    result = host.run(["ss", "-H", "-t", "-l", "-n", "-p", "sport", "=", f":{port}"], timeout=30)
    if result.ok:
        return parse_ss(result.stdout, port)
    found: list[Listener] = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        text = host.read_text(path)
        if text:
            found += parse_proc_net_tcp(text, port)
    return found


def port_holders(host: Host, port: int, running: list[ContainerInfo]) -> list[PortHolder]:
    """Who holds ``port``: our containers, foreign containers, or other processes.

    Containers are found by their published ports (and, with host networking, by our
    port label or the listener's cgroup); the rest come from the host's listeners.
    """
    holders: list[PortHolder] = []
    seen: set[str] = set()

    def add_container(info: ContainerInfo, address: str | None) -> None:
        if info.id in seen:
            return
        seen.add(info.id)
        holders.append(
            PortHolder(
                kind="managed_container" if info.managed else "container",
                port=port,
                address=address,
                container_id=info.id,
                container_name=info.name,
                model=info.model if info.managed else None,
            )
        )

    for info in running:
        for published in info.ports:
            if published.host_port == port and published.protocol == "tcp":
                add_container(info, published.host_ip)
        if info.network_mode == "host" and info.managed and info.port == port:
            add_container(info, None)

    by_id = {c.id: c for c in running}
    seen_procs: set[tuple[str, int | None]] = set()
    for listener in listeners(host, port):
        names = [name for name, _ in listener.processes]
        if "docker-proxy" in names:
            if not holders:  # published by a container we could not inspect
                holders.append(PortHolder(kind="container", port=port, address=listener.address))
            continue
        if not listener.processes:
            if not holders and ("?", None) not in seen_procs:
                seen_procs.add(("?", None))
                holders.append(PortHolder(kind="process", port=port, address=listener.address))
            continue
        for pname, pid in listener.processes:
            owner = _container_of_pid(host, pid, by_id)
            if owner is not None:
                add_container(owner, listener.address)
            elif (pname, pid) not in seen_procs:
                seen_procs.add((pname, pid))
                holders.append(
                    PortHolder(
                        kind="process",
                        port=port,
                        address=listener.address,
                        pid=pid,
                        process=pname,
                    )
                )
    return holders


def _container_of_pid(
    host: Host, pid: int | None, by_id: Mapping[str, ContainerInfo]
) -> ContainerInfo | None:
    if pid is None or not by_id:
        return None
    text = host.read_text(f"/proc/{pid}/cgroup")
    cid = container_id_from_cgroup(text or "")
    return by_id.get(cid) if cid else None
