"""Named GPU profiles (``--gpu mi300x``): plan and fit without touching the hardware.

VRAM is what the driver reports per GPU (amd-smi's "MB" are MiB), not the marketing figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from instinct_serve.errors import UsageError
from instinct_serve.hardware.inventory import Gpu, GpuInventory

MIB = 2**20


@dataclass(frozen=True)
class GpuProfile:
    key: str
    market_name: str
    gfx_version: str
    vram_mib: int
    default_count: int
    source: str  # where the VRAM figure comes from

    @property
    def vram_bytes(self) -> int:
        return self.vram_mib * MIB

    def inventory(self, count: int | None = None) -> GpuInventory:
        n = count or self.default_count
        if n < 1:
            raise UsageError("--gpu-count must be at least 1", id="bad_gpu_count")
        gpus = [
            Gpu(
                index=i,
                name=self.market_name,
                market_name=self.market_name,
                gfx_version=self.gfx_version,
                vram_total_bytes=self.vram_bytes,
            )
            for i in range(n)
        ]
        return GpuInventory(gpus=gpus, source="profile")


PROFILES: dict[str, GpuProfile] = {
    p.key: p
    for p in [
        GpuProfile(
            "mi300x",
            "AMD Instinct MI300X",
            "gfx942",
            196592,
            8,
            "amd-smi 26.0.0 on 8x MI300X: 196592 MB (MiB) per GPU",
        ),
        GpuProfile(
            "mi325x", "AMD Instinct MI325X", "gfx942", 262144, 8, "256 GiB HBM3E per GPU (AMD spec)"
        ),
        GpuProfile(
            "mi300a",
            "AMD Instinct MI300A",
            "gfx942",
            131072,
            4,
            "128 GiB unified HBM3 per APU (AMD spec); the GPU shares it with the CPU",
        ),
        GpuProfile(
            "mi350x", "AMD Instinct MI350X", "gfx950", 294912, 8, "288 GiB HBM3E per GPU (AMD spec)"
        ),
        GpuProfile(
            "mi355x", "AMD Instinct MI355X", "gfx950", 294912, 8, "288 GiB HBM3E per GPU (AMD spec)"
        ),
        GpuProfile(
            "mi250x",
            "AMD Instinct MI250X",
            "gfx90a",
            65536,
            8,
            "64 GiB per GCD; an MI250X OAM shows as two GPUs",
        ),
        GpuProfile("mi210", "AMD Instinct MI210", "gfx90a", 65536, 1, "64 GiB HBM2e, PCIe card"),
    ]
}


def get_profile(name: str) -> GpuProfile:
    key = name.strip().lower().replace("-", "").replace("_", "").replace("instinct", "")
    if key in PROFILES:
        return PROFILES[key]
    raise UsageError(
        f"unknown GPU profile {name!r}",
        fix="use one of: " + ", ".join(PROFILES),
        id="unknown_gpu_profile",
    )
