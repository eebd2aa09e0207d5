"""``instinct serve --replicas 3``: three vLLM doubles behind the real HAProxy (the router
test image: Debian's haproxy, non-root like the official image) on the real dockerd.

One endpoint for the client; requests spread over every replica; a replica killed (its
process SIGKILLed from the host, as an OOM kill or a crash would) is dropped by HAProxy's
health check while requests keep succeeding, restarted by dockerd's restart policy
(``--restart on-failure:3``, given by ``runtime.group`` once the replicas were proven),
and taken back. ``ps`` shows the group as one row, ``stop`` stops all of it. The measured
times are printed (``-s``) for the report.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from instinct_serve.plan.model import RESTART_POLICY
from tests.infra.docker import TestImage
from tests.infra.ports import free_port_run
from tests.serve.conftest import MODEL, Serve, docker, inspect, run_cli

pytestmark = pytest.mark.docker

LOAD_S = 4.0  # each double's load: long enough for HAProxy to see a restarting one down
REPLICAS = 3
DEADLINE_S = 60.0


def chat(base: str, n: int = 1) -> list[int]:
    """``n`` sequential chat completions through ``base``: their status codes."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    codes = []
    with httpx.Client(timeout=20) as http:
        for _ in range(n):
            codes.append(http.post(f"{base}/v1/chat/completions", json=body).status_code)
    return codes


def served(port: int) -> float:
    """Requests a replica finished (the double's ``vllm:request_success_total``)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    found = re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return sum(float(v) for v in found)


def started_at(name: str) -> float:
    """When docker started the container (its ``State.StartedAt``, to the microsecond)."""
    from datetime import datetime

    info = inspect(name)
    assert info is not None
    stamp = info["State"]["StartedAt"].rstrip("Z")
    whole, _, fraction = stamp.partition(".")
    return datetime.fromisoformat(f"{whole}.{(fraction + '000000')[:6]}+00:00").timestamp()


def router_log(name: str) -> str:
    out = docker("logs", name)
    return out.stdout + out.stderr


def test_three_replicas_behind_haproxy(serve: Serve, router_test_image: TestImage) -> None:
    port = free_port_run(REPLICAS + 1)  # the replicas take the ports after the router's
    name = serve.name("group")
    members = [f"{name}-r{i}" for i in range(REPLICAS)]
    serve.names.extend(members)
    for i in range(1, REPLICAS + 1):  # the replicas take the ports after the router's
        assert port + i < 65536
    # listening only once loaded, like vLLM's API server: a restarting replica refuses
    image = serve.double(load_s=LOAD_S, VLLM_DOUBLE_BIND="late")
    extra = ["--gpu-count", str(REPLICAS), "--replicas", str(REPLICAS)]
    extra += ["--router-image", router_test_image.tag]
    started = time.monotonic()
    run = serve(*extra, image=image, name=name, port=port)
    assert run.returncode == 0, run.explain()
    serve_s = time.monotonic() - started
    result = run.result
    assert result["status"] == "ready" and result["endpoint"]["container"] == name
    assert result["endpoint"]["base_url"] == f"http://127.0.0.1:{port}/v1"
    group: dict[str, Any] = result["replicas"]
    assert group["mode"] == "replicas" and group["count"] == REPLICAS
    assert [m["name"] for m in group["members"]] == members
    assert [m["gpus"] for m in group["members"]] == [[0], [1], [2]]
    ports = [m["port"] for m in group["members"]]
    assert ports == [port + 1, port + 2, port + 3]
    # the compile cache was cold: replica 1 loaded alone and filled it, then the other two
    # together (well under three loads one after the other)
    assert "cold compile cache: replica 1 fills it, then 2 more" in result["notes"], result
    began = [started_at(m) for m in members]
    assert began[1] - began[0] >= LOAD_S and abs(began[2] - began[1]) < LOAD_S, began
    assert serve_s < 3 * LOAD_S + 30, serve_s

    router = inspect(name)
    assert router is not None and router["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    labels = router["Config"]["Labels"]
    assert labels["instinct-serve.group"] == name and labels["instinct-serve.role"] == "router"
    assert router["Config"]["User"] == "haproxy"  # the config is readable by HAProxy's user
    for index, member in enumerate(members):
        info = inspect(member)
        assert info is not None and info["State"]["Running"]
        policy = info["HostConfig"]["RestartPolicy"]  # the endpoints' own, once proven
        assert f"{policy['Name']}:{policy['MaximumRetryCount']}" == RESTART_POLICY
        mlabels = info["Config"]["Labels"]
        assert (mlabels["instinct-serve.group"], mlabels["instinct-serve.role"]) == (
            name,
            "replica",
        )
        assert mlabels["instinct-serve.replica"] == str(index)
        env = dict(e.partition("=")[::2] for e in info["Config"]["Env"])
        assert env["HIP_VISIBLE_DEVICES"] == str(index)

    # ps: one endpoint, its replicas under it
    ps = run_cli(["ps", "--json"])
    assert ps.returncode == 0, ps.explain()
    rows = {r["name"]: r for r in json.loads(ps.stdout)["endpoints"]}
    assert not set(members) & set(rows), "replicas are not endpoints of their own"
    row = rows[name]
    assert (row["role"], row["port"], row["health"]) == ("router", port, "healthy")
    assert row["verified"]["coherence"] == "coherent"  # probed through the router
    assert result["endpoint"]["coherence"]["verdict"] == "coherent"
    assert [m["name"] for m in row["members"]] == members
    assert all(m["health"] == "healthy" for m in row["members"])
    human = run_cli(["ps"], env={**os.environ, "COLUMNS": "400"})  # other tests' rows too
    assert f"{name} (3 replicas)" in human.stdout, human.stdout
    assert all(f"└ {member}" in human.stdout for member in members), human.stdout

    # requests spread over every replica
    base = f"http://127.0.0.1:{port}"
    before = [served(p) for p in ports]
    codes = chat(base, 60)
    assert codes == [200] * 60
    spread = [served(p) - b for p, b in zip(ports, before, strict=True)]
    print(f"\nspread of 60 requests over {REPLICAS} replicas: {spread}")
    assert sum(spread) == 60 and all(n > 0 for n in spread), spread

    # a killed replica: dropped, requests still succeed, restarted by dockerd, taken back
    victim = inspect(members[1])
    assert victim is not None
    os.kill(int(victim["State"]["Pid"]), signal.SIGKILL)
    killed = time.monotonic()
    drop_s = restart_s = back_s = None
    failures: list[int] = []
    total = 0
    while time.monotonic() - killed < DEADLINE_S and total < 2000:
        codes = chat(base, 5)
        total += len(codes)
        failures += [c for c in codes if c != 200]
        now = time.monotonic() - killed
        log = router_log(name)
        if drop_s is None and "replicas/r1 is DOWN" in log:
            drop_s = now
        if restart_s is None:
            info = inspect(members[1])
            if info is not None and info["RestartCount"] >= 1 and info["State"]["Running"]:
                restart_s = now
        if drop_s is not None and "replicas/r1 is UP" in log.split("replicas/r1 is DOWN")[-1]:
            back_s = now
            break
    print(
        f"killed {members[1]}: {total} requests meanwhile, failed: {failures}; dropped by "
        f"HAProxy after {drop_s} s, restarted by dockerd after {restart_s} s, back in "
        f"rotation after {back_s} s"
    )
    assert failures == [] and total > 0
    assert drop_s is not None and restart_s is not None and back_s is not None
    after = served(ports[1])
    codes = chat(base, 30)
    assert codes == [200] * 30 and served(ports[1]) > after, "the restarted replica serves"

    # serve the same plan again: the group is reused as it is
    again = serve(*extra, image=image, name=name, port=port)
    assert again.returncode == 0, again.explain()
    assert again.result["status"] == "reused" and not again.of("launched")

    config = Path(os.environ["INSTINCT_DATA_DIR"]) / "groups" / f"{name}.haproxy.cfg"
    assert f"server r2 127.0.0.1:{ports[2]} check" in config.read_text()
    assert config.stat().st_mode & 0o777 == 0o644  # HAProxy's user reads it; no secret

    # fewer replicas: the third is not left running (holding its GPU) beside the new plan
    fewer = ["--gpu-count", "2", "--replicas", "2", "--router-image", router_test_image.tag]
    refused = serve(*fewer, image=image, name=name, port=port)
    assert refused.returncode == 3, refused.explain()
    assert refused.result["error"]["id"] == "container_name_conflict", refused.explain()
    assert all(inspect(m) is not None for m in members)  # refused before touching anything
    smaller = serve(*fewer, "--replace", image=image, name=name, port=port)
    assert smaller.returncode == 0, smaller.explain()
    assert [m["name"] for m in smaller.result["replicas"]["members"]] == members[:2]
    assert inspect(members[2]) is None, "the extra replica was left behind"
    assert "server r2 " not in config.read_text()
    assert chat(base, 10) == [200] * 10

    # stop: the group, router first; its configuration goes with it
    stop = run_cli(["stop", "--yes", name, "--json"])
    assert stop.returncode == 0, stop.explain()
    stopped = json.loads(stop.stdout)["stopped"][0]
    assert [m["name"] for m in stopped["members"]] == [name, *members[:2]]
    for container in (name, *members[:2]):
        assert inspect(container) is None
    assert not config.exists()


def test_a_public_group_has_one_generated_key(serve: Serve, router_test_image: TestImage) -> None:
    """--public: only the router listens on every interface; the replicas stay on loopback
    and share the group's generated key, so the client's one key passes to any replica."""
    port = free_port_run(3)
    name = serve.name("pubgroup")
    members = [f"{name}-r0", f"{name}-r1"]
    serve.names.extend(members)
    extra = ["--gpu-count", "2", "--replicas", "2", "--router-image", router_test_image.tag]
    run = serve("--public", *extra, name=name, port=port)
    assert run.returncode == 0, run.explain()
    endpoint = run.result["endpoint"]
    assert endpoint["bind_address"] == "0.0.0.0" and endpoint["container"] == name
    key_file = Path(endpoint["api_key"]["file"])
    key = key_file.read_text().strip()
    assert len(key) >= 40 and key not in run.stdout + run.stderr
    for member in members:
        info = inspect(member)
        assert info is not None and f"VLLM_API_KEY={key}" in info["Config"]["Env"]
        ports = info["HostConfig"]["PortBindings"]
        assert all(b["HostIp"] == "127.0.0.1" for bs in ports.values() for b in bs), ports
    router = inspect(name)
    assert router is not None and key not in json.dumps(router["Config"])
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/v1/models", timeout=5).status_code == 401
    good = {"Authorization": f"Bearer {key}"}
    assert all(httpx.get(f"{base}/v1/models", headers=good, timeout=5).is_success for _ in range(4))
    stop = run_cli(["stop", "--yes", name, "--json"])
    assert stop.returncode == 0, stop.explain()
    assert not key_file.exists()
    assert all(inspect(c) is None for c in (name, *members))


def test_a_stranger_on_a_replicas_port_is_refused_not_taken_into_the_group(
    serve: Serve, router_test_image: TestImage, tmp_path: Path
) -> None:
    """A single endpoint may reuse a foreign server of its model on its port; a replica may
    not: the router would send the group's traffic to a server instinct does not manage. The
    group's port check refuses it before anything starts (and a replica's own serve never
    reuses a stranger, should one appear after that check: ``Deployer.foreign_ok``)."""
    from tests.infra.vllm_double import install_fake_vllm
    from tests.serve.conftest import answers

    port = free_port_run(3)
    exe = install_fake_vllm(tmp_path / "bin")
    argv = [str(exe), "serve", MODEL, "--host", "127.0.0.1", "--port", str(port + 1)]
    stranger = subprocess.Popen(
        argv,
        env={**os.environ, "VLLM_DOUBLE_LOAD_S": "0.2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert answers(port + 1, timeout=30)
        name = serve.name("group-stranger")
        serve.names.extend([f"{name}-r0", f"{name}-r1"])
        extra = ["--gpu-count", "2", "--replicas", "2", "--router-image", router_test_image.tag]
        run = serve(*extra, image=serve.double(load_s=0.3), name=name, port=port)
        assert run.returncode != 0, run.explain()
        error = run.result["error"]  # refused before anything of the group started
        assert run.result["status"] == "error" and error["id"] == "port_in_use", error
        assert error["details"]["port"] == port + 1 and not error["details"]["holder"]["managed"]
        assert not run.of("launched")
        assert stranger.poll() is None and answers(port + 1, timeout=5)  # left untouched
    finally:
        stranger.terminate()
        stranger.wait(timeout=10)
