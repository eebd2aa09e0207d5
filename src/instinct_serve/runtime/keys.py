"""The API key of a ``--public`` endpoint: made once, kept in a file only the user can
read on the endpoint's host, and handed to vLLM by environment name.

``<data dir>/keys/<endpoint name>`` on the target host (mode 0600 in a 0700 directory,
written with ``umask 077`` so it is never readable by others, even for a moment). The
value travels only on stdin (writing) and stdout (reading) of commands through the
``Host``, and in the environment of ``docker run --env VLLM_API_KEY`` / the native
process: never an argument, a plan, a label or a log line. Serve's own probes send it;
the connection details say where the file is (``Endpoint.api_key_file``), never what is
in it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING

from instinct_serve.errors import HostError, NotReadyError, UsageError
from instinct_serve.hosts import Host
from instinct_serve.names import CONTAINER_NAME
from instinct_serve.plan.model import API_KEY_ENV

if TYPE_CHECKING:
    from instinct_serve.plan.model import LaunchPlan

_KEY = re.compile(r"[A-Za-z0-9_-]{20,256}")
MAX_KEY_FILE = 1024  # a key is at most 256 characters: anything larger is not one

# $1: the key file. The key comes on stdin; umask 077 from the first byte written.
_WRITE = (
    'umask 077; d="${1%/*}"; mkdir -p "$d" && chmod 700 "$d" && '
    'tmp="$1.tmp.$$" && cat > "$tmp" && chmod 600 "$tmp" && mv -f "$tmp" "$1"'
)


def key_path(host: Host, name: str) -> str:
    """Where the key of endpoint ``name`` is kept on ``host``."""
    from instinct_serve.engine import hostfs

    if not CONTAINER_NAME.fullmatch(name):
        raise UsageError(f"invalid endpoint name {name!r}", id="bad_name")
    return hostfs.join(hostfs.data_dir(host), "keys", name)


def new_key() -> str:
    return secrets.token_urlsafe(32)


def read_key(host: Host, path: str) -> str | None:
    """The key in ``path``, or None when there is none (or it is not a key)."""
    text = (host.read_text(path, MAX_KEY_FILE) or "").strip()
    return text if _KEY.fullmatch(text) else None


def ensure_key(host: Host, path: str) -> str:
    """The key in ``path``, made (and written, 0600) when there is none yet."""
    found = read_key(host, path)
    if found is not None:
        return found
    key = new_key()
    write_key(host, path, key)
    return key


def write_key(host: Host, path: str, key: str) -> None:
    """Write ``key`` to ``path`` (0600 in a 0700 directory), through stdin only: the copy
    a replica of a group keeps under its own name (``runtime.group``)."""
    result = host.run(["sh", "-c", _WRITE, "sh", path], timeout=30, input=key + "\n")
    if not result.ok:
        raise HostError(
            f"cannot write the API key file {path} on {host.name}: {result.stderr.strip()}",
            fix="check that the tool's data directory on the host is writable",
            id="key_write_failed",
        )


def remove_key(host: Host, path: str) -> None:
    host.run(["rm", "-f", "--", path], timeout=30)


def valid_key(value: str) -> bool:
    """Whether a user's own key is usable (vLLM compares it verbatim in a header)."""
    return bool(value) and "\n" not in value and "\r" not in value and len(value) <= 4096


def caller_key(plan: LaunchPlan, secrets: Mapping[str, str]) -> str | None:
    """``--env VLLM_API_KEY``: the caller's key, which must be there before anything
    starts (None: the plan passes no key of the caller's)."""
    if plan.api_key != "environment":
        return None
    name = plan.api_key_env or API_KEY_ENV
    value = secrets.get(name, "")
    if not valid_key(value):
        raise UsageError(
            f"--env {name} passes your {name} by name, and it is not set "
            "in your environment (or holds a newline)",
            fix=f"export {name}=<your key> first, or drop --env {name} "
            "(with --public a key is generated)",
            id="api_key_missing",
        )
    return value


def endpoint_key(host: Host, plan: LaunchPlan, *, create: bool) -> tuple[str, str] | None:
    """A generated key: its file and the key, read from (or, at launch, made in) the key
    file on the host (None: the plan has no generated key)."""
    if plan.api_key != "generated":
        return None
    path = key_path(host, plan.container_name)
    key = ensure_key(host, path) if create else read_key(host, path)
    if key is None:
        raise NotReadyError(
            f"{plan.container_name} requires an API key and its key file {path} "
            f"is missing on {host.name}",
            fix=f"stop it (`instinct stop {plan.container_name}`) and serve again: "
            "a new key is made",
            id="api_key_missing",
            details={"key_file": path},
        )
    return path, key
