"""ssh connection sharing (``SshHost.command_argv``): one handshake for many short commands,
never shared across configurations, sockets in a private directory, streams unshared."""

from __future__ import annotations

import os
import stat
import time

import pytest

from instinct_serve.hosts import MULTIPLEX_ENV, SshHost, control_dir
from tests.infra.ssh import SshServer

pytestmark = pytest.mark.ssh


def test_control_dir_is_private() -> None:
    path = control_dir()
    assert path is not None
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def test_the_socket_name_depends_on_the_configuration(tmp_path: object) -> None:
    a = SshHost("box", user="u", ssh_config="/x/one").control_path()
    b = SshHost("box", user="u", ssh_config="/x/two").control_path()
    c = SshHost("box", user="u", port=2222, ssh_config="/x/one").control_path()
    assert a and b and c and len({a, b, c}) == 3
    assert SshHost("box", multiplex=False).control_path() is None
    argv = SshHost("box", ssh_config="/x/one").command_argv()
    assert "ControlMaster=auto" in argv and argv[-2:] == ["-T", "box"]
    assert "ControlMaster=auto" not in SshHost("box").ssh_argv()  # tunnels: own connection


def test_off_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MULTIPLEX_ENV, "0")
    assert SshHost("box").control_path() is None
    assert SshHost("box").command_argv() == SshHost("box").ssh_argv()


def test_commands_share_one_connection(sshd: SshServer) -> None:
    host = sshd.host()
    assert host.run(["true"]).ok  # opens the master
    start = time.monotonic()
    for _ in range(5):
        assert host.run(["echo", "hi"]).stdout == "hi\n"
    shared = (time.monotonic() - start) / 5
    single = sshd.host(multiplex=False)
    start = time.monotonic()
    for _ in range(5):
        assert single.run(["echo", "hi"]).stdout == "hi\n"
    unshared = (time.monotonic() - start) / 5
    assert shared < unshared, (shared, unshared)
    # a client with a key the server refuses never rides on the authorized connection
    from instinct_serve.errors import HostError

    with pytest.raises(HostError) as refused:
        sshd.unauthorized().host().run(["true"])
    assert refused.value.id == "ssh_auth_failed"


def test_a_stream_ends_when_it_is_killed(sshd: SshServer) -> None:
    proc = sshd.host().spawn(["sh", "-c", "echo start; sleep 30"])
    assert proc.stdout is not None and proc.stdout.readline() == "start\n"
    proc.terminate()
    start = time.monotonic()
    assert proc.stdout.read() == ""  # EOF at once: no master holds the pipe
    assert time.monotonic() - start < 5
    proc.wait(timeout=5)
