"""``serve --hosts``: one model across two nodes, end to end on the real dockerd.

Two "nodes" are two ssh aliases (``node-a``, ``node-b``) of the loopback sshd, so every
docker call crosses a real ssh boundary per node; their GPUs come from a fake ``amd-smi``
(a captured 8x MI300X output) in the check root's ``opt/rocm/bin`` (``--root``), where
detection looks after PATH. The two ranks are containers of the
vLLM test double on a user-defined docker network, where they perform a real TCP
rendezvous: rank 0 listens on the master port and turns healthy only once rank 1 joined.
Two host specs reach one daemon, as a user's two aliases of one machine would. The failures
the double replays include the real vLLM's first-request failure of eager + pipeline
parallelism on the CPU build (``real-vllm-cpu/18_...``, issue 31).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.infra.cluster import NODES, Cluster, make_cluster
from tests.infra.docker import DockerDaemon
from tests.infra.ports import free_port
from tests.infra.ssh import SshServer
from tests.serve.conftest import MODEL, Run, Serve, docker, inspect, run_cli

pytestmark = [pytest.mark.docker, pytest.mark.ssh]


@pytest.fixture
def cluster(sshd: SshServer, docker_daemon: DockerDaemon, tmp_path: Path) -> Iterator[Cluster]:
    with make_cluster(sshd, tmp_path) as made:
        yield made


def serve_group(
    serve: Serve,
    cluster: Cluster,
    image: str,
    name: str,
    port: int,
    *extra: str,
    yes: bool = True,
) -> Run:
    # the ranks' names: the group's, and NAME-node1 (removed by the fixture either way)
    serve.names.append(f"{name}-node1")
    args = serve.args(
        "--hosts",
        cluster.hosts,
        "--multi-node",
        "--network",
        cluster.network,
        *extra,
        image=image,
        name=name,
        port=port,
        yes=yes,
    )
    args[args.index("--root") + 1] = str(cluster.root)  # this test's root: GPUs detected
    return run_cli(args, env=cluster.env, timeout=180)


def logs_of(run: Run, rank: int) -> list[str]:
    return [str(e["line"]) for e in run.of("log") if e["rank"] == rank]


def stamp(lines: list[str], needle: str) -> float:
    line = next(ln for ln in lines if needle in ln)
    found = re.search(r" at ([0-9.]+)", line)
    assert found, line
    return float(found.group(1))


def args_of(name: str) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    info = inspect(name)
    assert info is not None, name
    env = {k: v for k, _, v in (e.partition("=") for e in info["Config"]["Env"])}
    return list(info["Config"]["Cmd"]), env, info  # what follows the image's `vllm serve`


def test_two_nodes_rendezvous_and_serve_as_one(serve: Serve, cluster: Cluster) -> None:
    name, port = serve.name("mn"), free_port()
    run = serve_group(serve, cluster, serve.double(load_s=0.5), name, port)
    assert run.returncode == 0, run.explain()
    result = run.result
    assert result["ok"] and result["status"] == "ready", result
    assert result["completion"]["text"].strip()
    assert result["base_url"] == f"http://127.0.0.1:{port}/v1"
    [plan] = run.of("plan")
    assert plan["strategy"] == "multi_node_tp" and plan["backend"] == "mp"
    assert plan["master_addr"] == name and plan["rendezvous_port"] == 29501
    notes = [e["message"] for e in run.of("note")]
    assert any(n.startswith("multi-node: asked for (--multi-node)") for n in notes), notes
    checked = {e["rank"]: e for e in run.of("node_checked")}
    assert set(checked) == {0, 1}
    for report in checked.values():
        assert report["checks"] == {
            "docker": "ok",
            "gpus": "ok",
            "image": "ok",
            "model": "ok",
            "interface": "ok",
        }, report
        assert report["facts"]["gpus"]["count"] == 8
        assert report["facts"]["gpus"]["gfx"] == "gfx942"

    # argv and env of each rank, as docker holds them
    head_args, head_env, head_info = args_of(name)
    worker_args, worker_env, worker_info = args_of(f"{name}-node1")
    common = ["--nnodes", "2", "--master-addr", name, "--master-port", "29501"]
    for args in (head_args, worker_args):
        text = " ".join(args)
        assert args[0] == MODEL and "--distributed-executor-backend mp" in text
        assert "--tensor-parallel-size 16" in text
        for flag, value in zip(common[::2], common[1::2], strict=True):
            assert f"{flag} {value}" in text
    assert "--node-rank 0" in " ".join(head_args) and "--headless" not in head_args
    assert "--node-rank 1" in " ".join(worker_args) and worker_args[-1] == "--headless"
    for env in (head_env, worker_env):
        assert env["GLOO_SOCKET_IFNAME"] == "eth0" and env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert "HIP_VISIBLE_DEVICES" not in env
    assert head_info["HostConfig"]["NetworkMode"] == cluster.network
    assert worker_info["HostConfig"]["NetworkMode"] == cluster.network
    assert head_info["HostConfig"]["PortBindings"]  # the API: rank 0 only
    assert not worker_info["HostConfig"]["PortBindings"]
    labels = worker_info["Config"]["Labels"]
    assert labels["instinct-serve.group"] == name and labels["instinct-serve.role"] == "worker"
    assert labels["instinct-serve.nodes"] == cluster.hosts

    # start order: rank 0 first, then rank 1 (after its node reached the master port)
    started = {s["rank"]: s for s in result["started"]}
    assert [s["rank"] for s in result["started"]] == [0, 1]
    assert started[0]["host"] == "node-a" and started[1]["host"] == "node-b"
    assert started[0]["at"] < started[1]["at"]
    assert head_info["State"]["StartedAt"] < worker_info["State"]["StartedAt"]
    # the rendezvous really happened: rank 0 listened, rank 1 joined, then it got healthy
    head_log, worker_log = logs_of(run, 0), logs_of(run, 1)
    listening = stamp(head_log, "rank 0 listening")
    joined = stamp(head_log, "all 2 ranks joined")
    assert stamp(worker_log, "rank 1 joined") >= listening
    healthy = stamp(head_log, "healthy at")
    assert listening < joined < healthy
    print(
        f"\nMULTINODE start rank0={started[0]['at']:.3f} rank1={started[1]['at']:.3f} "
        f"(+{started[1]['at'] - started[0]['at']:.3f} s); rendezvous {joined - listening:.3f} s "
        f"after rank 0 listened, {joined - started[1]['at']:.3f} s after rank 1's docker run "
        f"returned; healthy {result['ready_s']} s after rank 0 started"
    )

    # ps: the group is one endpoint with its two ranks; plain ps hides the headless rank
    ps = run_cli(["ps", "--hosts", cluster.hosts, "--json"], env=cluster.env)
    assert ps.returncode == 0, ps.explain()
    [group] = [g for g in json.loads(ps.stdout)["groups"] if g["name"] == name]
    assert group["status"] == "running" and group["health"] == "healthy"
    assert group["model"] == MODEL and group["port"] == port
    assert [(n["rank"], n["host"]) for n in group["nodes"]] == [(0, "node-a"), (1, "node-b")]
    plain = run_cli(["ps", "--host", "node-b", "--json", "--no-health"], env=cluster.env)
    names = [r["name"] for r in json.loads(plain.stdout)["endpoints"]]
    assert name in names and f"{name}-node1" not in names

    logs = run_cli(["logs", name, "--hosts", cluster.hosts, "--tail", "50"], env=cluster.env)
    assert logs.returncode == 0, logs.explain()
    assert "[rank 0 node-a]" in logs.stdout and "[rank 1 node-b]" in logs.stdout

    replaced_by_group_serve(serve, cluster, name, port)
    stop = run_cli(["stop", "--yes", name, "--hosts", cluster.hosts, "--json"], env=cluster.env)
    assert stop.returncode == 0, stop.explain()
    stopped = sorted(s["name"] for s in json.loads(stop.stdout)["stopped"])
    assert stopped == [name, f"{name}-node1"]
    assert inspect(name) is None and inspect(f"{name}-node1") is None
    again = run_cli(["stop", "--yes", name, "--hosts", cluster.hosts], env=cluster.env)
    assert again.returncode != 0 and "no multi-node group" in again.stderr


def replaced_by_group_serve(serve: Serve, cluster: Cluster, name: str, port: int) -> None:
    """Served again over a running group: refused without --replace, and with it but without
    --yes (both naming every rank's container it would remove); with both, the summary is an
    event before the removal and the group is new."""
    before = {n: inspect(n)["Id"][:12] for n in (name, f"{name}-node1")}  # type: ignore[index]
    wanted = sorted(f"{host}:{n}" for host, n in zip(NODES, before, strict=True))
    image = serve.double(load_s=0.5)
    refused = serve_group(serve, cluster, image, name, port)
    assert refused.returncode != 0 and refused.result["error"]["id"] == "group_exists"
    asked = serve_group(serve, cluster, image, name, port, "--replace", yes=False)
    error = asked.result["error"]
    assert error["id"] == "confirmation_required", asked.explain()
    touch = error["details"]["change"]["touch"]
    assert sorted(t["name"] for t in touch) == wanted
    assert sorted(t["id"] for t in touch) == sorted(before.values())
    assert {n: inspect(n)["Id"][:12] for n in before} == before  # type: ignore[index]
    again = serve_group(serve, cluster, image, name, port, "--replace")
    assert again.returncode == 0, again.explain()
    [said] = again.of("replacing")
    assert sorted(t["name"] for t in said["change"]["touch"]) == wanted
    assert all(inspect(n)["Id"][:12] != old for n, old in before.items())  # type: ignore[index]


def test_a_failing_worker_fails_the_group_with_its_log_line(serve: Serve, cluster: Cluster) -> None:
    name, port = serve.name("mnfail"), free_port()
    image = serve.double(load_s=1.0, VLLM_DOUBLE_FAIL_RANKS="1")
    run = serve_group(serve, cluster, image, name, port)
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert run.result["status"] == "failed"
    assert failure["rank"] == 1 and failure["host"] == "node-b", failure
    worker_log = logs_of(run, 1)
    assert failure["line"] and failure["line"] in worker_log  # its own log line, verbatim
    assert failure["line"] in failure["message"]
    assert failure["id"] != "rank_exited"  # the diagnosis recognised the replayed failure
    assert sorted(failure["removed"]) == [name, f"{name}-node1"]
    assert inspect(name) is None and inspect(f"{name}-node1") is None


def test_a_model_one_node_holds_is_served_on_the_first_host_alone(
    serve: Serve, cluster: Cluster
) -> None:
    name, port = serve.name("mnone"), free_port()
    args = serve.args("--hosts", cluster.hosts, name=name, port=port)
    args[args.index("--root") + 1] = str(cluster.root)
    run = run_cli(args, env=cluster.env, timeout=180)
    assert run.returncode == 0, run.explain()
    [note] = [e["message"] for e in run.of("note") if e["message"].startswith("multi-node:")]
    assert "fit one node of 8 GPUs: node-a alone runs it" in note
    assert run.result["status"] == "ready" and run.result["host"] == "node-a"
    info = inspect(name)
    assert info is not None and "--nnodes" not in info["Config"]["Cmd"]
    assert inspect(f"{name}-node1") is None
    docker("rm", "-f", name)


def test_a_node_without_the_named_interface_stops_before_anything_starts(
    serve: Serve, cluster: Cluster
) -> None:
    name, port = serve.name("mnif"), free_port()
    serve.names.append(f"{name}-node1")
    args = serve.args(
        "--hosts", cluster.hosts, "--multi-node", "--ifname", "nosuch9", name=name, port=port
    )
    args[args.index("--root") + 1] = str(cluster.root)
    run = run_cli(args, env=cluster.env, timeout=180)
    assert run.returncode == 3, run.explain()
    error = run.result["error"]
    assert error["id"] == "nodes_not_ready"
    for rank, host in enumerate(NODES):
        assert f"rank {rank} ({host}): interface: no interface nosuch9" in error["message"]
    assert not run.of("launched")
    assert inspect(name) is None and inspect(f"{name}-node1") is None


# -- failures and broken groups (issue 31): the rank to blame with its saved log, a head gone
# while a rank lives on, a --public group's key


def test_a_head_that_dies_at_load_is_blamed_at_once_with_its_saved_log(
    serve: Serve, cluster: Cluster
) -> None:
    """Rank 0 dies before it listens: the group fails on rank 0 within seconds (it was
    blamed on rank 1's unreachable rendezvous after 60 s), its whole log is saved, and
    ``logs --hosts`` reads it once the group is gone."""
    name, port = serve.name("mnhead"), free_port()
    image = serve.double(load_s=0.5, VLLM_DOUBLE_FAIL_RANKS="0")
    began = time.monotonic()
    run = serve_group(serve, cluster, image, name, port)
    took = time.monotonic() - began
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert (failure["rank"], failure["host"]) == (0, "node-a"), failure
    assert failure["id"] not in ("rendezvous_unreachable", "rank_exited"), failure
    assert failure["line"] and failure["log_tail"]
    assert took < 45, f"{took:.1f} s: the head's death must end the rendezvous wait"
    [saved] = failure["saved_logs"]  # rank 1 never started
    assert saved["rank"] == 0 and saved["host"] == "node-a" and saved["lines"] > 5
    assert inspect(name) is None and inspect(f"{name}-node1") is None

    logs = run_cli(["logs", name, "--hosts", cluster.hosts, "--json"], env=cluster.env)
    assert logs.returncode == 0, logs.explain()
    lines = json.loads(logs.stdout)["lines"]
    assert lines and all(ln.startswith("[rank 0 node-a saved rank0-") for ln in lines)
    assert any(failure["line"] in ln for ln in lines)
    assert Path(saved["path"]).is_file()  # the aliases reach this machine


def test_a_first_request_that_kills_a_pipeline_rank_blames_that_rank(
    serve: Serve, cluster: Cluster
) -> None:
    """Healthy, then the readiness completion kills the engine (the real CPU build's eager +
    PP trap): the failure names rank 1 on node-b and the assertion (not a bare completion
    error), and both ranks' logs are saved before they are removed."""
    name, port = serve.name("mnpp"), free_port()
    image = serve.double(load_s=0.5, VLLM_DOUBLE_PP_FIRST_REQUEST="die")
    run = serve_group(serve, cluster, image, name, port)
    assert run.returncode == 1, run.explain()
    failure = run.result["failure"]
    assert (failure["rank"], failure["host"]) == (1, "node-b"), failure
    assert failure["id"] == "pp_rank_without_warmup", failure
    assert "assert self.intermediate_tensors is not None" in failure["line"]
    assert any("AssertionError" in ln for ln in failure["log_tail"])
    assert sorted(s["rank"] for s in failure["saved_logs"]) == [0, 1]
    assert all(s["path"] and s["lines"] for s in failure["saved_logs"])
    assert inspect(name) is None and inspect(f"{name}-node1") is None
    assert run.of("healthy")  # it was healthy: the failure came with the first request


def test_a_group_whose_head_is_gone_is_broken_names_its_survivor_and_stop_removes_it(
    serve: Serve, cluster: Cluster
) -> None:
    name, port = serve.name("mnbroken"), free_port()
    image = serve.double(load_s=0.5, VLLM_DOUBLE_HEADLESS_STAYS="1")
    run = serve_group(serve, cluster, image, name, port)
    assert run.returncode == 0, run.explain()
    assert docker("rm", "-f", name).returncode == 0  # the head is gone (a node reboot, a kill)
    time.sleep(1.0)
    assert inspect(f"{name}-node1")["State"]["Running"]  # type: ignore[index]
    ps = run_cli(["ps", "--hosts", cluster.hosts, "--json", "--no-health"], env=cluster.env)
    assert ps.returncode == 0, ps.explain()
    [group] = [g for g in json.loads(ps.stdout)["groups"] if g["name"] == name]
    assert group["broken"] is True and group["status"].startswith("broken: head gone")
    assert [(s["rank"], s["host"]) for s in group["survivors"]] == [(1, "node-b")]
    # two aliases of one daemon: each rank's log once, not twice
    logs = run_cli(["logs", name, "--hosts", cluster.hosts, "--json"], env=cluster.env)
    lines = json.loads(logs.stdout)["lines"]
    assert lines and len(lines) == len(set(lines)), "a line printed twice"
    stop = run_cli(["stop", "--yes", name, "--hosts", cluster.hosts, "--json"], env=cluster.env)
    assert stop.returncode == 0, stop.explain()
    assert [s["name"] for s in json.loads(stop.stdout)["stopped"]] == [f"{name}-node1"]
    assert inspect(f"{name}-node1") is None


def test_a_public_group_gets_a_key_only_its_head_holds(serve: Serve, cluster: Cluster) -> None:
    name, port = serve.name("mnpub"), free_port()
    run = serve_group(serve, cluster, serve.double(load_s=0.5), name, port, "--public")
    assert run.returncode == 0, run.explain()
    result = run.result
    key_file = Path(result["api_key_file"])
    key = key_file.read_text().strip()
    assert len(key) >= 20 and oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert key not in run.stdout  # never printed
    head_env = inspect(name)["Config"]["Env"]  # type: ignore[index]
    worker_env = inspect(f"{name}-node1")["Config"]["Env"]  # type: ignore[index]
    assert f"VLLM_API_KEY={key}" in head_env
    assert not any(e.startswith("VLLM_API_KEY=") for e in worker_env)  # headless: no API
    url = f"http://127.0.0.1:{port}/v1/models"
    assert httpx.get(url, timeout=10).status_code == 401
    ok = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    assert ok.status_code == 200
    stop = run_cli(["stop", "--yes", name, "--hosts", cluster.hosts], env=cluster.env)
    assert stop.returncode == 0, stop.explain()
    assert not key_file.exists()
