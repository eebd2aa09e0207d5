"""Compile caches that survive ``stop``: the real CLI, the real dockerd and the vLLM test
double, whose torch.compile is SIMULATED (``VLLM_DOUBLE_COMPILE_S``: it sleeps and writes a
marker file into ``VLLM_CACHE_ROOT``, or "loads" it quickly when an earlier start left it).
What is real here: the mounts serve makes, the key, the seeding of the AITER directory from
the image (a stand-in ``aiter`` package with prebuilt ``.so`` files baked into the image), and
``instinct cache ls|prune`` over what is on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.infra.docker import derived_test_image
from tests.infra.ports import free_port
from tests.serve.conftest import Serve, inspect, run_cli

pytestmark = pytest.mark.docker

COLD_S = 4.0
WARM_S = 0.4
FAKE_AITER = {
    "/opt/fake-aiter/aiter/__init__.py": b"# stand-in aiter package (tests): never imported\n",
    "/opt/fake-aiter/aiter/jit/module_moe_asm.so": b"\x7fELF stand-in prebuilt AITER module\n",
}


def _image(serve: Serve) -> str:
    env = {
        "VLLM_DOUBLE_MODE": "healthy",
        "VLLM_DOUBLE_LOAD_S": "0.5",
        "VLLM_DOUBLE_COMPILE_S": str(COLD_S),
        "VLLM_DOUBLE_WARM_COMPILE_S": str(WARM_S),
        "PYTHONPATH": "/opt/fake-aiter",
    }
    return derived_test_image(serve.image, env, FAKE_AITER)


def _cache_doc(root: Path) -> dict[str, Any]:
    out = run_cli(["cache", "ls", "--compile-cache", str(root), "--json"])
    assert out.returncode == 0, out.explain()
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def test_second_start_finds_the_first_starts_compile_cache(serve: Serve, tmp_path: Path) -> None:
    root = tmp_path / "compile-cache"
    image = _image(serve)
    name = serve.name("cc")
    port = free_port()

    cold = serve("--compile-cache", str(root), image=image, name=name, port=port)
    assert cold.returncode == 0, cold.explain()
    info = inspect(name)
    assert info is not None
    binds = {m["Source"]: m["Destination"] for m in info["Mounts"] if m["Type"] == "bind"}
    (key_dir,) = [p for p in root.iterdir() if p.is_dir()]
    assert key_dir.name.startswith("gfx942-") and "-ref-" not in key_dir.name  # the digest
    image_id = json.loads((key_dir / "meta.json").read_text())["image_id"]
    assert image_id.startswith("sha256:") and key_dir.name.endswith(image_id[7:19])
    for cache, target in (("vllm", "/root/.cache/vllm"), ("aiter", "/root/.cache/aiter-jit")):
        assert binds[str(key_dir / cache)] == target
    env = dict(e.partition("=")[::2] for e in info["Config"]["Env"])
    assert env["VLLM_CACHE_ROOT"] == "/root/.cache/vllm"
    assert env["AITER_JIT_DIR"] == "/root/.cache/aiter-jit"
    # the image's prebuilt AITER module was copied in before vLLM started
    seeded = key_dir / "aiter" / "module_moe_asm.so"
    assert seeded.read_bytes() == FAKE_AITER["/opt/fake-aiter/aiter/jit/module_moe_asm.so"]
    artifacts = list((key_dir / "vllm").rglob("double-compiled-graph.txt"))
    assert len(artifacts) == 1  # what the first start's (simulated) compile left on the host
    assert any("graph compiled in" in e["message"] for e in cold.of("phase"))

    # in use: listed with its endpoint, and prune keeps it whatever is asked
    doc = _cache_doc(root)
    (entry,) = doc["caches"]
    assert entry["key"] == key_dir.name and entry["used_by"] == [name]
    assert entry["image_present"] is True and entry["size_bytes"] > 0
    kept = run_cli(["cache", "prune", "--all", "--yes", "--compile-cache", str(root), "--json"])
    assert kept.returncode == 0, kept.explain()
    assert json.loads(kept.stdout)["removed"] == [] and key_dir.is_dir()

    stop = run_cli(["stop", "--yes", name, "--json"])
    assert stop.returncode == 0 and inspect(name) is None
    warm = serve("--compile-cache", str(root), image=image, name=name, port=port)
    assert warm.returncode == 0, warm.explain()
    assert not any("graph compiled in" in e["message"] for e in warm.of("phase"))
    logs = run_cli(["logs", name, "--tail", "200"])
    assert "Directly load the compiled graph(s)" in logs.stdout, logs.explain()
    assert not any("seeding the AITER" in json.dumps(e) for e in warm.events)  # once per key
    cold_s, warm_s = cold.phase_s("compiling"), warm.phase_s("compiling")
    assert cold_s is not None and warm_s is not None, (cold.phases, warm.phases)
    print(f"compile phase: cold {cold_s:.2f} s, warm {warm_s:.2f} s (simulated by the double)")
    assert cold_s >= COLD_S * 0.9 and warm_s < cold_s / 2, (cold_s, warm_s)

    # once no endpoint uses it: --all selects it (dry run first), --yes removes it
    assert run_cli(["stop", "--yes", name]).returncode == 0
    mine = root / "not-ours"
    mine.mkdir()
    (mine / "keep.txt").write_text("a directory the tool did not make")
    dry = run_cli(["cache", "prune", "--all", "--compile-cache", str(root), "--json"])
    assert dry.returncode == 0, dry.explain()
    doc = json.loads(dry.stdout)
    assert doc["dry_run"] is True and [e["key"] for e in doc["would_remove"]] == [key_dir.name]
    assert key_dir.is_dir()
    gone = run_cli(["cache", "prune", "--all", "--yes", "--compile-cache", str(root), "--json"])
    assert gone.returncode == 0, gone.explain()
    assert [e["key"] for e in json.loads(gone.stdout)["removed"]] == [key_dir.name]
    assert not key_dir.exists() and (mine / "keep.txt").is_file()


def test_default_prune_takes_keys_whose_image_is_gone(serve: Serve, tmp_path: Path) -> None:
    """After an upgrade the old image's key is garbage; the current one stays."""
    root = tmp_path / "cc"
    name = serve.name("cc")
    run = serve("--compile-cache", str(root), image=serve.double(), name=name)
    assert run.returncode == 0, run.explain()
    assert run_cli(["stop", "--yes", name]).returncode == 0
    (current,) = [p for p in root.iterdir()]
    stale = root / "gfx942-0123456789ab"
    stale.mkdir()
    meta = json.loads((current / "meta.json").read_text())
    meta.update(key=stale.name, image_id="sha256:" + "0123456789ab" * 5 + "0123", image="old:1")
    (stale / "meta.json").write_text(json.dumps(meta))
    out = run_cli(["cache", "prune", "--compile-cache", str(root), "--json"])
    assert out.returncode == 0, out.explain()
    doc = json.loads(out.stdout)
    assert [e["key"] for e in doc["would_remove"]] == [stale.name]
    assert [e["key"] for e in doc["kept"]] == [current.name]
    unknown = run_cli(["cache", "prune", "nope", "--compile-cache", str(root), "--json"])
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["id"] == "bad_input"
