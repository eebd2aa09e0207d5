"""Every table of the CLI read two ways: through a pipe (one line per row, nothing wrapped
or cut: ``grep`` finds the row) and on an 80-column terminal (no line wider, names and
ids whole). ``ps``, ``top``, ``detect``, ``partition`` and ``bench`` are read where their
endpoints, processes and GPUs are set up (tests/runtime, tests/observe, tests/hardware)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from instinct_serve.cli.main import main
from tests.infra import tables
from tests.infra.fakebin import FakeBin

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
Run = Callable[..., str]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    def call(*args: str) -> str:
        with pytest.raises(SystemExit):
            main(list(args))
        return capsys.readouterr().out

    return call


def both(monkeypatch: pytest.MonkeyPatch, run: Run, *args: str) -> tuple[str, str]:
    """The command's stdout through a pipe, then on an 80-column terminal."""
    tables.pipe(monkeypatch)
    piped = run(*args)
    tables.terminal(monkeypatch)
    return piped, run(*args)


def test_plan_list(monkeypatch: pytest.MonkeyPatch, run: Run) -> None:
    piped, shown = both(monkeypatch, run, "plan", LLAMA, "--gpu", "mi300x", "--list")
    tables.one_line(piped, "CHECKPOINT", "PRECISION", "GIB/GPU", "KV TOKENS", "FULL-CTX X")
    nvfp4 = [line for line in piped.splitlines() if "Llama-3.1-8B-Instruct-NVFP4" in line]
    assert len(nvfp4) == 4  # TP 1, 2, 4, 8: each whole on its line, its reason at the end
    assert all(r.endswith("nvfp4 has no kernel on gfx942") for r in nvfp4)
    tables.fits(shown, "Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "Llama-3.1-8B-Instruct-FP8")
    assert "SIZE" not in shown and "VERDICT" in shown  # the size basis goes first


def test_plan_list_partition_modes_and_references(
    monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    args = ("plan", "deepseek-ai/DeepSeek-R1", "--gpu", "mi355x", "--list")
    piped, shown = both(monkeypatch, run, *args)
    tables.one_line(piped, "CONFIG", "SERVER", "PARALLEL", "ISL/OSL", "IMAGE")
    image = "rocm/atom:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0_atom0.1.3"
    rows = [line for line in piped.splitlines() if line.startswith("dsr1-fp8-mi355x-atom-mtp ")]
    assert rows and all(" atom " in r and "TP 8" in r and r.endswith(image) for r in rows), piped
    tables.one_line(piped, "LOGICAL GPUS", "MODE", "MEMORY EACH", "ENDPOINTS", "FIT")
    tables.one_line(piped, "now   SPX/NPS1", "287.98 GiB", "safe")
    tables.fits(shown, "dsr1-fp8-mi355x-atom-mtp", "SPX/NPS1")


def test_plan_summary(monkeypatch: pytest.MonkeyPatch, run: Run) -> None:
    piped, shown = both(monkeypatch, run, "plan", LLAMA, "--gpu", "mi300x")
    tables.one_line(piped, "Replicas", "--objective throughput", "behind one endpoint")
    tables.fits(shown.split("Command")[0], LLAMA, "vllm-llama-3-1-8b-instruct")


def test_recipes_list_search_and_show(monkeypatch: pytest.MonkeyPatch, run: Run) -> None:
    piped, shown = both(monkeypatch, run, "recipes", "list")
    tables.one_line(piped, "deepseek-ai/DeepSeek-R1 ", "671B (37B active)", "AMD: mi300x")
    tables.fits(shown, "arcee-ai/Trinity-Large-Thinking", "deepseek-ai/DeepSeek-R1")
    assert "173 recipes (snapshot" in piped

    piped, shown = both(monkeypatch, run, "recipes", "search", "deepseek", "r1", "--gpu", "mi300x")
    assert "1 recipe for 'deepseek r1'" in piped  # one, not "1 recipes"
    row = tables.one_line(piped, "deepseek-ai/DeepSeek-R1 ", "671B", "its name exactly")
    assert "200%" not in row
    tables.fits(shown, "deepseek-ai/DeepSeek-R1")

    piped, shown = both(monkeypatch, run, "recipes", "show", "Qwen/Qwen3.5-9B", "--gpu", "mi300x")
    tables.one_line(piped, "spec_decoding", '"num_speculative_tokens":1}', "opt-in")
    tables.one_line(piped, "VLLM_ROCM_USE_AITER_FP4BMM", "gpu env_defaults (gfx942)")
    tables.fits(shown, "VLLM_ROCM_USE_AITER_FP4BMM", "Qwen/Qwen3.5-9B")


def test_cache_ls(
    monkeypatch: pytest.MonkeyPatch, run: Run, tmp_path: Path, fakebin: FakeBin
) -> None:
    key = "gfx942-ref-a496918368d7"
    (tmp_path / key / "vllm").mkdir(parents=True)
    meta = {"tool": "instinct-serve", "key": key, "engine": "native", "image_id": None}
    meta |= {"image": "vllm/vllm-openai-rocm:v0.27.1", "last_used": "2026-12-01T10:00:00+00:00"}
    (tmp_path / key / "meta.json").write_text(json.dumps(meta))
    fakebin.add("docker", {}, default=("", 0))  # Docker answers: no containers, no images
    piped, shown = both(monkeypatch, run, "cache", "ls", "--compile-cache", str(tmp_path))
    tables.one_line(piped, key, "vllm/vllm-openai-rocm:v0.27.1", "2026-12-01T10:00:00+00:00")
    tables.fits(shown, key)


def test_fit(monkeypatch: pytest.MonkeyPatch, run: Run) -> None:
    piped, shown = both(monkeypatch, run, "fit", LLAMA, "--gpu", "mi300x", "--gpu-count", "1")
    tables.one_line(piped, "overhead / GPU", "activations", "graphs")
    tables.fits(shown.split("per GPU █")[0], LLAMA)


def test_a_real_terminal_of_80_columns(tmp_path: Path) -> None:
    """A pseudo-terminal of 80 columns (no COLUMNS, no TTY_COMPATIBLE): the terminal view,
    names whole, no line wider than the terminal."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TTY_COMPATIBLE")}
    args = ["recipes", "list", "--task", "embedding"]
    with subprocess.Popen(
        [sys.executable, "-m", "instinct_serve", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env=env | {"NO_COLOR": "1"},
    ) as proc:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command is done
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=60) == 0
    os.close(leader)
    out = b"".join(chunks).decode().replace("\r\n", "\n")
    assert "MODEL" in out and "jinaai/jina-embeddings-v5-text-small" in out, out
    tables.fits(out, "jinaai/jina-embeddings-v5-text-small", "jinaai/jina-reranker-m0")
