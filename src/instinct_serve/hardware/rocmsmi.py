"""Parser for rocm-smi, the predecessor of amd-smi (still the only tool on older ROCm).

``rocm-smi --showproductname --showbus --showmeminfo vram --json`` prints
``{"card0": {"Card Series": .., "GFX Version": .., "VRAM Total Memory (B)": ..}, ..}``.
Key spelling changed over releases ("Card series" / "Card Series"), "Card Model" is the PCI
device id on newer releases but the subsystem id on older ones, and "GFX Version" renders
gfx90a as "gfx9010": all handled. The text form (``GPU[0] : Card Series: ...``) of the
same queries is read too, for a rocm-smi that ignores ``--json``.
"""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.hardware.build import Parsed, dedupe_notes, has_data, make_gpu
from instinct_serve.hardware.values import (
    Unparsable,
    as_int,
    clean_str,
    extract_json,
    normalize_bdf,
    partition_label,
    to_bytes,
)

_CARD = re.compile(r"card(\d+)", re.IGNORECASE)
_TEXT_LINE = re.compile(r"^GPU\[(\d+)\]\s*:\s*([^:]+?):\s*(.*?)\s*$")


def parse(text: str) -> Parsed:
    """GPUs from rocm-smi JSON (or text). Raises ``Unparsable`` when neither is there."""
    try:
        doc = extract_json(text)
    except Unparsable as exc:
        records = _text_records(text)
        if not records:
            raise Unparsable(f"rocm-smi output unparsable ({exc})") from exc
        parsed = _parse_records(records)
        parsed.notes.insert(0, "rocm-smi printed text instead of JSON; read the text")
        return parsed
    if not isinstance(doc, dict):
        raise Unparsable("rocm-smi JSON is not an object of cards")
    cards: dict[int, dict[str, Any]] = {}
    for key, value in doc.items():
        match = _CARD.fullmatch(str(key))
        if match and isinstance(value, dict):
            cards[int(match.group(1))] = value
    if not cards and any(k != "system" for k in doc):
        raise Unparsable("rocm-smi JSON has no cardN entries")
    return _parse_records(cards)


def _text_records(text: str) -> dict[int, dict[str, Any]]:
    records: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        match = _TEXT_LINE.match(line.strip())
        if match:
            fields = records.setdefault(int(match.group(1)), {})
            fields.setdefault(match.group(2).strip(), match.group(3))
    return records


def _parse_records(records: dict[int, dict[str, Any]]) -> Parsed:
    parsed = Parsed()
    # rocm-smi's cardN is the DRM card number (card0 may be a BMC's VGA), not a GPU index.
    for index, (_, raw) in enumerate(sorted(records.items())):
        fields = {str(k).strip().lower(): v for k, v in raw.items()}
        name = clean_str(fields.get("card series")) or clean_str(fields.get("device name"))
        device_id = as_int(fields.get("device id"))
        if device_id is None:
            device_id = as_int(fields.get("card model"))
        gpu, note = make_gpu(
            index,
            market_name=name,
            device_id=device_id,
            gfx_field=clean_str(fields.get("gfx version")),
            vram_total=to_bytes(fields.get("vram total memory (b)")),
            vram_used=to_bytes(fields.get("vram total used memory (b)")),
            bdf=normalize_bdf(fields.get("pci bus")),
            partition=partition_label(
                fields.get("compute partition"), fields.get("memory partition")
            ),
        )
        if note:
            parsed.notes.append(note)
        if has_data(gpu) or name:
            parsed.gpus.append(gpu)
    parsed.notes = dedupe_notes(parsed.notes)
    return parsed
