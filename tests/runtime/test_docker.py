"""The docker adapter against the real local dockerd and the registry-free test image."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from instinct_serve.errors import InstinctError, NotReadyError
from instinct_serve.hosts import LocalHost
from instinct_serve.plan.labels import LABEL_MODEL
from instinct_serve.runtime.docker import Docker
from instinct_serve.runtime.health import (
    WaitOutcome,
    coherence_probe,
    list_models,
    wait_healthy,
    warmup,
)
from tests.infra.docker import TEST_LABEL, DockerDaemon, derived_test_image
from tests.infra.ports import free_port
from tests.runtime.conftest import Launcher, healthy_at, read_until, running

pytestmark = pytest.mark.docker


@pytest.fixture
def docker(docker_daemon: DockerDaemon) -> Docker:
    return Docker(LocalHost())


DEVICE_CHECK = (
    "import os, stat; "
    "print(*(stat.S_ISCHR(os.stat(p).st_mode) for p in ('/dev/kfd', '/dev/dri/renderD128')), "
    "sorted(g for g in os.getgroups() if g))"
)


def raw_inspect(name: str) -> dict[str, object]:
    out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, check=True)
    doc: dict[str, object] = json.loads(out.stdout)[0]
    return doc


def test_available(docker: Docker, docker_daemon: DockerDaemon) -> None:
    ok, reason = docker.available()
    assert ok and reason == f"Docker {docker_daemon.version}"
    docker.require()


def test_images(docker: Docker, launcher: Launcher) -> None:
    assert docker.image_present(launcher.image.tag)
    missing = "instinct-serve-test/no-such-image:never"
    assert not docker.image_present(missing)
    argv = launcher.argv(launcher.names("noimage"), free_port())
    argv[argv.index(launcher.image.tag)] = missing
    with pytest.raises(InstinctError) as exc:
        docker.run(argv, timeout=120)
    # Which one depends on whether Docker Hub is reachable from here; both say what to do.
    assert exc.value.id in ("image_not_found", "image_pull_failed")


def test_a_derived_image_carries_the_doubles_behaviour(
    docker: Docker, launcher: Launcher, docker_daemon: DockerDaemon
) -> None:
    """For planner-made argvs without ``-e`` flags: the mode comes from the image."""
    tag = derived_test_image(
        launcher.image, {"VLLM_DOUBLE_MODE": "die", "VLLM_DOUBLE_EXIT_CODE": "9"}
    )
    name = launcher.names("derived")
    argv = launcher.argv(name, free_port())
    at = argv.index("VLLM_DOUBLE_MODE=healthy")
    del argv[at - 1 : at + 1]  # no "-e VLLM_DOUBLE_MODE=...": the image's ENV applies
    argv[argv.index(launcher.image.tag)] = tag
    docker.run(argv)
    state = docker.wait_state(name, timeout=60)
    assert state is not None and state.exit_code == 9


def test_serve_path_on_a_managed_container(docker: Docker, launcher: Launcher) -> None:
    c = launcher.launch(docker, "managed", load_s=3.0, args=["--max-model-len", "8192"])
    host_config = raw_inspect(c.name)["HostConfig"]
    assert isinstance(host_config, dict)
    devices = {(d["PathOnHost"], d["PathInContainer"]) for d in host_config["Devices"]}
    # the stand-in tree's nodes, seen inside as the real paths; the host's /dev untouched
    assert (f"{launcher.device_root}/dev/kfd", "/dev/kfd") in devices
    assert (f"{launcher.device_root}/dev/dri", "/dev/dri") in devices
    inside = subprocess.run(
        ["docker", "exec", c.name, "python3", "-c", DEVICE_CHECK],
        capture_output=True,
        text=True,
        timeout=30,
    )
    # The real flags worked: the devices are there and video/render (44/109) are joined.
    assert inside.stdout.split() == ["True", "True", "[44,", "109]"], inside.stderr
    assert host_config["GroupAdd"] == ["video", "render"]
    assert [cap.removeprefix("CAP_") for cap in host_config["CapAdd"]] == ["SYS_PTRACE"]
    assert "seccomp=unconfined" in host_config["SecurityOpt"]
    assert host_config["IpcMode"] == "host"

    samples: list[int | None] = []
    result = wait_healthy(
        c.base_url,
        timeout=60,
        still_running=running(docker, c.name),
        on_sample=lambda s: samples.append(s.status_code),
    )
    returned = time.time()
    assert result.outcome is WaitOutcome.HEALTHY
    assert 503 in samples  # loading seen through docker-proxy, then 200
    assert returned - healthy_at(docker, c.name) <= 2.5

    [info] = [i for i in docker.list_managed() if i.name == c.name]
    assert info.id == c.id and info.managed
    assert (info.model, info.port, info.plan_hash) == (c.model, c.port, "test-plan")
    assert info.state.running and info.uptime_s is not None and info.uptime_s >= 0
    assert [(p.host_ip, p.host_port) for p in info.ports] == [("127.0.0.1", c.port)]
    assert docker.get(c.id) == docker.get(c.name) or docker.get(c.id) is not None

    assert [m.id for m in list_models(c.base_url)] == [c.model]
    assert [m.max_model_len for m in list_models(c.base_url)] == [8192]
    assert warmup(c.base_url, c.model, use_chat=True, timeout=60).text
    assert coherence_probe(c.base_url, c.model, use_chat=True).ok

    stopped = docker.stop(c.name, grace_s=5)
    assert stopped.id == c.id
    assert docker.get(c.name) is None


def test_foreign_containers_are_invisible_and_never_stopped(
    docker: Docker, launcher: Launcher
) -> None:
    foreign = launcher.launch(docker, "foreign", managed=False)
    assert foreign.name not in {i.name for i in docker.list_managed()}
    info = docker.get(foreign.name)
    assert info is not None and not info.managed
    for action in (docker.stop, docker.remove):
        with pytest.raises(InstinctError) as refused:
            action(foreign.name)
        assert refused.value.id == "not_managed"
        assert foreign.name in refused.value.message
    state = docker.inspect_state(foreign.name)
    assert state is not None and state.running  # still running afterwards
    with pytest.raises(InstinctError) as missing:
        docker.stop("instinct-no-such-container")
    assert missing.value.id == "container_not_found"


def test_port_holders_tell_managed_foreign_and_plain_processes_apart(
    docker: Docker, launcher: Launcher
) -> None:
    ours = launcher.launch(docker, "holder-ours")
    theirs = launcher.launch(docker, "holder-theirs", managed=False)
    free = free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        process_port = listener.getsockname()[1]

        [managed] = docker.port_holders(ours.port)
        assert managed.kind == "managed_container" and managed.managed
        assert (managed.container_name, managed.model) == (ours.name, ours.model)
        assert managed.address == "127.0.0.1"

        [foreign] = docker.port_holders(theirs.port)
        assert foreign.kind == "container" and foreign.container_name == theirs.name
        assert "not started by instinct-serve" in foreign.describe()

        [proc] = docker.port_holders(process_port)
        assert proc.kind == "process" and proc.pid == os.getpid()
        assert proc.process == Path("/proc/self/comm").read_text().strip()

        assert docker.port_holders(free) == []


def test_a_host_network_container_is_found_through_its_process(
    docker: Docker, launcher: Launcher, docker_daemon: DockerDaemon
) -> None:
    """No published port to match: the listener's pid leads to the container (cgroup)."""
    name, port = launcher.names("hostnet"), free_port()
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "host",
            *docker_daemon.label_args(),
            "-e",
            "VLLM_DOUBLE_LOAD_S=0.2",
            launcher.image.tag,
            "--model",
            "org/m",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    assert wait_healthy(f"http://127.0.0.1:{port}", timeout=30, interval=0.2).healthy
    [holder] = docker.port_holders(port)
    assert (holder.kind, holder.container_name) == ("container", name)


def test_logs_and_follow_return_the_doubles_lines(docker: Docker, launcher: Launcher) -> None:
    c = launcher.launch(docker, "logs", load_s=1.5)
    follower = docker.follow(c.name)
    try:
        lines, found = read_until(follower, "vllm-double: healthy at", timeout=60)
    finally:
        follower.terminate()
        follower.wait(timeout=10)
    assert found, lines[-20:]
    assert "TEST DOUBLE of vLLM" in lines[0]
    assert any("Automatically detected platform rocm." in line for line in lines)
    assert any("Loading safetensors checkpoint shards: 100%" in line for line in lines)  # stderr

    text = docker.logs(c.name, tail=None)
    ordered = [
        "Starting to load model",  # stdout
        "Loading safetensors checkpoint shards:  50% Completed",  # stderr (a progress bar)
        "Loading weights took 1.25 seconds",  # stdout
        "Capturing CUDA graph shapes:  51%",  # stderr
        "Graph capturing finished in 35 secs",  # stdout
    ]
    positions = [text.index(needle) for needle in ordered]
    assert positions == sorted(positions)  # the two streams are merged back in time order
    assert len(docker.logs(c.name, tail=5).splitlines()) == 5
    later = docker.follow(c.name, since=time.time() + 3600)
    try:
        lines, found = read_until(later, "never printed", timeout=1.0)
    finally:
        later.terminate()
        later.wait(timeout=10)
    assert lines == []


def test_a_dying_container_ends_the_wait_with_its_exit_code(
    docker: Docker, launcher: Launcher
) -> None:
    c = launcher.launch(docker, "dies", mode="die", env={"VLLM_DOUBLE_EXIT_CODE": "3"})
    start = time.monotonic()
    result = wait_healthy(c.base_url, timeout=120, still_running=running(docker, c.name))
    assert result.outcome is WaitOutcome.CONTAINER_EXITED
    assert time.monotonic() - start < 1.0 + 2.0 + 3.0  # life + one poll + docker latency
    state = docker.wait_state(c.name, timeout=30)
    assert state is not None and state.exited and state.exit_code == 3
    assert not state.oom_killed and state.finished_at is not None
    assert "Engine core initialization failed" in docker.logs(c.name, tail=50)


# A daemon thread wakes while the interpreter finalizes (a slow __del__ holds it there):
# CPython ends the thread with pthread_exit, which glibc unwinds through libgcc_s.
DAEMON_THREAD_AT_EXIT = """
import sys, threading, time
class Slow:
    def __del__(self):
        time.sleep(0.3)
def nap():
    while True:
        time.sleep(0.01)
threading.Thread(target=nap, daemon=True).start()
slow = Slow()
time.sleep(0.05)
sys.exit(3)
"""


def test_the_test_image_keeps_the_exit_code_of_a_threaded_server(
    docker_daemon: DockerDaemon, launcher: Launcher
) -> None:
    """The image is a faithful base: a process with live daemon threads exits with its code.

    Without ``libgcc_s.so.1`` (loaded by glibc, invisible to ``ldd``) this exits 139 and
    dying-server tests flake.
    """
    argv = ["docker", "run", "--rm", *docker_daemon.label_args(), "--entrypoint", "python3"]
    out = subprocess.run(
        [*argv, launcher.image.tag, "-c", DAEMON_THREAD_AT_EXIT],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 3, out.stderr


def test_oom_in_graph_capture_then_relaunch_with_enforce_eager(
    docker: Docker, launcher: Launcher
) -> None:
    c = launcher.launch(docker, "oom", mode="oom_graph_capture")
    state = docker.wait_state(c.name, timeout=60)
    assert state is not None and state.exit_code == 1
    assert "RuntimeError: CUDA error: out of memory" in docker.logs(c.name, tail=20)

    docker.remove(c.name)  # ours and exited: removed so the name can be reused
    argv = launcher.argv(c.name, c.port, mode="oom_graph_capture", args=["--enforce-eager"])
    docker.run(argv)
    result = wait_healthy(c.base_url, timeout=60, still_running=running(docker, c.name))
    assert result.healthy
    assert "Capturing CUDA graph shapes" not in docker.logs(c.name, tail=None)


def test_a_hang_in_graph_capture_times_out_while_running(
    docker: Docker, launcher: Launcher
) -> None:
    c = launcher.launch(docker, "hang", mode="hang_in_graph_capture")
    result = wait_healthy(
        c.base_url, timeout=4, interval=0.5, still_running=running(docker, c.name)
    )
    assert result.outcome is WaitOutcome.TIMEOUT
    assert result.last is not None and result.last.status_code == 503
    assert docker.logs(c.name, tail=1).strip().startswith("Capturing CUDA graph shapes:  40%")
    state = docker.wait_state(c.name, timeout=1)  # bounded: it does not end by itself
    assert state is not None and state.running


def test_run_failures_carry_dockers_reason(docker: Docker, launcher: Launcher) -> None:
    c = launcher.launch(docker, "first")
    with pytest.raises(InstinctError) as conflict:
        docker.run(launcher.argv(c.name, free_port()))
    assert conflict.value.id == "container_name_conflict"
    assert "already in use" in conflict.value.message
    assert docker.get(c.name) is not None  # the existing one is untouched

    second = launcher.names("second")
    with pytest.raises(InstinctError) as port:
        docker.run(launcher.argv(second, c.port))
    assert port.value.id == "port_in_use"
    assert "already allocated" in port.value.details["stderr"]
    assert port.value.details.get("removed_unstarted_container") == second
    assert docker.get(second) is None  # no half-created container left behind

    argv = launcher.argv(launcher.names("nodev"), free_port())
    kfd = next(a for a in argv if a.endswith(":/dev/kfd"))
    argv[argv.index(kfd)] = "/dev/instinct-no-such-device"
    with pytest.raises(InstinctError) as device:
        docker.run(argv)
    assert device.value.id == "device_missing"

    argv = launcher.argv(launcher.names("nogroup"), free_port())
    argv[argv.index("--group-add=render")] = "--group-add=instinct-no-such-group"
    with pytest.raises(InstinctError) as group:
        docker.run(argv)
    assert group.value.id == "group_missing"

    with pytest.raises(ValueError):
        docker.run(["docker", "run", "--rm", "img"])  # not detached: would block


def test_stop_all_managed_only_touches_what_the_filter_selects(
    docker: Docker, launcher: Launcher, docker_daemon: DockerDaemon
) -> None:
    a = launcher.launch(docker, "all-a", model="org/a")
    b = launcher.launch(docker, "all-b", model="org/b")
    foreign = launcher.launch(docker, "all-foreign", managed=False)
    only_a = docker.list_managed(labels={LABEL_MODEL: "org/a"})
    assert a.name in {i.name for i in only_a} and b.name not in {i.name for i in only_a}
    stopped = docker.stop_all_managed(labels={TEST_LABEL: docker_daemon.session}, grace_s=2)
    assert {a.name, b.name} <= {i.name for i in stopped}
    assert docker.get(a.name) is None and docker.get(b.name) is None
    state = docker.inspect_state(foreign.name)
    assert state is not None and state.running


def test_secrets_reach_the_container_by_name_only(docker: Docker, launcher: Launcher) -> None:
    name = launcher.names("secret")
    argv = launcher.argv(name, free_port())
    image_at = argv.index(launcher.image.tag)
    argv[image_at:image_at] = ["--env", "HF_TOKEN"]
    docker.run(argv, env={"HF_TOKEN": "hf_test_s3cret"})
    assert not any("hf_test_s3cret" in a for a in argv)
    config = raw_inspect(name)["Config"]
    assert isinstance(config, dict)
    assert "HF_TOKEN=hf_test_s3cret" in config["Env"]


def test_a_daemon_that_does_not_answer_is_reported(
    tmp_path: Path, docker_daemon: DockerDaemon
) -> None:
    wrapper = tmp_path / "docker-nodaemon"
    wrapper.write_text(
        f'#!/bin/sh\nDOCKER_HOST=unix://{tmp_path}/no.sock exec docker "$@"\n', encoding="utf-8"
    )
    wrapper.chmod(0o755)
    down = Docker(LocalHost(), binary=str(wrapper))
    ok, reason = down.available()
    assert not ok and "not running" in reason
    with pytest.raises(NotReadyError) as exc:
        down.list_managed()
    assert exc.value.id == "docker_unavailable"


def test_a_missing_docker_cli_is_reported(tmp_path: Path) -> None:
    missing = Docker(LocalHost(), binary=str(tmp_path / "no-docker"))
    ok, reason = missing.available()
    assert not ok and "not installed" in reason
