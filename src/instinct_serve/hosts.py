"""Where commands run: one ``Host`` protocol for the local machine and for ``ssh user@host``.

Every adapter (detect, check, docker, the native engine) talks to a ``Host`` and never to
``subprocess`` directly, so local and remote are one code path. Commands are argv lists,
never shell strings: ``LocalHost`` runs them without a shell and ``SshHost`` joins them with
``shlex.join`` so the remote login shell splits them back into exactly the same argv: a
model id or a path with spaces, quotes or ``;`` cannot inject a command.

Environment variables given to ``run``/``spawn`` travel over stdin on SSH (read by a tiny
``sh`` prologue), so a value such as ``HF_TOKEN`` never appears in a process argument on
either machine.

Over SSH, commands share one connection (``ControlMaster``, sockets in a private per-user
directory, see ``SshHost.command_argv``): serve makes dozens of docker calls, and each
would otherwise pay a full handshake.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, NamedTuple, Protocol, runtime_checkable

from instinct_serve.errors import HostError, UsageError
from instinct_serve.names import is_env_name
from instinct_serve.paths import READ_LIMIT, read_regular

DEFAULT_TIMEOUT_S = 60.0
SSH_CONNECT_TIMEOUT_S = 10


def ssh_missing() -> HostError:
    """The one error for a machine without the ``ssh`` client (every ssh path raises it)."""
    return HostError(
        "the ssh client is not installed on this machine",
        fix="install OpenSSH (e.g. apt-get install openssh-client)",
        id="ssh_missing",
    )


class Result(NamedTuple):
    """The outcome of one command: exit status, both streams, and how long it took."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@runtime_checkable
class Host(Protocol):
    """What every adapter needs from a machine."""

    @property
    def name(self) -> str:
        """``local`` or ``user@host`` (for messages and JSON)."""
        ...

    @property
    def is_local(self) -> bool: ...

    @property
    def address(self) -> str:
        """The address a client on this machine's network uses to reach the host."""
        ...

    def run(
        self,
        argv: Sequence[str],
        timeout: float | None = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> Result:
        """Run argv to completion. A missing executable gives returncode 127."""
        ...

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start argv and stream its merged stdout/stderr (e.g. ``docker logs -f``)."""
        ...

    def read_text(self, path: str, limit: int = READ_LIMIT) -> str | None:
        """The file's text, or None when it does not exist, cannot be read, is not a regular
        file (a FIFO, a device, a link loop) or is larger than ``limit`` bytes."""
        ...

    def exists(self, path: str) -> bool: ...

    def which(self, name: str) -> str | None: ...

    def env(self, names: Iterable[str]) -> dict[str, str]:
        """The values of ``names`` in the host's environment (set ones only, empty
        included). Never ask for a secret: its value would travel back."""
        ...


# --------------------------------------------------------------------------- ssh multiplexing

MULTIPLEX_ENV = "INSTINCT_SSH_MULTIPLEX"  # "0" turns connection sharing off
CONTROL_PERSIST_S = 60
_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS


def control_dir() -> str | None:
    """A private directory for ssh control sockets, or None when none can be trusted.

    ``$XDG_RUNTIME_DIR`` (per-user, mode 0700 by definition) when set, else a per-uid
    directory under the temp dir. It must be a real directory (not a symlink) owned by us
    and closed to everyone else: whoever can reach a control socket can run commands on
    the remote host as us.
    """
    import stat
    import tempfile

    uid = os.getuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    if runtime and os.path.isabs(runtime):
        candidate = os.path.join(runtime, "instinct-serve-ssh")
    else:
        candidate = os.path.join(tempfile.gettempdir(), f"instinct-serve-ssh-{uid}")
    try:
        os.mkdir(candidate, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(candidate)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        return None
    return candidate


def _multiplex_enabled() -> bool:
    return os.environ.get(MULTIPLEX_ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def _check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    if isinstance(argv, str) or not argv:
        raise TypeError("argv must be a non-empty sequence of strings, not a shell string")
    return tuple(str(a) for a in argv)


def _check_env(env: Mapping[str, str]) -> None:
    for key, value in env.items():
        if (
            not key
            or not (key[0].isalpha() or key[0] == "_")
            or not all(c.isalnum() or c == "_" for c in key)
        ):
            raise UsageError(f"invalid environment variable name {key!r}", id="bad_env")
        if "\n" in value or "\0" in value:
            raise UsageError(
                f"environment variable {key} contains a newline or NUL byte",
                fix="remove the newline from the value",
                id="bad_env",
            )


# $@: variable names (validated: `eval` only ever sees a name, never a value). Prints
# NAME=VALUE\0 for each one that is set, so values may hold newlines.
_ENV_SCRIPT = (
    'for n in "$@"; do eval "[ -n \\"\\${$n+x}\\" ]" && '
    '{ eval "v=\\${$n}"; printf "%s=%s\\0" "$n" "$v"; }; done; exit 0'
)


def _env_names(names: Iterable[str]) -> list[str]:
    wanted = list(dict.fromkeys(names))
    bad = [n for n in wanted if not is_env_name(n)]
    if bad:
        raise ValueError(f"not environment variable names: {bad}")
    return wanted


@dataclass
class LocalHost:
    """This machine: subprocess without a shell."""

    @property
    def name(self) -> str:
        return "local"

    @property
    def is_local(self) -> bool:
        return True

    @property
    def address(self) -> str:
        return "127.0.0.1"

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str] | None:
        if not env:
            return None
        _check_env(env)
        merged = dict(os.environ)
        merged.update(env)
        return merged

    def run(
        self,
        argv: Sequence[str],
        timeout: float | None = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> Result:
        args = _check_argv(argv)
        start = time.monotonic()
        try:
            return _run_captured(args, args, timeout=timeout, env=self._env(env), input=input)
        except OSError as exc:  # the executable itself could not be started
            missing = exc.errno in (errno.ENOENT, errno.ENOTDIR)
            return Result(
                args,
                127 if missing else 126,
                "",
                f"{args[0]}: {'not found' if missing else 'cannot execute'} ({exc.strerror})",
                time.monotonic() - start,
            )

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        args = _check_argv(argv)
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=self._env(env),
            start_new_session=True,
        )

    def read_text(self, path: str, limit: int = READ_LIMIT) -> str | None:
        try:
            return read_regular(path, limit).decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def env(self, names: Iterable[str]) -> dict[str, str]:
        wanted = _env_names(names)
        return {n: os.environ[n] for n in wanted if n in os.environ}


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and everything it started (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _run_captured(
    popen_argv: Sequence[str],
    result_argv: tuple[str, ...],
    *,
    timeout: float | None,
    env: Mapping[str, str] | None,
    input: str | None,
) -> Result:
    """Run to completion in a new session, so a timeout (or Ctrl-C) kills the whole tree.

    ``subprocess.run`` kills only the direct child: a shell's grandchildren would survive a
    timeout, and keep our pipes open. Output is read as bytes and decoded here, so text
    arrives exactly as written (text mode would turn every ``\r`` into ``\n``). Raises
    OSError when ``popen_argv[0]`` cannot start.
    """
    start = time.monotonic()
    data = input.encode("utf-8") if input is not None else None
    with subprocess.Popen(
        list(popen_argv),
        stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            try:  # a second communicate returns everything read, before and after the kill
                out, err = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # a grandchild escaped the group with our pipes
                out, err = exc.stdout or b"", exc.stderr or b""
            return Result(
                result_argv,
                124,
                _text(out),
                _text(err) + f"\ntimed out after {timeout} s",
                time.monotonic() - start,
                timed_out=True,
            )
        except BaseException:  # KeyboardInterrupt included: leave nothing running
            _kill_group(proc)
            raise
    return Result(result_argv, proc.returncode, _text(out), _text(err), time.monotonic() - start)


# The remote prologue: read K=V lines from stdin until an empty line, export them, then exec
# the real argv. Values never appear on a command line, on either side of the connection.
_ENV_PROLOGUE = (
    'while IFS= read -r __instinct_kv; do [ -z "$__instinct_kv" ] && break; '
    'export "$__instinct_kv"; done; unset __instinct_kv; exec "$@"'
)


# `which` over ssh: the first executable regular file named $1 on the remote PATH, like
# shutil.which. (`command -v` would also answer builtins, aliases and functions by bare name.)
# ``read_text`` on a host: $1 the file, $2 the limit. A regular file only (``-f`` follows
# links and is false for a FIFO, a device or a link loop), its size known before reading.
READ_SCRIPT = (
    '[ -f "$1" ] || exit 3; n=$(wc -c < "$1") || exit 3; [ "$n" -le "$2" ] || exit 4; '
    'exec head -c "$2" -- "$1"'
)
_WHICH_SCRIPT = (
    'n=$1; case $n in */*) [ -f "$n" ] && [ -x "$n" ] && printf "%s\\n" "$n"; exit;; esac; '
    'IFS=:; for d in $PATH; do [ -n "$d" ] || d=.; '
    'if [ -f "$d/$n" ] && [ -x "$d/$n" ]; then printf "%s\\n" "$d/$n"; exit 0; fi; done; exit 1'
)

# What ssh itself prints when *it* fails (exit 255). A remote command may also exit 255;
# only output that looks like ssh's own is turned into a HostError.
_SSH_FAILURE = re.compile(
    r"^ssh: |permission denied \(|host key verification failed|host identification has changed"
    r"|kex_exchange_identification|ssh_exchange_identification|connection (closed|reset) by"
    r"|banner exchange|unable to negotiate|too many authentication failures"
    r"|bad owner or permissions|bad configuration option|can't open user config file"
    r"|could not resolve hostname|connection timed out|connection refused|no route to host"
    r"|network is unreachable|ssh_dispatch_run_fatal|client_loop: ",
    re.IGNORECASE | re.MULTILINE,
)


@dataclass
class SshHost:
    """A remote machine reached with the system ``ssh`` in batch mode (keys only).

    The system client is used (not a Python ssh library) so that the user's
    ``~/.ssh/config``, agent, jump hosts and known_hosts apply exactly as they do for
    ``ssh`` by hand. ``ssh_config`` (``INSTINCT_SSH_CONFIG``) replaces ~/.ssh/config.
    The remote login shell must be POSIX-compatible (sh, bash, dash, zsh, ksh).
    """

    host: str
    user: str | None = None
    port: int | None = None
    ssh_config: str | None = None
    connect_timeout: int = SSH_CONNECT_TIMEOUT_S
    extra_options: tuple[str, ...] = field(default_factory=tuple)
    multiplex: bool = True  # share one connection between commands (``ControlMaster``)

    @property
    def name(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and self.port else self.host
        target = f"{self.user}@{host}" if self.user else host
        return f"{target}:{self.port}" if self.port else target

    @property
    def target(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    @property
    def is_local(self) -> bool:
        return False

    @property
    def address(self) -> str:
        return self.host

    def ssh_argv(self, *, tty: bool = False) -> list[str]:
        """The ``ssh`` invocation up to (not including) the remote command."""
        if not self.host or self.target.startswith("-"):  # would be read as an ssh option
            raise UsageError(f"invalid ssh host {self.target!r}", id="bad_host")
        argv = ["ssh"]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        argv += [
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout}",
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "ServerAliveCountMax=4",
        ]
        if self.port:
            argv += ["-p", str(self.port)]
        argv += list(self.extra_options)
        argv.append("-t" if tty else "-T")
        argv.append(self.target)
        return argv

    def control_path(self) -> str | None:
        """The control socket shared by this host's commands, or None (no multiplexing).

        The name hashes everything that decides *which* login the connection is (config
        file and its version, target, port, extra options) on top of ssh's own ``%C``, so a
        different key or config never rides on another configuration's connection.
        """
        if not self.multiplex or not _multiplex_enabled():
            return None
        directory = control_dir()
        if directory is None or "%" in directory:  # ssh would expand it as a token
            return None
        import hashlib

        config = self.ssh_config or os.path.expanduser("~/.ssh/config")
        try:
            st = os.stat(config)
            version = f"{st.st_size}:{st.st_mtime_ns}"
        except OSError:
            version = "-"
        key = "\0".join([config, version, self.target, str(self.port or ""), *self.extra_options])
        digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        path = os.path.join(directory, f"{digest}-%C")
        return path if len(path) - 2 + 40 <= _MAX_SOCKET_PATH else None  # %C: 40 hex digits

    def command_argv(self) -> list[str]:
        """``ssh_argv()`` plus connection sharing, for the short commands of ``run``.

        The first command opens a master connection that lingers ``CONTROL_PERSIST_S``
        seconds after the last one (in its own session: killing a command's process group
        on a timeout leaves it alone); the next commands skip the key exchange and
        authentication (~0.4 s each here, more over a WAN). Streams (``spawn``) and port
        forwards (``runtime.tunnel``) keep their own connection (``ssh_argv()``): through a
        master, a stream or a forward would outlive its client.
        """
        argv = self.ssh_argv()
        path = self.control_path()
        if path is None:
            return argv
        mux = [
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={path}",
            "-o",
            f"ControlPersist={CONTROL_PERSIST_S}",
        ]
        return [*argv[:-2], *mux, *argv[-2:]]

    def remote_command(self, argv: Sequence[str], env: Mapping[str, str] | None) -> str:
        """The one string the remote login shell parses back into ``argv``."""
        args = _check_argv(argv)
        if env:
            _check_env(env)
            return shlex.join(["sh", "-c", _ENV_PROLOGUE, "sh", *args])
        return shlex.join(args)

    @staticmethod
    def _env_stdin(env: Mapping[str, str] | None, input: str | None) -> str | None:
        if not env:
            return input
        lines = "".join(f"{k}={v}\n" for k, v in env.items()) + "\n"
        return lines + (input or "")

    def run(
        self,
        argv: Sequence[str],
        timeout: float | None = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> Result:
        """Run argv remotely. Raises HostError when ssh itself fails (no key, host down).

        A command missing on the remote side gives 127, as locally (the remote shell says so).
        """
        args = _check_argv(argv)
        full = [*self.command_argv(), "--", self.remote_command(args, env)]
        try:
            result = _run_captured(
                full, args, timeout=timeout, env=None, input=self._env_stdin(env, input)
            )
        except OSError as exc:
            raise ssh_missing() from exc
        if result.returncode == 255 and (
            _SSH_FAILURE.search(result.stderr) or not (result.stderr or result.stdout)
        ):
            raise ssh_error(self, result.stderr)
        return result

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        # Not multiplexed: a master would hold our pipe's write end (fds are passed to it)
        # until the remote command ends, so killing the client would not end the stream.
        full = [*self.ssh_argv(), "--", self.remote_command(argv, env)]
        try:
            proc = subprocess.Popen(
                full,
                stdin=subprocess.PIPE if env else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:
            raise ssh_missing() from exc
        if env:
            stdin: IO[str] | None = proc.stdin
            assert stdin is not None
            stdin.write(self._env_stdin(env, None) or "")
            stdin.close()
            proc.stdin = None  # closed: communicate() and wait() must not touch it again
        return proc

    def check(self) -> None:
        """Fail early with an actionable error when the host cannot be reached."""
        result = self.run(["true"], timeout=self.connect_timeout + 20)
        if not result.ok:
            raise HostError(
                f"ssh to {self.name} works but `true` failed there (exit {result.returncode})",
                fix="check the remote login shell (~/.bashrc must not fail or print on exit)",
            )

    def read_text(self, path: str, limit: int = READ_LIMIT) -> str | None:
        result = self.run(["sh", "-c", READ_SCRIPT, "sh", path, str(limit)], timeout=30)
        return result.stdout if result.ok else None

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path], timeout=30).ok

    def which(self, name: str) -> str | None:
        result = self.run(["sh", "-c", _WHICH_SCRIPT, "sh", name], timeout=30)
        found = result.stdout.strip().splitlines()
        return found[0] if result.ok and found else None

    def env(self, names: Iterable[str]) -> dict[str, str]:
        wanted = _env_names(names)
        result = self.run(["sh", "-c", _ENV_SCRIPT, "sh", *wanted], timeout=30)
        found: dict[str, str] = {}
        for item in result.stdout.split("\0") if result.ok else []:
            key, sep, value = item.partition("=")
            if sep and key in wanted:
                found[key] = value
        return found


def ssh_error(host: SshHost, stderr: str) -> HostError:
    """Map ssh's own failure (exit 255) to a one-line error that says what to do."""
    text = stderr.strip()
    low = text.lower()
    target = host.target
    port = f"-p {host.port} " if host.port else ""
    config = f"-F {shlex.quote(host.ssh_config)} " if host.ssh_config else ""
    details = {"ssh_stderr": text.splitlines()[-5:]} if text else None
    if "permission denied" in low or "too many authentication failures" in low:
        return HostError(
            f"ssh key not accepted by {target}",
            fix=f"run ssh-copy-id {config}{port}{target} (or load your key with ssh-add)",
            id="ssh_auth_failed",
            details=details,
        )
    if "host key verification failed" in low or "host identification has changed" in low:
        return HostError(
            f"the host key of {host.host} is unknown or has changed",
            fix=f"verify the fingerprint, then connect once with `ssh {config}{port}{target}` "
            "to record it",
            id="ssh_host_key",
            details=details,
        )
    if (
        "could not resolve hostname" in low
        or "name or service not known" in low
        or "temporary failure in name resolution" in low
    ):
        return HostError(
            f"cannot resolve host name {host.host}",
            fix="check the --host spelling or your DNS / ~/.ssh/config",
            id="ssh_unresolvable",
            details=details,
        )
    if "connection refused" in low:
        return HostError(
            f"ssh connection to {host.name} refused (no sshd listening on that port)",
            fix="start sshd on the host or pass the right port (--host user@host:port)",
            id="ssh_refused",
            details=details,
        )
    if "timed out" in low or "no route to host" in low or "network is unreachable" in low:
        return HostError(
            f"cannot reach {host.name}: {text.splitlines()[-1] if text else 'timed out'}",
            fix="check that the host is up and reachable from here (VPN, firewall)",
            id="ssh_unreachable",
            details=details,
        )
    last = text.splitlines()[-1] if text else "ssh exited with status 255"
    fix = f"try `ssh {config}{port}{target} true` by hand"
    if "config file" in low or "configuration option" in low:
        fix = "fix the ssh config file named above (INSTINCT_SSH_CONFIG or ~/.ssh/config)"
    return HostError(
        f"ssh to {host.name} failed: {last}", fix=fix, id="ssh_failed", details=details
    )


_HOSTNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_ZONE = re.compile(r"[A-Za-z0-9_.-]+")
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\\$-]*")


def parse_host_spec(spec: str) -> SshHost:
    """``[ssh://][user@]host[:port]`` (or an alias from the ssh config) to an ``SshHost``.

    IPv6 addresses take brackets when a port follows (``user@[fe80::1]:2222``). Anything
    else is refused: the spec ends up on ssh's command line, so it must not be able to
    smuggle in an option.
    """
    raw = spec.strip()
    if raw.startswith("ssh://"):
        raw = raw[len("ssh://") :].rstrip("/")

    def bad(why: str) -> UsageError:
        return UsageError(
            f"invalid --host {spec!r}: {why}",
            fix="use host, user@host, user@host:port or user@[ipv6]:port",
            id="bad_host",
        )

    if not raw:
        raise bad("empty")
    user: str | None = None
    if "@" in raw:
        user, _, raw = raw.rpartition("@")
        if not _USER.fullmatch(user):
            raise bad("bad user name")
    port: int | None = None
    if raw.startswith("["):
        inner, close, rest = raw[1:].partition("]")
        if not close or not _is_ipv6(inner):
            raise bad("bad bracketed IPv6 address")
        if rest:
            if not rest.startswith(":"):
                raise bad("unexpected text after ']'")
            port = _parse_port(rest[1:], spec)
        raw = inner
    elif raw.count(":") == 1:
        raw, _, port_text = raw.partition(":")
        port = _parse_port(port_text, spec)
    elif raw.count(":") > 1 and not _is_ipv6(raw):
        raise bad("bad IPv6 address")
    if ":" not in raw and not _HOSTNAME.fullmatch(raw):
        raise bad("bad host name")
    return SshHost(
        host=raw, user=user, port=port, ssh_config=os.environ.get("INSTINCT_SSH_CONFIG") or None
    )


def _is_ipv6(text: str) -> bool:
    """An IPv6 address, optionally with a zone (``fe80::1%eth0``)."""
    import ipaddress

    address, _, zone = text.partition("%")
    if "%" in text and not _ZONE.fullmatch(zone):
        return False
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        return False
    return True


def _parse_port(text: str, spec: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise UsageError(
            f"invalid port in --host {spec!r}", fix="use user@host:22 (1-65535)", id="bad_host"
        )
    return int(text)


def resolve_host(spec: str | None) -> Host:
    """``--host`` if given, else ``ROCM_SSH_HOST`` (+ ``ROCM_SSH_USER``), else this machine.

    ``--host local`` selects this machine explicitly, overriding ``ROCM_SSH_HOST``.
    """
    if spec is None:
        env_host = os.environ.get("ROCM_SSH_HOST", "").strip()
        if not env_host:
            return LocalHost()
        env_user = os.environ.get("ROCM_SSH_USER", "").strip()
        spec = f"{env_user}@{env_host}" if env_user and "@" not in env_host else env_host
    if spec.strip() in ("", "local"):
        return LocalHost()
    return parse_host_spec(spec)
