"""Where the tool keeps its files on this machine (recipes cache, managed engine, state),
and how it reads them (``read_regular``).

``INSTINCT_CACHE_DIR`` and ``INSTINCT_DATA_DIR`` override the platformdirs defaults, so
tests and shared installations can point them elsewhere.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from instinct_serve.hosts import Host

APP = "instinct-serve"


def cache_dir() -> Path:
    """Re-creatable data: the synced recipes cache, the recipes git clone."""
    env = os.environ.get("INSTINCT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(APP))


def data_dir() -> Path:
    """Data worth keeping: the managed vLLM environment, native process state."""
    env = os.environ.get("INSTINCT_DATA_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP))


READ_LIMIT = 64 * 2**20  # the most any state, cache or record file of the tool is read to


def read_regular(
    path: str | os.PathLike[str], limit: int = READ_LIMIT, *, tail: bool = False
) -> bytes:
    """The bytes of a *regular* file of at most ``limit`` bytes, or ``OSError``; with
    ``tail``, a larger file's last ``limit`` bytes (a log: where its failure is).

    A cache or state file that is a FIFO would block ``open`` forever, a link to
    ``/dev/zero`` would be read until memory runs out, and a 10 GB sparse file nearly so. So
    the path is ``stat``-ed first (a symlink loop is ``ELOOP`` there, not a hang), opened
    non-blocking (a FIFO swapped in meanwhile does not block), checked again on the open
    descriptor, and read to ``limit`` + 1 bytes at most (``/proc`` files say size 0)."""
    cap = None if tail else limit
    if not _regular(os.stat(path), cap, path):
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not _regular(st, cap, path):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 2**20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if size > limit:
        if not tail:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
        data = data[-limit:]  # it grew while read, or /proc: keep the end
    return data


def _regular(st: os.stat_result, limit: int | None, path: str | os.PathLike[str]) -> bool:
    if limit is not None and st.st_size > limit and stat.S_ISREG(st.st_mode):
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return stat.S_ISREG(st.st_mode)


# What huggingface_hub reads to place its files (and vLLM, which uses huggingface_hub).
HF_ENV_NAMES: tuple[str, ...] = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_TOKEN_PATH",
    "XDG_CACHE_HOME",
    "HOME",
)
CONTAINER_HF_HOME = "/root/.cache/huggingface"  # where vLLM images keep the HF cache

_VAR = re.compile(r"\$(\w+|\{\w+\})")


class HfLocations(NamedTuple):
    """Where huggingface_hub keeps its files on one machine, and which variable decided."""

    home: str  # HF_HOME
    hub_cache: str  # model repositories (models--org--name)
    token_file: str  # what `hf auth login` writes
    home_from: str  # HF_HOME | XDG_CACHE_HOME | default
    hub_cache_from: str  # HF_HUB_CACHE | HUGGINGFACE_HUB_CACHE | HF_HOME | XDG_CACHE_HOME | default


def expand_path(path: str, env: Mapping[str, str]) -> str:
    """``~`` and ``$VAR`` as huggingface_hub expands them (expanduser, then expandvars),
    against ``env`` (another host's environment), leaving unknown variables as they are."""
    home = env.get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        path = home.rstrip("/") + path[1:]

    def var(found: re.Match[str]) -> str:
        name = found.group(1).strip("{}")
        return env.get(name, found.group(0))

    return _VAR.sub(var, path)


def hf_locations(env: Mapping[str, str]) -> HfLocations:
    """huggingface_hub's rules (``constants.py``), applied to ``env``: ``HF_HOME`` defaults to
    ``$XDG_CACHE_HOME/huggingface``, else ``~/.cache/huggingface``; the hub cache is
    ``HF_HUB_CACHE``, else the legacy ``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``; the
    token file is ``HF_TOKEN_PATH``, else ``$HF_HOME/token``. Empty values count as unset.
    Pure: the adapters hand in ``Host.env(HF_ENV_NAMES)``."""
    if env.get("HF_HOME"):
        home, home_from = expand_path(env["HF_HOME"], env), "HF_HOME"
    elif env.get("XDG_CACHE_HOME"):
        home = posixpath.join(expand_path(env["XDG_CACHE_HOME"], env), "huggingface")
        home_from = "XDG_CACHE_HOME"
    else:
        home, home_from = expand_path("~/.cache/huggingface", env), "default"
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            hub, hub_from = expand_path(env[name], env), name
            break
    else:
        hub, hub_from = posixpath.join(home, "hub"), home_from
    token = expand_path(env["HF_TOKEN_PATH"], env) if env.get("HF_TOKEN_PATH") else None
    return HfLocations(
        home=home,
        hub_cache=hub,
        token_file=token or posixpath.join(home, "token"),
        home_from=home_from,
        hub_cache_from=hub_from,
    )


def hf_home(host: Host, env: Mapping[str, str] | None = None) -> str | None:
    """The HF_HOME a native vLLM process on ``host`` reads (``env``: what its launch sets
    over the host's environment), where HF_HOME is set; None: huggingface_hub's default
    (the native route's failures name it: ``diagnose.wording``)."""
    values = host.env(HF_ENV_NAMES)
    values.update({k: v for k, v in (env or {}).items() if k in HF_ENV_NAMES})
    places = hf_locations(values)
    return places.home if places.home_from == "HF_HOME" else None


def local_hf_locations() -> HfLocations:
    """``hf_locations`` of this process's environment."""
    env = {n: os.environ[n] for n in HF_ENV_NAMES if n in os.environ}
    env.setdefault("HOME", os.path.expanduser("~"))
    return hf_locations(env)


def hf_token_file() -> str:
    """Where ``hf auth login`` keeps the Hub token on this machine."""
    return local_hf_locations().token_file
