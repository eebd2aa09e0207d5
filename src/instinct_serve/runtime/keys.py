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

from instinct_serve.errors import HostError, UsageError
from instinct_serve.hosts import Host
from instinct_serve.names import CONTAINER_NAME

_KEY = re.compile(r"[A-Za-z0-9_-]{20,256}")

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
    text = (host.read_text(path) or "").strip()
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
