"""Fill what the answering tool left out with what sysfs knows (pure).

A tool can answer with gaps: rocm-smi's product query without VRAM, amd-smi without used
memory, a mangled gfx. And on a partitioned GPU (CPX, ...) the tools may report the whole
device's VRAM for every partition (ROCm/ROCm#4750) while KFD's memory banks hold each
partition's share, which is what HIP, and so vLLM, can use.
"""

from __future__ import annotations

from dataclasses import replace

from instinct_serve.hardware.inventory import Gpu
from instinct_serve.hardware.values import is_partitioned


def needs_sysfs(gpus: list[Gpu]) -> bool:
    """Whether reading sysfs could add anything to these GPUs."""
    return any(
        g.gfx_version == "unknown"
        or g.vram_total_bytes is None
        or g.vram_used_bytes is None
        or is_partitioned(g.partition)
        for g in gpus
    )


def pair(primary: list[Gpu], secondary: list[Gpu]) -> list[tuple[Gpu, Gpu | None]]:
    """Match GPUs by PCI address when every one has a distinct one, else by order."""
    by_bdf = {g.bdf: g for g in secondary if g.bdf}
    bdfs = [g.bdf for g in primary]
    if (
        all(bdfs)
        and len(set(bdfs)) == len(bdfs)
        and len(by_bdf) == len(secondary)
        and all(b in by_bdf for b in bdfs)
    ):
        return [(g, by_bdf[g.bdf]) for g in primary if g.bdf]
    if len(primary) == len(secondary):
        return list(zip(primary, secondary, strict=True))
    return [(g, None) for g in primary]


def fill(primary: list[Gpu], secondary: list[Gpu]) -> tuple[list[Gpu], list[str]]:
    """``primary`` with its gaps filled from ``secondary``, and notes on what changed."""
    out: list[Gpu] = []
    filled: set[str] = set()
    shrunk = 0
    for gpu, other in pair(primary, secondary):
        if other is None:
            out.append(gpu)
            continue
        new = gpu
        if new.gfx_version == "unknown" and other.gfx_version != "unknown":
            new = replace(new, gfx_version=other.gfx_version)
            filled.add("gfx")
        if new.vram_total_bytes is None and other.vram_total_bytes:
            new = replace(new, vram_total_bytes=other.vram_total_bytes)
            filled.add("VRAM")
        if new.vram_used_bytes is None and other.vram_used_bytes is not None:
            new = replace(new, vram_used_bytes=other.vram_used_bytes)
            filled.add("used VRAM")
        if new.bdf is None and other.bdf:
            new = replace(new, bdf=other.bdf)
        if new.partition is None and other.partition:
            new = replace(new, partition=other.partition)
        if new.compute_units is None and other.compute_units:
            new = replace(new, compute_units=other.compute_units)
        if (
            is_partitioned(new.partition)
            and other.vram_total_bytes
            and new.vram_total_bytes
            and other.vram_total_bytes < new.vram_total_bytes
        ):
            new = replace(new, vram_total_bytes=other.vram_total_bytes)
            shrunk += 1
        out.append(new)
    notes = []
    if filled:
        notes.append(f"{', '.join(sorted(filled))} taken from sysfs")
    if shrunk:
        mode = next((g.partition for g in out if is_partitioned(g.partition)), "")
        notes.append(
            f"GPUs are partitioned ({mode}): per-partition VRAM of {shrunk} GPU(s) taken "
            "from the KFD topology"
        )
    return out, notes
