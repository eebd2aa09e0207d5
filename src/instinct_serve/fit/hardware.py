"""Which GPUs to fit on: a named profile, VRAM and count given by hand, or detection.

Shared by ``instinct fit`` and the MCP ``fit`` tool. The host is only reached (through
``host()``) when neither a profile nor VRAM and count are given.
"""

from __future__ import annotations

from collections.abc import Callable

from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.fit.estimate import HardwareSpec
from instinct_serve.hosts import Host


def fit_hardware(
    gpu: str | None,
    vram_gb: float | None,
    vram_gib: float | None,
    gpu_count: int | None,
    host: Callable[[], Host],
    sysfs_root: str = "/",
) -> tuple[HardwareSpec, list[str]]:
    """The hardware spec and the warnings about it (mixed GPUs are fitted on the smallest)."""
    if vram_gb is not None and vram_gib is not None:
        raise UsageError("give --vram-gb or --vram-gib, not both", id="bad_vram")
    manual = int(vram_gb * 10**9) if vram_gb is not None else None
    if vram_gib is not None:
        manual = int(vram_gib * 2**30)
    if gpu is not None:
        from instinct_serve.hardware.profiles import get_profile

        profile = get_profile(gpu)
        hw = HardwareSpec.from_inventory(profile.inventory(gpu_count), source="profile")
        if manual is not None:
            hw = HardwareSpec(manual, hw.gpu_count, hw.gfx_version, hw.name, "profile+manual")
        return hw, []
    if manual is not None and gpu_count is not None:
        return HardwareSpec(manual, gpu_count, None, "GPU", "manual"), []
    from instinct_serve.hardware.detect import detect

    target = host()
    inventory = detect(target, sysfs_root=sysfs_root)
    if inventory.gpus:
        hw = HardwareSpec.from_inventory(inventory, source=f"detect ({inventory.source})")
        notes = ["GPUs differ; fitting against the smallest"] if inventory.mixed else []
        spec = HardwareSpec(
            manual or hw.vram_bytes,
            gpu_count or hw.gpu_count,
            hw.gfx_version,
            hw.name,
            hw.source + ("+manual" if manual or gpu_count else ""),
        )
        return spec, notes
    if manual is not None:
        return HardwareSpec(manual, 1, None, "GPU", "manual"), []
    raise NotReadyError(
        f"no AMD GPU found on {target.name} to fit against",
        fix="pass --gpu mi300x (or mi325x, mi355x, mi250x, ...) or --vram-gb with --gpu-count",
        id="no_gpu_to_fit",
    )
