"""``serve --prefetch``: the weights land in the mounted HF cache before the launch (the real
CLI, the real dockerd and the vLLM test double; the Hub is a stand-in on 127.0.0.1)."""

from __future__ import annotations

import os

import pytest

from tests.infra.hubfiles import SHA, hub_repo
from tests.infra.paths import CONFIGS
from tests.serve.conftest import MODEL, Serve

pytestmark = pytest.mark.docker


def test_prefetch_fills_the_mounted_cache_before_the_launch(serve: Serve) -> None:
    files = {
        "config.json": (CONFIGS / "meta-llama__Meta-Llama-3.1-8B.json").read_bytes(),
        "model.safetensors": os.urandom(2 * 2**20),
        "tokenizer.json": b"{}",
    }
    with hub_repo(MODEL, files, rate=4 * 2**20) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
        env["HF_ENDPOINT"] = hub.endpoint
        run = serve("--prefetch", env=env)
    assert run.returncode == 0, run.explain()
    assert run.result["status"] == "ready"
    snapshot = serve.hf_cache / "hub" / f"models--{MODEL.replace('/', '--')}" / "snapshots" / SHA
    assert (snapshot / "model.safetensors").read_bytes() == files["model.safetensors"]
    kinds = [e["event"] for e in run.events]
    launched = kinds.index("launched")
    notes = [i for i, e in enumerate(run.events) if "prefetched" in str(e.get("message", ""))]
    assert notes and notes[0] < launched  # fetched before the container started


def test_prefetch_without_a_hub_is_a_note_not_a_failure(serve: Serve) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens: refused at once
    run = serve("--prefetch", env=env)
    assert run.returncode == 0, run.explain()
    assert any("weights not prefetched" in str(e.get("message", "")) for e in run.events)
