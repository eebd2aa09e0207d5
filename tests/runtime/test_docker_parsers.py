"""The pure parts of the docker adapter: inspect JSON, ss / proc listings, log merging."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from instinct_serve.plan.labels import (
    LABEL_MANAGED,
    LABEL_MODEL,
    LABEL_PLAN_HASH,
    LABEL_PORT,
    LABEL_VERSION,
    label_args,
    managed_labels,
)
from instinct_serve.runtime.docker_data import (
    Listener,
    PortHolder,
    container_id_from_cgroup,
    merge_timestamped,
    parse_docker_time,
    parse_inspect,
    parse_proc_net_tcp,
    parse_ss,
)

# Trimmed from `docker inspect` of a container on the Docker 20.10.24 daemon used in tests.
INSPECT = {
    "Id": "be6ac8da3ab0748d1d78a655a27a677e36b842e7d73c7c683883c1855d9683da",
    "Created": "2026-12-02T18:12:16.225806398Z",
    "State": {
        "Status": "running",
        "Running": True,
        "OOMKilled": False,
        "Pid": 9596,
        "ExitCode": 0,
        "Error": "",
        "StartedAt": "2026-12-02T18:12:16.608147007Z",
        "FinishedAt": "0001-01-01T00:00:00Z",
    },
    "Name": "/explore1",
    "RestartCount": 0,
    "HostConfig": {
        "NetworkMode": "default",
        "PortBindings": {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18181"}]},
    },
    "Config": {"Image": "scratch/bb:explore", "Labels": {"a": "b"}},
    "NetworkSettings": {
        "Ports": {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18181"}]},
    },
}


def test_parse_inspect_of_a_running_foreign_container() -> None:
    now = datetime(2026, 12, 2, 18, 13, 16, 608147, tzinfo=UTC)
    info = parse_inspect(INSPECT, now)
    assert info.name == "explore1" and info.short_id == "be6ac8da3ab0"
    assert info.image == "scratch/bb:explore"
    assert not info.managed and info.model is None and info.port is None
    assert info.state.running and info.state.status == "running"
    assert info.state.exit_code == 0 and info.state.finished_at is None
    assert info.uptime_s == pytest.approx(60.0)
    assert [(p.host_ip, p.host_port, p.container_port, p.protocol) for p in info.ports] == [
        ("127.0.0.1", 18181, 8080, "tcp")
    ]
    doc = info.to_dict()
    assert doc["status"] == "running" and doc["uptime_s"] == 60.0
    assert doc["ports"][0]["host_port"] == 18181


def test_parse_inspect_of_an_oom_killed_managed_container() -> None:
    doc = {
        **INSPECT,
        "State": {
            "Status": "exited",
            "Running": False,
            "OOMKilled": True,
            "ExitCode": 137,
            "StartedAt": "2026-12-02T18:12:16.6Z",
            "FinishedAt": "2026-12-02T18:14:00.123456789Z",
            "Health": {"Status": "unhealthy"},
        },
        "Config": {
            "Image": "vllm/vllm-openai-rocm:v0.11.0",
            "Labels": managed_labels(model="org/m", port=8000, plan_hash="abc123"),
        },
        "NetworkSettings": {"Ports": {}},
    }
    info = parse_inspect(doc)
    assert info.managed and info.model == "org/m" and info.port == 8000
    assert info.plan_hash == "abc123" and info.version
    assert info.state.exited and info.state.oom_killed and info.state.exit_code == 137
    assert info.state.health == "unhealthy"
    assert info.uptime_s is None
    assert info.state.finished_at == datetime(2026, 12, 2, 18, 14, 0, 123456, tzinfo=UTC)
    # A stopped container has no live NetworkSettings.Ports: the configured binding remains.
    assert [p.host_port for p in info.ports] == [18181]


def test_a_created_container_has_no_exit_code() -> None:
    doc = {**INSPECT, "State": {"Status": "created", "Running": False, "ExitCode": 0}}
    assert parse_inspect(doc).state.exit_code is None


def test_docker_times() -> None:
    assert parse_docker_time("0001-01-01T00:00:00Z") is None
    assert parse_docker_time("") is None and parse_docker_time("yesterday") is None
    assert parse_docker_time("2026-12-02T18:12:16Z") == datetime(
        2026, 12, 2, 18, 12, 16, tzinfo=UTC
    )
    assert parse_docker_time("2026-12-02T19:12:16.5+01:00") == datetime(
        2026, 12, 2, 18, 12, 16, 500000, tzinfo=UTC
    )


def test_labels_contract() -> None:
    labels = managed_labels(model="meta-llama/Llama-3.1-8B-Instruct", port=8000, plan_hash="h")
    assert set(labels) == {LABEL_MANAGED, LABEL_MODEL, LABEL_PORT, LABEL_PLAN_HASH, LABEL_VERSION}
    assert labels[LABEL_MANAGED] == "true"
    assert all(k.startswith("instinct-serve.") for k in labels)
    args = label_args(labels)
    assert args[0::2] == ["--label"] * 5
    assert "instinct-serve.model=meta-llama/Llama-3.1-8B-Instruct" in args


SS = """\
LISTEN 0      128          0.0.0.0:2024       0.0.0.0:*
LISTEN 0      4096       127.0.0.1:18181      0.0.0.0:*    users:(("docker-proxy",pid=9559,fd=4))
LISTEN 0      5          127.0.0.1:8000       0.0.0.0:*    users:(("python3",pid=42,fd=3),\
("python3",pid=43,fd=3))
LISTEN 0      4096          [::]:8000            [::]:*    users:(("vllm",pid=77,fd=9))
LISTEN 0      4096   127.0.0.53%lo:53         0.0.0.0:*    users:(("systemd-resolve",pid=5,fd=14))
"""


def test_parse_ss() -> None:
    assert parse_ss(SS, 18181) == [Listener("127.0.0.1", 18181, (("docker-proxy", 9559),))]
    assert parse_ss(SS, 8000) == [
        Listener("127.0.0.1", 8000, (("python3", 42), ("python3", 43))),
        Listener("::", 8000, (("vllm", 77),)),
    ]
    assert parse_ss(SS, 2024) == [Listener("0.0.0.0", 2024, ())]
    assert parse_ss(SS, 53)[0].address == "127.0.0.53"
    assert len(parse_ss(SS)) == 5
    assert parse_ss(SS, 9999) == []


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:46E5 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1
   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2
   2: 0100007F:1F40 0100007F:A2B4 01 00000000:00000000 00:00000000 00000000     0        0 3
"""
PROC_NET_TCP6 = """\
  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A
"""


def test_parse_proc_net_tcp() -> None:
    assert parse_proc_net_tcp(PROC_NET_TCP, 18149) == [Listener("127.0.0.1", 18149)]
    assert parse_proc_net_tcp(PROC_NET_TCP, 8000) == [Listener("0.0.0.0", 8000)]  # not ESTAB
    assert parse_proc_net_tcp(PROC_NET_TCP6, 8000) == [Listener("0:0:0:0:0:0:0:1", 8000)]


def test_container_id_from_cgroup() -> None:
    cid = "a" * 64
    assert container_id_from_cgroup(f"12:pids:/docker/{cid}\n11:cpu:/docker/{cid}\n") == cid
    assert container_id_from_cgroup(f"0::/system.slice/docker-{cid}.scope\n") == cid
    assert container_id_from_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n") is None


def test_merge_timestamped_restores_the_order_of_both_streams() -> None:
    out = (
        "2026-12-02T18:12:16.1Z INFO starting to load model\n"
        "2026-12-02T18:12:16.30001Z INFO Loading weights took 1.25 seconds\n"
    )
    err = (
        "2026-12-02T18:12:16.2Z Loading safetensors checkpoint shards:   0% Completed\n"
        "2026-12-02T18:12:16.300009Z Loading safetensors checkpoint shards: 100% Completed\n"
        "2026-12-02T18:12:16Z a line at a whole second (docker drops the zero fraction)\n"
    )
    assert merge_timestamped(out, err).splitlines() == [
        "a line at a whole second (docker drops the zero fraction)",
        "INFO starting to load model",
        "Loading safetensors checkpoint shards:   0% Completed",
        "Loading safetensors checkpoint shards: 100% Completed",  # .300009 < .30001
        "INFO Loading weights took 1.25 seconds",
    ]


def test_port_holder_descriptions() -> None:
    ours = PortHolder("managed_container", 8000, container_name="instinct-llama", model="m")
    assert ours.managed and ours.describe() == "instinct-serve container instinct-llama serving m"
    foreign = PortHolder("container", 8000, container_name="webapp")
    assert "not started by instinct-serve" in foreign.describe() and not foreign.managed
    assert PortHolder("process", 8000, pid=42, process="nginx").describe() == (
        "process nginx (pid 42)"
    )
    assert "not visible" in PortHolder("process", 8000).describe()
    assert PortHolder("process", 8000, pid=1, process="x").to_dict()["kind"] == "process"
