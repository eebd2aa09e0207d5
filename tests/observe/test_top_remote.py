"""``top`` of a remote host: a managed container (the test double) found with ``docker`` over
the loopback sshd, its ``/metrics`` read through an ssh port forward kept across refreshes."""

from __future__ import annotations

import time

import httpx
import pytest

from instinct_serve.runtime.observe import Observer
from tests.infra.docker import DockerDaemon
from tests.infra.ssh import SshServer
from tests.runtime.conftest import Launcher, launcher  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.docker, pytest.mark.ssh]


def _healthy(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the double on port {port} did not turn healthy")


def test_top_over_ssh(
    sshd: SshServer,
    docker_daemon: DockerDaemon,
    launcher: Launcher,  # noqa: F811
) -> None:
    host = sshd.host()
    from instinct_serve.runtime.docker import Docker

    c = launcher.launch(Docker(host), "top-ssh", load_s=0.3, env={"VLLM_DOUBLE_TTFT_S": "0.07"})
    _healthy(c.port)
    with Observer(host, [c.name], gpus=False) as obs:
        first = obs.refresh().to_dict()
        body = {"model": c.model, "prompt": "hi", "max_tokens": 4, "ignore_eos": True}
        for _ in range(3):
            httpx.post(f"http://127.0.0.1:{c.port}/v1/completions", json=body, timeout=30)
        second = obs.refresh().to_dict()
        tunnels = list(obs.scraper._tunnels.values())
        assert len(tunnels) == 1 and tunnels[0].alive()  # one forward, reused
    assert not tunnels[0].alive()  # closed with the observer
    ep = second["endpoints"][0]
    assert first["endpoints"][0]["status"] == ep["status"] == "ok"
    assert ep["engine"] == "docker" and ep["name"] == c.name and ep["port"] == c.port
    assert second["host"] == host.name
    m = ep["metrics"]
    assert m["latency_scope"] == "window" and m["ttft_ms"]["count"] == 3
    assert 60 <= m["ttft_ms"]["p50"] <= 80
    assert m["requests_per_s"] is not None and m["requests_per_s"] > 0
