"""The same docker operations over the real loopback sshd, and health through an ssh tunnel."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Callable

import httpx
import pytest

from instinct_serve.errors import HostError, InstinctError
from instinct_serve.hosts import LocalHost
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.health import (
    WaitOutcome,
    coherence_probe,
    list_models,
    probe_health,
    wait_healthy,
    warmup,
)
from instinct_serve.runtime.tunnel import Tunnel, tunnel
from tests.infra.docker import DockerDaemon, LocalDouble
from tests.infra.ports import free_port
from tests.infra.ssh import SshServer
from tests.runtime.conftest import Launcher, read_until, running

pytestmark = [pytest.mark.docker, pytest.mark.ssh]
StartDouble = Callable[..., LocalDouble]


@pytest.fixture
def remote(sshd: SshServer, docker_daemon: DockerDaemon) -> Docker:
    """Docker on "another machine": the loopback sshd's host, reached only through ssh."""
    return Docker(sshd.host())


def test_docker_over_ssh(remote: Docker, launcher: Launcher) -> None:
    ok, reason = remote.available()
    assert ok and reason.startswith("Docker ")
    c = launcher.launch(remote, "ssh-managed", load_s=1.0)
    foreign = launcher.launch(remote, "ssh-foreign", managed=False)

    names = {i.name for i in remote.list_managed()}
    assert c.name in names and foreign.name not in names
    with pytest.raises(InstinctError) as refused:
        remote.stop(foreign.name)
    assert refused.value.id == "not_managed"

    follower = remote.follow(c.name)  # docker logs -f through ssh
    try:
        lines, found = read_until(follower, "vllm-double: healthy at", timeout=60)
    finally:
        follower.terminate()
        follower.wait(timeout=10)
    assert found and "TEST DOUBLE of vLLM" in lines[0]
    assert "Application startup complete." in remote.logs(c.name, tail=20)

    [holder] = remote.port_holders(c.port)  # ss runs on the remote side
    assert holder.kind == "managed_container" and holder.container_name == c.name
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        [proc] = remote.port_holders(listener.getsockname()[1])
        assert proc.kind == "process" and proc.pid == os.getpid()

    remote.stop(c.name, grace_s=2)
    assert remote.get(c.name) is None
    state = remote.inspect_state(foreign.name)
    assert state is not None and state.running


def test_health_warmup_and_coherence_through_the_tunnel(
    remote: Docker, launcher: Launcher, sshd: SshServer
) -> None:
    c = launcher.launch(remote, "ssh-health", load_s=2.0)
    with tunnel(sshd.host(), c.port) as base_url:
        assert base_url.startswith("http://127.0.0.1:") and base_url != c.base_url
        samples: list[int | None] = []
        result = wait_healthy(
            base_url,
            timeout=60,
            still_running=running(remote, c.name),
            on_sample=lambda s: samples.append(s.status_code),
        )
        assert result.outcome is WaitOutcome.HEALTHY and 503 in samples
        assert [m.id for m in list_models(base_url)] == [c.model]
        assert warmup(base_url, c.model, use_chat=False, timeout=60).text
        assert coherence_probe(base_url, c.model, use_chat=True).ok


def test_a_remote_container_that_dies_ends_the_wait(remote: Docker, launcher: Launcher) -> None:
    c = launcher.launch(remote, "ssh-dies", mode="die", env={"VLLM_DOUBLE_EXIT_CODE": "4"})
    with tunnel(remote.host, c.port) as base_url:
        result = wait_healthy(base_url, timeout=120, still_running=running(remote, c.name))
    assert result.outcome is WaitOutcome.CONTAINER_EXITED
    state = remote.wait_state(c.name, timeout=30)
    assert state is not None and state.exit_code == 4


def test_secrets_travel_over_ssh_by_name_only(remote: Docker, launcher: Launcher) -> None:
    name = launcher.names("ssh-secret")
    argv = launcher.argv(name, free_port())
    at = argv.index(launcher.image.tag)
    argv[at:at] = ["--env", "HF_TOKEN"]
    remote.run(argv, env={"HF_TOKEN": "hf_over_ssh_s3cret"})
    out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=True)
    assert "HF_TOKEN=hf_over_ssh_s3cret" in json.loads(out.stdout)[0]["Config"]["Env"]


def test_the_tunnel_is_torn_down(sshd: SshServer, vllm_double_local: StartDouble) -> None:
    double = vllm_double_local()
    assert wait_healthy(double.base_url, timeout=30, interval=0.2).healthy
    forward = Tunnel(sshd.host(), double.port)
    proc: subprocess.Popen[bytes] | None = None
    with pytest.raises(RuntimeError, match="boom"), forward as base_url:
        assert probe_health(base_url).status_code == 200
        proc = forward.process
        assert proc is not None and forward.alive()
        raise RuntimeError("boom")  # an error (or Ctrl-C) inside still closes the forward
    assert proc is not None and proc.poll() is not None and not forward.alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(base_url + "/health", timeout=2)


def test_a_tunnel_to_a_closed_remote_port_opens_but_gets_no_answer(sshd: SshServer) -> None:
    with tunnel(sshd.host(), free_port()) as base_url:
        sample = probe_health(base_url, timeout=2)
        assert not sample.ok and sample.status_code is None


def test_tunnel_failures_are_host_errors(sshd: SshServer) -> None:
    with pytest.raises(HostError) as denied, tunnel(sshd.unauthorized().host(), 8000):
        pass
    assert denied.value.id == "ssh_auth_failed"
    with pytest.raises(HostError) as refused, tunnel(sshd.closed_port().host(), 8000):
        pass
    assert refused.value.id == "ssh_refused"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with pytest.raises(HostError) as in_use, Tunnel(sshd.host(), 8000, local_port=taken):
            pass
    assert in_use.value.id == "tunnel_failed"


def test_a_local_host_needs_no_tunnel() -> None:
    forward = Tunnel(LocalHost(), 8123)
    with forward as base_url:
        assert base_url == "http://127.0.0.1:8123"
        assert forward.process is None and forward.alive()
