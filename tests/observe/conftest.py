"""A running endpoint for ``top`` and ``bench``: ``instinct serve --engine native`` of the vLLM
test double (the fake ``vllm`` on ``INSTINCT_VLLM_COMMAND``), with fixed latencies, in a
state directory of its own that every CLI call of the module shares."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from instinct_serve.engine import launcher
from instinct_serve.hosts import LocalHost
from tests.infra.cli import run_instinct
from tests.infra.fakeroot import build_gpu_root
from tests.infra.ports import free_port
from tests.infra.vllm_double import install_fake_vllm
from tests.serve.conftest import MODEL, Run, run_cli

TTFT_S = 0.07  # inside vLLM's (0.06, 0.08] TTFT bucket
ITL_S = 0.02  # inside its (0.01, 0.025] inter-token bucket


@dataclass
class Endpoint:
    name: str
    port: int
    plan_hash: str
    base_env: dict[str, str]
    data: Path
    # False while a test loads the endpoint from threads of this process: its timings are
    # then measured by a CLI of its own, as a user's would be, not one sharing our GIL
    in_process: bool = True

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The CLI's environment: this machine's (PATH with any fake bins), the module's
        state directory, and ``extra``."""
        env = dict(os.environ)
        env.update(self.base_env)
        env.update(extra or {})
        return env

    def cli(self, *args: str, timeout: float = 120, **extra: str) -> Run:
        """``top``/``bench``: clients of the endpoint, run in-process unless ``in_process``
        is off (then a subprocess)."""
        if not self.in_process:
            return run_cli(list(args), env=self.env(extra), timeout=timeout)
        done = run_instinct(args, env=self.env(extra), timeout=timeout)
        return Run(list(done.args), done.returncode, done.stdout, done.stderr)

    def json(self, *args: str, timeout: float = 120, **extra: str) -> tuple[int, object]:
        """The document: pretty-printed JSON, or the last line of JSON Lines (bench's
        result after its step events)."""
        run = self.cli(*args, timeout=timeout, **extra)
        try:
            doc = json.loads(run.stdout)
        except ValueError:
            try:
                doc = json.loads(run.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError) as exc:
                raise AssertionError(run.explain()) from exc
        return run.returncode, doc


def serve_double(tmp: Path, name: str, env: Mapping[str, str], model: str = MODEL) -> Endpoint:
    exe = install_fake_vllm(tmp / "bin")
    root = tmp / "gpu-root"
    build_gpu_root(root)
    base = {
        "INSTINCT_VLLM_COMMAND": str(exe),
        "INSTINCT_DATA_DIR": str(tmp / "data"),
        "INSTINCT_CACHE_DIR": str(tmp / "cache"),
        "VLLM_DOUBLE_LOAD_S": "0.3",
        **env,
    }
    port = free_port()
    endpoint = Endpoint(name, port, "", base, tmp / "data")
    argv = ["serve", model, "--engine", "native", "--gpu", "mi300x", "--gpus", "1"]
    argv += ["--port", str(port), "--name", name, "--root", str(root), "--timeout", "60"]
    run = run_cli([*argv, "--yes", "--json"], env=endpoint.env())
    assert run.returncode == 0, run.explain()
    endpoint.plan_hash = str(run.result["plan_hash"])
    return endpoint


def stop(endpoint: Endpoint) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INSTINCT_DATA_DIR", str(endpoint.data))
        if launcher.load(LocalHost(), endpoint.name) is not None:
            launcher.stop(LocalHost(), endpoint.name)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    """A double serving natively, tokens paced at TTFT_S then ITL_S."""
    tmp = tmp_path_factory.mktemp("observe-endpoint")
    latency = {"VLLM_DOUBLE_TTFT_S": str(TTFT_S), "VLLM_DOUBLE_ITL_S": str(ITL_S)}
    served = serve_double(tmp, f"observe-{free_port()}", latency)
    try:
        yield served
    finally:
        stop(served)
