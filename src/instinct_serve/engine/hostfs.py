"""Small file and environment operations over a ``Host`` (local or ssh, one code path).

``Host`` runs argv and reads files; writing a file, making a directory or reading the
host's own environment are built here from ``sh`` one-liners whose variable parts travel
as positional arguments (``sh -c SCRIPT sh ARG...``), never spliced into the script.
"""

from __future__ import annotations

import posixpath
import sys
from collections.abc import Mapping

from instinct_serve.errors import HostError
from instinct_serve.hosts import Host

APP = "instinct-serve"

# Where platformdirs puts user data on Linux, honouring the same override as paths.py.
_DATA_DIR_SCRIPT = (
    'if [ -n "$INSTINCT_DATA_DIR" ]; then printf %s "$INSTINCT_DATA_DIR"; '
    'else printf %s "${XDG_DATA_HOME:-$HOME/.local/share}/' + APP + '"; fi'
)


def data_dir(host: Host) -> str:
    """The tool's data directory on ``host`` (``paths.data_dir()`` locally)."""
    if host.is_local:
        from instinct_serve import paths

        return str(paths.data_dir())
    result = host.run(["sh", "-c", _DATA_DIR_SCRIPT], timeout=30)
    path = result.stdout.strip()
    if not result.ok or not path.startswith("/"):
        raise HostError(
            f"cannot find the data directory on {host.name}",
            fix="set INSTINCT_DATA_DIR in the remote login environment",
            id="remote_data_dir",
        )
    return path


def join(*parts: str) -> str:
    return posixpath.join(*parts)


def makedirs(host: Host, path: str) -> None:
    result = host.run(["mkdir", "-p", "--", path], timeout=30)
    if not result.ok:
        raise HostError(
            f"cannot create {path} on {host.name}: {result.stderr.strip()}",
            fix="check the permissions of the parent directory",
            id="mkdir_failed",
        )


def write_text(host: Host, path: str, text: str, mode: str | None = None) -> None:
    """Write ``text`` to ``path`` atomically (temp file + rename) on the host."""
    script = (
        'tmp="$1.tmp.$$"; cat > "$tmp" && { [ -z "$2" ] || chmod "$2" "$tmp"; } '
        '&& mv -f "$tmp" "$1"'
    )
    result = host.run(["sh", "-c", script, "sh", path, mode or ""], timeout=30, input=text)
    if not result.ok:
        raise HostError(
            f"cannot write {path} on {host.name}: {result.stderr.strip()}",
            fix="check the permissions of its directory",
            id="write_failed",
        )


def remove_tree(host: Host, path: str, *, inside: str) -> None:
    """``rm -rf path``, refused unless ``path`` lies strictly inside ``inside``."""
    norm, root = posixpath.normpath(path), posixpath.normpath(inside)
    if not norm.startswith(root.rstrip("/") + "/"):
        raise ValueError(f"refusing to remove {path}: not inside {inside}")
    host.run(["rm", "-rf", "--", norm], timeout=300)


def classify_platform(name: str) -> str:
    """``sys.platform`` or ``uname -s`` to ``linux`` / ``windows`` / ``darwin`` / ...

    Native Windows Pythons say ``win32``; Git Bash, MSYS2 and Cygwin shells reached over
    OpenSSH on Windows answer ``uname -s`` with ``MINGW64_NT-...``, ``MSYS_NT-...`` or
    ``CYGWIN_NT-...``. WSL says ``Linux``, which is what it is.
    """
    low = name.strip().lower()
    if not low:
        return "unknown"
    if low.startswith(("win", "mingw", "msys", "cygwin")):
        return "windows"
    if low.startswith("linux"):
        return "linux"
    return low


def platform_name(host: Host) -> str:
    """The host's platform, classified (``unknown`` if it cannot say)."""
    if host.is_local:
        return classify_platform(sys.platform)
    result = host.run(["uname", "-s"], timeout=30)
    return classify_platform(result.stdout) if result.ok else "unknown"


def with_env(base: Mapping[str, str] | None, **extra: str) -> dict[str, str]:
    merged = dict(base or {})
    merged.update(extra)
    return merged
