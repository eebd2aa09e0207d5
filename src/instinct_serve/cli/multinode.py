"""``serve --hosts``, and ``ps``/``logs``/``stop --hosts``: one model across nodes as one
endpoint. The work is ``runtime.multinode``'s; this module renders it (JSON Lines with
``--json``, a line per event otherwise)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from instinct_serve.errors import UsageError

if TYPE_CHECKING:
    from instinct_serve.cli.serve import ServeView
    from instinct_serve.hosts import Host
    from instinct_serve.options import PlanOptions, ServeOptions
    from instinct_serve.plan.multinode import MultiNodePlan
    from instinct_serve.runtime.confirm import Change


def hosts_of(text: str | None, host_spec: str | None) -> list[Host] | None:
    """``--hosts`` parsed (None when not given); ``--host`` with it is a contradiction."""
    if text is None:
        return None
    if host_spec is not None:
        raise UsageError(
            "give --host or --hosts, not both",
            fix="--hosts lists every node, rank 0 first",
            id="bad_hosts",
            details={"option": "hosts"},
        )
    from instinct_serve.runtime.multinode import parse_hosts

    return parse_hosts(text)


def serve_hosts(view: ServeView, opts: ServeOptions, hosts: list[Host]) -> int | None:
    """Serve across ``hosts``: the exit code, or None when one node holds the model (the
    caller serves it on the first host alone)."""
    from instinct_serve.runtime.multinode import Decision, serve_group

    def sink(doc: dict[str, Any]) -> None:
        redacted = view.redact(doc)
        if view.as_json:
            sys.stdout.write(json.dumps(redacted, ensure_ascii=False, default=str) + "\n")
            sys.stdout.flush()
            return
        kind = redacted.get("event")
        if kind == "log":
            return  # every rank's log is followed; `instinct logs NAME --hosts` shows them
        if kind == "phase":
            from instinct_serve.cli.common import phase_text

            phase, message = str(redacted.get("phase")), str(redacted.get("message", ""))
            view.print("[cyan]·[/] " + phase_text(phase, message))
        elif kind == "launched":
            view.print(f"→ launched rank {redacted['rank']} on {redacted['host']}")
        elif kind == "node_checked":
            view.print(f"✓ rank {redacted['rank']} on {redacted['host']}: checked")
        elif kind == "plan":
            view.print(
                f"· plan: {redacted['strategy']} over {len(redacted['nodes'])} nodes "
                f"({redacted['backend']}), rendezvous {redacted['master_addr']}:"
                f"{redacted['rendezvous_port']}"
            )
        elif "message" in redacted:
            view.print(f"· {redacted['message']}")

    def confirm(plan: MultiNodePlan, change: Change) -> None:
        if opts.yes:
            return
        removes = "" if change.empty else " and " + "; ".join(change.lines())
        raise UsageError(
            f"serve --hosts starts containers on several machines{removes}: it needs --yes",
            fix="review it with `instinct serve ... --hosts ... --json` events, then add --yes",
            id="confirmation_required",
            details={"change": change.to_dict()} if not change.empty else None,
        )

    outcome = serve_group(opts, hosts, sink=sink, confirm=confirm)
    if isinstance(outcome, Decision):
        return None
    if view.as_json:
        sink(outcome.to_dict())
    elif outcome.ok:
        view.print(
            f"✓ {outcome.group} ready on {len(outcome.nodes)} nodes at {outcome.base_url} "
            f"(healthy after {outcome.ready_s} s)"
        )
    else:
        failure = outcome.failure or {}
        view.print(f"✗ {outcome.group} failed: {failure.get('message')}")
    return outcome.exit_code


def plan_on_hosts(
    opts: PlanOptions, host_spec: str | None, fmt: str
) -> tuple[int | None, str | None]:
    """``plan --hosts``: the exit code once the ranks' commands are printed; else (one node
    holds the model, or no --hosts) None and the host to plan that node's plan on (none for
    a ``--gpu`` preview: the node is not contacted)."""
    from instinct_serve.cli.common import warn

    nodes = hosts_of(opts.hosts, host_spec)
    if nodes is None:
        return None, host_spec
    done = plan_hosts(opts, nodes, fmt)
    if done is not None:
        return done, None
    if opts.gpu:
        warn(
            f"preview for --gpu: {nodes[0].name} was not contacted; the HF cache and compile "
            "cache paths are the defaults (--hf-cache, --compile-cache set them)"
        )
        return None, None
    return None, nodes[0].name  # one node holds it: the plan is that node's


def plan_hosts(opts: PlanOptions, hosts: list[Host], fmt: str) -> int | None:
    """``plan --hosts``: the ranks' commands (None when one node holds the model: the
    caller prints that node's plan, after saying why)."""
    import shlex

    from instinct_serve.cli.common import warn
    from instinct_serve.gather.plan import resolve_hardware
    from instinct_serve.runtime.multinode import decide, plan_across

    node = resolve_hardware(opts, hosts[0]).inventory
    connect = not opts.gpu  # named GPUs: a preview, no node is contacted
    decision = decide(opts, hosts[0], node, connect=connect)
    if not decision.multi_node:
        warn(f"multi-node: {decision.why}")
        return None
    _result, plan = plan_across(opts, hosts, node, decision.why, connect=connect)
    if not connect:
        warn(
            "multi-node preview for --gpu: no node was contacted; the HF cache and compile "
            "cache paths are the defaults (--hf-cache, --compile-cache set them)"
        )
    if fmt == "json":
        doc = {"multi_node": {"why": decision.why, **plan.to_dict()}}
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        return 0
    lines = [f"# {plan.group}: {plan.strategy} over {len(plan.nodes)} nodes ({decision.why})"]
    lines.append("# start rank 0 first; secrets (--env NAME) come from each node's environment")
    for rank in plan.nodes:
        lines.append(f"# rank {rank.rank} ({rank.role}) on {rank.host}")
        here = rank.host == "local"
        lines.append(shlex.join(rank.argv if here else ["ssh", rank.host, shlex.join(rank.argv)]))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
