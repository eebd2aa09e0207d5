"""GPUs from the kernel's own view: KFD topology nodes and DRM devices under /sys.

Works without any ROCm tool installed. ``DUMP_SCRIPT`` prints every file needed in one
command (one round trip over ssh instead of dozens); ``parse_dump`` splits that output back
into ``path -> text`` and ``parse`` turns the files into GPUs:

- ``/sys/class/kfd/kfd/topology/nodes/N/properties``: ``gfx_target_version 90402`` (gfx942),
  ``simd_count`` (0 on CPU nodes), ``device_id``, ``location_id``/``domain`` (the PCI
  address), ``drm_render_minor`` (the matching ``/dev/dri/renderD<minor>``);
- ``nodes/N/mem_banks/M/properties``: ``heap_type`` 1/2 = device memory, ``size_in_bytes``.
  This is the size HIP reports, right for compute partitions and APUs, where
  ``mem_info_vram_total`` shows the whole device or the BIOS carve-out;
- ``/sys/class/drm/{renderD*,card*}/device/``: ``mem_info_vram_{total,used}``, ``uevent``
  (``PCI_SLOT_NAME``), ``current_{compute,memory}_partition``, ``product_name``, ``device``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from instinct_serve.hardware import gfx as gfx_mod
from instinct_serve.hardware.build import Parsed, make_gpu
from instinct_serve.hardware.inventory import Gpu
from instinct_serve.hardware.values import (
    as_int,
    bdf_from_location,
    clean_str,
    normalize_bdf,
    partition_label,
    to_bytes,
)

MARKER = "\x1einstinct-sysfs "

_DRM_FILES = (
    "uevent",
    "vendor",
    "device",
    "mem_info_vram_total",
    "mem_info_vram_used",
    "current_compute_partition",
    "current_memory_partition",
    "product_name",
)

# $1 is the root prefix ("/" or a test tree). Globs that match nothing stay literal and are
# skipped by the -f test; unreadable files print nothing.
DUMP_SCRIPT = (
    'r="${1%/}"; n="$r/sys/class/kfd/kfd/topology/nodes"; d="$r/sys/class/drm"; '
    'for f in "$n"/*/properties "$n"/*/mem_banks/*/properties '
    + " ".join(f'"$d"/renderD*/device/{name} "$d"/card*/device/{name}' for name in _DRM_FILES)
    + '; do [ -f "$f" ] || continue; printf "\\036instinct-sysfs %s\\n" "$f"; '
    'cat "$f" 2>/dev/null; echo; done'
)

_KFD_NODE = re.compile(r"/sys/class/kfd/kfd/topology/nodes/(\d+)/properties$")
_KFD_BANK = re.compile(r"/sys/class/kfd/kfd/topology/nodes/(\d+)/mem_banks/(\d+)/properties$")
_DRM_FILE = re.compile(r"/sys/class/drm/((?:card|renderD)\d+)/device/(\w+)$")

AMD_VENDOR_ID = 0x1002


def parse_dump(text: str) -> dict[str, str]:
    """``DUMP_SCRIPT`` output back into ``/sys/...`` path (root prefix removed) -> text."""
    files: dict[str, str] = {}
    path: str | None = None
    lines: list[str] = []
    for line in text.split("\n"):
        if line.startswith(MARKER):
            if path is not None:
                files[path] = "\n".join(lines).strip()
            raw = line[len(MARKER) :]
            cut = raw.rfind("/sys/class/")
            path, lines = (raw[cut:] if cut >= 0 else None), []
        elif path is not None:
            lines.append(line)
    if path is not None:
        files[path] = "\n".join(lines).strip()
    return files


def _properties(text: str) -> dict[str, int]:
    props: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            value = as_int(parts[1])
            if value is not None:
                props[parts[0]] = value
    return props


@dataclass
class _Drm:
    files: dict[str, str] = field(default_factory=dict)

    @property
    def bdf(self) -> str | None:
        for line in self.files.get("uevent", "").splitlines():
            if line.startswith("PCI_SLOT_NAME="):
                return normalize_bdf(line.split("=", 1)[1])
        return None

    @property
    def is_amd(self) -> bool:
        vendor = as_int(self.files.get("vendor"))
        driver = "DRIVER=amdgpu" in self.files.get("uevent", "")
        return driver or vendor == AMD_VENDOR_ID

    def size(self, name: str) -> int | None:
        return to_bytes(self.files.get(name, "").strip() or None)

    @property
    def partition(self) -> str | None:
        return partition_label(
            self.files.get("current_compute_partition"), self.files.get("current_memory_partition")
        )


def parse(files: dict[str, str]) -> Parsed:
    """GPUs from sysfs files (``parse_dump`` output). No KFD GPU node means no GPU."""
    nodes: dict[int, dict[str, int]] = {}
    banks: dict[int, int] = {}
    drm: dict[str, _Drm] = {}
    for path, text in files.items():
        if node := _KFD_NODE.search(path):
            nodes[int(node.group(1))] = _properties(text)
        elif bank := _KFD_BANK.search(path):
            props = _properties(text)
            if props.get("heap_type") in (1, 2) and props.get("size_in_bytes", 0) > 0:
                node_id = int(bank.group(1))
                banks[node_id] = banks.get(node_id, 0) + props["size_in_bytes"]
        elif entry := _DRM_FILE.search(path):
            drm.setdefault(entry.group(1), _Drm()).files[entry.group(2)] = text
    by_bdf = {d.bdf: d for name, d in sorted(drm.items()) if name.startswith("card") and d.bdf}

    parsed = Parsed()
    gpu_nodes = [
        (node_id, props)
        for node_id, props in sorted(nodes.items())
        if props.get("gfx_target_version", 0) > 0 and props.get("simd_count", 1) > 0
    ]
    for index, (node_id, props) in enumerate(gpu_nodes):
        location = props.get("location_id")
        bdf = bdf_from_location(props.get("domain", 0), location) if location else None
        minor = props.get("drm_render_minor")
        dev = drm.get(f"renderD{minor}") if minor is not None else None
        if dev is None and bdf:
            dev = by_bdf.get(bdf)
        dev = dev or _Drm()
        gfx = gfx_mod.from_target_version(props.get("gfx_target_version"))
        gpu, note = make_gpu(
            index,
            market_name=clean_str(dev.files.get("product_name")),
            device_id=props.get("device_id") or as_int(dev.files.get("device")),
            gfx_field=gfx,
            vram_total=banks.get(node_id) or dev.size("mem_info_vram_total"),
            vram_used=dev.size("mem_info_vram_used"),
            bdf=bdf or dev.bdf,
            partition=dev.partition,
            compute_units=_compute_units(props),
        )
        parsed.gpus.append(gpu)
        if note:
            parsed.notes.append(note)
    if not parsed.gpus:
        parsed.gpus = _drm_only(drm)
        if parsed.gpus:
            parsed.notes.append(
                "amdgpu devices found but no KFD compute node: ROCm cannot use them "
                "(is /dev/kfd present? is the amdgpu driver fully loaded?)"
            )
    return parsed


def _compute_units(props: dict[str, int]) -> int | None:
    """CUs of a KFD node: ``simd_count / simd_per_cu`` (MI300X: 1216 / 4 = 304; a CPX
    partition's node counts its own XCD's only)."""
    simds, per_cu = props.get("simd_count"), props.get("simd_per_cu")
    return simds // per_cu if simds and per_cu else None


def _drm_only(drm: dict[str, _Drm]) -> list[Gpu]:
    gpus: list[Gpu] = []
    for name, dev in sorted(drm.items(), key=lambda kv: int(re.sub(r"\D", "", kv[0]) or 0)):
        if not name.startswith("card") or not dev.is_amd:
            continue
        device_id = as_int(dev.files.get("device"))
        gpu, _ = make_gpu(
            len(gpus),
            market_name=clean_str(dev.files.get("product_name")),
            device_id=device_id,
            vram_total=dev.size("mem_info_vram_total"),
            vram_used=dev.size("mem_info_vram_used"),
            bdf=dev.bdf,
            partition=dev.partition,
        )
        gpus.append(gpu)
    return gpus
