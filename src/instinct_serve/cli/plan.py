"""``instinct plan``: the exact launch command for a model, and why each piece is there.

The options are ``options.PlanOptions`` (generated click options, shared with ``serve`` and
the MCP server); the work is ``gather.plan.make_plan``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import click

from instinct_serve.cli.common import choice, emit, get_host, host_option, warn
from instinct_serve.cli.help import GroupedCommand, help_all_option
from instinct_serve.cli.options import options_for, parse_cli
from instinct_serve.errors import UsageError
from instinct_serve.options import KubernetesOptions, PlanOptions

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.cli.tables import Rows
    from instinct_serve.plan.model import PlanResult

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("summary", "json", "docker", "argv", "shell", "native", "compose", "k8s")


def print_summary(con: Console, result: PlanResult, title: str = "Launch plan") -> None:
    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows
    from instinct_serve.plan.summary import summary_rows

    table = Rows([Column("", key=True), Column("", prose=True)], title, header=False)
    for key, value in summary_rows(result):
        table.add(f"[bold]{escape(key)}[/]", escape(value))
    table.print(con)
    for message in result.plan.warnings:  # warnings on stderr, whatever ``con`` prints to
        warn(message)


@click.command("plan", cls=GroupedCommand)
@help_all_option
@options_for(PlanOptions)
@options_for(KubernetesOptions)
@host_option
@click.option(
    "--format",
    "fmt",
    type=choice(FORMATS),
    default="summary",
    show_default=True,
    help="What to print.",
)
@click.option(
    "--list",
    "as_list",
    is_flag=True,
    help="List every precision x TP this target could run, ranked, with why the plan took "
    "its pick.",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def plan(fmt: str, as_list: bool, as_json: bool, host_spec: str | None, **kwargs: Any) -> int:
    """Print the exact launch command for MODEL (default: Qwen/Qwen3.5-9B).

    \b
    Without --gpu, the GPUs of the host (or --host) are detected; on a machine with no AMD
    GPU the plan is made for an MI300X profile. Arguments after `--` are passed to
    `vllm serve` as they are, e.g.:  instinct plan MODEL -- --max-num-seqs 64
    \b
    Formats: summary (default: the table and the command), json, docker (a script to
    paste: the cache seeding, then `docker run`), argv (docker run's arguments, one per
    line), shell (one line per command), native (`vllm serve` with exports), compose, k8s
    (PVC, Deployment or LeaderWorkerSet with --nodes, Service, PodDisruptionBudget, KEDA
    ScaledObject with --autoscale).
    """
    from instinct_serve.gather.plan import plan_for
    from instinct_serve.plan.render import render

    fmt = "json" if as_json else fmt
    opts = parse_cli(PlanOptions, kwargs, engine="native" if fmt == "native" else "docker")
    k8s = parse_cli(KubernetesOptions, kwargs, replicas=opts.replicas or 1)
    if fmt == "k8s":  # the cluster makes the copies: one endpoint per pod
        opts.replicas, opts.local_group, opts.nodes = None, False, k8s.nodes
    if fmt != "k8s" and replace(k8s, replicas=1) != KubernetesOptions():
        raise UsageError(
            "--namespace, --autoscale, --max-replicas, --nodes, --storage-class, "
            "--socket-ifname and --prometheus-url shape Kubernetes manifests",
            fix="add --format k8s",
            id="k8s_only",
        )
    if k8s.nodes > 1 and opts.gpu_count is None:
        raise UsageError(
            f"--nodes {k8s.nodes} needs the GPUs of all nodes together to plan for",
            fix=f"add --gpu-count, e.g. --gpu-count {8 * k8s.nodes} for {k8s.nodes} nodes of 8",
            id="bad_nodes",
            details={"option": "nodes"},
        )
    if as_list:
        return _list(opts, host_spec, as_json)
    from instinct_serve.cli.multinode import plan_on_hosts

    done, host_spec = plan_on_hosts(opts, host_spec, fmt)
    if done is not None:
        return done
    result = plan_for(opts, get_host(host_spec), fallback_gpu=True)
    if fmt == "json":
        emit(result, True)
        return 0
    if fmt != "summary":
        from instinct_serve.plan.render import secret_notes

        for message in result.plan.warnings:
            warn(message)
        for note in secret_notes(result.plan, fmt) if fmt != "compose" else []:
            sys.stderr.write(f"note: {note}\n")
        sys.stdout.write(render(result.plan, fmt, k8s=k8s))
        return 0

    def human(con: Console) -> None:
        print_summary(con, result)
        con.print()
        # the block is a script: pasted into a shell, it runs as it is (seeding included)
        con.print("[bold]Command[/] (paste it into a shell; --format argv|native|compose|k8s):")
        con.print(render(result.plan, "docker").rstrip("\n"), markup=False, soft_wrap=True)

    emit(result, False, human)
    return 0


_UNSIZED = {"estimated": "weights fit (estimate; KV unknown)"}


def _list(opts: PlanOptions, host_spec: str | None, as_json: bool) -> int:
    """``plan --list``: the ranked choices (``gather.choices``)."""
    from instinct_serve.gather.choices import plan_choices

    host = get_host(host_spec)
    if host.is_local:
        opts.default_gpu = "mi300x"
    listing = plan_choices(opts, host)
    if not as_json:
        for message in listing.warnings:
            warn(message)

    def human(con: Console) -> None:
        from rich.markup import escape

        _choices_table(listing).print(con)
        if listing.chosen_why:
            con.print(f"[green]→[/] chosen: {escape(listing.chosen_why)}")
        elif listing.plan_error:
            con.print(
                f"[red]no plan:[/] {escape(str(listing.plan_error.get('message')))}"
                f"\n  fix: {escape(str(listing.plan_error.get('fix')))}"
            )
        if listing.partition_modes:
            _print_modes(con, listing)
        _print_references(con, listing.references)

    emit(listing.to_dict(), as_json, human)
    return 0 if listing.plan_error is None else 1


def _choices_table(listing: Any) -> Rows:
    """``plan --list``: one row per checkpoint and TP; on a narrow terminal the size basis,
    full-context concurrency, KV tokens, weights per GPU and context go first."""
    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows

    table = Rows(
        [
            Column(""),
            Column("CHECKPOINT", key=True),
            Column("PRECISION"),
            Column("TP", right=True),
            Column("GIB/GPU", drop=3, right=True),
            Column("SIZE", drop=6),
            Column("KV TOKENS", drop=4, right=True),
            Column("CONTEXT", drop=2, right=True),
            Column("FULL-CTX X", drop=5, right=True),
            Column("VERDICT", prose=True),
        ],
        f"{listing.model} on {listing.target} ({listing.objective})",
    )
    for c in listing.choices:
        table.add(
            "[green]→[/]" if c.chosen else ("" if c.feasible else "[dim]✗[/]"),
            escape(c.model_id.rsplit("/", 1)[-1]),
            f"{c.precision or '?'} ({c.status})",
            str(c.tp),
            f"{c.weights_per_gpu_gib:g}" if c.weights_per_gpu_gib is not None else "?",
            c.size_basis or "?",
            f"{c.kv_cache_tokens:,}" if c.kv_cache_tokens else "?",
            f"{c.max_model_len:,}" if c.max_model_len else "?",
            f"{c.full_context_concurrency:g}" if c.full_context_concurrency else "?",
            escape(c.why_not or c.verdict or _UNSIZED.get(c.size_basis or "", "unsized")),
        )
    return table


def _print_references(con: Console, rows: list[dict[str, Any]]) -> None:
    """AMD's reference configs for this model and GPU (InferenceX), one row each."""
    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows

    if not rows:
        return
    table = Rows(
        [
            Column("CONFIG", key=True),
            Column("SERVER"),
            Column("PARALLEL"),
            Column("SPEC", drop=2),
            Column("ISL/OSL", drop=1),
            Column("IMAGE", drop=3),
        ],
        "AMD reference configs (InferenceX)",
    )
    for r in rows:
        table.add(
            escape(r["config"]),
            r["server"],
            r["parallel"],
            r["speculative"] or "",
            f"{r['isl']}/{r['osl']}" if r["isl"] else "agentic",
            escape(r["image"]),
        )
    table.print(con)


def _print_modes(con: Console, listing: Any) -> None:
    """The partition modes side by side, and the commands that switch (printed only)."""
    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows

    first = listing.partition_modes[0]
    table = Rows(
        [
            Column(""),
            Column("MODE", key=True),
            Column("LOGICAL GPUS", right=True),
            Column("MEMORY EACH", right=True),
            Column("TP", right=True),
            Column("ENDPOINTS", drop=1, right=True),
            Column("FIT", prose=True),
        ],
        f"Partition modes for {first.model_id.rsplit('/', 1)[-1]}",
    )
    for m in listing.partition_modes:
        table.add(
            "[green]now[/]" if m.current else "",
            m.mode,
            str(m.logical_gpus),
            f"{m.memory_per_device_gib:g} GiB" if m.memory_per_device_gib else "?",
            str(m.tp) if m.tp else "-",
            str(m.replicas),
            escape(m.why_not or (m.verdict or "unsized")),
        )
    table.print(con)
    for m in listing.partition_modes:
        if m.commands:
            con.print(f"to switch to {m.mode} (stop all GPU work first; not run by instinct):")
            for line in m.commands:
                con.print(f"  {line}", markup=False, soft_wrap=True)
    con.print(
        "`instinct partition set MODE --yes` runs them through the host (root or sudo -n)",
        markup=False,
    )
