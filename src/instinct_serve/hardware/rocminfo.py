"""Parser for ``rocminfo``: the HSA runtime's view of the GPUs (ships with every ROCm,
including containers that lack amd-smi and rocm-smi).

Per GPU agent it gives the gfx target (``Name: gfx942``), ``Marketing Name``, ``Chip ID``
(``29857(0x74a1)``), ``BDFID`` (``bus << 8 | devfn``, decimal) and the memory pools; the
first ``GLOBAL; FLAGS: COARSE GRAINED`` pool is device memory as HIP sees it (its size is
in KB = KiB: 201310208 KB = 196592 MiB on an MI300X).
"""

from __future__ import annotations

import re

from instinct_serve.hardware.build import Parsed, dedupe_notes, make_gpu
from instinct_serve.hardware.values import (
    Unparsable,
    as_int,
    bdf_from_location,
    clean_str,
    to_bytes,
)

_AGENT = re.compile(r"^\s*Agent\s+(\d+)\s*$")
_FIELD = re.compile(r"^  (\S[^:]*?):\s*(.*?)\s*$")
_SEGMENT = re.compile(r"^\s+Segment:\s*(.*?)\s*$")
_SIZE = re.compile(r"^\s+Size:\s*(\d+)\s*(?:\([^)]*\))?\s*([KMG]?B)\s*$")


def parse(text: str) -> Parsed:
    """GPU agents of ``rocminfo``. Raises ``Unparsable`` when there is no agent at all."""
    agents: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    segment: str | None = None
    for line in text.splitlines():
        if _AGENT.match(line):
            current, segment = {}, None
            agents.append(current)
            continue
        if current is None:
            continue
        if seg := _SEGMENT.match(line):
            segment = seg.group(1).upper()
            continue
        if (size := _SIZE.match(line)) and segment is not None:
            if "COARSE GRAINED" in segment and "GLOBAL" in segment:
                current.setdefault("vram", f"{size.group(1)} {size.group(2)}")
            segment = None
            continue
        if field := _FIELD.match(line):
            current.setdefault(field.group(1).strip().lower(), field.group(2))
    if not agents:
        raise Unparsable("rocminfo output has no HSA agent")
    parsed = Parsed()
    gpus = [a for a in agents if (clean_str(a.get("device type")) or "").upper() == "GPU"]
    for index, agent in enumerate(gpus):
        chip = re.match(r"\s*(\d+)", agent.get("chip id", ""))
        bdfid = as_int(agent.get("bdfid"))
        gpu, note = make_gpu(
            index,
            market_name=clean_str(agent.get("marketing name")),
            device_id=int(chip.group(1)) if chip else None,
            gfx_field=clean_str(agent.get("name")),
            vram_total=to_bytes(agent.get("vram")),
            bdf=bdf_from_location(0, bdfid) if bdfid else None,
        )
        parsed.gpus.append(gpu)
        if note:
            parsed.notes.append(note)
    parsed.notes = dedupe_notes(parsed.notes)
    return parsed
