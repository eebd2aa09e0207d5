"""The docker SGLang endpoint a realsglang test module serves once (its ``served`` fixture):
``instinct serve`` run by ``tests.infra.realsglang.docker_serve``'s command, what came back,
and the container removed after the module whatever happened."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.infra.realsglang import DOCKER_CPU_TAIL, Setup, docker_serve
from tests.serve.conftest import Run, docker, run_cli


@dataclass
class Served:
    run: Run
    env: dict[str, str]
    port: int
    name: str
    image: str
    seconds: float

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def served_by_docker(
    setup: Setup,
    image: str,
    tmp: Path,
    prefix: str,
    *,
    serve_timeout_s: int,
    cli_timeout_s: float,
    extra: Sequence[str] = (),
) -> Iterator[Served]:
    """Serve SmolLM2 as SGLang from ``image`` (``extra``: serve options of the test's own)."""
    cmd = docker_serve(setup, image, tmp, prefix, serve_timeout_s)
    args = [*cmd.args, *extra, "--json", *DOCKER_CPU_TAIL]
    start = time.monotonic()
    try:
        run = run_cli(args, env=cmd.env, timeout=cli_timeout_s)
        yield Served(run, cmd.env, cmd.port, cmd.name, image, time.monotonic() - start)
    finally:
        docker("rm", "-f", cmd.name, timeout=120)
