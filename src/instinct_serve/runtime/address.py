"""Where clients reach a host: its public address, the ssh words that reach it, a free port.

Shared by the deployers (the endpoint document's ``base_url`` and ``tunnel``, the port a
conflict suggests) and ``serve --hosts`` (the head's address the other nodes dial).
"""

from __future__ import annotations

import subprocess

from instinct_serve.hosts import Host, SshHost
from instinct_serve.plan.model import LOOPBACK


def ssh_words(host: Host) -> list[str]:
    """``ssh [-F CONFIG] [-p PORT] TARGET`` as a user would type it for this host."""
    if not isinstance(host, SshHost):
        return []
    argv = ["ssh"]
    if host.ssh_config:
        argv += ["-F", host.ssh_config]
    if host.port:
        argv += ["-p", str(host.port)]
    return [*argv, host.target]


def public_address(host: Host) -> str:
    """The name clients on the network use for the host: this machine's own address (the
    one its default route leaves from), or the ssh config's HostName."""
    if host.is_local:
        return local_address()
    if isinstance(host, SshHost):
        try:
            out = subprocess.run(
                [*ssh_words(host)[:-1], "-G", host.target],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError):
            return host.address
        for line in out.stdout.splitlines():
            key, _, value = line.partition(" ")
            if key == "hostname" and value.strip():
                return value.strip()
    return host.address


def local_address() -> str:
    """This machine's address on its network (no packet is sent), else its host name."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: a route lookup, nothing sent
            address = str(sock.getsockname()[0])
    except OSError:
        address = ""
    if address and not address.startswith("127.") and address != "0.0.0.0":
        return address
    return socket.gethostname() or LOOPBACK


def suggest_port(port: int) -> int:
    """A nearby port free on this machine (a hint only)."""
    import socket

    for candidate in range(port + 1, min(port + 50, 65535)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    return port + 1
