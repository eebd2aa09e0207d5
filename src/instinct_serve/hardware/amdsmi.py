"""Parsers for amd-smi output: text in, GPUs out, for every shape amd-smi has printed.

JSON shapes (amdsmi_cli/amdsmi_commands.py across ROCm releases):

- old (ROCm <= 6.3): a top-level list of per-GPU objects ``[{"gpu": 0, "asic": {..}}, ..]``
  (a single object when there is one GPU), VRAM as ``"vram_size_mb": 196592``;
- new (ROCm >= 6.4): ``{"gpu_data": [{"gpu": 0, ...}]}`` (plus ``cpu_data`` with CPUs),
  VRAM as ``"size": {"value": 196592, "unit": "MB"}``.

Leaves are bare numbers, strings or ``{"value", "unit"}``; "N/A" means unknown. amd-smi's
"MB" are MiB. When a command printed text instead of JSON, the human-readable ``static``
blocks (``GPU: 0`` / ``ASIC:`` / ``MARKET_NAME: ...``) and the default table view are read.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, NamedTuple

from instinct_serve.hardware.build import Parsed, dedupe_notes, has_data, make_gpu
from instinct_serve.hardware.inventory import Gpu
from instinct_serve.hardware.values import (
    Unparsable,
    as_int,
    clean_str,
    extract_json,
    normalize_bdf,
    partition_label,
    to_bytes,
)


class MemUsage(NamedTuple):
    total: int | None
    used: int | None


def parse_static(text: str) -> Parsed:
    """GPUs from ``amd-smi static --asic --bus --vram --json`` (or its text rendering).

    Raises ``Unparsable`` when the output holds neither JSON nor amd-smi text with GPUs.
    """
    try:
        doc = extract_json(text)
    except Unparsable as exc:
        parsed = parse_text(text)
        if parsed.gpus:
            parsed.notes.insert(0, "amd-smi printed text instead of JSON; read the text")
            return parsed
        raise Unparsable(f"amd-smi output unparsable ({exc})") from exc
    records = _gpu_records(doc)
    parsed = Parsed()
    for position, record in enumerate(records):
        gpu, note = _gpu_from_record(record, position)
        if note:
            parsed.notes.append(note)
        parsed.gpus.append(gpu)
    if records and not any(has_data(g) for g in parsed.gpus):
        raise Unparsable("amd-smi JSON has no ASIC or VRAM data")
    parsed.notes = dedupe_notes(parsed.notes)
    return parsed


def parse_metric(text: str) -> dict[int, MemUsage]:
    """Per-GPU VRAM total/used from ``amd-smi metric --mem-usage --json``."""
    usage: dict[int, MemUsage] = {}
    for position, record in enumerate(_gpu_records(extract_json(text))):
        block = record.get("mem_usage")
        if not isinstance(block, dict):
            continue
        index = _index(record, position)
        usage[index] = MemUsage(
            to_bytes(block.get("total_vram"), "MB"), to_bytes(block.get("used_vram"), "MB")
        )
    return usage


def parse_partition(text: str) -> dict[int, str]:
    """Per-GPU ``SPX/NPS1``-style labels from ``amd-smi static --partition --json``."""
    labels: dict[int, str] = {}
    for position, record in enumerate(_gpu_records(extract_json(text))):
        label = _partition(record.get("partition"))
        if label:
            labels[_index(record, position)] = label
    return labels


def with_usage(gpus: list[Gpu], usage: dict[int, MemUsage]) -> list[Gpu]:
    """GPUs with used VRAM (and total, where static had none) from the metric output."""
    out = []
    for gpu in gpus:
        mem = usage.get(gpu.index)
        if mem is None:
            out.append(gpu)
            continue
        out.append(
            replace(
                gpu,
                vram_total_bytes=gpu.vram_total_bytes or mem.total,
                vram_used_bytes=gpu.vram_used_bytes if mem.used is None else mem.used,
            )
        )
    return out


def with_partitions(gpus: list[Gpu], labels: dict[int, str]) -> list[Gpu]:
    """GPUs with their partition mode, where known."""
    return [replace(g, partition=labels.get(g.index, g.partition)) for g in gpus]


# --- JSON --------------------------------------------------------------------------------


def _gpu_records(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict):
        if "gpu_data" in doc:
            doc = doc["gpu_data"]
        elif "gpu" in doc:
            doc = [doc]  # old amd-smi printed a bare object for a single GPU
        elif "cpu_data" in doc:
            return []  # CPUs (amd_hsmp) only: no GPU
        else:
            raise Unparsable("amd-smi JSON has neither a gpu_data list nor GPU entries")
    if not isinstance(doc, list):
        raise Unparsable("amd-smi JSON is not a list of GPUs")
    return [r for r in doc if isinstance(r, dict) and ("gpu" in r or "cpu" not in r)]


def _index(record: dict[str, Any], position: int) -> int:
    index = as_int(record.get("gpu"))
    return index if index is not None and index >= 0 else position


def _section(record: dict[str, Any], name: str) -> dict[str, Any]:
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def _partition(block: Any) -> str | None:
    if not isinstance(block, dict):
        return None
    compute = block.get("compute_partition", block.get("accelerator_partition"))
    return partition_label(compute, block.get("memory_partition"))


def _gpu_from_record(record: dict[str, Any], position: int) -> tuple[Gpu, str | None]:
    asic = _section(record, "asic")
    vram = _section(record, "vram")
    bus = _section(record, "bus")
    board = _section(record, "board")
    mem = _section(record, "mem_usage")
    total = next(
        (
            size
            for size in (
                to_bytes(vram.get("size"), "MB"),
                to_bytes(vram.get("vram_size"), "MB"),
                to_bytes(vram.get("vram_size_mb"), "MB"),
                to_bytes(mem.get("total_vram"), "MB"),
            )
            if size
        ),
        None,
    )
    return make_gpu(
        _index(record, position),
        market_name=clean_str(asic.get("market_name")) or clean_str(board.get("product_name")),
        device_id=as_int(asic.get("device_id")),
        gfx_field=clean_str(asic.get("target_graphics_version")),
        vram_total=total,
        vram_used=to_bytes(mem.get("used_vram"), "MB"),
        bdf=normalize_bdf(bus.get("bdf")) or normalize_bdf(record.get("bdf")),
        partition=_partition(record.get("partition")),
        compute_units=as_int(asic.get("num_compute_units")),
    )


# --- text ---------------------------------------------------------------------------------

_BLOCK_START = re.compile(r"^([A-Z][A-Z_ ]*):\s*(\d+)\s*$")
_KEY_VALUE = re.compile(r"^(\s*)([A-Za-z][A-Za-z0-9_ /()-]*?):\s*(.*?)\s*$")
_VIEW_ROW1 = re.compile(
    r"^\|\s*(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<name>.+?)\s*\|"
)
_VIEW_ROW2 = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+\S+\s+\S+\s+(?P<part>\S+)\s*\|.*?"
    r"(?P<used>\d+|N/A)/(?P<total>\d+)\s*(?P<unit>[KMGT]i?B)\s*\|"
)


def parse_text(text: str) -> Parsed:
    """GPUs from amd-smi's human-readable ``static``/``list`` blocks or its default table."""
    blocks = _text_blocks(text)
    if blocks:
        parsed = Parsed()
        for position, (index, fields) in enumerate(sorted(blocks.items())):
            gpu, note = make_gpu(
                index if index >= 0 else position,
                market_name=fields.get("asic.market_name") or fields.get("board.product_name"),
                device_id=as_int(fields.get("asic.device_id")),
                gfx_field=fields.get("asic.target_graphics_version"),
                vram_total=to_bytes(
                    fields.get("vram.size") or fields.get("vram.vram_size_mb"), "MB"
                ),
                bdf=normalize_bdf(fields.get("bus.bdf") or fields.get("bdf")),
                partition=partition_label(
                    fields.get("partition.compute_partition")
                    or fields.get("partition.accelerator_partition"),
                    fields.get("partition.memory_partition"),
                ),
                compute_units=as_int(fields.get("asic.num_compute_units")),
            )
            if note:
                parsed.notes.append(note)
            if has_data(gpu):
                parsed.gpus.append(gpu)
        parsed.notes = dedupe_notes(parsed.notes)
        return parsed
    return _parse_default_view(text)


def _text_blocks(text: str) -> dict[int, dict[str, str]]:
    """``GPU: n`` blocks as flat ``section.key -> value`` maps (keys lower-cased).

    ``list`` and ``static`` print the same ``GPU: n`` header, so blocks with one index merge;
    other top-level blocks (``AI_NIC: 0``, ``CPU: 0``) and shell prompts end a GPU block.
    """
    blocks: dict[int, dict[str, str]] = {}
    current: dict[str, str] | None = None
    sections: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        start = _BLOCK_START.match(line)
        if start:
            current = None
            if start.group(1).strip() == "GPU":
                current = blocks.setdefault(int(start.group(2)), {})
            sections = []
            continue
        if not line[0].isspace():
            current = None  # a prompt, a note, a marker: the block is over
            continue
        if current is None:
            continue
        match = _KEY_VALUE.match(line)
        if match is None:
            continue
        indent = len(match.group(1).expandtabs())
        key = match.group(2).strip().lower().replace(" ", "_")
        while sections and sections[-1][0] >= indent:
            sections.pop()
        if match.group(3) == "":
            sections.append((indent, key))
            continue
        path = ".".join([s for _, s in sections] + [key])
        current.setdefault(path, match.group(3))
    return {i: f for i, f in blocks.items() if f}


def _parse_default_view(text: str) -> Parsed:
    """The table ``amd-smi`` prints with no arguments (ROCm 7): two rows per GPU."""
    parsed = Parsed()
    pending: tuple[str, str] | None = None
    seen: set[int] = set()
    for line in text.splitlines():
        row1 = _VIEW_ROW1.match(line)
        if row1:
            pending = (row1.group("bdf"), row1.group("name"))
            continue
        row2 = _VIEW_ROW2.match(line)
        if row2 and pending:
            index = int(row2.group("gpu"))
            if index in seen:
                continue
            seen.add(index)
            unit = row2.group("unit")
            gpu, note = make_gpu(
                index,
                market_name=pending[1],
                vram_total=to_bytes(f"{row2.group('total')} {unit}"),
                vram_used=to_bytes(f"{row2.group('used')} {unit}"),
                bdf=normalize_bdf(pending[0]),
                partition=clean_str(row2.group("part")),
            )
            if note:
                parsed.notes.append(note)
            parsed.gpus.append(gpu)
        pending = None if row2 else pending
    return parsed
