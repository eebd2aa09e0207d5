"""Seeding a node's compile caches from the head's (``runtime.cache_seed``), through the real
sshd on 127.0.0.1: the head is this machine, the node an ssh alias of it, each with its own
cache root (as two machines' disks would be)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from instinct_serve.hosts import LocalHost
from instinct_serve.plan.caches import CacheLayout
from instinct_serve.runtime.cache_seed import PARTIAL, copy_tree, seed_nodes
from tests.infra.ssh import SshServer

pytestmark = pytest.mark.ssh

KEY = "gfx942-0123456789ab"


def layout(root: Path) -> CacheLayout:
    return CacheLayout(str(root), KEY, ("vllm", "triton", "aiter", "miopen"))


def fill(root: Path) -> dict[str, bytes]:
    """A head's caches after a compile: torch.compile artifacts, Triton kernels, an AITER
    module (binary, with a name a shell would mangle); MIOpen left empty."""
    files = {
        "vllm/torch_compile_cache/ab12/rank_0_0/backbone/model.py": b"# compiled graph\n",
        "triton/XYZ/kernel.hsaco": bytes(range(256)) * 64,
        "aiter/module_moe ck$(x).so": os.urandom(4096),
    }
    for rel, data in files.items():
        path = root / KEY / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / KEY / "miopen").mkdir(parents=True)
    return files


def test_an_empty_node_gets_the_heads_caches_and_a_filled_one_keeps_its_own(
    sshd: SshServer, tmp_path: Path
) -> None:
    head_root, node_root = tmp_path / "head", tmp_path / "node"
    files = fill(head_root)
    (node_root / KEY / "triton").mkdir(parents=True)  # made empty by an earlier mkdir -p
    own = node_root / KEY / "aiter" / "own.so"  # the node's own build: left alone
    own.parent.mkdir(parents=True)
    own.write_bytes(b"node's")
    said: list[str] = []
    node = sshd.host()
    seeded = seed_nodes(LocalHost(), layout(head_root), [(1, node, layout(node_root))], said.append)
    assert sorted(s.cache for s in seeded) == ["triton", "vllm"]
    for rel, data in files.items():
        copied = node_root / KEY / rel
        if rel.startswith("aiter/"):
            assert not copied.exists()
        else:
            assert copied.read_bytes() == data
    assert own.read_bytes() == b"node's"
    assert not (node_root / KEY / "miopen").exists()  # nothing to copy: the head's is empty
    assert not list(node_root.glob(f"{KEY}/*{PARTIAL}"))
    triton = next(s for s in seeded if s.cache == "triton")
    assert triton.rank == 1 and triton.size_bytes is not None and triton.size_bytes >= 16384
    assert any("seeded the triton cache of rank 1 on" in m for m in said), said
    again = seed_nodes(LocalHost(), layout(head_root), [(1, node, layout(node_root))], said.append)
    assert again == []  # filled now: the node's own


def test_a_copy_that_fails_is_said_and_leaves_the_node_to_compile(
    sshd: SshServer, tmp_path: Path
) -> None:
    head_root, node_root = tmp_path / "head", tmp_path / "node"
    files = fill(head_root)
    node_root.mkdir()
    (node_root / KEY).write_text("a file where the node's key directory would be")
    said: list[str] = []
    seeded = seed_nodes(
        LocalHost(), layout(head_root), [(1, sshd.host(), layout(node_root))], said.append
    )
    assert seeded == []
    assert len(said) == 3 and all("not seeded on" in m and "rank 1 compiles" in m for m in said)
    assert (node_root / KEY).is_file()  # nothing of the node's touched
    assert all((head_root / KEY / rel).read_bytes() == data for rel, data in files.items())


def test_copy_tree_streams_between_two_hosts_and_fails_plainly(
    sshd: SshServer, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    (source / "a" / "b").mkdir(parents=True)
    (source / "a" / "b" / "c.bin").write_bytes(b"\x00\x01" * 1000)
    target = tmp_path / "dst" / "x"
    copy_tree(sshd.host(), str(source), LocalHost(), str(target))  # node to head: both ways
    assert (target / "a" / "b" / "c.bin").read_bytes() == b"\x00\x01" * 1000
    from instinct_serve.errors import InstinctError

    with pytest.raises(InstinctError) as failed:
        copy_tree(LocalHost(), str(tmp_path / "missing"), sshd.host(), str(tmp_path / "y"))
    assert failed.value.id == "cache_seed_failed" and "missing" in str(failed.value)
    assert not (tmp_path / "y").exists()


def test_a_group_seeds_its_other_nodes_before_the_ranks_start(
    sshd: SshServer, tmp_path: Path
) -> None:
    """``GroupRunner.seed_caches`` (run first by ``start``): each rank above 0 from the head,
    with one event carrying the figures; the node's own root differs, as on another disk."""
    from instinct_serve.runtime.multinode import GroupRunner
    from tests.plan.test_multinode import split

    plan = split(compatible=["single_node_tp", "multi_node_tp"])
    head_root, node_root = tmp_path / "head", tmp_path / "node"
    fill(head_root)
    head, worker = plan.nodes
    head.plan.cache = layout(head_root)
    worker.plan.cache = layout(node_root)
    events: list[dict[str, object]] = []
    runner = GroupRunner([LocalHost(), sshd.host()], plan, sink=events.append)
    runner.seed_caches()
    seeded = [e for e in events if e["event"] == "cache_seeded"]
    assert len(seeded) == 1
    rows = seeded[0]["seeded"]
    assert isinstance(rows, list) and {r["cache"] for r in rows} == {"vllm", "triton", "aiter"}
    assert all(r["rank"] == 1 and r["target"].startswith(str(node_root)) for r in rows)
    notes = [e["message"] for e in events if e["event"] == "note"]
    assert len(notes) == 3 and all(" from local: " in str(m) for m in notes), notes
    assert any("triton cache of rank 1" in str(m) and " KiB in " in str(m) for m in notes)
    assert (node_root / KEY / "triton" / "XYZ" / "kernel.hsaco").exists()
