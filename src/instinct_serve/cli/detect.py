"""``instinct detect``: the GPUs of a host (local or ``--host user@h``).

The ``--json`` path imports no rich (nor pydantic/httpx): agents call it often.
Exit 0 when GPUs this tool serves are found, 3 (environment not ready) when none are or
they are not Instinct GPUs it serves (``supported`` false, with ``support``: what they are
and what to do); the document is printed either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from instinct_serve.cli.common import emit, get_host, host_option, json_option
from instinct_serve.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from instinct_serve.hardware.inventory import GpuInventory


@click.command("detect")
@json_option
@host_option
@click.option(
    "--sysfs-root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Read /sys and /opt/rocm under this directory on the host (tests, chroots).",
)
def detect(as_json: bool, host_spec: str | None, sysfs_root: str) -> int:
    """Detect the AMD GPUs of the host: gfx target, VRAM, count, ROCm version.

    Asks amd-smi, then rocm-smi, then rocminfo, then the kernel's sysfs, falling through
    when a tool is missing, fails or hangs (the reasons are printed as warnings).
    Exit status 3 when no GPU is found.
    """
    from instinct_serve.gather.detect import detect as detect_gpus

    host = get_host(host_spec)
    inventory = detect_gpus(host, sysfs_root=sysfs_root)
    from instinct_serve.hardware.scope import document, scope_of

    emit(document(inventory), as_json, lambda con: render(con, inventory, host.name))
    # GPUs this tool does not serve (a consumer Radeon, an old Instinct) are not "ready"
    return int(ExitCode.OK if scope_of(inventory).supported else ExitCode.NOT_READY)


def vram_text(n_bytes: int | None) -> str:
    """``192 GiB (206.1 GB)``: GiB is what vLLM logs, GB what the spec sheet says."""
    if n_bytes is None:
        return "?"
    return f"{n_bytes / 2**30:.3g} GiB ({n_bytes / 10**9:.1f} GB)"


def summary(inventory: GpuInventory) -> str:
    """One line: ``8 x AMD Instinct MI300X (gfx942), 192 GiB (206.1 GB) each; ROCm 7.0.0``."""
    if not inventory.gpus:
        return "No AMD GPU found."
    groups: dict[tuple[str, str], int] = {}
    for gpu in inventory.gpus:
        groups[(gpu.name, gpu.gfx_version)] = groups.get((gpu.name, gpu.gfx_version), 0) + 1
    kinds = ", ".join(f"{n} x {name} ({gfx})" for (name, gfx), n in groups.items())
    vram = vram_text(inventory.vram_bytes)
    if inventory.mixed:
        text = f"{inventory.gpu_count} GPUs, mixed: {kinds}; smallest VRAM {vram}"
    else:
        text = f"{kinds}, {vram} each"
    rocm = inventory.rocm_version or "unknown"
    return f"{text}; ROCm {rocm}; source: {inventory.source}"


def render(con: Console, inventory: GpuInventory, host_name: str) -> None:
    """A table per host (one row per GPU), the summary, then warnings and hint on stderr."""
    from rich.markup import escape

    from instinct_serve.cli.common import warn
    from instinct_serve.cli.tables import Column, Rows

    if inventory.gpus:
        table = Rows(
            [
                Column("#", right=True),
                Column("NAME", key=True),
                Column("GFX"),
                Column("VRAM TOTAL", right=True),
                Column("VRAM USED", right=True, drop=2),
                Column("PCI", key=True, drop=1),
                Column("PARTITION", drop=3),
            ],
            f"GPUs on {host_name}",
        )
        for gpu in inventory.gpus:
            table.add(
                str(gpu.index),
                escape(gpu.name),
                gpu.gfx_version,
                vram_text(gpu.vram_total_bytes),
                vram_text(gpu.vram_used_bytes) if gpu.vram_used_bytes is not None else "?",
                gpu.bdf or "",
                gpu.partition or "",
            )
        table.print(con)
    con.print(summary(inventory), markup=False)
    for message in inventory.warnings:
        warn(message)
    if inventory.hint:
        warn(inventory.hint)
    if inventory.gpus:
        from instinct_serve.hardware.scope import scope_of

        scope = scope_of(inventory)
        if not scope.supported:
            warn(f"{scope.message}; {scope.fix}")
