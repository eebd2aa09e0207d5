"""Where commands run: one ``Host`` protocol for the local machine and for ``ssh user@host``.

Every adapter (detect, check, docker, the native engine) talks to a ``Host`` and never to
``subprocess`` directly, so local and remote are one code path. Commands are argv lists,
never shell strings: ``LocalHost`` runs them without a shell and ``SshHost`` joins them with
``shlex.join`` so the remote login shell splits them back into exactly the same argv: a
model id or a path with spaces, quotes or ``;`` cannot inject a command.

Environment variables given to ``run``/``spawn`` travel over stdin on SSH (read by a tiny
``sh`` prologue), so a value such as ``HF_TOKEN`` never appears in a process argument on
either machine.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol, runtime_checkable

from instinct_serve.errors import HostError, UsageError

DEFAULT_TIMEOUT_S = 60.0
SSH_CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class Result:
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

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it does not exist or cannot be read."""
        ...

    def exists(self, path: str) -> bool: ...

    def which(self, name: str) -> str | None: ...


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
            proc = subprocess.run(
                args,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                env=self._env(env),
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            return Result(
                args, 127, "", f"{args[0]}: not found ({exc.strerror})", time.monotonic() - start
            )
        except PermissionError as exc:
            return Result(args, 126, "", f"{args[0]}: {exc.strerror}", time.monotonic() - start)
        except subprocess.TimeoutExpired as exc:
            return Result(
                args,
                124,
                _text(exc.stdout),
                _text(exc.stderr) + f"\ntimed out after {timeout} s",
                time.monotonic() - start,
                timed_out=True,
            )
        return Result(args, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)

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

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except (OSError, ValueError):
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def which(self, name: str) -> str | None:
        return shutil.which(name)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data


# The remote prologue: read K=V lines from stdin until an empty line, export them, then exec
# the real argv. Values never appear on a command line, on either side of the connection.
_ENV_PROLOGUE = (
    'while IFS= read -r __instinct_kv; do [ -z "$__instinct_kv" ] && break; '
    'export "$__instinct_kv"; done; unset __instinct_kv; exec "$@"'
)


@dataclass
class SshHost:
    """A remote machine reached with the system ``ssh`` in batch mode (keys only)."""

    host: str
    user: str | None = None
    port: int | None = None
    ssh_config: str | None = None
    connect_timeout: int = SSH_CONNECT_TIMEOUT_S
    extra_options: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        target = f"{self.user}@{self.host}" if self.user else self.host
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
        args = _check_argv(argv)
        full = [*self.ssh_argv(), "--", self.remote_command(args, env)]
        stdin_text = self._env_stdin(env, input)
        start = time.monotonic()
        try:
            proc = subprocess.run(
                full,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                input=stdin_text,
                stdin=None if stdin_text is not None else subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            raise HostError(
                "the ssh client is not installed on this machine",
                fix="install OpenSSH (e.g. apt-get install openssh-client)",
                id="ssh_missing",
            ) from exc
        except subprocess.TimeoutExpired as exc:
            return Result(
                args,
                124,
                _text(exc.stdout),
                _text(exc.stderr) + f"\ntimed out after {timeout} s",
                time.monotonic() - start,
                timed_out=True,
            )
        if proc.returncode == 255:
            raise ssh_error(self, proc.stderr)
        return Result(args, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)

    def spawn(
        self, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        full = [*self.ssh_argv(), "--", self.remote_command(argv, env)]
        proc = subprocess.Popen(
            full,
            stdin=subprocess.PIPE if env else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        if env:
            stdin: IO[str] | None = proc.stdin
            assert stdin is not None
            stdin.write(self._env_stdin(env, None) or "")
            stdin.close()
        return proc

    def check(self) -> None:
        """Fail early with an actionable error when the host cannot be reached."""
        result = self.run(["true"], timeout=self.connect_timeout + 20)
        if not result.ok:
            raise HostError(
                f"ssh to {self.name} works but `true` failed there (exit {result.returncode})",
                fix="check the remote login shell",
            )

    def read_text(self, path: str) -> str | None:
        result = self.run(["cat", "--", path], timeout=30)
        return result.stdout if result.ok else None

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path], timeout=30).ok

    def which(self, name: str) -> str | None:
        result = self.run(["sh", "-c", 'command -v -- "$1"', "sh", name], timeout=30)
        found = result.stdout.strip().splitlines()
        return found[0] if result.ok and found else None


def ssh_error(host: SshHost, stderr: str) -> HostError:
    """Map ssh's own failure (exit 255) to a one-line error that says what to do."""
    text = stderr.strip()
    low = text.lower()
    target = host.target
    if "permission denied" in low:
        return HostError(
            f"ssh key not accepted by {target}",
            fix=f"run ssh-copy-id {target} (or load your key with ssh-add)",
            id="ssh_auth_failed",
        )
    if "host key verification failed" in low or "no matching host key" in low:
        return HostError(
            f"the host key of {host.host} is unknown or has changed",
            fix=f"verify the fingerprint, then connect once with `ssh {target}` to record it",
            id="ssh_host_key",
        )
    if "could not resolve hostname" in low or "name or service not known" in low:
        return HostError(
            f"cannot resolve host name {host.host}",
            fix="check the --host spelling or your DNS / ~/.ssh/config",
            id="ssh_unresolvable",
        )
    if "connection refused" in low:
        return HostError(
            f"ssh connection to {host.name} refused (no sshd listening on that port)",
            fix="start sshd on the host or pass the right port (--host user@host:port)",
            id="ssh_refused",
        )
    if "timed out" in low or "no route to host" in low or "network is unreachable" in low:
        return HostError(
            f"cannot reach {host.name}: {text.splitlines()[-1] if text else 'timed out'}",
            fix="check that the host is up and reachable from here (VPN, firewall)",
            id="ssh_unreachable",
        )
    last = text.splitlines()[-1] if text else "ssh exited with status 255"
    return HostError(
        f"ssh to {host.name} failed: {last}",
        fix=f"try `ssh {target} true` by hand",
        id="ssh_failed",
    )


def parse_host_spec(spec: str) -> SshHost:
    """``[ssh://][user@]host[:port]`` (or an alias from ~/.ssh/config) to an ``SshHost``."""
    raw = spec.strip()
    if raw.startswith("ssh://"):
        raw = raw[len("ssh://") :].rstrip("/")
    if not raw or any(c.isspace() for c in raw) or raw.startswith("-"):
        raise UsageError(
            f"invalid --host {spec!r}", fix="use user@host or user@host:port", id="bad_host"
        )
    user: str | None = None
    if "@" in raw:
        user, _, raw = raw.rpartition("@")
        if not user or not raw:
            raise UsageError(f"invalid --host {spec!r}", fix="use user@host", id="bad_host")
    port: int | None = None
    if raw.startswith("[") and "]" in raw:  # [ipv6]:port
        inner, _, rest = raw[1:].partition("]")
        raw = inner
        if rest.startswith(":"):
            port = _parse_port(rest[1:], spec)
    elif raw.count(":") == 1:
        raw, _, port_text = raw.partition(":")
        port = _parse_port(port_text, spec)
    return SshHost(
        host=raw, user=user, port=port, ssh_config=os.environ.get("INSTINCT_SSH_CONFIG") or None
    )


def _parse_port(text: str, spec: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise UsageError(f"invalid port in --host {spec!r}", fix="use user@host:22", id="bad_host")
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
