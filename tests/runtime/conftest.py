"""Shared pieces of the runtime tests: a launcher of test-double containers."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from instinct_serve.plan.labels import managed_labels
from instinct_serve.runtime.docker import Docker
from tests.infra.docker import DockerDaemon, TestImage, amd_run_argv
from tests.infra.ports import free_port


@dataclass
class Launched:
    name: str
    port: int
    model: str
    id: str

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Launcher:
    """Runs the test double in containers with the mandatory AMD flags and test labels."""

    daemon: DockerDaemon
    image: TestImage
    names: Callable[[str], str]
    device_root: Path

    def argv(
        self,
        name: str,
        port: int,
        *,
        model: str = "org/test-model",
        mode: str = "healthy",
        managed: bool = True,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        load_s: float = 1.0,
    ) -> list[str]:
        labels = dict(self.daemon.labels())
        if managed:
            labels.update(managed_labels(model=model, port=port, plan_hash="test-plan"))
        double_env = {"VLLM_DOUBLE_MODE": mode, "VLLM_DOUBLE_LOAD_S": str(load_s)}
        double_env.update(env or {})
        return amd_run_argv(
            self.image.tag,
            name=name,
            port=port,
            model=model,
            labels=labels,
            env=double_env,
            args=args,
            device_root=self.device_root,
        )

    def launch(self, docker: Docker, prefix: str = "rt", **kw: object) -> Launched:
        name = self.names(prefix)
        port = free_port()
        model = str(kw.get("model", "org/test-model"))
        cid = docker.run(self.argv(name, port, **kw))  # type: ignore[arg-type]
        return Launched(name, port, model, cid)


@pytest.fixture
def launcher(
    docker_daemon: DockerDaemon,
    vllm_test_image: TestImage,
    device_root: Path,
    docker_names: Callable[[str], str],
) -> Launcher:
    return Launcher(docker_daemon, vllm_test_image, docker_names, device_root)


def running(docker: Docker, name: str) -> Callable[[], bool]:
    """``still_running`` for wait_healthy: the container's process is alive."""

    def check() -> bool:
        state = docker.inspect_state(name)
        return state is not None and state.running

    return check


def healthy_at(docker: Docker, name: str, timeout: float = 30) -> float:
    """When the double in the container turned healthy (its own clock = the host's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in docker.logs(name, tail=None).splitlines():
            if line.startswith("vllm-double: healthy at"):
                return float(line.split("healthy at", 1)[1].split()[0])
        time.sleep(0.2)
    raise AssertionError(f"{name} never said it was healthy")


def read_until(
    proc: subprocess.Popen[str], needle: str, timeout: float = 30
) -> tuple[list[str], bool]:
    """Lines of a streaming process until one contains ``needle`` (bounded in time)."""
    lines: list[str] = []
    found = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if needle in line:
                found.set()
                return

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    found.wait(timeout)
    return lines, found.is_set()
