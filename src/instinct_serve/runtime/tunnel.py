"""Reaching an endpoint that listens on the host's loopback: directly here, by ``ssh -L`` there.

vLLM containers publish their port on ``127.0.0.1`` of the GPU host by default, so from
another machine the health checks, warm-up and coherence probe go through a local port
forward over the same ssh connection settings as every other command (``SshHost.ssh_argv``:
batch mode, the user's config and keys). For ``LocalHost`` it is a no-op.

    with tunnel(host, 8000) as base_url:   # http://127.0.0.1:LOCAL
        wait_healthy(base_url, ...)
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from types import TracebackType
from typing import IO

from instinct_serve.errors import HostError, UsageError
from instinct_serve.hosts import Host, SshHost, ssh_error, ssh_missing

DEFAULT_TUNNEL_TIMEOUT_S = 20.0
_BIND_RETRIES = 3


def free_local_port() -> int:
    """A TCP port free on this machine's loopback right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bindable(port: int) -> bool:
    """Whether a TCP socket can bind ``port`` on this machine's loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Tunnel:
    """A context manager whose value is the base URL (``http://127.0.0.1:PORT``) to use."""

    def __init__(
        self,
        host: Host,
        remote_port: int,
        *,
        remote_host: str = "127.0.0.1",
        local_port: int | None = None,
        timeout: float = DEFAULT_TUNNEL_TIMEOUT_S,
    ) -> None:
        if not 0 < remote_port < 65536:
            raise UsageError(f"invalid port {remote_port}", id="bad_port")
        self.host = host
        self.remote_port = remote_port
        self.remote_host = remote_host
        self.requested_local_port = local_port
        self.timeout = timeout
        self.local_port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        if self.host.is_local:
            return f"http://{self.remote_host}:{self.remote_port}"
        if self.local_port is None:
            raise RuntimeError("the tunnel is not open")
        return f"http://127.0.0.1:{self.local_port}"

    def alive(self) -> bool:
        """True for a local host, or while the ssh forward runs."""
        return self.host.is_local or (self.process is not None and self.process.poll() is None)

    def open(self) -> str:
        """Start the forward and wait (bounded) until it carries connections."""
        if self.host.is_local:
            return self.base_url
        if not isinstance(self.host, SshHost):
            raise HostError(f"cannot tunnel to {self.host.name}", id="tunnel_unsupported")
        if self.requested_local_port is not None:
            if not bindable(self.requested_local_port):
                raise HostError(
                    f"local port {self.requested_local_port} is already in use",
                    fix="pick another local port, or leave it to the tool",
                    id="tunnel_failed",
                )
            candidates = [self.requested_local_port]
        else:
            candidates = [free_local_port() for _ in range(_BIND_RETRIES)]
        for attempt, port in enumerate(candidates):
            if self._start(self.host, port):
                return self.base_url
            if (
                attempt + 1 < len(candidates)
                and "address already in use" in self._error_text().lower()
            ):
                continue  # someone took the port we picked meanwhile: try the next one
            break
        raise self._failure()

    def _start(self, host: SshHost, port: int) -> bool:
        self.close()
        argv = host.ssh_argv()
        target = argv.pop()
        argv += [
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-o",
            "LogLevel=VERBOSE",  # "Authenticated to ...": the forward is ours, not a squatter's
            "-L",
            f"127.0.0.1:{port}:{self.remote_host}:{self.remote_port}",
            target,
        ]
        # A file, not a pipe: ssh may warn for hours and must never block on a full pipe.
        # Append mode: our seek-and-read never moves where ssh's writes land.
        self._stderr = tempfile.TemporaryFile(mode="a+b")  # noqa: SIM115 (closed by close())
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                start_new_session=True,  # our __exit__ ends it, not the terminal's Ctrl-C
            )
        except FileNotFoundError as exc:
            raise ssh_missing() from exc
        self.local_port = port
        deadline = time.monotonic() + self.timeout
        accepting_since: float | None = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if _accepts(port):
                now = time.monotonic()
                accepting_since = accepting_since or now
                text = self._error_text()
                authenticated = "Authenticated to" in text or "Authentication succeeded" in text
                # ssh binds the local port only after authenticating; an ssh that does not
                # log that gets a second to fail its bind (ExitOnForwardFailure) instead.
                if authenticated or now - accepting_since >= 1.0:
                    time.sleep(0.05)
                    return self.process.poll() is None
            time.sleep(0.05)
        return False

    def _error_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", errors="replace")

    def _failure(self) -> HostError:
        text = self._error_text()
        code = None if self.process is None else self.process.poll()
        self.close()
        assert isinstance(self.host, SshHost)
        lines = [ln for ln in text.strip().splitlines() if not ln.startswith("Authenticated")]
        if code == 255 and "address already in use" not in text.lower():
            return ssh_error(self.host, "\n".join(lines))
        why = lines[-1] if lines else f"no forward within {self.timeout:g} s"
        return HostError(
            f"cannot forward 127.0.0.1:{self.remote_port} of {self.host.name}: {why}",
            fix="check that sshd allows TCP forwarding (AllowTcpForwarding yes) on the host",
            id="tunnel_failed",
        )

    def close(self) -> None:
        """Stop the forward (idempotent)."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> str:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def tunnel(
    host: Host,
    remote_port: int,
    *,
    remote_host: str = "127.0.0.1",
    local_port: int | None = None,
    timeout: float = DEFAULT_TUNNEL_TIMEOUT_S,
) -> Tunnel:
    """``with tunnel(host, port) as base_url:``: the endpoint as seen from this machine."""
    return Tunnel(
        host, remote_port, remote_host=remote_host, local_port=local_port, timeout=timeout
    )


class LazyTunnel:
    """The base URL of one port on ``host``, its tunnel opened on first use and kept
    until ``close``: every probe of a deployer goes through one forward."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._tunnel: Tunnel | None = None
        self._url: str | None = None

    def url(self, port: int) -> str:
        if self._url is None:
            tun = Tunnel(self.host, port)
            self._url = tun.open()
            self._tunnel = tun
        return self._url

    def close(self) -> None:
        if self._tunnel is not None:
            self._tunnel.close()
            self._tunnel = self._url = None
