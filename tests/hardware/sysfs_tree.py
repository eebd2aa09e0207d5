"""Build a temporary sysfs root (KFD topology + DRM devices) shaped like the real one.

Real layout: ``/sys/class/kfd/kfd/topology/nodes/<n>/properties`` ("key value" lines, CPU
nodes with ``simd_count 0``), ``nodes/<n>/mem_banks/<m>/properties``, and
``/sys/class/drm/{card<k>,renderD<minor>}/device`` symlinks to one PCI device directory
holding ``uevent``, ``vendor``, ``device``, ``mem_info_vram_{total,used}`` and, on MI300
and later, ``current_{compute,memory}_partition``. The property names and values follow
``tests/fixtures/smi/kfd_topology_properties_excerpts.txt``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

MIB = 2**20


@dataclass
class GpuSpec:
    """One GPU (or partition) as the kernel shows it."""

    gfx_target_version: int
    device_id: int
    bdf: str
    render_minor: int
    vram_bytes: int
    vram_used_bytes: int = 0
    simd_count: int = 1216
    card: int | None = None  # DRM card number; None: render node only
    compute_partition: str | None = None
    memory_partition: str | None = None
    bank_bytes: int | None = None  # KFD mem_banks size; default: vram_bytes
    extra: dict[str, int] = field(default_factory=dict)


def _location(bdf: str) -> tuple[int, int]:
    domain, bus, devfn = bdf.split(":")
    dev, fn = devfn.split(".")
    return int(domain, 16), int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn)


def build(root: Path, gpus: list[GpuSpec], cpu_nodes: int = 1) -> Path:
    """Write the tree under ``root`` (CPU nodes first, as on real hosts); returns ``root``."""
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    drm = root / "sys/class/drm"
    drm.mkdir(parents=True, exist_ok=True)
    node_id = 0
    for _ in range(cpu_nodes):
        _write_node(
            nodes / str(node_id),
            {
                "cpu_cores_count": 48,
                "simd_count": 0,
                "mem_banks_count": 1,
                "gfx_target_version": 0,
                "vendor_id": 0,
                "device_id": 0,
                "location_id": 0,
                "domain": 0,
                "drm_render_minor": 0,
            },
            bank=(0, 1_188_729_676 * 1024),
        )
        node_id += 1
    for gpu in gpus:
        domain, location = _location(gpu.bdf)
        props = {
            "cpu_cores_count": 0,
            "simd_count": gpu.simd_count,
            "mem_banks_count": 1,
            "max_waves_per_simd": 8,
            "wave_front_size": 64,
            "array_count": 32,
            "simd_arrays_per_engine": 1,
            "cu_per_simd_array": 10,
            "simd_per_cu": 4,
            "gfx_target_version": gpu.gfx_target_version,
            "vendor_id": 4098,
            "device_id": gpu.device_id,
            "location_id": location,
            "domain": domain,
            "drm_render_minor": gpu.render_minor,
            "num_xcc": 8,
            "local_mem_size": 0,
            **gpu.extra,
        }
        bank = gpu.bank_bytes if gpu.bank_bytes is not None else gpu.vram_bytes
        _write_node(nodes / str(node_id), props, bank=(1, bank))
        node_id += 1

        pci = root / "sys/devices/pci0000:00" / f"{gpu.bdf}-r{gpu.render_minor}"
        pci.mkdir(parents=True, exist_ok=True)
        (pci / "uevent").write_text(
            f"DRIVER=amdgpu\nPCI_CLASS=12000\nPCI_ID=1002:{gpu.device_id:04X}\n"
            f"PCI_SLOT_NAME={gpu.bdf}\nMODALIAS=pci:v00001002d0000{gpu.device_id:04X}\n"
        )
        (pci / "vendor").write_text("0x1002\n")
        (pci / "device").write_text(f"0x{gpu.device_id:04x}\n")
        (pci / "mem_info_vram_total").write_text(f"{gpu.vram_bytes}\n")
        (pci / "mem_info_vram_used").write_text(f"{gpu.vram_used_bytes}\n")
        if gpu.compute_partition:
            (pci / "current_compute_partition").write_text(gpu.compute_partition + "\n")
        if gpu.memory_partition:
            (pci / "current_memory_partition").write_text(gpu.memory_partition + "\n")
        links = [f"renderD{gpu.render_minor}"]
        if gpu.card is not None:
            links.append(f"card{gpu.card}")
        for name in links:
            (drm / name).mkdir(exist_ok=True)
            (drm / name / "device").symlink_to(pci)
    return root


def _write_node(path: Path, props: dict[str, int], bank: tuple[int, int]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "properties").write_text("".join(f"{k} {v}\n" for k, v in props.items()))
    bank_dir = path / "mem_banks" / "0"
    bank_dir.mkdir(parents=True, exist_ok=True)
    heap_type, size = bank
    (bank_dir / "properties").write_text(
        f"heap_type {heap_type}\nsize_in_bytes {size}\nflags 0\nwidth 8192\nmem_clk_max 1300\n"
    )


def mi300x(i: int, **overrides: object) -> GpuSpec:
    """MI300X number ``i`` of an 8-GPU host (gfx942, 196592 MiB)."""
    bdfs = ["0c", "22", "38", "5c", "9f", "af", "bf", "df"]
    spec = GpuSpec(
        gfx_target_version=90402,
        device_id=0x74A1,
        bdf=f"0000:{bdfs[i % 8]}:00.0",
        render_minor=128 + i,
        vram_bytes=196592 * MIB,
        vram_used_bytes=4976 * MIB,
        card=i + 1,
        compute_partition="SPX",
        memory_partition="NPS1",
    )
    for key, value in overrides.items():
        setattr(spec, key, value)
    return spec


def mi355x(i: int) -> GpuSpec:
    """MI355X number ``i`` (gfx950, 294896 MiB)."""
    return GpuSpec(
        gfx_target_version=90500,
        device_id=0x75A3,
        bdf=f"0000:{0x05 + 0x10 * i:02x}:00.0",
        render_minor=128 + i,
        vram_bytes=294896 * MIB,
        vram_used_bytes=283 * MIB,
        simd_count=1024,
        card=i + 1,
        compute_partition="SPX",
        memory_partition="NPS1",
    )


def radeon_7900xt(i: int = 0) -> GpuSpec:
    """A consumer Radeon RX 7900 XT (gfx1100, 20 GiB): detected, but not served."""
    return GpuSpec(
        gfx_target_version=110000,
        device_id=0x744C,
        bdf=f"0000:{0x03 + i:02x}:00.0",
        render_minor=128 + i,
        vram_bytes=20464 * MIB,
        simd_count=168,
        card=i,
    )


def partitioned(
    gpu: GpuSpec, count: int, compute: str, memory: str, first_minor: int
) -> list[GpuSpec]:
    """The ``count`` logical GPUs one physical GPU shows in a compute mode: one KFD node and
    render node each (minors in a row, as HIP numbers them), the same PCI function, 1/count
    of the memory banks and of the SIMDs; the DRM device still reports the whole GPU's
    ``mem_info_vram_total`` (ROCm issue 4750: KFD shows the share)."""
    return [
        replace(
            gpu,
            render_minor=first_minor + i,
            card=first_minor + i - 127,
            compute_partition=compute,
            memory_partition=memory,
            bank_bytes=gpu.vram_bytes // count,
            simd_count=gpu.simd_count // count,
        )
        for i in range(count)
    ]
