"""GPU choice and memory reservation for a native ``vllm serve`` (pure, plus one adapter).

* Without ``--gpus``, the GPU with the most free VRAM is taken; ``--gpus 0,1`` names them.
  The free figures come from the detect inventory; amd-smi / rocm-smi index GPUs
  the way HIP does, but the DRM sysfs fallback numbers ``card<N>`` in probe order, which
  need not match HIP ordinals, so its counters are trusted for selection only when there
  is a single GPU. The choice is pinned with ``HIP_VISIBLE_DEVICES``; ``--gpus`` gives a
  tensor-parallel group (``--tensor-parallel-size`` = its size).
* ``--gpu-memory-utilization`` (validated by ``options``): vLLM reserves that fraction of
  each GPU's **total** VRAM, whatever is already in use; a busy GPU gets a note before
  launch; an out-of-memory startup gets a hint with the concrete retries.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from instinct_serve.errors import NotReadyError, UsageError
from instinct_serve.hardware.inventory import GIB, Gpu, GpuInventory
from instinct_serve.hosts import Host

VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's own default for --gpu-memory-utilization
RETRY_UTILIZATION = 0.5
VISIBLE_DEVICES_ENV = "HIP_VISIBLE_DEVICES"


def free_bytes(gpu: Gpu) -> int | None:
    if gpu.vram_total_bytes is None or gpu.vram_used_bytes is None:
        return None
    return max(gpu.vram_total_bytes - gpu.vram_used_bytes, 0)


def telemetry_trusted(inventory: GpuInventory) -> bool:
    """Whether free-VRAM figures may pick a GPU: sysfs ones only on a single-GPU host."""
    if not inventory.gpus or any(free_bytes(g) is None for g in inventory.gpus):
        return False
    return inventory.source != "sysfs" or inventory.gpu_count == 1


def rank(inventory: GpuInventory) -> list[Gpu]:
    """GPUs by free VRAM, most first (ties and unknowns by index)."""
    return sorted(inventory.gpus, key=lambda g: (-(free_bytes(g) or -1), g.index))


def max_safe_utilization(gpu: Gpu, margin: float = 0.02) -> float | None:
    """The largest fraction of total VRAM still free (minus a margin), two decimals."""
    free = free_bytes(gpu)
    if free is None or not gpu.vram_total_bytes:
        return None
    return max(math.floor((free / gpu.vram_total_bytes - margin) * 100) / 100, 0.0)


@dataclass
class GpuSelection:
    """The GPUs a native launch uses and what to tell the user about them."""

    indexes: list[int]
    mode: Literal["auto", "index", "group"]
    telemetry: bool
    utilization: float | None
    gpus: list[Gpu] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    low_free: list[str] = field(default_factory=list)

    @property
    def visible_devices(self) -> str:
        return ",".join(str(i) for i in self.indexes)

    @property
    def tensor_parallel_size(self) -> int:
        return len(self.indexes)

    @property
    def env(self) -> dict[str, str]:
        return {VISIBLE_DEVICES_ENV: self.visible_devices}

    def to_dict(self) -> dict[str, Any]:
        return {
            "indexes": list(self.indexes),
            "mode": self.mode,
            "hip_visible_devices": self.visible_devices,
            "tensor_parallel_size": self.tensor_parallel_size,
            "telemetry_trusted": self.telemetry,
            "gpu_memory_utilization": self.utilization,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.market_name or g.name,
                    "vram_total_gib": round(g.vram_total_bytes / GIB, 2)
                    if g.vram_total_bytes
                    else None,
                    "vram_free_gib": round(free, 2) if (free := _free_gib(g)) is not None else None,
                }
                for g in self.gpus
            ],
            "notes": list(self.notes),
            "low_free_vram": list(self.low_free),
        }


def _free_gib(gpu: Gpu) -> float | None:
    free = free_bytes(gpu)
    return free / GIB if free is not None else None


def low_free_note(gpu: Gpu, utilization: float | None) -> str | None:
    """A note when vLLM's reservation (fraction x total) will not fit in the free VRAM."""
    free, total = free_bytes(gpu), gpu.vram_total_bytes
    if free is None or not total:
        return None
    fraction = utilization if utilization is not None else VLLM_DEFAULT_UTILIZATION
    if fraction * total <= free:
        return None
    used = total - free
    safe = max_safe_utilization(gpu)
    which = "--gpu-memory-utilization" + (
        f" {fraction:g}" if utilization is not None else f" (vLLM's default {fraction:g})"
    )
    advice = (
        f"lower --gpu-memory-utilization to {safe:g} or less"
        if safe and safe > 0
        else "free memory on it first"
    )
    return (
        f"GPU {gpu.index} is busy: {used / GIB:.1f} GiB of {total / GIB:.1f} GiB already in use, "
        f"and {which} reserves {fraction * total / GIB:.1f} GiB of its total; {advice}, or "
        "choose a less busy GPU with --gpus N"
    )


def select(
    inventory: GpuInventory,
    *,
    indexes: list[int] | None = None,
    utilization: float | None = None,
) -> GpuSelection:
    """Pick the GPUs for a launch from the inventory: ``indexes`` (``--gpus``, already
    validated by ``options``) as given, else the one with the most free VRAM."""
    if not inventory.gpus:
        raise NotReadyError(
            "no AMD GPU found on this host; the native engine has no CPU fallback",
            fix=inventory.hint or "check that the amdgpu driver is loaded (instinct detect)",
            id="no_gpu",
        )
    by_index = {g.index: g for g in inventory.gpus}
    trusted = telemetry_trusted(inventory)
    notes: list[str] = []
    mode: Literal["auto", "group"]
    if indexes is not None:
        mode = "group"
    else:
        mode = "auto"
        if trusted:
            best = rank(inventory)[0]
            indexes = [best.index]
            if inventory.gpu_count > 1:
                notes.append(
                    f"chose GPU {best.index}, the one with the most free VRAM "
                    f"({_free_gib(best) or 0:.1f} GiB); --gpus N picks another"
                )
        else:
            indexes = [min(by_index)]
            why = (
                "the DRM sysfs card numbering need not match HIP's device order on a multi-GPU host"
                if inventory.source == "sysfs" and inventory.gpu_count > 1
                else "free VRAM is not known"
            )
            notes.append(f"took GPU {indexes[0]} without ranking: {why}; pass --gpus N to choose")
    unknown = [i for i in indexes if i not in by_index]
    if unknown:
        raise UsageError(
            f"no GPU with index {', '.join(map(str, unknown))} on this host "
            f"(it has {', '.join(str(i) for i in sorted(by_index))})",
            fix="pick an index that `instinct detect` lists",
            id="bad_gpus",
        )
    chosen = [by_index[i] for i in indexes]
    low = []
    if trusted:
        low = [n for n in (low_free_note(g, utilization) for g in chosen) if n]
    return GpuSelection(indexes, mode, trusted, utilization, chosen, notes, low)


_OOM = re.compile(
    r"out of memory|OutOfMemoryError|hipErrorOutOfMemory|No available memory for the cache "
    r"blocks|insufficient memory",
    re.IGNORECASE,
)


def oom_line(log_text: str) -> str | None:
    """The first log line that reports running out of GPU memory, stripped."""
    for line in log_text.splitlines():
        if _OOM.search(line):
            return line.strip()
    return None


def oom_hint(
    log_text: str,
    selection: GpuSelection | None = None,
    inventory: GpuInventory | None = None,
) -> str | None:
    """What to retry after an out-of-memory startup, or None when the log shows none."""
    line = oom_line(log_text)
    if line is None:
        return None
    from instinct_serve.diagnose.shell import quote_line

    retry = [f"--gpu-memory-utilization {RETRY_UTILIZATION:g}"]
    other = None
    if inventory is not None and telemetry_trusted(inventory):
        current = set(selection.indexes) if selection else set()
        other = next((g for g in rank(inventory) if g.index not in current), None)
    gpu_hint = (
        f"a less busy GPU with --gpus {other.index} ({_free_gib(other) or 0:.1f} GiB free)"
        if other is not None
        else "a less busy GPU with --gpus N"
    )
    symptom = quote_line(line, "torch.OutOfMemoryError: HIP out of memory")
    return (
        f"vLLM ran out of GPU memory while starting. Retry with {retry[0]} (a smaller "
        f"reservation of each GPU's total VRAM), or on {gpu_hint}. For the full breakdown "
        f"(a busy GPU versus a model that does not fit): instinct diagnose --symptom {symptom}"
    )


def select_on_host(
    host: Host,
    *,
    indexes: list[int] | None = None,
    utilization: float | None = None,
    sysfs_root: str = "/",
) -> tuple[GpuSelection, GpuInventory]:
    """Detect the host's GPUs and select."""
    from instinct_serve.gather.detect import detect

    inventory = detect(host, sysfs_root)
    return select(inventory, indexes=indexes, utilization=utilization), inventory


def utilization_args(fraction: float | None) -> Sequence[str]:
    """The vLLM flag for a validated fraction (nothing: vLLM's default applies)."""
    return [] if fraction is None else ["--gpu-memory-utilization", f"{fraction:g}"]
