"""bench/plan_vs_reference.py counts both servers' AMD configs: the vLLM ones planned with
``--server vllm`` as before, the SGLang ones with ``--server sglang`` (TP/EP/DP-attention,
env and flags), the prefill/decode-split ones counted apart as not planned."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.plan_vs_reference import not_planned, run


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``configure_offline`` does, for this test only: no Hub, fresh directories."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("INSTINCT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("INSTINCT_DATA_DIR", str(tmp_path / "data"))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def test_the_sglang_configs_are_planned_as_amd_runs_them() -> None:
    results = run(server="sglang")
    assert len(results) == 58
    assert {r.gpu for r in results} == {"mi300x", "mi325x", "mi355x"}
    unmatched = [r for r in results if not r.matched]
    # the one left: the same name in a deprecated file lists another TP first (stated)
    assert [(r.name, r.file) for r in unmatched] == [
        ("dsr1-fp8-mi355x-sglang", "configs/deprecated/amd-1k1k-master.yaml")
    ]
    assert unmatched[0].explained
    assert len(not_planned("sglang")) == 19


def test_the_vllm_configs_still_match_47_of_48() -> None:
    results = run(server="vllm")
    assert (sum(r.matched for r in results), len(results)) == (47, 48)
