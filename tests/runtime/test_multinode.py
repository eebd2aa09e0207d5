"""``runtime.multinode``'s decision: multi-node only when one node cannot hold the model (or
when asked), and why; the plan across nodes is then made for the GPUs of all of them.

Named GPUs (``--gpu``) need no host: the real planner runs on shipped metadata.
"""

from __future__ import annotations

import pytest

from instinct_serve.errors import UsageError
from instinct_serve.gather.plan import resolve_hardware
from instinct_serve.hosts import LocalHost
from instinct_serve.options import ServeOptions
from instinct_serve.runtime.multinode import decide, parse_hosts, plan_across


def options(model: str, gpu: str, count: int, *, multi_node: bool = False) -> ServeOptions:
    opts = ServeOptions(model=model)
    opts.gpu, opts.gpu_count, opts.multi_node = gpu, count, multi_node
    opts.hosts = "n1,n2"
    return opts


def test_a_model_one_node_cannot_hold_goes_multi_node_and_says_why() -> None:
    opts = options("meta-llama/Llama-3.3-70B-Instruct", "mi210", 2)
    host = LocalHost()
    node = resolve_hardware(opts.plan_options(), host).inventory
    decision = decide(opts, host, node)
    assert decision.multi_node and decision.gpus_per_node == 2
    assert decision.why.startswith("one node cannot hold it: ")
    assert "needs TP 4" in decision.why and "141 GB" in decision.why
    hosts = [LocalHost(), LocalHost()]  # planning reads the head's cache settings
    result, plan = plan_across(opts, hosts, node, decision.why)
    assert result.plan.gpu_count == 4  # planned for both nodes' GPUs together
    args = plan.head.plan.vllm_args
    tp = int(args[args.index("--tensor-parallel-size") + 1])
    pp = (
        int(args[args.index("--pipeline-parallel-size") + 1])
        if "--pipeline-parallel-size" in args
        else 1
    )
    assert tp * pp == 4 and plan.gpus_per_node == 2
    assert [n.host for n in plan.nodes] == ["local", "local"]
    assert plan.reasons[0].why == decision.why


def test_a_model_that_fits_one_node_stays_there_unless_asked() -> None:
    opts = options("meta-llama/Llama-3.1-8B-Instruct", "mi300x", 8)
    host = LocalHost()
    node = resolve_hardware(opts.plan_options(), host).inventory
    decision = decide(opts, host, node)
    assert not decision.multi_node
    assert "fit one node of 8 GPUs" in decision.why
    asked = decide(options(opts.model, "mi300x", 8, multi_node=True), host, node)
    assert asked.multi_node and asked.why.startswith("asked for (--multi-node)")


@pytest.mark.parametrize("text", ["", "n1", "n1,,", " , "])
def test_hosts_needs_two_or_more(text: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_hosts(text)
    assert raised.value.id == "bad_hosts"


def test_hosts_are_ssh_specs_in_rank_order() -> None:
    hosts = parse_hosts("root@a, b:2222 ,c")
    assert [h.name for h in hosts] == ["root@a", "b:2222", "c"]
    with pytest.raises(UsageError):
        parse_hosts("a,-oProxyCommand=x")
