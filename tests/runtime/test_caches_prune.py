"""``instinct cache prune`` against the real dockerd (issue 26, finding 1): a cache that a
container mounts is kept whatever spelling of ``--compile-cache`` serve and prune were given
(``ROOT/.``, ``ROOT/../compile-cache``, ``PARENT//compile-cache``, a symlink), and prune
removes nothing when the container list cannot be read (Docker not answering).

Six caches made as serve makes them (a key directory with the tool's ``meta.json``); three are
mounted by running containers of the vLLM test double, each told its cache under another
spelling (the label serve writes, and the bind mounts), one of them not even a container of the
tool. The CLI runs as a subprocess, locally and over the loopback sshd.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from instinct_serve.plan.labels import LABEL_COMPILE_CACHE
from instinct_serve.runtime.docker import Docker
from tests.infra.ports import free_port
from tests.infra.ssh import SshServer
from tests.runtime.conftest import Launcher
from tests.serve.conftest import answers, run_cli

pytestmark = [pytest.mark.docker]

KEYS = [f"gfx942-{i:012x}" for i in range(6)]


def make_caches(root: Path) -> None:
    for key in KEYS:
        for name in ("vllm", "triton"):
            (root / key / name).mkdir(parents=True)
        (root / key / "vllm" / "artifact").write_text("compiled\n")
        meta = {"tool": "instinct-serve", "key": key, "engine": "docker", "image_id": None}
        (root / key / "meta.json").write_text(json.dumps(meta))


def mounting(launcher: Launcher, docker: Docker, label_dir: str, *, managed: bool = True) -> int:
    """A running test double whose container mounts ``label_dir``'s vllm cache (and, when
    managed, carries serve's label naming it)."""
    name = launcher.names("cache")
    port = free_port()
    argv = launcher.argv(name, port, managed=managed)
    extra = ["-v", f"{label_dir}/vllm:/root/.cache/vllm"]
    if managed:
        extra += ["--label", f"{LABEL_COMPILE_CACHE}={label_dir}"]
    docker.run([*argv[:3], *extra, *argv[3:]])
    return port


def prune(root: str, *extra: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    run = run_cli(["cache", "prune", "--compile-cache", root, *extra, "--json"], env=env)
    try:
        return run.returncode, json.loads(run.stdout)
    except ValueError as exc:
        raise AssertionError(run.explain()) from exc


@pytest.fixture
def world(tmp_path: Path, launcher: Launcher) -> dict[str, Any]:
    parent = tmp_path / "parent"
    root = parent / "compile-cache"
    root.mkdir(parents=True)
    make_caches(root)
    link = tmp_path / "link-to-caches"
    link.symlink_to(root)
    docker = Docker(launcher.daemon.host)
    ports = [
        mounting(launcher, docker, f"{root}/./{KEYS[0]}"),
        mounting(launcher, docker, f"{link}/{KEYS[1]}"),
        mounting(launcher, docker, f"{parent}//compile-cache/../compile-cache/{KEYS[2]}"),
        # not a container of the tool: no label, only the bind mount, through the symlink
        mounting(launcher, docker, f"{link}/{KEYS[3]}", managed=False),
    ]
    spellings = [f"{root}/.", f"{root}/../compile-cache", f"{parent}//compile-cache", str(link)]
    return {"root": root, "ports": ports, "spellings": spellings}


def test_prune_keeps_every_mounted_cache_whatever_the_spelling(world: dict[str, Any]) -> None:
    root: Path = world["root"]
    for spelling in world["spellings"]:
        code, doc = prune(spelling, "--all")
        assert code == 0, doc
        assert doc["root"] == str(root)  # canonical
        assert sorted(e["key"] for e in doc["would_remove"]) == KEYS[4:]
        kept = {e["key"]: e for e in doc["kept"]}
        assert sorted(kept) == KEYS[:4]
        assert all(e["why"].startswith("mounted by ") for e in kept.values())
    code, doc = prune(world["spellings"][1], "--all", "--yes")
    assert code == 0, doc
    assert sorted(e["key"] for e in doc["removed"]) == KEYS[4:]
    assert sorted(p.name for p in root.iterdir()) == KEYS[:4]
    for key in KEYS[:4]:
        assert (root / key / "vllm" / "artifact").read_text() == "compiled\n"
    assert all(answers(port) for port in world["ports"])
    # a key named on the command line that a container mounts is kept as well
    code, doc = prune(str(root), KEYS[0], "--yes")
    assert code == 0 and doc["removed"] == [] and doc["kept"][0]["key"] == KEYS[0]
    assert (root / KEYS[0]).is_dir()


def test_prune_removes_nothing_when_docker_does_not_answer(
    world: dict[str, Any], tmp_path: Path
) -> None:
    root: Path = world["root"]
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no-daemon.sock")
    code, doc = prune(str(root), "--all", "--yes", env=env)
    assert code != 0 and doc["error"]["id"] == "containers_unreadable", doc
    assert sorted(p.name for p in root.iterdir()) == KEYS
    # listing still works, and says the users are unknown
    run = run_cli(["cache", "ls", "--compile-cache", str(root), "--json"], env=env)
    assert run.returncode == 0, run.explain()
    listed = json.loads(run.stdout)
    assert listed["containers_readable"] is False and len(listed["caches"]) == 6


@pytest.mark.ssh
def test_prune_over_ssh_canonicalises_on_the_host(world: dict[str, Any], sshd: SshServer) -> None:
    """The same through ``--host`` (realpath runs on the host, through the ssh boundary)."""
    root: Path = world["root"]
    argv = ["cache", "prune", "--compile-cache", world["spellings"][3], "--all", "--yes"]
    run = run_cli([*argv, "--host", sshd.host_spec, "--json"], env=sshd.env())
    assert run.returncode == 0, run.explain()
    doc = json.loads(run.stdout)
    assert doc["root"] == str(root)
    assert sorted(e["key"] for e in doc["removed"]) == KEYS[4:]
    assert sorted(p.name for p in root.iterdir()) == KEYS[:4]


BULKY = [f"gfx942-{i:012x}" for i in range(100, 103)]  # removed one after the other
BULKY_FILES = 1500  # enough that a removal is still under way when the kill lands


def make_bulky(root: Path) -> None:
    for key in BULKY:
        kernels = root / key / "triton" / "kernels"
        kernels.mkdir(parents=True)
        for i in range(BULKY_FILES):
            (kernels / f"k{i:05d}.so").write_bytes(b"x" * 64)
        meta = {"tool": "instinct-serve", "key": key, "engine": "docker", "image_id": None}
        (root / key / "meta.json").write_text(json.dumps(meta))


def descendants(pid: int) -> list[int]:
    """``pid``'s children, theirs, and so on (read from /proc; the host runs each command in
    a session of its own, so a process group would not reach them)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found += (kids := parents.get(todo.pop(), []))
        todo += kids
    return found


def kill_all(pid: int) -> None:
    """SIGKILL ``pid`` and all it started (a host going down): stopped first, so it starts
    nothing more while its descendants are found."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGSTOP)
    for each in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)


def removal_begun(root: Path, key: str) -> bool:
    """The key is set aside, gone, or has lost a file."""
    if (root / f".{key}.removing").exists() or not (root / key / "meta.json").exists():
        return True
    try:
        return len(os.listdir(root / key / "triton" / "kernels")) < BULKY_FILES
    except OSError:
        return True


def kill_at_removal(root: Path, n: int) -> bool:
    """Run ``cache prune --all --yes`` and SIGKILL it, its ``rm`` with it (the whole host
    going down), once its Nth removal has begun (a ``.KEY.removing`` seen, or a key gone);
    False when prune ended first."""
    from tests.serve.conftest import CLI

    argv = [*CLI, "cache", "prune", "--compile-cache", str(root), "--all", "--yes", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    begun: set[str] = set()
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            begun |= {k for k in BULKY if removal_begun(root, k)}
            if len(begun) >= n:
                kill_all(proc.pid)
                proc.wait(timeout=30)
                return True
            time.sleep(0.002)
        return False
    finally:
        if proc.poll() is None:
            kill_all(proc.pid)
        proc.wait(timeout=30)


def test_prune_killed_at_every_removal_leaves_no_half_cache(world: dict[str, Any]) -> None:
    """Kill at every step of a prune (issue 26): each removal is a rename out of every
    plan's reach, then ``rm``; whatever the kill cut, no key is left half removed (whole or
    gone), ``ls`` names the unfinished removals, the next prune finishes them, and the mounted
    caches and their endpoints are untouched."""
    root: Path = world["root"]
    kills = 0
    for n in range(1, len(BULKY) + 1):
        make_bulky(root)
        if not kill_at_removal(root, n):
            continue
        kills += 1
        names = sorted(p.name for p in root.iterdir())
        for key in (k for k in names if not k.startswith(".")):
            assert (root / key / "meta.json").is_file(), (n, key)  # whole, or not there
            if key in BULKY:
                assert len(list((root / key / "triton" / "kernels").iterdir())) == BULKY_FILES
        aside = sorted(str(root / k) for k in names if k.endswith(".removing"))
        run = run_cli(["cache", "ls", "--compile-cache", str(root), "--json"])
        assert run.returncode == 0, run.explain()
        assert json.loads(run.stdout)["unfinished_removals"] == aside, (n, names)
        code, doc = prune(str(root), "--all", "--yes")
        assert code == 0, doc
        assert doc["finished_removals"] == aside
        assert sorted(p.name for p in root.iterdir()) == KEYS[:4], n
        for key in KEYS[:4]:
            assert (root / key / "vllm" / "artifact").read_text() == "compiled\n"
    print(f"\nkill campaign prune: {kills} removals killed, 0 half caches")
    assert kills >= 2  # the removals are long enough for the kill to land
    assert all(answers(port) for port in world["ports"])
