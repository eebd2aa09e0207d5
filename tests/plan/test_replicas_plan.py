"""``--objective throughput`` / ``--replicas N`` (issue 16 item 1): the planner fills the GPUs
with copies behind one endpoint: replicas x TP behind HAProxy for dense models (disjoint
GPU sets, ports, names, labels, the exact docker commands), vLLM's own data parallelism with
AMD's ROCm settings for mixture-of-experts models. 8x MI300X and 8x MI355X by name, 8x
MI300X in CPX/NPS4 from a sysfs tree, and the MI308X CPX capture through a fake amd-smi."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from instinct_serve import vllm_args
from instinct_serve.errors import InstinctError
from instinct_serve.gather.plan import make_plan
from instinct_serve.hardware.inventory import GpuInventory
from instinct_serve.options import KubernetesOptions, PlanOptions
from instinct_serve.plan.model import RESTART_POLICY, LaunchPlan
from instinct_serve.plan.render import render
from instinct_serve.plan.replicas import haproxy_config
from tests.infra.fakebin import FakeBin
from tests.plan.test_partitions_plan import cpx_inventory, mi308x_host

__all__ = ["cpx_inventory"]  # the fixture, used by name below

HF = "/srv/hf-cache"
DENSE = "Qwen/Qwen3-8B"  # TP 1 on one MI300X
MOE = "openai/gpt-oss-20b"  # 4 of 32 experts per token: 12.5 %
SPARSE_MOE = "Qwen/Qwen3-Next-80B-A3B-Instruct"  # 10 of 512 experts: 1.95 %


def plan(inventory: GpuInventory | None = None, **kw: Any) -> LaunchPlan:
    kw.setdefault("hf_cache", HF)
    return make_plan(PlanOptions(**kw), inventory=inventory).plan


def labels_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--label")


@pytest.mark.parametrize("gpu", ["mi300x", "mi355x"])
def test_throughput_fills_eight_gpus_with_tp1_replicas(gpu: str) -> None:
    p = plan(gpu=gpu, model=DENSE, objective="throughput", port=8000, name="qwen")
    group = p.group
    assert group is not None and group.mode == "replicas"
    assert (group.count, group.tp) == (8, 1)
    assert [m.gpus for m in group.members] == [(i,) for i in range(8)]
    assert [m.port for m in group.members] == list(range(8001, 8009))
    assert [m.name for m in group.members] == [f"qwen-r{i}" for i in range(8)]
    assert group.router is not None and (group.router.port, group.router.bind) == (
        8000,
        "127.0.0.1",
    )
    why = next(r.why for r in p.reasons if r.item == "8 replicas")
    assert "AMD" in why and "HAProxy" in why


def test_latency_says_the_idle_gpus_and_how_to_use_them() -> None:
    p = plan(gpu="mi300x", model=DENSE)
    assert p.group is None
    hint = next(r.why for r in p.reasons if r.item == "replicas")
    assert "7 GPU(s) idle" in hint and "--replicas 8" in hint


def test_replicas_n_on_a_larger_tp_takes_disjoint_runs_of_gpus() -> None:
    p = plan(gpu="mi300x", model=DENSE, tp=2, replicas=3)
    assert p.group is not None and [m.gpus for m in p.group.members] == [(0, 1), (2, 3), (4, 5)]
    assert p.group.gpus == (0, 1, 2, 3, 4, 5)
    sub = plan(gpu="mi300x", model=DENSE, replicas=2, gpus=[5, 7])
    assert sub.group is not None and [m.gpus for m in sub.group.members] == [(5,), (7,)]


def test_too_many_replicas_is_an_error_that_says_how_many_fit() -> None:
    with pytest.raises(InstinctError) as err:
        plan(gpu="mi300x", model=DENSE, tp=4, replicas=3)
    assert err.value.id == "too_many_replicas" and "--replicas 2" in (err.value.fix or "")


def test_shell_render_is_every_replica_then_the_router() -> None:
    p = plan(gpu="mi300x", model=DENSE, replicas=3, port=8000, name="q")
    text = render(p, "shell")
    lines = [ln for ln in text.splitlines() if ln.startswith("docker ")]
    assert [shlex.split(ln)[:2] for ln in lines] == [["docker", "run"]] * 3 + [
        ["docker", "update"],
        ["docker", "run"],
    ]
    for index, line in enumerate(lines[:3]):
        argv = shlex.split(line)
        labels = labels_of(argv)
        assert labels["instinct-serve.group"] == "q" and labels["instinct-serve.role"] == "replica"
        assert labels["instinct-serve.replica"] == str(index)
        assert labels["instinct-serve.port"] == str(8001 + index)
        assert f"HIP_VISIBLE_DEVICES={index}" in argv
        assert f"127.0.0.1:{8001 + index}:{8001 + index}" in argv
        assert vllm_args.value(argv, "--port") == str(8001 + index)
        assert argv[argv.index("--name") + 1] == f"q-r{index}"
        assert "--restart" not in argv  # not before the replica is proven
    assert shlex.split(lines[3]) == [
        "docker",
        "update",
        "--restart",
        RESTART_POLICY,  # the endpoints' own, given once they answer
        "q-r0",
        "q-r1",
        "q-r2",
    ]
    router = lines[4]
    assert "--network host" in router and "--restart unless-stopped" in router
    assert "--entrypoint haproxy haproxy:3.0 -W -db -f /usr/local/etc/haproxy/haproxy.cfg" in router
    assert '"$PWD"/q-haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro' in router
    assert "instinct-serve.role=router" in router
    # the configuration between them, as a here-document
    config = text.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    assert config == haproxy_config(p).rstrip("\n")
    assert "bind 127.0.0.1:8000" in config and "option httpchk GET /health" in config
    for index in range(3):
        assert f"server r{index} 127.0.0.1:{8001 + index} check" in config
    with pytest.raises(InstinctError) as err:
        render(p, "compose")
    assert err.value.id == "bad_format"


def test_json_carries_the_group_and_its_commands() -> None:
    p = plan(gpu="mi355x", model=DENSE, replicas=2, port=9000, name="g", router_image="mirror/h:3")
    doc = json.loads(render(p, "json"))
    group = doc["replicas"]
    assert (group["mode"], group["count"], group["tp"], group["gpus"]) == ("replicas", 2, 1, [0, 1])
    assert [m["port"] for m in group["members"]] == [9001, 9002]
    assert group["members"][1]["docker_argv"][:2] == ["docker", "run"]
    assert group["members"][1]["hip_visible_devices"] == "1"
    assert group["restart_argv"][-2:] == ["g-r0", "g-r1"]
    router = group["router"]
    assert router["image"] == "mirror/h:3" and router["listen"] == "127.0.0.1:9000"
    assert router["docker_argv"][-4:] == ["-W", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
    assert "g-haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in router["docker_argv"]
    assert "mirror/h:3" in router["docker_argv"] and "server r1 127.0.0.1:9002" in router["config"]
    one = json.loads(render(plan(gpu="mi355x", model=DENSE), "json"))
    assert one["replicas"] is None
    # the group is part of the plan's identity
    assert p.plan_hash != plan(gpu="mi355x", model=DENSE, replicas=3, port=9000).plan_hash


def test_a_public_group_binds_only_the_router_publicly() -> None:
    p = plan(gpu="mi300x", model=DENSE, replicas=2, public=True)
    assert p.group is not None and p.group.router is not None
    assert p.group.router.bind == "0.0.0.0"
    text = render(p, "shell")
    assert "127.0.0.1:8001:8001" in text and "127.0.0.1:8002:8002" in text


@pytest.mark.parametrize("gpu", ["mi300x", "mi355x"])
def test_moe_uses_vllm_data_parallelism_with_amds_rocm_settings(gpu: str) -> None:
    p = plan(gpu=gpu, model=MOE, objective="throughput")
    group = p.group
    assert group is not None and group.mode == "data_parallel" and group.count == 8
    assert vllm_args.value(p.vllm_args, "--data-parallel-size") == "8"
    assert vllm_args.has(p.vllm_args, "--disable-nccl-for-dp-synchronization")
    assert vllm_args.has(p.vllm_args, "--enable-expert-parallel")  # 12.5 % >= 3 %
    assert p.env["VLLM_ALL2ALL_BACKEND"] == "allgather_reducescatter"
    assert group.router is None and not group.members
    # one endpoint: the single-endpoint renderings still work, with vLLM's DP flags
    argv = render(p, "argv").split("\n")
    assert "--data-parallel-size" in argv and "VLLM_ALL2ALL_BACKEND=allgather_reducescatter" in argv


def test_sparse_moe_gets_data_parallelism_without_expert_parallelism() -> None:
    p = plan(gpu="mi300x", model=SPARSE_MOE, objective="throughput")
    assert p.group is not None and p.group.mode == "data_parallel"
    assert not vllm_args.has(p.vllm_args, "--enable-expert-parallel")
    why = p.group.why
    assert "1.95%" in why or "2.0%" in why


def test_dp_given_after_double_dash_is_left_to_vllm() -> None:
    p = plan(gpu="mi300x", model=MOE, objective="throughput", extra_args=["-dp", "2"])
    assert p.group is None
    assert any(r.item == "replicas" for r in p.reasons)


def test_kubernetes_replicas_are_the_deployments() -> None:
    opts = PlanOptions(gpu="mi300x", model=DENSE, replicas=3, hf_cache=HF)
    opts.replicas, opts.local_group = None, False  # what `plan --format k8s` does
    p = make_plan(opts).plan
    assert p.group is None
    text = render(p, "k8s", KubernetesOptions(replicas=3))
    assert "replicas: 3" in text


# ------------------------------------------------------------------ partitioned GPUs


def test_cpx_replicas_are_partitions(cpx_inventory: GpuInventory) -> None:
    """8x MI300X in CPX/NPS4: 64 logical GPUs; TP 2 groups stay on one GPU's partitions."""
    p = plan(cpx_inventory, model=DENSE, tp=1, objective="throughput")
    assert p.group is not None and p.group.mode == "replicas" and p.group.count == 64
    assert p.group.members[63].gpus == (63,) and p.group.members[63].port == p.port + 64
    two = plan(cpx_inventory, model=DENSE, tp=2, replicas=5)
    assert two.group is not None
    assert [m.gpus for m in two.group.members] == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    for member in two.group.members:  # never across two physical GPUs (8 partitions each)
        assert len({g // 8 for g in member.gpus}) == 1


def test_mi308x_cpx_capture_holds_one_copy(tools: FakeBin, root: Path) -> None:
    inv = mi308x_host(tools, root)
    p = plan(inv, model=DENSE, objective="throughput")
    assert p.group is None  # one visible partition: one endpoint
    assert any(r.item == "replicas" and "one copy" in r.why for r in p.reasons)
    with pytest.raises(InstinctError) as err:
        plan(inv, model=DENSE, replicas=2)
    assert err.value.id == "too_many_replicas"


def test_a_group_moved_for_an_upgrade_keeps_its_gpus_router_and_hash() -> None:
    """``serve --upgrade`` starts the new replicas on other ports and names (``moved``);
    the record keeps the whole group (``record``/``group_from_record``) to roll back to."""
    from instinct_serve.plan.labels import LABEL_PLAN_HASH
    from instinct_serve.plan.replicas import group_from_record, moved

    group_plan = plan(model=DENSE, gpu="mi300x", gpu_count=4, replicas=3)
    group = group_plan.group
    assert group is not None and group.router is not None
    out = moved(group_plan, [9101, 9102, 9103], "-next")
    assert out.group is not None and out.group.router == group.router
    assert [(m.name, m.port, m.gpus) for m in out.group.members] == [
        (f"{group.name}-next-r{m.index}", 9101 + m.index, m.gpus) for m in group.members
    ]
    assert out.labels[LABEL_PLAN_HASH] == group_plan.labels.get(
        LABEL_PLAN_HASH, group_plan.plan_hash
    )
    assert group_plan.group is group and group.members[0].port == group_plan.port + 1  # a copy
    config = haproxy_config(out)
    assert (
        "server r2 127.0.0.1:9103 check" in config
        and f"127.0.0.1:{group.members[0].port}" not in config
    )
    assert group_from_record(json.loads(json.dumps(out.group.record()))) == out.group
    for bad in (None, [], {"mode": "replicas"}, {"mode": "x", "count": 1, "tp": 1}):
        assert group_from_record(bad) is None


def test_router_puts_haproxy_in_front_of_one_replica() -> None:
    """``--router``: one endpoint, still behind HAProxy, so an upgrade can swap it there."""
    one = plan(model=DENSE, gpu="mi300x", gpu_count=2, router=True, port=9000)
    group = one.group
    assert group is not None and group.mode == "replicas" and group.count == 1
    assert [(m.port, m.gpus) for m in group.members] == [(9001, (0,))]
    assert group.router is not None and group.router.port == 9000
    assert "--router" in group.why and "serve --upgrade" in group.why
    assert plan(model=DENSE, gpu="mi300x", gpu_count=2, port=9000).group is None
    two = plan(model=DENSE, gpu="mi300x", gpu_count=2, router=True, replicas=2)
    assert two.group is not None and two.group.count == 2
