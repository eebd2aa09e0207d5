"""The persistent compile caches: one table, used by every rendering.

A ROCm start spends minutes compiling: vLLM's torch.compile (43 s cold, about 5 s from a
warm cache, vllm-project/vllm#44881), Triton kernels, AITER's JIT modules (one took 225 s
cold on gfx950, ROCm/aiter#4055; 633 s over 16 modules on 8x MI355X, sgl-project/sglang
#34586) and MIOpen's kernels and tuning database. Inside a container all of it lands in the
container's own layer and is lost when ``stop``, a relaunch with a known fix or an upgrade
removes the container. So each cache is a directory on the host, mounted at the place the
library reads it from (the variable that names it is set as well), under one directory per
*cache key*: the image's digest and the GPU architecture (``cache_key``). A new image or
another gfx starts clean; a restart of the same one finds everything its predecessor built.

``COMPILE_CACHES`` is the table; ``docker_args``/``compose``/``native_env``/Kubernetes
subPaths are all read from it (``plan.render``, ``plan.kubernetes``):

* ``vllm``: ``VLLM_CACHE_ROOT`` (vLLM's ``envs.py``; default ``~/.cache/vllm``): the
  torch.compile artifacts (``torch_compile_cache/``, Inductor's output with them).
* ``triton``: ``TRITON_CACHE_DIR`` (default ``~/.triton/cache``): compiled Triton kernels.
* ``aiter``: ``AITER_JIT_DIR``. AITER (aiter/jit/core.py, ``get_user_jit_dir``) builds and
  imports its JIT modules (``module_*.so``) from that directory *only* when it is set
  (``importlib.import_module(md_name)`` with the directory on ``sys.path``; otherwise
  ``aiter.jit.<md_name>`` from the package). The image ships prebuilt modules in the
  package's ``jit/`` directory, so an empty mount would hide them and rebuild them all:
  the volume is *seeded* from the image once per cache key (``SEED_SCRIPT``: the
  ``*.so`` files of ``aiter/jit`` copied in, a marker written; ``seed_argv``), and the
  directory is dropped from the layout where the seed fails (no ``python3`` in the image).
  Older AITER releases read ``JIT_WORKSPACE_DIR`` instead and imported from the package
  all the same: there the mount is merely unused. Not used by the native engine: a user's
  own environment keeps what AITER builds in its package directory already.
* ``miopen``: ``MIOPEN_USER_DB_PATH`` (the tuning database, default ``~/.config/miopen``)
  and ``MIOPEN_CUSTOM_CACHE_DIR`` (the kernel cache, default ``~/.cache/miopen``;
  ROCm/MIOpen doc/src/cache.md), one directory for both.

Pure: data in, data out. The host side (the image digest: ``gather.caches``; creating,
seeding, re-keying after a pull, ``instinct cache ls|prune``: ``runtime.caches``).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from typing import Any, NamedTuple

# where the tool keeps the compile caches under its cache directory on the host
CACHE_SUBDIR = "compile-cache"
META_FILE = "meta.json"  # in each key's directory: image, digest, gfx, when used
SEED_MARKER = ".instinct-seeded"  # in the aiter directory once the image's modules are in
OFF = "off"  # --compile-cache off
# what a first start compiles into (AITER's come seeded): a key whose directory of either
# holds anything is *warm* (``runtime.cache_seed.cache_is_warm``, ``FILL_SCRIPT``)
WARM_CACHES = ("vllm", "triton")
# the test of one such directory, in sh (``$1``): both the host check and the pod's use it
FILLED_SH = 'test -d "$1" && test -n "$(ls -A -- "$1" 2>/dev/null)"'
FILLED_MARKER = ".instinct-filled"  # in the first warm cache once a pod served from it


class CacheDir(NamedTuple):
    """One compile cache: its directory name under a key, where the container reads it,
    the variables that point there, and whether it comes seeded from the image."""

    name: str
    container_path: str
    variables: tuple[str, ...]
    what: str
    seeded: bool = False  # filled from the image once per key before the first start
    native: bool = True  # also set for the native engine (host paths)
    gpu: bool = True  # only for GPU plans (vLLM's CPU backend compiles with Inductor alone)


COMPILE_CACHES: tuple[CacheDir, ...] = (
    CacheDir(
        "vllm",
        "/root/.cache/vllm",
        ("VLLM_CACHE_ROOT",),
        "vLLM's torch.compile cache (and Inductor's output with it)",
        gpu=False,
    ),
    CacheDir("triton", "/root/.cache/triton", ("TRITON_CACHE_DIR",), "compiled Triton kernels"),
    CacheDir(
        "aiter",
        "/root/.cache/aiter-jit",
        ("AITER_JIT_DIR",),
        "AITER JIT modules, seeded with the image's prebuilt ones",
        seeded=True,
        native=False,
    ),
    CacheDir(
        "miopen",
        "/root/.cache/miopen",
        ("MIOPEN_USER_DB_PATH", "MIOPEN_CUSTOM_CACHE_DIR"),
        "MIOpen kernel cache and tuning database",
    ),
)
BY_NAME = {c.name: c for c in COMPILE_CACHES}
CACHE_VARIABLES = frozenset(v for c in COMPILE_CACHES for v in c.variables)

_SLUG = re.compile(r"[^A-Za-z0-9_.-]+")


class CacheLayout(NamedTuple):
    """Where one plan's compile caches live on its host.

    ``root``: the host directory with one directory per key; ``key``: this plan's
    (``cache_key``); ``names``: the caches mounted (``aiter`` is dropped where the image
    could not be seeded: an empty AITER_JIT_DIR would hide its prebuilt modules)."""

    root: str
    key: str
    names: tuple[str, ...]
    image_id: str | None = None  # the digest the key was made from (None: not known yet)

    @property
    def directory(self) -> str:
        return posixpath.join(self.root, self.key)

    def host_path(self, name: str) -> str:
        return posixpath.join(self.root, self.key, name)

    @property
    def dirs(self) -> list[CacheDir]:
        return [BY_NAME[n] for n in self.names if n in BY_NAME]

    @property
    def warm_names(self) -> tuple[str, ...]:
        """The caches whose contents make this key warm (``WARM_CACHES`` it mounts)."""
        return tuple(n for n in WARM_CACHES if n in self.names)

    def without(self, name: str) -> CacheLayout:
        return self._replace(names=tuple(n for n in self.names if n != name))

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "key": self.key,
            "image_id": self.image_id,
            "caches": [
                {
                    "name": c.name,
                    "host": self.host_path(c.name),
                    "container": c.container_path,
                    "variables": list(c.variables),
                }
                for c in self.dirs
            ],
        }


def cache_key(gfx: str, image: str, image_id: str | None, *, engine: str = "docker") -> str:
    """``<gfx>-<12 hex of the image digest>``; before the digest is known (planning, or
    the image not pulled yet) ``<gfx>-ref-<12 hex of the reference>``, which serve re-keys
    once the image is on the host; the native engine has no image: ``<gfx>-native``."""
    arch = _SLUG.sub("-", gfx or "unknown").strip("-") or "unknown"
    if engine == "native":
        return f"{arch}-native"
    if image_id:
        digest = image_id.split(":", 1)[-1]
        if re.fullmatch(r"[0-9a-f]{12,64}", digest):
            return f"{arch}-{digest[:12]}"
    if "@sha256:" in image:
        return f"{arch}-{image.rsplit('@sha256:', 1)[1][:12]}"
    return f"{arch}-ref-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def layout_for(
    root: str,
    gfx: str,
    image: str,
    image_id: str | None,
    *,
    engine: str = "docker",
    cpu: bool = False,
) -> CacheLayout:
    """The caches a plan mounts: all of them in a container, the native engine's own
    environment without AITER, a CPU-only plan vLLM's alone."""
    names = tuple(
        c.name
        for c in COMPILE_CACHES
        if (engine == "docker" or c.native) and (not cpu or not c.gpu)
    )
    return CacheLayout(root, cache_key(gfx, image, image_id, engine=engine), names, image_id)


def seed_argv(layout: CacheLayout | None, image: str) -> list[str] | None:
    """The ``docker run`` that seeds the AITER directory from ``image`` (idempotent: the
    marker makes a second run a no-op), or None when the layout mounts no AITER cache."""
    if layout is None or "aiter" not in layout.names:
        return None
    return [
        "docker",
        "run",
        "--rm",
        "--entrypoint",
        "python3",
        "-v",
        f"{layout.host_path('aiter')}:/seed",
        image,
        "-c",
        SEED_SCRIPT,
        "/seed",
    ]


def meta_doc(layout: CacheLayout, *, image: str, gfx: str, engine: str, now: str) -> dict[str, Any]:
    """What ``meta.json`` of a key says: the tool made it (``instinct cache prune`` removes
    nothing else), for which image and gfx, and when it was last used."""
    return {
        "tool": "instinct-serve",
        "key": layout.key,
        "image": image,
        "image_id": layout.image_id,
        "gfx": gfx,
        "engine": engine,
        "last_used": now,
    }


def rekeyed(layout: CacheLayout, gfx: str, image: str, image_id: str) -> CacheLayout:
    """The layout once the image's digest is known (after the pull)."""
    return layout._replace(key=cache_key(gfx, image, image_id), image_id=image_id)


def mounts(layout: CacheLayout | None) -> list[tuple[str, str]]:
    """(host path, container path) of every mounted cache."""
    if layout is None:
        return []
    return [(layout.host_path(c.name), c.container_path) for c in layout.dirs]


def container_env(layout: CacheLayout | None, env: dict[str, str]) -> dict[str, str]:
    """The variables pointing at the mounted caches (container paths); a variable the
    plan sets itself (``--env-literal VLLM_CACHE_ROOT=...``) is the plan's."""
    out: dict[str, str] = {}
    if layout is None:
        return out
    for cache in layout.dirs:
        for variable in cache.variables:
            if variable not in env:
                out[variable] = cache.container_path
    return out


def host_env(layout: CacheLayout | None, env: dict[str, str]) -> dict[str, str]:
    """The same for the native engine: the variables point at the host directories."""
    out: dict[str, str] = {}
    if layout is None:
        return out
    for cache in layout.dirs:
        if not cache.native:
            continue
        for variable in cache.variables:
            if variable not in env:
                out[variable] = layout.host_path(cache.name)
    return out


# Run by the image's own python3 (every vLLM image has one): argv[1] is the mounted AITER
# directory. Copies the prebuilt modules of the installed aiter package (``aiter/jit/*.so``,
# found without importing aiter: ``find_spec`` of a top-level package does not run it)
# unless the directory was seeded before, then writes the marker. Prints one JSON line.
SEED_SCRIPT = """\
import importlib.util, json, os, shutil, sys
dest = sys.argv[1]
marker = os.path.join(dest, ".instinct-seeded")
if os.path.exists(marker):
    print(json.dumps({"seeded": "before", "copied": 0}))
    sys.exit(0)
os.makedirs(dest, exist_ok=True)
spec = importlib.util.find_spec("aiter")
src = None
if spec is not None and spec.submodule_search_locations:
    src = os.path.join(list(spec.submodule_search_locations)[0], "jit")
copied = []
if src and os.path.isdir(src):
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name.endswith(".so") and os.path.isfile(path):
            if not os.path.exists(os.path.join(dest, name)):
                shutil.copy2(path, os.path.join(dest, name))
            copied.append(name)
with open(marker, "w") as fh:
    json.dump({"source": src, "modules": copied}, fh)
print(json.dumps({"seeded": "now", "source": src, "copied": len(copied)}))
"""


# Run by ``sh`` in an init container of every pod of a Kubernetes plan with several copies
# on one cache volume (``plan.k8s_cache``), so that they do not all compile the same kernels
# into one directory at once: the first pod fills the key's compile cache, the others wait
# for it and start warm (what a replica group does on docker, ``runtime.group``). argv: the
# key's directory, this pod's owner name (a pod, or a multi-node group: its ranks start
# together), the most seconds to wait (the filler's own start budget; a lock as old is
# stale: its pod died or gave up), the seconds between looks, the marker a pod's readiness
# probe writes once it served from the cache (relative to the key), then the warm caches'
# names. Warm at once: the marker, or no lock and a warm cache (filled before the gate).
# Otherwise the first pod to make the lock directory (``mkdir``: atomic, on NFS too)
# fills; the others wait until the marker appears, take over a stale lock (one taker per
# stale lock: its own ``mkdir``), or give up after the bound and start cold. Two waiters
# that judge one lock stale in the same instant can both fill: a duplicate compile, no more.
FILL_SCRIPT = f"""\
dir=$1 owner=$2 bound=$3 poll=$4 marker=$1/$5
shift 5
state=$dir/.instinct-fill
lock=$state/lock
filled() {{ {FILLED_SH}; }}
warm() {{
  for name in "$@"; do filled "$dir/$name" && return 0; done
  return 1
}}
take() {{
  mkdir -p "$state" && mkdir "$lock" 2>/dev/null || return 1
  echo "$(date +%s) $owner" > "$lock/owner"
  echo "compile cache cold: $owner fills it, the other pods wait for it"
}}
if test -e "$marker"; then
  echo "compile cache warm: a pod has served from it"
  exit 0
fi
if ! test -d "$lock" && warm "$@"; then
  echo "compile cache warm: it holds a compile"
  exit 0
fi
take && exit 0
start=$(date +%s)
while :; do
  now=$(date +%s)
  if test -e "$marker"; then
    echo "compile cache warm after $((now - start)) s: starting from it"
    exit 0
  fi
  since= holder=
  test -f "$lock/owner" && read -r since holder < "$lock/owner"
  if test -n "$holder" && test "$holder" = "$owner"; then
    echo "compile cache: $owner took the fill lock before: filling it"
    exit 0
  fi
  if ! test -d "$lock"; then
    take && exit 0
  fi
  # a takeover is one mkdir named for the lock's state (one taker each), and the lock stays
  # in place, its owner rewritten: no moment without a lock for a third pod to take
  case $since in ''|*[!0-9]*) since=$start state_id=none ;; *) state_id=$since ;; esac
  if test $((now - since)) -ge "$bound" && mkdir -p "$state" &&
      mkdir "$state/taken-$state_id-$holder" 2>/dev/null; then
    echo "the fill lock of ${{holder:-a pod}} is $((now - since)) s old: taking it over"
    mkdir -p "$lock" && echo "$(date +%s) $owner" > "$lock/owner"
    echo "compile cache cold: $owner fills it, the other pods wait for it"
    exit 0
  elif test $((now - start)) -ge "$bound"; then
    echo "waited $((now - start)) s for ${{holder:-a pod}} to fill the compile cache: starting cold"
    exit 0
  fi
  sleep "$poll"
done
"""
