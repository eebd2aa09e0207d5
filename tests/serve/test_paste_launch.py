"""The launch a user copies: ``instinct plan``'s Command block (and ``--format docker``), run
as it is by ``sh`` against the test image on the real dockerd, seeding included.

The one change made to the text is the one ``serve --root`` makes to its own argv
(``rooted_devices``): this machine has no /dev/kfd, so ``--device /dev/X`` reads the stand-in
node of the test root (the container still sees /dev/X). Everything else (the AITER seed
step, quoting, line continuations, secrets by name) runs exactly as printed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from instinct_serve.plan.caches import SEED_MARKER
from tests.infra.docker import free_port
from tests.serve.conftest import MODEL, Serve, answers, docker, inspect, run_cli


def _plan(serve: Serve, image: str, name: str, port: int, cache: Path, *extra: str) -> str:
    done = run_cli(
        [
            "plan",
            MODEL,
            "--gpu",
            "mi300x",
            "--image",
            image,
            "--hf-cache",
            str(serve.hf_cache),
            "--compile-cache",
            str(cache),
            "--port",
            str(port),
            "--name",
            name,
            *extra,
        ]
    )
    assert done.returncode == 0, done.explain()
    return done.stdout


def _command_block(summary: str) -> str:
    """What follows the summary's ``Command`` heading: the block a user selects and copies."""
    lines = summary.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Command"))
    return "\n".join(lines[start + 1 :]) + "\n"


def test_the_summarys_command_block_runs_as_it_is_in_sh(serve: Serve, tmp_path: Path) -> None:
    image = serve.double()
    name, port, cache = serve.name("paste"), free_port(), tmp_path / "compile-cache"
    block = _command_block(_plan(serve, image, name, port, cache))
    # the summary prints exactly the pasteable script of --format docker
    assert block == _plan(serve, image, name, port, cache, "--format", "docker")
    assert block.count("docker run") == 2  # the AITER seeding, then the endpoint
    assert "--env HF_TOKEN \\\n" in block and "hf_" not in block  # the secret by name only

    script = block
    for device in ("/dev/kfd", "/dev/dri"):  # what serve --root does to its own argv
        script = script.replace(f"--device {device} ", f"--device {serve.root}{device}:{device} ")
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    done = subprocess.run(
        ["sh", "-e", "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stdout}\n{done.stderr}"

    # the seed step ran first (the test image has no aiter: nothing to copy, marker written)
    aiter = next(cache.glob(f"*/aiter/{SEED_MARKER}"))
    assert json.loads(aiter.read_text())["modules"] == []
    assert answers(port, timeout=60), docker("logs", name).stderr[-3000:]
    info = inspect(name)
    assert info is not None and info["Config"]["Image"] == image
    assert info["HostConfig"]["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert info["HostConfig"]["PortBindings"] == {
        f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
    }
    removed = docker("rm", "-f", name)  # only the container this test made
    assert removed.returncode == 0, removed.stderr
