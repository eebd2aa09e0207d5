"""One place that turns a source's raw fields into a ``Gpu``, so every source agrees."""

from __future__ import annotations

from dataclasses import dataclass, field

from instinct_serve.hardware import gfx as gfx_mod
from instinct_serve.hardware.inventory import Gpu
from instinct_serve.hardware.values import clean_str


@dataclass
class Parsed:
    """A parser's answer: the GPUs it found and notes worth a warning (never fatal)."""

    gpus: list[Gpu] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def make_gpu(
    index: int,
    *,
    market_name: str | None = None,
    device_id: int | None = None,
    gfx_field: str | None = None,
    vram_total: int | None = None,
    vram_used: int | None = None,
    bdf: str | None = None,
    partition: str | None = None,
    compute_units: int | None = None,
) -> tuple[Gpu, str | None]:
    """A ``Gpu`` with gfx and name resolved, plus a note when the gfx field was unusable."""
    market = clean_str(market_name)
    gfx, note = gfx_mod.resolve(gfx_field, device_id, market)
    name = gfx_mod.product_name(device_id, market, gfx)
    gpu = Gpu(
        index=index,
        name=name,
        gfx_version=gfx,
        vram_total_bytes=vram_total if vram_total else None,
        vram_used_bytes=vram_used,
        bdf=bdf,
        partition=partition,
        market_name=market or name,
        compute_units=compute_units if compute_units and compute_units > 0 else None,
    )
    return gpu, (f"GPU {index}: {note}" if note else None)


def has_data(gpu: Gpu) -> bool:
    """Whether a record says anything at all (a bare ``{"gpu": 0}`` does not)."""
    return gpu.gfx_version != "unknown" or gpu.vram_total_bytes is not None


def dedupe_notes(notes: list[str]) -> list[str]:
    """Notes in order, each once; the same per-GPU note on several GPUs becomes one line."""
    seen: dict[str, list[str]] = {}
    for note in notes:
        key = note.split(": ", 1)[1] if note.startswith("GPU ") and ": " in note else note
        seen.setdefault(key, []).append(note)
    return [
        group[0] if len(group) == 1 else f"{len(group)} GPUs: {key}" for key, group in seen.items()
    ]
