"""``instinct partition``: the GPUs' partition mode (CPX, NPS4...) and the exact commands
that change it. ``show`` reads it; ``set MODE`` prints the ``amd-smi`` commands and runs them
only with ``--yes`` (through the host: root, or ``sudo -n``). The work is
``gather.partitions``; the facts are ``hardware.partitions``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from instinct_serve.cli.common import emit, get_host, host_option, json_option, warn
from instinct_serve.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.gather.partitions import Change, Survey

SYSFS_HELP = "Read /sys and /opt/rocm under this directory on the host (tests, chroots)."


@click.group("partition")
def partition() -> None:
    """GPU partition modes: show them, or change them (printed; run only with --yes)."""


@partition.command("show")
@json_option
@host_option
@click.option("--sysfs-root", default="/", show_default=True, metavar="DIR", help=SYSFS_HELP)
def show(as_json: bool, host_spec: str | None, sysfs_root: str) -> int:
    """The current mode, the logical GPUs, and every mode with the commands to reach it."""
    from instinct_serve.gather.partitions import survey

    found = survey(get_host(host_spec), sysfs_root=sysfs_root)
    emit(found.to_dict(), as_json, lambda con: _render_survey(con, found))
    return int(ExitCode.OK)


@partition.command("set")
@click.argument("mode", metavar="MODE")
@click.option(
    "--memory",
    metavar="NPS",
    default=None,
    help="Memory mode (NPS1, NPS2, NPS4); default: AMD's pairing for MODE (CPX: NPS4 on MI300X).",
)
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Run the commands on the host (stop all GPU work first). Without it they are printed.",
)
@json_option
@host_option
@click.option("--sysfs-root", default="/", show_default=True, metavar="DIR", help=SYSFS_HELP)
def set_mode(
    mode: str,
    memory: str | None,
    yes: bool,
    as_json: bool,
    host_spec: str | None,
    sysfs_root: str,
) -> int:
    """Change the GPUs to MODE (SPX, DPX, TPX, QPX, CPX; or CPX/NPS4).

    Prints the amd-smi commands, in an order where every mode on the way is valid; with
    --yes runs them on the host (as root, or sudo -n). A memory (NPS) change applies to
    every GPU and reloads the amdgpu driver: every GPU process, containers included, must
    have stopped first.
    """
    from instinct_serve.gather.partitions import apply, plan_change, survey

    if "/" in mode and memory is None:
        mode, memory = mode.split("/", 1)
    host = get_host(host_spec)
    change = plan_change(survey(host, sysfs_root=sysfs_root), mode, memory)
    if yes and change.steps:
        change = apply(host, change)
    emit(change.to_dict(), as_json, lambda con: _render_change(con, change))
    if change.failed:
        warn(f"failed: {change.failed}", as_json=as_json)
        return int(ExitCode.FAILED)
    return int(ExitCode.OK)


def _render_survey(con: Console, found: Survey) -> None:
    from rich.markup import escape

    where = found.layout
    name = where.product.market_name if where.product is not None else "GPU"
    con.print(
        f"{escape(found.host)}: {where.physical_gpus}x {escape(name)}, "
        f"{where.mode.label if where.mode else 'mode not reported'}"
        + (f", {where.per_gpu} logical GPUs each" if where.partitioned else "")
    )
    for note in where.notes:
        warn(note)
    modes = found.modes()
    if not modes:
        con.print("these GPUs have no partition modes")
        return
    from instinct_serve.cli.tables import Column, Rows

    table = Rows(
        [
            Column(""),
            Column("MODE", key=True),
            Column("LOGICAL GPUS", right=True),
            Column("MEMORY EACH", right=True),
        ]
    )
    for row in modes:
        mem = row["memory_per_device_gib"]
        table.add(
            "[green]now[/]" if row["current"] else "",
            row["mode"],
            str(row["logical_gpus"]),
            f"{mem:g} GiB" if mem else "?",
        )
    table.print(con)
    for row in modes:
        if row["commands"]:
            con.print(f"to switch to {row['mode']}:  instinct partition set {row['mode']} --yes")
            for line in row["commands"]:
                con.print(f"  {line}", markup=False, soft_wrap=True)


def _render_change(con: Console, change: Change) -> None:
    if not change.steps:
        con.print(f"{change.host} is already in {change.target}: nothing to do")
        return
    con.print(
        f"{change.host}: {change.current or 'mode not reported'} -> {change.target}"
        + ("" if change.applied else " (not run: add --yes to run these)")
    )
    ran = {r["command"]: r for r in change.ran}
    for step in change.steps:
        done = ran.get(step.shell)
        mark = "" if done is None else ("[green]ok[/] " if done["ok"] else "[red]failed[/] ")
        con.print(f"  {mark}", end="")
        con.print(step.shell, markup=False, soft_wrap=True)
        con.print(f"      [dim]{step.why}[/]")
        if done is not None and not done["ok"] and done["output"]:
            con.print(f"      {done['output']}", markup=False)
