"""The GPU inventory every later step reads (fit, plan, serve).

Memory is kept in exact bytes; JSON carries both ``*_gb`` (10^9 bytes, the unit of file
sizes) and ``*_gib`` (2^30 bytes, the unit vLLM logs and amd-smi's "MB" really are), so the
two are never mixed. AMD markets the MI300X as "192 GB": that is 192 GiB = 206.1 GB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GB = 10**9
GIB = 2**30


def gb(n_bytes: int | float) -> float:
    return round(n_bytes / GB, 2)


def gib(n_bytes: int | float) -> float:
    return round(n_bytes / GIB, 2)


@dataclass
class Gpu:
    """One GPU (or one partition of one, as the driver exposes it)."""

    index: int
    name: str
    gfx_version: str
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    bdf: str | None = None
    partition: str | None = None  # e.g. "SPX/NPS1", "CPX"
    market_name: str | None = None
    compute_units: int | None = None  # this device's (a partition's share when partitioned)

    def to_dict(self) -> dict[str, Any]:
        total, used = self.vram_total_bytes, self.vram_used_bytes
        return {
            "index": self.index,
            "name": self.name,
            "market_name": self.market_name or self.name,
            "gfx_version": self.gfx_version,
            "vram_total_gb": gb(total) if total is not None else None,
            "vram_total_gib": gib(total) if total is not None else None,
            "vram_used_gb": gb(used) if used is not None else None,
            "vram_used_gib": gib(used) if used is not None else None,
            "bdf": self.bdf,
            "partition": self.partition,
            "compute_units": self.compute_units,
        }


@dataclass
class GpuInventory:
    """What is on the host. ``gfx_version`` is ``mixed`` when GPUs differ, ``unknown`` if none."""

    gpus: list[Gpu] = field(default_factory=list)
    rocm_version: str | None = None
    source: str = "none"  # amd-smi | rocm-smi | rocminfo | sysfs | profile | none
    warnings: list[str] = field(default_factory=list)
    hint: str | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def mixed(self) -> bool:
        """GPUs differ in gfx target or VRAM size (an unknown size is not a difference)."""
        sizes = {g.vram_total_bytes for g in self.gpus if g.vram_total_bytes is not None}
        return len({g.gfx_version for g in self.gpus}) > 1 or len(sizes) > 1

    @property
    def gfx_version(self) -> str:
        kinds = {g.gfx_version for g in self.gpus}
        if not kinds:
            return "unknown"
        return kinds.pop() if len(kinds) == 1 else "mixed"

    @property
    def vram_bytes(self) -> int | None:
        """VRAM per GPU: the smallest GPU's, since a TP group runs at its pace."""
        sizes = [g.vram_total_bytes for g in self.gpus if g.vram_total_bytes]
        return min(sizes) if sizes else None

    def to_dict(self) -> dict[str, Any]:
        per_gpu = self.vram_bytes
        return {
            "gfx_version": self.gfx_version,
            "vram_gb": gb(per_gpu) if per_gpu else None,
            "vram_gib": gib(per_gpu) if per_gpu else None,
            "gpu_count": self.gpu_count,
            "rocm_version": self.rocm_version,
            "mixed": self.mixed,
            "gpus": [g.to_dict() for g in self.gpus],
            "source": self.source,
            "warnings": list(self.warnings),
            "hint": self.hint,
        }
