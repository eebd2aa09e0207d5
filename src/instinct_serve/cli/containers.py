"""``instinct ps``, ``instinct logs``, ``instinct stop``: the endpoints this tool started.

Views over ``runtime.endpoints`` (managed containers by label, native processes by the
launcher's state directory; nothing else is ever listed as ours or stopped).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from instinct_serve.cli.common import (
    F,
    confirm_change,
    emit,
    get_host,
    host_option,
    hosts_option,
    json_option,
    warn,
    yes_option,
)
from instinct_serve.errors import UsageError
from instinct_serve.units import plural

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.cli.tables import Rows
    from instinct_serve.hosts import Host
    from instinct_serve.runtime.endpoints import Row


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def everyone_option(func: F) -> F:
    """``--everyone``: every user's endpoints, not only the caller's (``runtime.owner``)."""
    return click.option(
        "--everyone",
        is_flag=True,
        help="Every user's endpoints (and those of older versions, which name no owner), "
        "not only yours.",
    )(func)


@click.command("ps")
@click.option("-a", "--all", "show_all", is_flag=True, help="Stopped and exited ones too.")
@click.option("-q", "--quiet", is_flag=True, help="Only the names, one a line.")
@click.option("--no-health", is_flag=True, help="Do not probe /health of each endpoint.")
@everyone_option
@host_option
@hosts_option
@json_option
def ps(
    show_all: bool,
    quiet: bool,
    no_health: bool,
    everyone: bool,
    host_spec: str | None,
    hosts_spec: str | None,
    as_json: bool,
) -> int:
    """List your running endpoints on the host (-a: stopped ones too; --everyone: every
    user's): model, port, status, uptime and health (/health probed, through an ssh
    tunnel for --host). --json lists every record (`running` says which run). With
    --hosts: the multi-node groups on those nodes, one row each."""
    from instinct_serve.cli.multinode import hosts_of
    from instinct_serve.runtime.endpoints import list_endpoints
    from instinct_serve.runtime.recover import resolve

    nodes = hosts_of(hosts_spec, host_spec)
    if nodes is not None:
        return _ps_groups(nodes, not no_health and not quiet, as_json, quiet)

    host = get_host(host_spec)
    interrupted = resolve(host, lambda text: warn(text, as_json))  # changes cut short
    listing = list_endpoints(host, health=not (no_health or quiet), everyone=everyone)
    rows = listing.rows if show_all else [row for row in listing.rows if row.alive]
    if quiet and not as_json:
        sys.stdout.write("".join(f"{row.name}\n" for row in rows))
        return 0

    def human(con: Console) -> None:
        from rich.markup import escape

        if listing.docker_problem and not rows:
            con.print(f"[yellow]Docker:[/] {escape(listing.docker_problem)}")
        if not rows:
            whose = "" if everyone else " of yours"
            running = "" if show_all else " running"
            con.print(f"No{running} instinct-serve endpoints{whose} on {escape(host.name)}.")
        else:
            _ps_table(rows, everyone).print(con)
        for row in rows:  # restarts (the daemon's policy and watch), last failure
            if row.restarts or row.last_failure:
                con.print(f"[dim]{escape(_history(row.name, row.restarts, row.last_failure))}[/]")
            if row.survivors:
                con.print(f"[red]{escape(_survivors(row.name, row.survivors))}[/]")
        _hidden(con, listing.hidden, len(listing.rows) - len(rows))

    emit(listing.to_dict() | ({"interrupted": interrupted} if interrupted else {}), as_json, human)
    return 0


def _ps_table(rows: list[Row], everyone: bool) -> Rows:
    """``ps``'s table: a replica group is one endpoint (its router), its replicas under it.
    On a narrow terminal the proof, engine, uptime, owner and health go first (in that
    order)."""
    from rich.markup import escape

    from instinct_serve.cli.tables import Column, Rows
    from instinct_serve.plan.labels import ROLE_ROUTER

    columns = [
        Column("NAME", key=True),
        Column("ENGINE", drop=4),
        Column("MODEL", key=True),
        Column("PORT", right=True),
        Column("STATUS"),
        Column("UPTIME", drop=3, right=True),
        Column("HEALTH", drop=1),
        Column("PROVEN", drop=5),
        *([Column("OWNER", drop=2)] if everyone else []),
    ]
    table = Rows(columns)
    shown = [(row, row is not top) for top in rows for row in (top, *top.members)]
    for row, is_member in shown:
        colour = {"healthy": "green", "loading": "yellow"}.get(row.health or "", "red")
        name = escape(row.name)
        if row.members:
            name += f" ({len(row.members)} replicas)"
        table.add(
            f"└ {name}" if is_member else name,
            "haproxy" if row.role == ROLE_ROUTER else _engine(row),
            "" if is_member else escape(row.model or "-"),
            str(row.port or "-"),
            escape(row.status),
            _uptime(row.uptime_s),
            f"[{colour}]{escape(row.health)}[/]" if row.health else "-",
            escape(_proven(row.verified)),
            *([escape(row.owner or "-") if not is_member else ""] if everyone else []),
        )
    return table


def _engine(row: Row) -> str:
    """How it runs, and the server when it is not the default one: ``docker sglang``."""
    from instinct_serve import servers

    return row.engine if row.server == servers.DEFAULT else f"{row.engine} {row.server}"


def _hidden(con: Console, hidden: int, ended: int) -> None:
    """The footer of ``ps``: how many endpoints are not shown, and the flag that shows them."""
    if ended:
        con.print(f"[dim]{plural(ended, 'stopped endpoint')} not shown: -a[/]")
    if hidden:
        con.print(
            f"[dim]{plural(hidden, 'endpoint')} of other users hidden (or with no owner): "
            "--everyone[/]"
        )


def _history(name: str, restarts: int, failure: dict[str, Any] | None) -> str:
    """``NAME: restarted 2 times; last failure exited at TIME: why``."""
    parts = [f"restarted {restarts} time{'s' if restarts != 1 else ''}"] if restarts else []
    if failure:
        why = f": {failure['why']}" if failure.get("why") else ""
        parts.append(f"last failure {failure['kind']} at {failure['at']}{why}")
    return f"{name}: " + "; ".join(parts)


def _survivors(name: str, survivors: list[dict[str, Any]]) -> str:
    """``NAME ended, but 2 of its processes still run: pid 1 (cmd); ...; `instinct stop NAME```."""
    listed = "; ".join(f"pid {s['pid']} ({s['command']})" for s in survivors)
    return (
        f"{name} ended, but {len(survivors)} of its processes still run: {listed}; "
        f"`instinct stop {name}` ends them"
    )


def _ps_groups(nodes: list[Host], probe: bool, as_json: bool, quiet: bool = False) -> int:
    from instinct_serve.cli.tables import Column, Rows
    from instinct_serve.runtime.multinode_groups import group_rows

    rows = group_rows(nodes, probe=probe)
    doc = {"hosts": [h.name for h in nodes], "groups": [r.to_dict() for r in rows]}
    if quiet and not as_json:
        sys.stdout.write("".join(f"{row.name}\n" for row in rows))
        return 0

    def human(con: Console) -> None:
        from rich.markup import escape

        if not rows:
            con.print("No multi-node groups on these hosts.")
            return
        table = Rows(
            [
                Column("NAME", key=True),
                Column("MODEL", key=True),
                Column("PORT", right=True),
                Column("STATUS"),
                Column("HEALTH"),
                Column("NODES", drop=1),
            ],
            "Multi-node groups",
        )
        for row in rows:
            where = ", ".join(f"{n['rank']}:{n['host']}" for n in row.nodes)
            table.add(
                escape(row.name),
                escape(row.model or "-"),
                str(row.port or "-"),
                escape(row.status),
                escape(row.health or "-"),
                escape(where),
            )
        table.print(con)

    emit(doc, as_json, human)
    return 0


def _proven(verified: dict[str, object] | None) -> str:
    """serve's warm-up and coherence probe of this instance ("-": never proven, e.g. a
    large model left loading: `instinct serve` the same plan again proves it)."""
    if not verified:
        return "-"
    warmup = verified.get("warmup_latency_s")
    parts = [str(verified.get("coherence") or "warmed up")]
    if isinstance(warmup, int | float):
        parts.append(f"warm-up {warmup:.1f} s")
    prints = verified.get("fingerprint")
    if isinstance(prints, dict) and prints.get("ok") is False:
        parts.append(f"fingerprint failed: {prints.get('failure')}")
    elif isinstance(prints, dict) and prints.get("last_passed_at"):
        parts.append(f"fingerprint passed {str(prints['last_passed_at'])[11:19]}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- logs


@click.command("logs")
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming new lines (Ctrl-C to stop).")
@click.option(
    "--tail",
    type=click.IntRange(min=0),
    default=200,
    show_default=True,
    help="Lines from the end to show first.",
)
@host_option
@hosts_option
@json_option
def logs(
    name: str,
    follow: bool,
    tail: int,
    host_spec: str | None,
    hosts_spec: str | None,
    as_json: bool,
) -> int:
    """Show an endpoint's log (a container's, or a native process's log file), with
    secret values (your tokens, the endpoint's API key) redacted.

    With --json: {"name", "engine", "lines": [...]}; with -f --json, one
    {"event": "log", "line": ...} object per line.
    """
    from instinct_serve.cli.multinode import hosts_of
    from instinct_serve.runtime.endpoints import find, read_log

    nodes = hosts_of(hosts_spec, host_spec)
    if nodes is not None:  # every rank's log, prefixed with its rank and host
        from instinct_serve.runtime.endpoints import log_redactor
        from instinct_serve.runtime.multinode_groups import group_logs

        redact = log_redactor(nodes[0], name)
        lines = [redact.text(line) for line in group_logs(nodes, name, tail)]
        if not lines:
            raise UsageError(
                f"no multi-node group named {name} on {', '.join(h.name for h in nodes)}",
                fix="list them with `instinct ps --hosts ...`",
                id="container_not_found",
            )
        if as_json:
            emit({"name": name, "engine": "docker", "lines": lines}, True)
        else:
            sys.stdout.write("".join(line + "\n" for line in lines))
        return 0
    host = get_host(host_spec)
    if follow:
        engine, found = find(host, name)
        return _follow(host, engine, found, tail, as_json)
    engine, text = read_log(host, name, tail)
    if as_json:
        emit({"name": name, "engine": engine, "lines": text.splitlines()}, True)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def _follow(host: Host, engine: str, found: Any, tail: int, as_json: bool) -> int:
    import json

    from instinct_serve.runtime.endpoints import log_redactor, passed_by_name
    from instinct_serve.runtime.follower import LogFollower

    redact = log_redactor(host, found.name, passed_by_name(found))  # as without -f, as MCP
    if engine == "docker":
        from instinct_serve.runtime.docker import Docker

        proc = Docker(host).follow(found.name, tail=tail)
    else:
        proc = host.spawn(["tail", "-n", str(tail), "-F", found.log_path])
    follower = LogFollower(proc)
    try:
        while not follower.ended:
            line = follower.get(1.0)
            if line is None:
                continue
            line = redact.text(line)
            if as_json:
                sys.stdout.write(json.dumps({"event": "log", "line": line}) + "\n")
            else:
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
    finally:
        follower.close()
    return 0


# --------------------------------------------------------------------------- stop


@click.command("stop")
@click.argument("names", nargs=-1)
@click.option("--all", "stop_all", is_flag=True, help="Stop every endpoint you started.")
@everyone_option
@yes_option
@host_option
@hosts_option
@json_option
def stop(
    names: tuple[str, ...],
    stop_all: bool,
    everyone: bool,
    yes: bool,
    host_spec: str | None,
    hosts_spec: str | None,
    as_json: bool,
) -> int:
    """Stop (and remove) endpoints instinct-serve started: NAME..., or --all of yours
    (--all --everyone: every user's). What will be stopped and removed (containers,
    processes, API keys, proof records; a replica group whole) is shown first and asked
    about; --yes answers for you, and without a terminal nothing happens without it.
    Containers it did not start are refused, whatever their name; each name is reported."""
    if not names and not stop_all:
        raise UsageError(
            "name an endpoint to stop, or pass --all",
            fix="list them with `instinct ps`",
            id="bad_input",
        )
    if names and stop_all:
        raise UsageError("give names or --all, not both", id="bad_input")
    if everyone and not stop_all:
        raise UsageError("--everyone goes with --all", fix="add --all", id="bad_input")
    from instinct_serve.cli.multinode import hosts_of
    from instinct_serve.runtime import endpoints
    from instinct_serve.runtime.confirm import stop_selection

    nodes = hosts_of(hosts_spec, host_spec)
    if nodes is not None:
        return _stop_groups(nodes, names, stop_all, yes, as_json)
    host = get_host(host_spec)
    chosen = stop_selection(host, names, everyone=everyone)
    confirm_change(chosen.change, yes, "Stop and remove them?")
    doc = endpoints.stop_each(host, chosen.names, chosen.change.skipped)
    stopped, failed = doc["stopped"], doc["not_stopped"]

    def human(con: Console) -> None:
        from rich.markup import escape

        if not stopped and not failed:
            con.print(f"Nothing of yours to stop on {escape(host.name)}.")
        for item in stopped:
            model = f" ({escape(str(item['model']))})" if item.get("model") else ""
            con.print(_stopped_line(item).format(name=escape(item["name"]) + model))
            for member in item.get("members", []):
                role = escape(str(member["role"]))
                con.print(f"    stopped and removed {escape(member['name'])} ({role})")
        for item in failed:
            con.print(f"[red]✗[/] {escape(item['name'])}: {escape(item['message'])}")

    emit(doc, as_json, human)
    return 1 if failed else 0


def _stopped_line(item: dict[str, Any]) -> str:
    """What ``stop`` did to one endpoint (``{name}`` left to fill in): stopped, removed, or
    found already stopped (then only what it left running was ended)."""
    if item.get("was_running") is False:
        left = len(item.get("processes") or [])
        ended = f"; ended {plural(left, 'process')} it left running" if left else ""
        removed = "; removed" if item.get("removed") else ""
        return f"[dim]·[/] {{name}} was already stopped{removed}{ended}"
    what = "stopped and removed" if item.get("removed") else "stopped"
    return f"[green]✓[/] {what} {{name}}"


def _stop_groups(
    nodes: list[Host], names: tuple[str, ...], stop_all: bool, yes: bool, as_json: bool
) -> int:
    """Every rank of each named group (or of every group with --all), on every node."""
    from instinct_serve.runtime.confirm import Change, Item
    from instinct_serve.runtime.multinode_groups import group_rows, stop_group

    rows = group_rows(nodes, probe=False)
    wanted = [r.name for r in rows] if stop_all else list(names)
    ranks = [
        Item("rank", f"{row.name} rank {n['rank']} on {n['host']}", None, None, row.model, row.port)
        for row in rows
        if row.name in wanted
        for n in row.nodes
    ]
    where = ", ".join(h.name for h in nodes)
    confirm_change(Change("stop", where, tuple(ranks)), yes, "Stop and remove them?")
    stopped = []
    for name in wanted:
        found = stop_group(nodes, name)
        if not found and not stop_all:
            raise UsageError(
                f"no multi-node group named {name} on {where}",
                fix="list them with `instinct ps --hosts ...`",
                id="container_not_found",
            )
        stopped += found
    doc = {"hosts": [h.name for h in nodes], "stopped": stopped}

    def human(con: Console) -> None:
        from rich.markup import escape

        if not stopped:
            con.print("Nothing to stop.")
        for item in stopped:
            con.print(f"[green]✓[/] stopped and removed {escape(item['name'])} on {item['host']}")

    emit(doc, as_json, human)
    return 0
