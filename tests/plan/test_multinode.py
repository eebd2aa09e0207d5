"""``plan.multinode``: one plan split into vLLM ranks over nodes, from the recipe's strategy.

Plans come from the real planner (shipped metadata, the recipes snapshot); the split is
checked flag by flag against vLLM's multi-node command line (``--nnodes/--node-rank/
--master-addr/--master-port``, ``--headless`` on ranks > 0; the DP rendezvous flags for
``multi_node_dep``) and the strategies' env (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any

import pytest

from instinct_serve import vllm_args
from instinct_serve.catalog import load_catalog
from instinct_serve.errors import UsageError
from instinct_serve.gather.plan import make_plan
from instinct_serve.options import PlanOptions
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.plan.multinode import (
    RAY_ROCM_ENV,
    MultiNodeOptions,
    MultiNodePlan,
    choose_strategy,
    plan_multinode,
)
from tests.infra.cli import run_instinct

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
STRATEGIES = load_catalog().strategies


def total_plan(model: str = LLAMA, gpu: str = "mi300x", count: int = 16) -> LaunchPlan:
    opts = PlanOptions(model=model)
    opts.gpu, opts.gpu_count = gpu, count
    opts.nodes = 2  # the nodes' GPUs together, as runtime.multinode.plan_across plans them
    return make_plan(opts).plan


def split(base: LaunchPlan | None = None, **over: Any) -> MultiNodePlan:
    opts: dict[str, Any] = {"hosts": ("root@n1", "root@n2"), "gpus_per_node": 8}
    extra = {k: over.pop(k) for k in ("compatible", "moe") if k in over}
    opts.update(over)
    return plan_multinode(
        base or total_plan(),
        MultiNodeOptions(**opts),
        strategies=STRATEGIES,
        why="one node cannot hold it",
        **extra,
    )


def value(args: list[str], flag: str) -> str | None:
    return vllm_args.value(args, flag)


def test_mp_ranks_on_host_networking() -> None:
    plan = split(compatible=["single_node_tp", "multi_node_tp"])
    assert plan.strategy == "multi_node_tp" and plan.backend == "mp"
    assert plan.master_addr == "n1" and plan.rendezvous_port == 29501
    head, worker = plan.nodes
    assert (head.rank, head.role, head.host) == (0, "head", "root@n1")
    assert (worker.rank, worker.role, worker.host) == (1, "worker", "root@n2")
    for node in plan.nodes:
        args = node.plan.vllm_args
        assert value(args, "--tensor-parallel-size") == "16"
        assert value(args, "--nnodes") == "2" and value(args, "--node-rank") == str(node.rank)
        assert value(args, "--master-addr") == "n1" and value(args, "--master-port") == "29501"
        assert value(args, "--distributed-executor-backend") == "mp"
        assert args.count("--tensor-parallel-size") == 1  # the planner's TP replaced, once
        assert node.plan.env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert node.plan.env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert "--network=host" in node.argv and "-p" not in node.argv  # nothing to publish
    assert "--headless" not in head.plan.vllm_args and worker.plan.vllm_args[-1] == "--headless"
    # host networking: the API stays on the head's loopback, as -p 127.0.0.1 would keep it
    assert value(head.plan.vllm_args, "--host") == "127.0.0.1"
    assert value(worker.plan.vllm_args, "--host") is None
    assert head.plan.container_name == plan.group
    assert worker.plan.container_name == f"{plan.group}-node1"
    labels = worker.plan.labels
    assert labels["instinct-serve.group"] == plan.group
    assert labels["instinct-serve.role"] == "worker" and labels["instinct-serve.node-rank"] == "1"
    assert labels["instinct-serve.nodes"] == "root@n1,root@n2"
    assert labels["instinct-serve.managed"] == "true"
    why = {r.item: r.why for r in plan.reasons}
    assert why["multi-node"] == "one node cannot hold it"
    assert "8 GPUs on each of 2 nodes" in why["--tensor-parallel-size 16"]


def test_user_network_publishes_on_rank_0_only_and_resolves_its_name() -> None:
    plan = split(network="grp-net", ifname="eth1")
    head, worker = plan.nodes
    assert plan.master_addr == plan.group  # docker's DNS on a user-defined network
    assert "--network=grp-net" in head.argv and "--network=grp-net" in worker.argv
    assert head.argv[head.argv.index("-p") + 1] == f"127.0.0.1:{head.plan.port}:{head.plan.port}"
    assert "-p" not in worker.argv
    assert head.plan.env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert value(head.plan.vllm_args, "--host") is None  # the container's own interface


def test_tp_inside_a_node_and_pp_across_when_the_recipe_allows() -> None:
    plan = split(compatible=["multi_node_tp", "multi_node_tp_pp"])
    assert plan.strategy == "multi_node_tp_pp"
    for node in plan.nodes:
        assert value(node.plan.vllm_args, "--tensor-parallel-size") == "8"
        assert value(node.plan.vllm_args, "--pipeline-parallel-size") == "2"
        assert node.plan.tensor_parallel_size == 8


def test_dep_uses_vllms_data_parallel_rendezvous() -> None:
    plan = split(compatible=["multi_node_dep", "multi_node_tp"], moe=True, master_addr="10.0.0.1")
    assert plan.strategy == "multi_node_dep" and plan.rendezvous_port == 13345
    head, worker = plan.nodes
    for node in plan.nodes:
        args = node.plan.vllm_args
        assert value(args, "--data-parallel-size") == "16"
        assert value(args, "--data-parallel-size-local") == "8"
        assert value(args, "--data-parallel-address") == "10.0.0.1"
        assert "--enable-expert-parallel" in args
        assert "--data-parallel-hybrid-lb" not in args  # one API server: the head's
        assert value(args, "--nnodes") is None and value(args, "--tensor-parallel-size") is None
    assert value(worker.plan.vllm_args, "--data-parallel-start-rank") == "8"
    assert "--headless" in worker.plan.vllm_args and "--headless" not in head.plan.vllm_args


def test_ray_backend_runs_a_ray_cluster_with_rocm_visibility_settings() -> None:
    base = total_plan()
    base.env["HIP_VISIBLE_DEVICES"] = "0,1,2,3,4,5,6,7"
    plan = split(base, backend="ray")
    head, worker = plan.nodes
    assert plan.rendezvous_port == 6379
    for node in plan.nodes:
        assert {k: node.plan.env[k] for k in RAY_ROCM_ENV} == RAY_ROCM_ENV
        assert "HIP_VISIBLE_DEVICES" not in node.plan.env
        at = node.argv.index("--entrypoint")
        assert node.argv[at + 1 : at + 3] == ["/bin/sh", base.image]
        assert node.argv[at + 3] == "-c"
    head_script, worker_script = head.argv[-1], worker.argv[-1]
    assert head_script.startswith("ray start --head --port=6379 && exec vllm serve ")
    served = shlex.split(head_script.split("exec vllm serve ", 1)[1])
    assert served[0] == base.model and value(served, "--distributed-executor-backend") == "ray"
    assert value(served, "--nnodes") is None
    assert worker_script == "exec ray start --block --address=n1:6379"


def test_flags_the_user_carried_are_replaced_not_duplicated() -> None:
    base = total_plan()
    base.vllm_args += ["--nnodes", "4", "--headless", "--pipeline-parallel-size", "3"]
    plan = split(base)
    head = plan.head.plan.vllm_args
    assert value(head, "--nnodes") == "2" and "--headless" not in head
    assert value(head, "--pipeline-parallel-size") is None


@pytest.mark.parametrize(
    ("compatible", "moe", "expected"),
    [
        (["single_node_tp", "multi_node_tp", "multi_node_tp_pp"], False, "multi_node_tp_pp"),
        (["multi_node_tep", "multi_node_dep", "multi_node_tp"], True, "multi_node_dep"),
        (["multi_node_tep", "multi_node_dep", "multi_node_tp"], False, "multi_node_tp"),
        (["single_node_tp"], False, "multi_node_tp"),
        ([], True, "multi_node_tp"),
    ],
)
def test_strategy_choice(compatible: list[str], moe: bool, expected: str) -> None:
    assert choose_strategy(compatible, moe, None)[0] == expected


@pytest.mark.parametrize(
    ("over", "error"),
    [
        ({"hosts": ("n1",)}, "bad_hosts"),
        ({"backend": "slurm"}, "bad_backend"),
        ({"strategy": "multi_node_dep"}, "bad_strategy"),  # a dense model
        ({"strategy": "pd_cluster"}, "bad_strategy"),
        ({"strategy": "multi_node_dep", "moe": True, "backend": "ray"}, "bad_backend"),
    ],
)
def test_refusals(over: dict[str, Any], error: str) -> None:
    with pytest.raises(UsageError) as raised:
        split(**over)
    assert raised.value.id == error


def test_native_engine_is_refused() -> None:
    base = total_plan()
    base.launcher = "native"
    with pytest.raises(UsageError) as raised:
        split(base)
    assert raised.value.id == "bad_hosts"


def _plan_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_instinct(["plan", *args], timeout=120)


def test_plan_hosts_prints_every_rank_and_why() -> None:
    model = "meta-llama/Llama-3.3-70B-Instruct"
    base = [model, "--gpu", "mi210", "--gpu-count", "2", "--hosts", "local,local"]
    out = _plan_cli(*base, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)["multi_node"]
    assert doc["why"].startswith("one node cannot hold it:") and "needs TP 4" in doc["why"]
    assert doc["strategy"] == "multi_node_tp_pp" and doc["gpus_per_node"] == 2
    assert [n["rank"] for n in doc["nodes"]] == [0, 1]
    assert not doc["master_addr"].startswith("127.")  # the other nodes must reach it
    shell = _plan_cli(*base, "--format", "shell")
    assert shell.returncode == 0, shell.stderr
    commands = [ln for ln in shell.stdout.splitlines() if ln.startswith("docker run")]
    assert len(commands) == 2 and "--node-rank 1" in commands[1] and "--headless" in commands[1]


def test_plan_hosts_for_a_model_one_node_holds_is_that_nodes_plan() -> None:
    out = _plan_cli(LLAMA, "--gpu", "mi300x", "--hosts", "local,local", "--json")
    assert out.returncode == 0, out.stderr
    assert "fit one node of 8 GPUs: local alone runs it" in " ".join(out.stderr.split())
    doc = json.loads(out.stdout)
    assert "--nnodes" not in doc["vllm_args"] and doc["tensor_parallel_size"] == 1


def test_a_split_whose_tp_the_heads_do_not_divide_is_refused_before_anything_starts(
    tmp_path: Any,
) -> None:
    """SmolLM2-135M has 9 attention heads: TP 4 over two 2-GPU nodes (no recipe: plain
    multi_node_tp) or TP 2 per node would kill rank 0 at load while rank 1 waits on the
    rendezvous (what the real vLLM did). The split is refused with the rule; the fix names
    a per-node GPU count and the strategy it takes."""
    import shutil

    from tests.infra.paths import CONFIGS

    model = tmp_path / "SmolLM2-135M-Instruct"
    model.mkdir()
    shutil.copy(CONFIGS / "HuggingFaceTB__SmolLM2-135M-Instruct.json", model / "config.json")
    args = [str(model), "--gpu", "mi300x", "--gpu-count", "2", "--hosts", "local,local"]
    out = _plan_cli(*args, "--multi-node", "--json")
    assert out.returncode == 2, out.stdout + out.stderr
    error = json.loads(out.stdout)["error"]
    assert error["id"] == "split_not_allowed"
    assert "9 attention heads do not divide by TP 4" in error["message"]
    assert "--gpu-count 1" in error["fix"] and "multi_node_tp_pp" in error["fix"]
    assert error["details"]["constraint"] == "attention_heads_divisible"
    # one GPU per node: TP 1 on each, pipelined across the two
    pp = ["--strategy", "multi_node_tp_pp"]
    two = _plan_cli(*args, *pp, "--multi-node", "--json")
    assert json.loads(two.stdout)["error"]["message"].startswith("multi_node_tp_pp over 2 nodes")
    ok = _plan_cli(*args[:3], "--gpu-count", "1", *args[5:], *pp, "--multi-node", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc = json.loads(ok.stdout)["multi_node"]
    assert all(value(n["argv"], "--tensor-parallel-size") == "1" for n in doc["nodes"])
