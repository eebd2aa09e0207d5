"""``instinct serve`` end to end: the real CLI as a subprocess, the real dockerd, the vLLM
test double in the registry-free test image, and (for ``--host``) the loopback sshd.

``serve_cli`` runs ``python -m instinct_serve serve MODEL --gpu mi300x --image IMG
--hf-cache TMP --port FREE --name UNIQUE --yes --root GPU_ROOT --json`` and returns the
parsed JSON Lines. ``--root`` points the host checks at a temp tree where the GPU checks
pass (this machine has no amdgpu driver); the containers still get the real
``--device /dev/kfd --device /dev/dri`` flags, pointed at the stand-in nodes of the root.

The double's behaviour is baked into a derived image (``derived_test_image``), because the
docker argv comes from the real planner. Every container a test's serve may create is
removed by name afterwards (serve's containers carry no test label).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.infra.docker import (
    DockerDaemon,
    TestImage,
    derived_test_image,
    free_port,
)
from tests.infra.fakeroot import build_gpu_root

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # shipped metadata: planning needs no network
CLI = [sys.executable, "-m", "instinct_serve"]
SERVE_TIMEOUT_S = 120


@dataclass
class Run:
    """One finished CLI run: exit code, both streams, and stdout's JSON Lines."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def result(self) -> dict[str, Any]:
        assert self.events, f"no JSON on stdout; stderr:\n{self.stderr[-3000:]}"
        last = self.events[-1]
        assert last.get("event") == "result", last
        return last

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == kind]

    @property
    def phases(self) -> list[str]:
        return [str(e["phase"]) for e in self.of("phase")]

    def phase_s(self, phase: str) -> float | None:
        """Seconds from the first ``phase`` event to the next phase, by the events' own
        timestamps (what a user of --json sees); None when it never began or never ended."""
        events = self.of("phase")
        start = next((i for i, e in enumerate(events) if e["phase"] == phase), None)
        if start is None:
            return None
        after = next((e for e in events[start:] if e["phase"] != phase), None)
        return None if after is None else float(after["ts"]) - float(events[start]["ts"])

    def explain(self) -> str:
        return (
            f"rc={self.returncode}\nstdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-3000:]}"
        )


def parse_lines(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = SERVE_TIMEOUT_S,
    stdin: int | None = subprocess.DEVNULL,
) -> Run:
    argv = [*CLI, *args]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else None,
        stdin=stdin,
    )
    json_lines = bool(args) and args[0] == "serve" and "--json" in args
    events = parse_lines(out.stdout) if json_lines else []
    return Run(argv, out.returncode, out.stdout, out.stderr, events)


def docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def inspect(name: str) -> dict[str, Any] | None:
    out = docker("inspect", "--type", "container", name)
    if out.returncode != 0:
        return None
    docs: list[dict[str, Any]] = json.loads(out.stdout)
    return docs[0] if docs else None


@pytest.fixture(scope="session")
def gpu_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A check root where the GPU checks pass (``serve --root``)."""
    root = tmp_path_factory.mktemp("gpu-root")
    build_gpu_root(root)
    return root


@dataclass
class Serve:
    """Builds and runs serve commands for one test, and cleans up its containers."""

    image: TestImage
    root: Path
    hf_cache: Path
    names: list[str] = field(default_factory=list)

    def double(self, mode: str = "healthy", load_s: float = 0.5, **env: str) -> str:
        """A derived test image whose double runs in ``mode``."""
        values = {"VLLM_DOUBLE_MODE": mode, "VLLM_DOUBLE_LOAD_S": str(load_s), **env}
        return derived_test_image(self.image, values)

    def name(self, prefix: str = "serve") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.names.append(name)
        return name

    def args(
        self,
        *extra: str,
        image: str | None = None,
        name: str | None = None,
        port: int | None = None,
        model: str = MODEL,
        json_lines: bool = True,
        yes: bool = True,
    ) -> list[str]:
        argv = [
            "serve",
            model,
            "--gpu",
            "mi300x",
            "--image",
            image or self.double(),
            "--hf-cache",
            str(self.hf_cache),
            "--port",
            str(port or free_port()),
            "--name",
            name or self.name(),
            "--root",
            str(self.root),
            "--warmup-timeout",
            "30",
            "--timeout",
            "60",
        ]
        if yes:
            argv.append("--yes")
        if json_lines:
            argv.append("--json")
        return [*argv, *extra]

    def __call__(self, *extra: str, env: Mapping[str, str] | None = None, **kw: Any) -> Run:
        return run_cli(self.args(*extra, **kw), env=env)

    def cleanup(self) -> None:
        for name in self.names:
            docker("rm", "-f", name)


@pytest.fixture
def serve(
    docker_daemon: DockerDaemon,
    vllm_test_image: TestImage,
    gpu_root: Path,
    tmp_path: Path,
) -> Iterator[Serve]:
    helper = Serve(vllm_test_image, gpu_root, tmp_path / "hf-cache")
    try:
        yield helper
    finally:
        helper.cleanup()


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains ``text`` (orphan checks)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                state = fh.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            found.append((int(entry), cmd.strip()))
    return found


StartServe = Callable[..., subprocess.Popen[str]]


def answers(port: int, timeout: float = 30.0) -> bool:
    """The endpoint on ``port`` answers ``/health`` with 200 within ``timeout`` seconds."""
    import time

    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=3).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False
