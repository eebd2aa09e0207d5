"""The same serve through the real loopback sshd: docker runs over ssh, /health, warm-up and
the coherence probe go through an ssh tunnel, and ps/logs/stop work with --host."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.infra.ports import free_port
from tests.infra.ssh import SshServer
from tests.serve.conftest import MODEL, Serve, inspect, processes_mentioning, run_cli

pytestmark = [pytest.mark.docker, pytest.mark.ssh]


def test_serve_over_ssh(serve: Serve, sshd: SshServer) -> None:
    secret = "hf_ssh_" + os.urandom(8).hex()
    env = {**sshd.env(), "HF_TOKEN": secret}  # travels to the remote docker CLI on stdin
    port = free_port()
    name = serve.name("ssh")
    host = ["--host", sshd.host_spec]
    run = serve(*host, image=serve.double("oom_graph_capture"), port=port, name=name, env=env)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["host"] == sshd.host_spec and result["status"] == "ready"
    # loopback on the host: reached here through the ssh forward the result names
    assert result["endpoint"]["base_url"] == f"http://127.0.0.1:{port}/v1"
    assert result["endpoint"]["tunnel"] == (
        f"ssh -F {sshd.ssh_config} -N -L {port}:127.0.0.1:{port} {sshd.alias}"
    )
    assert result["endpoint"]["coherence"]["verdict"] == "coherent"
    assert [r["finding"] for r in result["relaunches"]] == ["oom_graph_capture"]
    for phase in ("loading_weights", "capturing_graphs", "ready", "warming_up"):
        assert phase in run.phases
    info = inspect(name)  # the "remote" docker is this machine's
    assert info is not None and "--enforce-eager" in info["Args"]
    assert f"HF_TOKEN={secret}" in info["Config"]["Env"]
    assert secret not in run.stdout + run.stderr

    again = serve(*host, image=serve.double("oom_graph_capture"), port=port, name=name, env=env)
    assert again.returncode == 0 and again.result["status"] == "reused", again.explain()

    ps = run_cli(["ps", "--json", *host], env=env)
    assert ps.returncode == 0, ps.explain()
    [row] = [r for r in json.loads(ps.stdout)["endpoints"] if r["name"] == name]
    assert row["health"] == "healthy" and row["model"] == MODEL
    assert row["fixes"] == ["oom_graph_capture"]
    logs = run_cli(["logs", name, "--tail", "20", *host], env=env)
    assert logs.returncode == 0 and "Application startup complete" in logs.stdout
    stop = run_cli(["stop", "--yes", name, *host], env=env)
    assert stop.returncode == 0, stop.explain()
    assert inspect(name) is None

    # no tunnel or log follower outlives the command (ssh masters are shared on purpose
    # and persist briefly; they carry no forward)
    time.sleep(0.5)
    assert [p for p in processes_mentioning(f":{port}") if "ssh" in p[1]] == []
    assert [p for p in processes_mentioning(f"logs -f {name}")] == []


def test_public_serve_over_ssh_keeps_the_key_on_the_host(serve: Serve, sshd: SshServer) -> None:
    env = sshd.env()
    port = free_port()
    name = serve.name("sshpub")
    host = ["--host", sshd.host_spec]
    run = serve(*host, "--public", port=port, name=name, env=env)
    assert run.returncode == 0, run.explain()
    endpoint = run.result["endpoint"]
    # every interface: the ssh config's HostName, not the alias, is what clients use
    assert endpoint["base_url"] == f"http://127.0.0.1:{port}/v1" and endpoint["tunnel"] is None
    key_file = endpoint["api_key"]["file"]
    remote = sshd.host()
    key = (remote.read_text(key_file) or "").strip()
    assert len(key) >= 40
    assert remote.run(["stat", "-c", "%a", key_file]).stdout.strip() == "600"
    assert key not in run.stdout + run.stderr
    info = inspect(name)
    assert info is not None and key not in json.dumps(info["Args"])
    # the printed curl fetches the key over ssh and is answered
    curl = endpoint["curl"]
    assert f"$(ssh -F {sshd.ssh_config} {sshd.alias} 'cat -- {key_file}')" in curl
    answer = subprocess.run(["sh", "-c", curl], capture_output=True, text=True, timeout=60)
    assert answer.returncode == 0 and json.loads(answer.stdout)["choices"], answer.stderr
    stop = run_cli(["stop", "--yes", name, *host], env=env)
    assert stop.returncode == 0 and remote.read_text(key_file) is None
