"""``instinct check``: can this host serve? Docker, devices, groups, env, HF token, disk, port.

Exit 0 when no check fails (warnings allowed), 3 when the host is not ready. ``--auto-fix``
applies the safe fixes of ``checks.fixes``; root-only ones need ``--yes`` as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from instinct_serve.cli.common import emit, get_host, host_option, json_option, print_wrapped
from instinct_serve.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.checks import CheckReport

_MARK = {
    "ok": "[green]✓[/]",
    "warn": "[yellow]![/]",
    "error": "[red]✗[/]",
    "skip": "[dim]-[/]",
}
_PLAIN = {"ok": "✓", "warn": "!", "error": "✗", "skip": "-"}


def render(report: CheckReport, auto_fix: bool) -> Callable[[Console], None]:
    """The human view: one row per check, then what to do and what was done."""

    def show(con: Console) -> None:
        from rich.markup import escape
        from rich.table import Table

        from instinct_serve.cli.tables import Column, Rows

        table = Rows(
            [Column(""), Column("CHECK", key=True), Column("RESULT", prose=True)],
            f"instinct check: {report.host}",
        )
        for check in report.checks:
            message = escape(check.message)
            table.add(
                _MARK[check.status],
                check.id,
                f"[dim]{message}[/]" if check.status == "skip" else message,
            )
        table.print(con)
        todo = [c for c in report.checks if c.status in ("error", "warn") and c.fix]
        if todo:
            con.print("\n[bold]To fix:[/]")
            for check in todo:
                print_wrapped(
                    con,
                    check.fix or "",
                    indent="     ",
                    first=f" {_PLAIN[check.status]} {check.id}: ",
                )
        for title, items in (
            ("Fixes applied", report.fixes_applied),
            ("Fixes that failed", report.fixes_failed),
            ("Fixes that need --yes (root)", report.fixes_pending),
        ):
            if items:
                con.print(f"\n[bold]{title}:[/]")
                grid = Table.grid(padding=(0, 1))
                grid.add_column(no_wrap=True)
                grid.add_column()
                for fix in items:
                    grid.add_row(
                        f"  {fix.id}:", f"[cyan]{escape(fix.command)}[/]  {escape(fix.message)}"
                    )
                con.print(grid)
        fixable = [c.id for c in report.checks if c.fixable]
        if fixable and not auto_fix:
            con.print(
                f"\n{len(fixable)} of these can be fixed safely: "
                "[cyan]instinct check --auto-fix[/] (add --yes for the ones needing root)"
            )
        if report.ready:
            warn = f" ({len(report.warnings)} warnings)" if report.warnings else ""
            con.print(f"\n[green]Ready to serve on {escape(report.host)}[/]{warn}")
        else:
            n = len(report.errors)
            con.print(f"\n[red]Not ready: {n} error{'s' if n != 1 else ''}[/]")

    return show


@click.command()
@click.option(
    "--auto-fix",
    is_flag=True,
    help="Apply the safe, reversible fixes (listed in the report); root ones need --yes.",
)
@click.option(
    "--yes", "-y", is_flag=True, help="Allow --auto-fix to run fixes that need root (sudo -n)."
)
@click.option(
    "--model",
    metavar="MODEL_ID",
    default=None,
    help="The model to serve: a missing HF token is an error when it is gated.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Check that this TCP port is free on the host.",
)
@click.option(
    "--hf-cache",
    metavar="DIR",
    default=None,
    help="The Hugging Face hub cache on the host (default: HF_HUB_CACHE, HF_HOME/hub, "
    "~/.cache/huggingface/hub).",
)
@click.option(
    "--need-gb",
    type=click.FloatRange(min=0),
    default=None,
    help="Free GB (10^9 bytes) the download needs in the HF cache (below: error).",
)
@click.option("--root", default="", hidden=True, help="Prefix for /dev, /proc, /sys (tests).")
@host_option
@json_option
def check(
    auto_fix: bool,
    yes: bool,
    model: str | None,
    port: int | None,
    hf_cache: str | None,
    need_gb: float | None,
    root: str,
    host_spec: str | None,
    as_json: bool,
) -> int:
    """Check that the host can serve: Docker, GPU devices and groups, environment,
    HF token and cache disk, port. Exit 0 when ready, 3 when not.

    \b
    instinct check
    instinct check --host user@gpu-box --model Qwen/Qwen3.5-9B --port 8000
    instinct check --auto-fix --yes
    """
    from instinct_serve.checks import CheckOptions, run_checks
    from instinct_serve.checks.hub import model_is_gated

    host = get_host(host_spec)
    options = CheckOptions(
        model=model,
        model_gated=model_is_gated(model) if model else None,
        port=port,
        hf_cache=hf_cache,
        need_gb=need_gb,
        root=root,
        auto_fix=auto_fix,
        yes=yes,
    )
    report = run_checks(host, options)
    emit(report, as_json, render(report, auto_fix))
    return int(ExitCode.OK if report.ready else ExitCode.NOT_READY)
