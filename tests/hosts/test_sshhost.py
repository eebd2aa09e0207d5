"""SshHost against a real sshd on 127.0.0.1 (tests/infra/ssh.py): the remote side of Host.

The "remote" is this machine, so the tests can look at both ends: the ssh client's argv
here, and the processes sshd starts there.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from instinct_serve.errors import HostError
from instinct_serve.hosts import Host, SshHost, parse_host_spec
from tests.infra.ssh import SshServer

from .argv_audit import recorded_argv

pytestmark = pytest.mark.ssh

NASTY = [
    "two words",
    "  leading and trailing  ",
    "it's",
    '"double"',
    "semi;colon; echo injected",
    "$(echo injected)",
    "`echo injected`",
    "line one\nline two",
    "tab\there",
    "*",
    "~",
    "$HOME ${HOME}",
    "back\\slash\\",
    "-n",
    "--",
    "",
    "a|b&c>d<e",
    "!bang #hash",
    "ünïcødé ✓",
    "'\"'\"'",
]


def _split0(text: str) -> list[str]:
    return text.split("\0")[:-1]


def test_is_a_host(sshd: SshServer) -> None:
    host = sshd.host()
    assert isinstance(host, Host)
    assert not host.is_local and host.name == sshd.alias


def test_run(sshd: SshServer) -> None:
    result = sshd.host().run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.returncode, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.argv == ("sh", "-c", "echo out; echo err >&2; exit 3")
    ok = sshd.host().run(["id", "-un"])
    assert ok.ok and ok.stdout.strip() == sshd.user


def test_missing_remote_executable_is_127(sshd: SshServer) -> None:
    result = sshd.host().run(["instinct-no-such-tool-xyz"])
    assert result.returncode == 127


def test_remote_exit_255_is_the_commands_not_an_ssh_failure(sshd: SshServer) -> None:
    result = sshd.host().run(["sh", "-c", "echo 'tool: no GPU' >&2; exit 255"])
    assert result.returncode == 255 and "no GPU" in result.stderr


def test_nasty_arguments_arrive_intact(sshd: SshServer, tmp_path: Path) -> None:
    marker = tmp_path / "injected"
    args = [*NASTY, f"$(touch {marker})", f"; touch {marker}", f"`touch {marker}`"]
    script = 'for a in "$@"; do printf "%s\\0" "$a"; done'
    result = sshd.host().run(["sh", "-c", script, "sh", *args])
    assert result.ok, result.stderr
    assert _split0(result.stdout) == args
    assert not marker.exists()


@pytest.mark.parametrize("arg", ["semi;colon", "$(id)", "`id`", "quo'te", "new\nline"])
def test_printf_echoes_one_argument(sshd: SshServer, arg: str) -> None:
    assert sshd.host().run(["printf", "%s", arg]).stdout == arg


# Any text an argv can carry: no NUL (C strings), no lone surrogates (not encodable).
ARG_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(ARG_CHARS, max_size=40), max_size=4))
def test_any_argv_round_trips(sshd: SshServer, args: list[str]) -> None:
    result = sshd.host().run(
        ["sh", "-c", 'for a in "$@"; do printf "%s\\0" "$a"; done', "sh", *args]
    )
    assert _split0(result.stdout) == args


def test_read_text_exists_which(sshd: SshServer, tmp_path: Path) -> None:
    host = sshd.host()
    path = tmp_path / "name with spaces; and $(x).txt"
    path.write_text("remote text\nline 2\n")
    assert host.read_text(str(path)) == "remote text\nline 2\n"
    assert host.read_text(str(tmp_path / "missing")) is None
    assert host.exists(str(path)) and not host.exists(str(tmp_path / "missing"))
    sh = host.which("sh")
    assert sh is not None and sh.startswith("/") and sh.endswith("/sh")
    echo = host.which("echo")  # a shell builtin too: which answers the executable, as locally
    assert echo is not None and echo.startswith("/")
    assert host.which("instinct-no-such-tool-xyz") is None
    assert host.which(sh) == sh


def test_env_arrives_and_never_appears_in_any_argv(sshd: SshServer) -> None:
    secret = "hf_SENTINEL_ssh_9c1e 'q' $x"
    # The remote program finds the value in its environment, then scans the command line
    # of every process on the machine (sshd's children, the sh prologue, and our local ssh
    # client, which is alive at that moment) for it.
    scan = (
        "import os\n"
        "s = os.environb[b'INSTINCT_SECRET']\n"
        "hits = []\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        data = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if s in data:\n"
        "        hits.append(pid)\n"
        "print(s.decode(), '|', ','.join(hits), '|', os.getppid())\n"
    )
    with recorded_argv() as seen:
        result = sshd.host().run([sys.executable, "-c", scan], env={"INSTINCT_SECRET": secret})
    assert result.ok, result.stderr
    value, hits, _ppid = (part.strip() for part in result.stdout.split("|"))
    assert value == secret
    assert hits == "", f"secret found in the argv of pids {hits}"
    ssh_argvs = [argv for argv in seen if argv and argv[0] == "ssh"]
    assert ssh_argvs, "the ssh client was not started"
    assert all(secret not in " ".join(argv) for argv in seen)


def test_env_and_input_together(sshd: SshServer) -> None:
    result = sshd.host().run(
        ["sh", "-c", 'printf "%s|" "$A"; cat'], env={"A": "x=y z"}, input="stdin text\n"
    )
    assert result.stdout == "x=y z|stdin text\n"


def test_timeout(sshd: SshServer) -> None:
    start = time.monotonic()
    result = sshd.host().run(["sleep", "30"], timeout=1)
    assert result.timed_out and result.returncode == 124
    assert time.monotonic() - start < 10


def test_spawn_with_env(sshd: SshServer) -> None:
    # ssh carries stdout and stderr on separate channels: their interleaving is not kept.
    proc = sshd.host().spawn(["sh", "-c", 'echo one; echo two >&2; echo "$X"'], env={"X": "3"})
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0 and sorted(out.splitlines()) == ["3", "one", "two"]


def test_host_spec_with_port_through_the_config(
    sshd: SshServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INSTINCT_SSH_CONFIG", str(sshd.ssh_config))
    host = parse_host_spec(f"ssh://{sshd.user}@127.0.0.1:{sshd.port}")
    assert (host.user, host.host, host.port) == (sshd.user, "127.0.0.1", sshd.port)
    assert host.run(["echo", "via port"]).stdout == "via port\n"
    host.check()


# --- ssh's own failures: one actionable error each -----------------------------------------


def test_refused_key(sshd: SshServer) -> None:
    with pytest.raises(HostError) as info:
        sshd.unauthorized().host().run(["true"])
    err = info.value
    assert err.id == "ssh_auth_failed"
    assert err.message == f"ssh key not accepted by {sshd.alias}"
    assert err.fix is not None and f"ssh-copy-id -F {sshd.dir}" in err.fix
    assert err.fix.split("(")[0].strip().endswith(sshd.alias)


def test_unknown_host_key(sshd: SshServer) -> None:
    with pytest.raises(HostError) as info:
        sshd.unknown_host_key().host().run(["true"])
    assert info.value.id == "ssh_host_key"
    assert "unknown or has changed" in info.value.message


def test_connection_refused(sshd: SshServer) -> None:
    client = sshd.closed_port()
    with pytest.raises(HostError) as info:
        client.host().check()
    assert info.value.id == "ssh_refused"
    assert "refused" in info.value.message


def test_unresolvable_host() -> None:
    host = SshHost("no-such-host.invalid", ssh_config="/dev/null", connect_timeout=5)
    with pytest.raises(HostError) as info:
        host.run(["true"])
    assert info.value.id in ("ssh_unresolvable", "ssh_unreachable")


def test_ssh_client_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no ssh binary to run
    with pytest.raises(HostError) as info:
        SshHost("example.invalid").run(["true"])
    assert info.value.id == "ssh_missing"


@pytest.mark.parametrize(
    ("client", "expected"),
    [
        ("unauthorized", "Error: ssh key not accepted by instinct-test"),
        ("unknown_host_key", "Error: the host key of instinct-test is unknown or has changed"),
        ("closed_port", "Error: ssh connection to instinct-test refused"),
    ],
)
def test_cli_one_line_error_and_exit_3(sshd: SshServer, client: str, expected: str) -> None:
    config = getattr(sshd, client)()
    proc = subprocess.run(
        [sys.executable, "-m", "instinct_serve", "check", "--host", config.host_spec],
        env=config.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(expected)
    assert len(lines) == 2 and lines[1].startswith("Fix: ")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_cli_json_error_document(sshd: SshServer) -> None:
    config = sshd.unauthorized()
    proc = subprocess.run(
        [sys.executable, "-m", "instinct_serve", "check", "--json", "--host", config.host_spec],
        env=config.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    import json

    assert proc.returncode == 3
    doc = json.loads(proc.stdout)
    assert doc["error"]["id"] == "ssh_auth_failed"
    assert "ssh-copy-id" in doc["error"]["fix"]
