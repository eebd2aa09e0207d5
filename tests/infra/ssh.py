"""A real OpenSSH server on 127.0.0.1 for tests that cross an ssh boundary (pytest plugin).

Usage (the fixture is session-scoped; start-up costs about 0.2 s once per session)::

    def test_remote(sshd: SshServer) -> None:
        host = sshd.host()                    # an SshHost using the fixture's ssh_config
        assert host.run(["echo", "hi"]).stdout == "hi\\n"

    def test_cli_remote(sshd: SshServer) -> None:
        subprocess.run(["instinct", "check", "--host", sshd.host_spec, "--json"],
                       env=sshd.env())      # INSTINCT_SSH_CONFIG points at the config

What it sets up, all in one temp dir (never /etc/ssh or ~/.ssh):

- ``/usr/sbin/sshd -D`` on a free 127.0.0.1 port with a generated ed25519 host key, keys only
  (``StrictModes no`` because the authorized_keys file lives under /tmp, ``UsePAM no``),
  logging to ``sshd.log`` in that dir, stopped at the end of the session.
- A generated client key that is authorized, and an ``ssh_config`` whose ``Host`` alias
  (``instinct-test``) resolves to that port, user, key and a private known_hosts file.
  ``Host 127.0.0.1`` gets the same key and known_hosts, so ``user@127.0.0.1:PORT`` specs work
  with the config too.
- ``AcceptEnv *`` on the server: a client config may carry ``SetEnv NAME=value`` lines (see
  ``client(set_env=...)``) to shape the remote *login environment*, e.g. a remote HF_TOKEN
  or PATH, without touching any file on the "remote" side.

Variants for failure tests, each its own ssh_config with the same alias: ``unauthorized()``
(a second key that is NOT in authorized_keys), ``unknown_host_key()`` (empty known_hosts),
``closed_port()`` (a port where nothing listens).

Notes for reuse: the "remote" is this machine, so a test can inspect both ends (files the
remote wrote, /proc of the processes sshd started). ``docker -H ssh://...`` and docker-py's
ssh transport read only ~/.ssh/config, not ``INSTINCT_SSH_CONFIG``: run ``docker`` on the
remote through ``sshd.host().run([...])`` (which is what the product does) instead.

When sshd or ssh is missing the fixture skips, unless ``INSTINCT_TEST_REQUIRE`` (comma list)
contains ``ssh``; then it fails, so CI never passes without crossing the real boundary.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from instinct_serve.hosts import SshHost
from tests.infra.ports import free_port

SSHD = "/usr/sbin/sshd"  # sshd re-executes itself and insists on an absolute path
ALIAS = "instinct-test"
START_TIMEOUT_S = 10.0


def required(component: str) -> bool:
    """True when INSTINCT_TEST_REQUIRE names ``component`` (a skip must become a failure)."""
    wanted = os.environ.get("INSTINCT_TEST_REQUIRE", "")
    return component in {part.strip() for part in wanted.split(",")}


def skip_or_fail(component: str, reason: str) -> NoReturn:
    """Skip the test, or fail it when CI demands the real ``component``."""
    if required(component):
        pytest.fail(f"{reason} (INSTINCT_TEST_REQUIRE contains {component!r})")
    pytest.skip(reason)


@dataclass(frozen=True)
class SshClient:
    """One client's view of the server: an ssh_config file whose alias reaches it."""

    ssh_config: Path
    alias: str
    user: str
    port: int

    @property
    def host_spec(self) -> str:
        """The value for ``--host`` (resolved through ``INSTINCT_SSH_CONFIG``, see ``env``)."""
        return self.alias

    def host(self, **overrides: object) -> SshHost:
        """An ``SshHost`` on this config; overrides go to the dataclass (e.g. connect_timeout)."""
        kwargs: dict[str, object] = {"host": self.alias, "ssh_config": str(self.ssh_config)}
        kwargs.update(overrides)
        return SshHost(**kwargs)  # type: ignore[arg-type]

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment for a subprocess ``instinct`` run that uses this config."""
        env = dict(os.environ if base is None else base)
        env["INSTINCT_SSH_CONFIG"] = str(self.ssh_config)
        env.pop("ROCM_SSH_HOST", None)
        env.pop("ROCM_SSH_USER", None)
        return env


@dataclass(frozen=True)
class SshServer(SshClient):
    """The running sshd plus the authorized client (``ssh_config``/``alias`` reach it)."""

    dir: Path
    pid: int
    host_key_pub: Path
    client_key: Path
    known_hosts: Path
    log: Path

    def client(
        self,
        name: str,
        *,
        key: Path | None = None,
        known_hosts: Path | None = None,
        port: int | None = None,
        set_env: Mapping[str, str] | None = None,
    ) -> SshClient:
        """Another ssh_config (same alias) with a different key, known_hosts, port or env."""
        config = self.dir / f"ssh_config.{name}"
        config.write_text(
            _client_config(
                alias=self.alias,
                port=self.port if port is None else port,
                user=self.user,
                key=self.client_key if key is None else key,
                known_hosts=self.known_hosts if known_hosts is None else known_hosts,
                set_env=set_env or {},
            )
        )
        return SshClient(
            ssh_config=config,
            alias=self.alias,
            user=self.user,
            port=self.port if port is None else port,
        )

    def unauthorized(self) -> SshClient:
        """A client whose key the server does not accept ("Permission denied (publickey)")."""
        key = self.dir / "stranger_ed25519"
        if not key.exists():
            _keygen(key)
        return self.client("unauthorized", key=key)

    def unknown_host_key(self) -> SshClient:
        """A client with an empty known_hosts ("Host key verification failed")."""
        empty = self.dir / "known_hosts.empty"
        empty.write_text("")
        return self.client("unknown-host-key", known_hosts=empty)

    def closed_port(self) -> SshClient:
        """A client pointed at a 127.0.0.1 port where nothing listens ("Connection refused")."""
        return self.client("closed-port", port=free_port())


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
        capture_output=True,
    )


def _client_config(
    *,
    alias: str,
    port: int,
    user: str,
    key: Path,
    known_hosts: Path,
    set_env: Mapping[str, str],
) -> str:
    common = [
        f"  User {user}",
        f"  IdentityFile {key}",
        "  IdentitiesOnly yes",
        "  IdentityAgent none",
        f"  UserKnownHostsFile {known_hosts}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ControlMaster no",
        "  ControlPath none",
    ]
    if set_env:
        common.append("  SetEnv " + " ".join(f'"{k}={v}"' for k, v in set_env.items()))
    lines = [f"Host {alias}", "  HostName 127.0.0.1", f"  Port {port}", *common]
    lines += ["Host 127.0.0.1", *common]
    return "\n".join(lines) + "\n"


def _sshd_config(directory: Path, port: int) -> str:
    return (
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {directory / 'host_ed25519'}",
                f"PidFile {directory / 'sshd.pid'}",
                f"AuthorizedKeysFile {directory / 'authorized_keys'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "AcceptEnv *",
                "AllowTcpForwarding yes",
                "AllowStreamLocalForwarding yes",
                "MaxStartups 100:30:200",
                "LogLevel VERBOSE",
                "Subsystem sftp internal-sftp",
            ]
        )
        + "\n"
    )


def _wait_listening(port: int, proc: subprocess.Popen[bytes], deadline: float) -> bool:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _start(directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start sshd on a free port; retry when another process grabbed the port meanwhile."""
    log = directory / "sshd.log"
    for _attempt in range(5):
        port = free_port()
        config = directory / "sshd_config"
        config.write_text(_sshd_config(directory, port))
        test = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True, text=True)
        if test.returncode != 0:
            pytest.fail(f"sshd rejected its test config: {test.stderr.strip()}")
        proc = subprocess.Popen(
            [SSHD, "-D", "-f", str(config), "-E", str(log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if _wait_listening(port, proc, time.monotonic() + START_TIMEOUT_S):
            return proc, port
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=5)
    pytest.fail(f"sshd did not start; its log:\n{log.read_text() if log.exists() else '(none)'}")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A running loopback sshd and an authorized client config (see the module docstring)."""
    if not os.access(SSHD, os.X_OK):
        skip_or_fail("ssh", f"{SSHD} is not installed (apt-get install openssh-server)")
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            skip_or_fail("ssh", f"{tool} is not installed (apt-get install openssh-client)")
    if os.geteuid() == 0:  # privilege separation directory, needed when sshd runs as root
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)

    directory = tmp_path_factory.mktemp("sshd")
    _keygen(directory / "host_ed25519")
    _keygen(directory / "client_ed25519")
    shutil.copy(directory / "client_ed25519.pub", directory / "authorized_keys")

    proc, port = _start(directory)
    try:
        known_hosts = directory / "known_hosts"
        host_pub = directory / "host_ed25519.pub"
        known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub.read_text().strip()}\n")
        user = getpass.getuser()
        config = directory / "ssh_config"
        config.write_text(
            _client_config(
                alias=ALIAS,
                port=port,
                user=user,
                key=directory / "client_ed25519",
                known_hosts=known_hosts,
                set_env={},
            )
        )
        server = SshServer(
            ssh_config=config,
            alias=ALIAS,
            user=user,
            port=port,
            dir=directory,
            pid=proc.pid,
            host_key_pub=host_pub,
            client_key=directory / "client_ed25519",
            known_hosts=known_hosts,
            log=directory / "sshd.log",
        )
        probe = subprocess.run(
            ["ssh", "-F", str(config), ALIAS, "true"],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        if probe.returncode != 0:
            pytest.fail(
                f"loopback ssh login failed: {probe.stderr.strip()}\n"
                f"sshd log:\n{server.log.read_text() if server.log.exists() else ''}"
            )
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
