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

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from instinct_serve.plan.labels import LABEL_COMPILE_CACHE
from instinct_serve.runtime.docker import Docker
from tests.infra.ports import free_port
from tests.infra.ssh import SshServer
from tests.runtime.conftest import Launcher
from tests.serve.conftest import run_cli

pytestmark = [pytest.mark.docker]

KEYS = [f"gfx942-{i:012x}" for i in range(6)]


def make_caches(root: Path) -> None:
    for key in KEYS:
        for name in ("vllm", "triton"):
            (root / key / name).mkdir(parents=True)
        (root / key / "vllm" / "artifact").write_text("compiled\n")
        meta = {"tool": "instinct-serve", "key": key, "engine": "docker", "image_id": None}
        (root / key / "meta.json").write_text(json.dumps(meta))


def mounting(launcher: Launcher, docker: Docker, label_dir: str, *, managed: bool = True) -> str:
    """A running test double whose container mounts ``label_dir``'s vllm cache (and, when
    managed, carries serve's label naming it)."""
    name = launcher.names("cache")
    port = free_port()
    argv = launcher.argv(name, port, managed=managed)
    extra = ["-v", f"{label_dir}/vllm:/root/.cache/vllm"]
    if managed:
        extra += ["--label", f"{LABEL_COMPILE_CACHE}={label_dir}"]
    docker.run([*argv[:3], *extra, *argv[3:]])
    return f"http://127.0.0.1:{port}"


def answers(url: str) -> bool:
    for _ in range(100):
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


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
    urls = [
        mounting(launcher, docker, f"{root}/./{KEYS[0]}"),
        mounting(launcher, docker, f"{link}/{KEYS[1]}"),
        mounting(launcher, docker, f"{parent}//compile-cache/../compile-cache/{KEYS[2]}"),
        # not a container of the tool: no label, only the bind mount, through the symlink
        mounting(launcher, docker, f"{link}/{KEYS[3]}", managed=False),
    ]
    spellings = [f"{root}/.", f"{root}/../compile-cache", f"{parent}//compile-cache", str(link)]
    return {"root": root, "urls": urls, "spellings": spellings}


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
    assert all(answers(url) for url in world["urls"])
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
