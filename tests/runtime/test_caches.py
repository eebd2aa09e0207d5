"""``instinct cache prune``'s choice (``runtime.caches.select``) and its refusal to remove a
directory the tool did not make (the real ``rm`` through ``LocalHost``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from instinct_serve.errors import InstinctError
from instinct_serve.hosts import LocalHost
from instinct_serve.runtime.caches import CacheEntry, list_caches, remove, select


def entry(key: str, *, present: bool | None, used: list[str] | None = None) -> CacheEntry:
    return CacheEntry("/cc", key, 1, {"tool": "instinct-serve"}, present, used or [])


def test_default_prune_takes_only_keys_whose_image_is_gone() -> None:
    gone, here = entry("a", present=False), entry("b", present=True)
    native = entry("c", present=None)
    in_use = entry("d", present=False, used=["vllm-x"])
    chosen, kept = select([gone, here, native, in_use])
    assert chosen == [gone]
    why = {e.key: reason for e, reason in kept}
    assert why["d"] == "mounted by vllm-x"  # never, whatever else is true
    assert "still on the host" in why["b"] and "no image" in why["c"]
    assert select([gone, here, native, in_use], every=True)[0] == [gone, here, native]
    assert select([gone, here, in_use], keys=("b", "d"))[0] == [here]


def test_only_directories_with_the_tools_meta_are_listed_or_removed(tmp_path: Path) -> None:
    ours = tmp_path / "gfx942-native"
    (ours / "vllm").mkdir(parents=True)
    meta = {"tool": "instinct-serve", "key": ours.name, "engine": "native", "image_id": None}
    (ours / "meta.json").write_text(json.dumps(meta))
    theirs = tmp_path / "gfx942-other"
    theirs.mkdir()
    (theirs / "meta.json").write_text(json.dumps({"tool": "something else"}))
    host = LocalHost()
    (listed,) = list_caches(host, str(tmp_path)).entries
    assert listed.key == ours.name and listed.size_bytes is not None
    with pytest.raises(InstinctError):
        remove(host, CacheEntry(str(tmp_path), theirs.name, 0, {}))
    assert theirs.is_dir()
    remove(host, listed)
    assert not ours.exists()
