"""GPU power, activity and memory from ``amd-smi metric --power --mem-usage --usage --json``.

Shapes (``hardware.amdsmi`` describes the envelopes; the same records here):

- ROCm >= 6.4: ``{"gpu_data": [{"gpu": 0, "power": {...}, "usage": {...},
  "mem_usage": {...}}]}``;
- ROCm 6.1-6.3: a top-level list of the same records (a bare object for one GPU);
- leaves ``{"value": 10, "unit": "W"}`` (6.1+), bare numbers (6.0), or ``"N/A"``.

Power is ``power.socket_power`` (what MI300-series report, ``current_socket_power`` in the
library), else ``average_socket_power`` (MI200 and older firmware report only the average).
On a partitioned MI300X (CPX/DPX) the socket's power is reported once, on its first
partition, and ``N/A`` on the others: totals add what is there. amd-smi's "MB" are MiB.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from instinct_serve.hardware.values import Unparsable, as_int, extract_json, to_bytes

POWER_KEYS = ("socket_power", "current_socket_power", "average_socket_power")
_WATTS = {"w": 1.0, "mw": 1e-3, "uw": 1e-6, "kw": 1e3}
_NUMBER_UNIT = re.compile(r"\s*([-+]?\d+(?:\.\d+)?)\s*([a-zA-Z%]*)\s*")

GIB = 2**30


@dataclass(frozen=True)
class GpuSample:
    """One GPU (or partition) as amd-smi reported it at one moment."""

    index: int
    power_w: float | None
    gfx_activity_pct: float | None
    vram_used_bytes: int | None
    vram_total_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        def gib(value: int | None) -> float | None:
            return None if value is None else round(value / GIB, 2)

        return {
            "index": self.index,
            "power_w": None if self.power_w is None else round(self.power_w, 1),
            "gfx_activity_pct": self.gfx_activity_pct,
            "vram_used_gib": gib(self.vram_used_bytes),
            "vram_total_gib": gib(self.vram_total_bytes),
            "vram_used_bytes": self.vram_used_bytes,
            "vram_total_bytes": self.vram_total_bytes,
        }


def number(value: Any, unit: str | None = None) -> tuple[float, str | None] | None:
    """(number, unit) from ``{"value", "unit"}``, a bare number or ``"140 W"``; None for
    ``"N/A"`` and anything else."""
    if isinstance(value, dict):
        inner = value.get("unit")
        return number(value.get("value"), inner if isinstance(inner, str) else unit)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return (float(value), unit) if math.isfinite(value) else None
    if isinstance(value, str):
        match = _NUMBER_UNIT.fullmatch(value)
        if match is None:
            return None
        return float(match.group(1)), match.group(2) or unit
    return None


def watts(value: Any) -> float | None:
    """Watts from an amd-smi power leaf (W by default; mW and uW converted)."""
    found = number(value, "W")
    if found is None:
        return None
    amount, unit = found
    factor = _WATTS.get((unit or "W").lower())
    if factor is None or amount < 0:
        return None
    return amount * factor


def percent(value: Any) -> float | None:
    found = number(value, "%")
    if found is None or (found[1] or "%") != "%":
        return None
    return found[0]


def records(doc: Any) -> list[dict[str, Any]]:
    """The per-GPU records of an amd-smi JSON document (every envelope)."""
    if isinstance(doc, dict):
        if "gpu_data" in doc:
            doc = doc["gpu_data"]
        elif "gpu" in doc:
            doc = [doc]
        elif "cpu_data" in doc:
            return []
        else:
            raise Unparsable("amd-smi JSON has neither a gpu_data list nor GPU entries")
    if not isinstance(doc, list):
        raise Unparsable("amd-smi JSON is not a list of GPUs")
    return [r for r in doc if isinstance(r, dict) and "gpu" in r]


def parse_metric(text: str) -> list[GpuSample]:
    """Every GPU of ``amd-smi metric ... --json`` output; ``Unparsable`` when the output
    holds no amd-smi JSON (an error message, a truncated document)."""
    out = []
    for position, record in enumerate(records(extract_json(text))):
        index = as_int(record.get("gpu"))
        power = record.get("power")
        power_w = None
        if isinstance(power, dict):
            for key in POWER_KEYS:
                power_w = watts(power.get(key))
                if power_w is not None:
                    break
        usage = record.get("usage")
        gfx = percent(usage.get("gfx_activity")) if isinstance(usage, dict) else None
        mem = record.get("mem_usage")
        used = total = None
        if isinstance(mem, dict):
            used = to_bytes(mem.get("used_vram"), "MB")
            total = to_bytes(mem.get("total_vram"), "MB")
        out.append(
            GpuSample(
                index if index is not None and index >= 0 else position, power_w, gfx, used, total
            )
        )
    return out


def total_power(samples: list[GpuSample], indices: list[int] | None = None) -> float | None:
    """Watts drawn by ``indices`` (every GPU when None); None when none reports power."""
    chosen = [s for s in samples if indices is None or s.index in indices]
    values = [s.power_w for s in chosen if s.power_w is not None]
    return sum(values) if values else None


def tokens_per_watt(tokens_per_s: float | None, power_w: float | None) -> float | None:
    """Generated tokens per second per watt (= tokens per joule)."""
    if tokens_per_s is None or power_w is None or power_w <= 0:
        return None
    return tokens_per_s / power_w
