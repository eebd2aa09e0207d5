"""--host parsing, the default host from the environment, and ssh's failure messages."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from instinct_serve.errors import HostError, UsageError
from instinct_serve.hosts import LocalHost, SshHost, parse_host_spec, resolve_host, ssh_error


@pytest.mark.parametrize(
    ("spec", "user", "host", "port"),
    [
        ("gpu-box", None, "gpu-box", None),
        ("alice@gpu-box", "alice", "gpu-box", None),
        ("alice@gpu-box.example.com:2222", "alice", "gpu-box.example.com", 2222),
        ("ssh://alice@gpu-box:2222/", "alice", "gpu-box", 2222),
        ("ssh://gpu-box", None, "gpu-box", None),
        ("10.0.0.5:22", None, "10.0.0.5", 22),
        ("  bob@h  ", "bob", "h", None),
        ("first.last@h", "first.last", "h", None),
        ("[::1]", None, "::1", None),
        ("root@[::1]:2222", "root", "::1", 2222),
        ("alice@[fe80::1%eth0]:22", "alice", "fe80::1%eth0", 22),
        ("::1", None, "::1", None),
        ("alice@2001:db8::7", "alice", "2001:db8::7", None),
        ("h:65535", None, "h", 65535),
    ],
)
def test_parse_host_spec(spec: str, user: str | None, host: str, port: int | None) -> None:
    parsed = parse_host_spec(spec)
    assert (parsed.user, parsed.host, parsed.port) == (user, host, port)


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "   ",
        "ssh://",
        "-oProxyCommand=touch /tmp/x",
        "a@-oProxyCommand=x",
        "-l@host",
        "@host",
        "user@",
        "host:0",
        "host:65536",
        "host:abc",
        "host:",
        "host:-1",
        "[::1",
        "[::1]x",
        "[::1]:",
        "[zz]:22",
        "[]:22",
        "a b",
        "host;rm -rf x",
        "$(id)",
        "user@host@",
        "a@b:c:d",
        "h/x",
    ],
)
def test_bad_host_specs_are_usage_errors(spec: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_host_spec(spec)
    assert info.value.id == "bad_host" and info.value.fix


def test_spec_takes_the_ssh_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INSTINCT_SSH_CONFIG", "/etc/instinct/ssh_config")
    assert parse_host_spec("box").ssh_config == "/etc/instinct/ssh_config"
    monkeypatch.delenv("INSTINCT_SSH_CONFIG")
    assert parse_host_spec("box").ssh_config is None


def test_resolve_host_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCM_SSH_HOST", raising=False)
    monkeypatch.delenv("ROCM_SSH_USER", raising=False)
    assert isinstance(resolve_host(None), LocalHost)
    assert isinstance(resolve_host("local"), LocalHost)

    monkeypatch.setenv("ROCM_SSH_HOST", "gpu-box")
    host = resolve_host(None)
    assert isinstance(host, SshHost) and (host.user, host.host) == (None, "gpu-box")

    monkeypatch.setenv("ROCM_SSH_USER", "bob")
    host = resolve_host(None)
    assert isinstance(host, SshHost) and (host.user, host.host, host.port) == (
        "bob",
        "gpu-box",
        None,
    )

    monkeypatch.setenv("ROCM_SSH_HOST", "gpu-box:2222")
    host = resolve_host(None)
    assert isinstance(host, SshHost) and (host.user, host.port) == ("bob", 2222)

    monkeypatch.setenv("ROCM_SSH_HOST", "alice@gpu-box")  # a user in the host wins
    host = resolve_host(None)
    assert isinstance(host, SshHost) and host.user == "alice"

    assert isinstance(resolve_host("local"), LocalHost)  # --host local overrides the env
    explicit = resolve_host("carol@other")
    assert isinstance(explicit, SshHost) and (explicit.user, explicit.host) == ("carol", "other")

    monkeypatch.setenv("ROCM_SSH_HOST", "   ")
    assert isinstance(resolve_host(None), LocalHost)

    monkeypatch.setenv("ROCM_SSH_HOST", "bad host")
    with pytest.raises(UsageError):
        resolve_host(None)


def test_names() -> None:
    assert SshHost("box").name == "box"
    assert SshHost("box", user="u", port=2222).name == "u@box:2222"
    assert SshHost("::1", user="u", port=22).name == "u@[::1]:22"
    assert SshHost("::1").name == "::1"
    assert SshHost("box", user="u").target == "u@box"


def test_ssh_argv() -> None:
    argv = SshHost("box", user="u", port=2222, ssh_config="/x/cfg", connect_timeout=7).ssh_argv()
    assert argv[:3] == ["ssh", "-F", "/x/cfg"]
    assert "BatchMode=yes" in argv and "ConnectTimeout=7" in argv
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[-2:] == ["-T", "u@box"]
    with pytest.raises(UsageError):
        SshHost("-oProxyCommand=x").ssh_argv()


@given(st.lists(st.text(st.characters(blacklist_characters="\0")), min_size=1, max_size=6))
def test_remote_command_splits_back_into_the_same_argv(args: list[str]) -> None:
    host = SshHost("box")
    assert shlex.split(host.remote_command(args, None)) == args
    with_env = shlex.split(host.remote_command(args, {"A": "1"}))
    assert with_env[:2] == ["sh", "-c"] and with_env[3:] == ["sh", *args]
    assert "1" not in with_env[2]  # the value travels on stdin, not in the command


@pytest.mark.parametrize(
    ("stderr", "error_id", "in_fix"),
    [
        ("u@box: Permission denied (publickey).", "ssh_auth_failed", "ssh-copy-id -p 2222 u@box"),
        ("Received disconnect: Too many authentication failures", "ssh_auth_failed", "ssh-add"),
        ("Host key verification failed.", "ssh_host_key", "ssh -p 2222 u@box"),
        (
            "@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
            "Host key verification failed.",
            "ssh_host_key",
            "fingerprint",
        ),
        (
            "ssh: Could not resolve hostname box: Name or service not known",
            "ssh_unresolvable",
            "DNS",
        ),
        (
            "ssh: Could not resolve hostname box: Temporary failure in name resolution",
            "ssh_unresolvable",
            "DNS",
        ),
        ("ssh: connect to host box port 2222: Connection refused", "ssh_refused", "port"),
        ("ssh: connect to host box port 2222: Connection timed out", "ssh_unreachable", "VPN"),
        ("ssh: connect to host box port 2222: No route to host", "ssh_unreachable", "VPN"),
        (
            "Unable to negotiate with 10.0.0.5 port 2222: no matching host key type found.",
            "ssh_failed",
            "by hand",
        ),
        ("kex_exchange_identification: Connection closed by remote host", "ssh_failed", "hand"),
        ("/x/cfg: line 3: Bad configuration option: foo", "ssh_failed", "ssh config file"),
        ("", "ssh_failed", "by hand"),
    ],
)
def test_ssh_error_mapping(stderr: str, error_id: str, in_fix: str) -> None:
    err = ssh_error(SshHost("box", user="u", port=2222), stderr)
    assert isinstance(err, HostError) and err.exit_code == 3
    assert err.id == error_id
    assert err.fix is not None and in_fix in err.fix
    assert "\n" not in err.message  # one line
