"""Ports for tests: one helper for every test and capture script that hands a loopback
port to a server it starts (the tool, docker, sshd, vLLM).

Ports come from under the kernel's ephemeral range: a client connection's local port is
never one of them, so nothing binds them between the choice and the server's bind. CI
failed twice on that race (docker: "bind: address already in use" on a port that was free
when chosen) while ports came from ``bind(("127.0.0.1", 0))``, which is in that range.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

from instinct_serve.runtime.tunnel import bindable

SPARE_MARGIN = 256  # the tool's spare ports are near the given one (upgrade.SPARE_PORTS)
LOWEST = 10_000
SLICES = 16  # slice 0: a plain pytest; 1..14: xdist workers gw0..gw13; 15: the real-vLLM tier

_handed_out: set[int] = set()


def _below_ephemeral() -> range:
    """Ports under the ephemeral range (``ip_local_port_range``)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(LOWEST, max(LOWEST, low))


def slot() -> int:
    """This process's slice: ``INSTINCT_TEST_PORT_SLOT`` when set (``.ci/run`` gives the
    real-vLLM tier its own), else 1 + the xdist worker number, else 0."""
    explicit = os.environ.get("INSTINCT_TEST_PORT_SLOT", "")
    if explicit.isdigit():
        return int(explicit) % SLICES
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw3"
    if worker[2:].isdigit():
        return 1 + int(worker[2:]) % (SLICES - 2)
    return 0


def _slice(below: range) -> range:
    """This process's share of ``below``, less a margin at its top for the spare ports the
    tool takes above a given one (they stay inside the slice too)."""
    width = len(below) // SLICES
    start = below.start + slot() * width
    return range(start, max(start, start + width - SPARE_MARGIN))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, not handed out before in this process, from this
    process's slice under the ephemeral range when there is room (``_slice``); else the
    kernel's pick."""
    pool = _slice(_below_ephemeral())
    for _ in range(200 if len(pool) > 200 else 0):
        port = random.choice(pool)
        if port not in _handed_out and bindable(port):
            _handed_out.add(port)
            return port
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port found")


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 now and not handed out
    before (a replica group takes the ports after its router's)."""
    for _ in range(50):
        first = free_port()
        run = range(first, first + count)
        if run[-1] < 65536 and not _handed_out & set(run[1:]) and all(map(bindable, run[1:])):
            _handed_out.update(run)
            return first
    raise RuntimeError(f"no {count} consecutive free ports found")
