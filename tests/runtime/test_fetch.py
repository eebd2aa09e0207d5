"""``instinct pull``: the image and the weights fetched at once (``runtime.fetch``).

The pure pieces directly; then the real CLI against the real dockerd pulling from a
registry stand-in on 127.0.0.1 (``tests/infra/registry.py``) while huggingface_hub downloads
from a Hub stand-in on 127.0.0.1 (``tests/infra/hubfiles.py``), both paced so that each side
takes seconds: the overlap is read from the phases' own timestamps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from instinct_serve.runtime.fetch import (
    Span,
    _parse_reference,
    disk_problems,
    overlap_s,
    parse_df,
    select_files,
)
from tests.infra.docker import DockerDaemon
from tests.infra.hubfiles import SHA, Hub, hub_repo
from tests.infra.paths import CONFIGS
from tests.infra.registry import Registry, registry

REPO = "org/tiny-llama"
CONFIG = (CONFIGS / "meta-llama__Meta-Llama-3.1-8B.json").read_bytes()


def test_select_files_takes_one_weight_format_and_the_rest() -> None:
    files = [
        ("config.json", 1),
        ("model-00001-of-00002.safetensors", 10),
        ("model-00002-of-00002.safetensors", 10),
        ("pytorch_model.bin", 20),
        ("original/consolidated.00.pth", 30),
        ("model.gguf", 5),
        ("tokenizer.json", 2),
        ("onnx/model.onnx", 3),
    ]
    assert [n for n, _ in select_files(files)] == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer.json",
    ]
    bins = [("config.json", 1), ("pytorch_model.bin", 20), ("training_args.bin", 1)]
    assert select_files(bins) == bins  # no safetensors: the bins are what vLLM loads


def test_disk_problems_sum_what_shares_a_filesystem() -> None:
    df = (
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
        "/dev/sda1 100000000 50000000 40000000 55% /\n"
        "/dev/sda1 100000000 50000000 40000000 55% /\n"
    )
    rows = parse_df(df)
    free = {"/hf": rows["0"], "/var/lib/docker": rows["1"]}
    assert free["/hf"] == ("/", 40_000_000 * 1024)
    fits = [("weights", "/hf", 20 * 10**9), ("image", "/var/lib/docker", 15 * 10**9)]
    assert disk_problems(fits, free) == []
    over = [("weights", "/hf", 25 * 10**9), ("image", "/var/lib/docker", 15 * 10**9)]
    (problem,) = disk_problems(over, free)
    assert "weights 25.0 GB + image 15.0 GB" in problem and "41.0 GB free" in problem


def test_overlap_and_references() -> None:
    a, b = Span("image", start=10.0, end=20.0), Span("weights", start=15.0, end=30.0)
    assert overlap_s(a, b) == 5.0
    assert overlap_s(a, Span("weights", start=21.0, end=22.0)) == 0.0
    assert overlap_s(a, Span("weights")) == 0.0
    assert _parse_reference("vllm/vllm-openai-rocm:v0.22.0") == (
        "registry-1.docker.io",
        "vllm/vllm-openai-rocm",
        "v0.22.0",
    )
    assert _parse_reference("ubuntu") == ("registry-1.docker.io", "library/ubuntu", "latest")
    assert _parse_reference("127.0.0.1:5000/a/b:t") == ("127.0.0.1:5000", "a/b", "t")
    assert _parse_reference("rocm/vllm@sha256:ab") == (
        "registry-1.docker.io",
        "rocm/vllm",
        "sha256:ab",
    )


# --------------------------------------------------------------------------- real pulls


@dataclass
class Stands:
    hub: Hub
    registry: Registry
    hf: Path
    env: dict[str, str]

    def argv(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "instinct_serve",
            "pull",
            REPO,
            "--gpu",
            "mi300x",
            "--image",
            self.registry.image,
            "--hf-cache",
            str(self.hf),
            "--json",
            *extra,
        ]

    def pull(self, **env: str) -> tuple[int, list[dict[str, Any]], str]:
        out = subprocess.run(
            self.argv(),
            capture_output=True,
            text=True,
            timeout=120,
            env={**self.env, **env},
            stdin=subprocess.DEVNULL,
        )
        lines = out.stdout.splitlines()
        docs: list[dict[str, Any]] = []
        for i, line in enumerate(lines):
            if line == "{":  # the error document, indented, last
                docs.append(json.loads("\n".join(lines[i:])))
                break
            if line.startswith("{"):
                docs.append(json.loads(line))
        return out.returncode, docs, out.stderr

    @property
    def snapshot(self) -> Path:
        return self.hf / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / SHA


@pytest.fixture
def stands(docker_daemon: DockerDaemon, tmp_path: Path) -> Iterator[Stands]:
    files = {
        "config.json": CONFIG,
        "model-00001-of-00002.safetensors": os.urandom(3 * 2**20),
        "model-00002-of-00002.safetensors": os.urandom(3 * 2**20),
        "pytorch_model.bin": os.urandom(2**20),  # another format of the same weights
        "tokenizer.json": b"{}",
    }
    with (
        hub_repo(REPO, files, rate=2 * 2**20) as hub,
        registry(layer_bytes=6 * 2**20, rate=2 * 2**20) as reg,
    ):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
        env.update(HF_ENDPOINT=hub.endpoint, HF_HOME=str(tmp_path / "hf-home"))
        try:
            yield Stands(hub, reg, tmp_path / "hf", env)
        finally:
            subprocess.run(["docker", "rmi", "-f", reg.image], capture_output=True, timeout=60)


def _result(docs: list[dict[str, Any]]) -> dict[str, Any]:
    assert docs and docs[-1]["event"] == "result", docs
    return docs[-1]


@pytest.mark.docker
def test_pull_overlaps_the_image_and_the_weights(stands: Stands) -> None:
    code, docs, stderr = stands.pull()
    assert code == 0, (stderr, docs)
    result = _result(docs)
    image, weights = result["image"], result["weights"]
    assert image["status"] == "done" and weights["status"] == "done"
    # the overlap, from the phases' own timestamps
    overlap = min(image["end"], weights["end"]) - max(image["start"], weights["start"])
    print(
        f"image {image['seconds']:.2f} s, weights {weights['seconds']:.2f} s, "
        f"overlap {overlap:.2f} s"
    )
    assert overlap > 1.0 and abs(overlap - result["overlap_s"]) < 0.01
    assert image["total_bytes"] == stands.registry.compressed_bytes  # asked of the registry
    assert weights["total_bytes"] == 6 * 2**20 + len(CONFIG) + 2
    # progress was reported for both while they ran
    running = {d["what"] for d in docs if d["event"] == "progress" and d["status"] == "running"}
    assert running == {"image", "weights"}
    assert any("weights" in line for line in result["disk_checked"])
    # the files vLLM reads are where the plan's mount puts them; the other format is not
    assert sorted(p.name for p in stands.snapshot.iterdir()) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer.json",
    ]
    assert stands.hub.gets("pytorch_model.bin") == []
    inspect = subprocess.run(
        ["docker", "image", "inspect", stands.registry.image], capture_output=True
    )
    assert inspect.returncode == 0

    # again: nothing to fetch (the image is there, the files are complete)
    before = len(stands.hub.gets("model-00001-of-00002.safetensors"))
    code, docs, stderr = stands.pull()
    assert code == 0, stderr
    again = _result(docs)
    assert again["image"]["status"] == "present" and again["weights"]["status"] == "done"
    assert len(stands.hub.gets("model-00001-of-00002.safetensors")) == before

    # offline: the cache is enough, and the Hub is not asked
    asked = len(stands.hub.requests)
    code, docs, stderr = stands.pull(HF_HUB_OFFLINE="1")
    assert code == 0, (stderr, docs)
    assert _result(docs)["weights"]["detail"].startswith("HF_HUB_OFFLINE is set")
    assert len(stands.hub.requests) == asked


@pytest.mark.docker
def test_offline_without_the_weights_says_so(stands: Stands) -> None:
    # planned once online (the model's config is then known offline), never downloaded
    plan = [sys.executable, "-m", "instinct_serve", "plan", REPO, "--gpu", "mi300x", "--json"]
    assert subprocess.run(plan, env=stands.env, capture_output=True, timeout=60).returncode == 0
    asked = len(stands.hub.requests)
    code, docs, _ = stands.pull(HF_HUB_OFFLINE="1")
    assert code == 3
    assert docs[-1]["error"]["id"] == "weights_not_cached"
    assert len(stands.hub.requests) == asked  # offline: the Hub is not asked


@pytest.mark.docker
def test_an_interrupted_pull_fetches_only_the_rest(stands: Stands) -> None:
    """Killed while the large shard downloads, after the small one finished: the next pull
    does not fetch the finished shard again, and completes the snapshot."""
    small, large = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    stands.hub.files[small] = os.urandom(128 * 1024)
    stands.hub.rate = 512 * 1024  # the 3 MiB shard takes ~6 s: time to interrupt
    proc = subprocess.Popen(
        stands.argv(),
        env=stands.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    snapshot = stands.snapshot
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if (snapshot / small).is_file() and not (snapshot / large).exists():
            break
        time.sleep(0.05)
    assert (snapshot / small).is_file() and not (snapshot / large).exists()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert len(stands.hub.gets(small)) == 1 and len(stands.hub.gets(large)) == 1
    stands.hub.rate = 8 * 2**20
    code, docs, stderr = stands.pull()
    assert code == 0, (stderr, docs)
    assert len(stands.hub.gets(small)) == 1  # kept, not fetched again
    assert len(stands.hub.gets(large)) == 2
    assert (snapshot / large).read_bytes() == stands.hub.files[large]
