"""Where a plan's compile caches live on its host (the gather half of ``plan.caches``).

The root: ``--compile-cache DIR`` (``~``/``$VAR`` expanded against the host's environment),
else ``compile-cache/`` in the tool's cache directory on the host (``INSTINCT_CACHE_DIR``,
else ``$XDG_CACHE_HOME/instinct-serve``, else ``~/.cache/instinct-serve``, as
``paths.cache_dir`` locally). Planning asks nothing of Docker (a plan is made without
touching the host's daemon): the key is made from the image reference, and ``serve`` re-keys
it by the image's digest once the pull has brought the image (``image_id``: its id, the
digest of its config, which also exists for images built or loaded locally;
``runtime.caches.prepare_caches``). A printed command keeps the reference's key.

The root is canonical (``realpaths``: ``realpath`` on the host, through the ``Host``, so over
ssh too): ``ROOT/.``, ``ROOT/../compile-cache``, ``PARENT//compile-cache`` and a symlink to
ROOT are one root, one plan hash and one label, and ``cache prune`` compares like with like.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from instinct_serve.plan.caches import CACHE_SUBDIR, OFF, CacheLayout, layout_for

if TYPE_CHECKING:
    from instinct_serve.hosts import Host
    from instinct_serve.plan.model import LaunchPlan

_CACHE_DIR_SCRIPT = (
    'if [ -n "$INSTINCT_CACHE_DIR" ]; then printf %s "$INSTINCT_CACHE_DIR"; '
    'else printf %s "${XDG_CACHE_HOME:-$HOME/.cache}/instinct-serve"; fi'
)
_IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")
# Each argument's canonical path, NUL-terminated (empty: it cannot be resolved, e.g. a symlink
# loop). GNU ``realpath -m`` (a missing tail is fine: a root serve has not made yet), else the
# POSIX ``cd -P`` for a directory where there is no realpath.
_REALPATH = (
    'for p do r=$(realpath -m -- "$p" 2>/dev/null) || r=$(cd -P -- "$p" 2>/dev/null && pwd -P) '
    '|| r=; printf "%s\\0" "$r"; done'
)
_REALPATH_CHUNK = 256  # paths per command (argv length over ssh)


def host_cache_dir(host: Host) -> str | None:
    """The tool's cache directory on ``host`` (``paths.cache_dir()`` here)."""
    if host.is_local:
        from instinct_serve import paths

        return str(paths.cache_dir())
    result = host.run(["sh", "-c", _CACHE_DIR_SCRIPT], timeout=30)
    path = result.stdout.strip()
    return path if result.ok and path.startswith("/") else None


def realpaths(host: Host, paths: Sequence[str]) -> dict[str, str | None]:
    """Each path's canonical form on ``host`` (symlinks, ``.``, ``..`` and ``//`` resolved),
    None for one that cannot be resolved. Raises ``InstinctError`` when the host does not
    answer (nothing may be compared, or removed, on a guess)."""
    from instinct_serve.errors import InstinctError

    wanted = list(dict.fromkeys(p for p in paths if p))
    found: dict[str, str | None] = {}
    for start in range(0, len(wanted), _REALPATH_CHUNK):
        chunk = wanted[start : start + _REALPATH_CHUNK]
        result = host.run(["sh", "-c", _REALPATH, "sh", *chunk], timeout=60)
        answers = result.stdout.split("\0")
        if not result.ok or len(answers) != len(chunk) + 1:
            raise InstinctError(
                f"cannot resolve paths on {host.name}: "
                f"{result.stderr.strip() or f'exit {result.returncode}'}",
                fix="check the host (`instinct check`)",
                id="realpath_failed",
            )
        for path, real in zip(chunk, answers, strict=False):
            found[path] = real if real.startswith("/") else None
    return found


def canonical_root(host: Host, root: str) -> str | None:
    """``root`` resolved on ``host`` (None: it cannot be, e.g. a symlink loop)."""
    return realpaths(host, [root]).get(root)


def image_id(host: Host, image: str) -> str | None:
    """The id (``sha256:<config digest>``) of ``image`` on the host, None when it is not
    there (or Docker is not usable: the key is then the reference's, re-keyed later)."""
    result = host.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], timeout=30)
    text = result.stdout.strip()
    return text if result.ok and _IMAGE_ID.fullmatch(text) else None


def cache_root(setting: str | None, host: Host) -> str | None:
    """The root directory of the compile caches, or None for ``off``."""
    if setting is not None and setting.strip().lower() == OFF:
        return None
    if setting:
        from instinct_serve.paths import expand_path

        env = host.env(["HOME"])
        if host.is_local and not env.get("HOME"):
            env["HOME"] = os.path.expanduser("~")
        path = expand_path(setting.strip(), env)
    else:
        base = host_cache_dir(host)
        if not base:
            return None
        path = f"{base.rstrip('/')}/{CACHE_SUBDIR}"
    # unresolvable (a loop): the spelling, normalised; serve's mkdir then says what is wrong
    return canonical_root(host, path) or posixpath.normpath(path)


def resolve_compile_cache(setting: str | None, host: Host, plan: LaunchPlan) -> CacheLayout | None:
    """The plan's cache layout on ``host`` (None: off, or no cache directory found)."""
    root = cache_root(setting, host)
    if root is None:
        return None
    from instinct_serve.hardware.target import CPU_SOURCE

    cpu = plan.gfx_version == CPU_SOURCE
    return layout_for(root, plan.gfx_version, plan.image, None, engine=plan.engine, cpu=cpu)
