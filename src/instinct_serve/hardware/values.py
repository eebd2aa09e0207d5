"""Leaf values as the GPU tools print them: "N/A", hex ids, sizes with or without units.

Every function here is total: any input (a fuzzer's included) gives a value or ``None``,
never an exception, so one odd field cannot sink a whole inventory.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

# What the tools print for "no value". amd-smi: "N/A"; rocm-smi: "N/A", "Not supported".
_NA = {"", "n/a", "na", "none", "null", "unknown", "not supported", "unsupported", "-"}

# amd-smi's "MB" are MiB (amdsmi_commands.py: ``total_vram // (1024*1024)``), and its "KB"
# (cache sizes) are KiB: every unit is binary. rocm-smi prints bytes ("(B)" in the key).
_UNIT_BYTES = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "k": 2**10,
    "kb": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tb": 2**40,
    "tib": 2**40,
}

_SIZE_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")
_BDF_RE = re.compile(r"\s*(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])\s*")
_VERSION_RE = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


class Unparsable(ValueError):
    """The text is not the output a parser expects (garbage, an error message, truncated)."""


def clean_str(value: Any) -> str | None:
    """A stripped string, or None for the tools' many spellings of "no value"."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    return None if text.lower() in _NA else text


def as_int(value: Any) -> int | None:
    """An int from 42, "42", "0x74a1" (amd-smi prints ids in hex); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    text = clean_str(value)
    if text is None:
        return None
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None


def to_bytes(value: Any, default_unit: str = "B") -> int | None:
    """Bytes from a bare number, "196592 MB", or amd-smi's ``{"value": .., "unit": ..}``.

    ``default_unit`` applies when the value carries none (old amd-smi printed bare MB).
    """
    if isinstance(value, dict):
        unit = value.get("unit")
        return to_bytes(value.get("value"), unit if isinstance(unit, str) else default_unit)
    if isinstance(value, bool) or value is None:
        return None
    unit = default_unit
    number: float
    if isinstance(value, int | float):
        number = value
    elif isinstance(value, str):
        match = _SIZE_RE.fullmatch(value)
        if match is None:
            return None
        number = float(match.group(1))
        unit = match.group(2) or default_unit
    else:
        return None
    factor = _UNIT_BYTES.get(unit.strip().lower())
    if factor is None or not math.isfinite(number) or number < 0:
        return None
    if isinstance(number, int):
        return number * factor
    return round(number * factor)


def normalize_bdf(value: Any) -> str | None:
    """PCI address as ``dddd:bb:dd.f`` in lower case (the domain defaults to 0000)."""
    text = clean_str(value)
    if text is None:
        return None
    match = _BDF_RE.fullmatch(text)
    if match is None:
        return None
    domain = int(match.group(1) or "0", 16)
    return f"{domain:04x}:{match.group(2).lower()}:{match.group(3).lower()}.{match.group(4)}"


def bdf_from_location(domain: int, location_id: int) -> str:
    """KFD's ``location_id`` is ``bus << 8 | devfn`` with ``devfn = dev << 3 | fn``."""
    bus = (location_id >> 8) & 0xFF
    dev = (location_id >> 3) & 0x1F
    fn = location_id & 0x7
    return f"{domain & 0xFFFF:04x}:{bus:02x}:{dev:02x}.{fn}"


def version_in(text: Any) -> str | None:
    """The first ``X.Y[.Z]`` in a string (e.g. "6.4.0-47" -> "6.4.0")."""
    cleaned = clean_str(text)
    if cleaned is None:
        return None
    match = _VERSION_RE.search(cleaned)
    return match.group(1) if match else None


def partition_label(compute: Any, memory: Any) -> str | None:
    """``SPX/NPS1`` as amd-smi's default view prints it; either half may be missing."""
    parts = [p.upper() for p in (clean_str(compute), clean_str(memory)) if p]
    return "/".join(parts) or None


def is_partitioned(partition: str | None) -> bool:
    """True for DPX/TPX/QPX/CPX: the device is split into several logical GPUs."""
    if not partition:
        return False
    return partition.split("/")[0].upper() in {"DPX", "TPX", "QPX", "CPX"}


def extract_json(text: str) -> Any:
    """The JSON document in a tool's output, skipping what is printed around it.

    amd-smi can print Python ``SyntaxWarning`` lines before its JSON. Only documents
    starting at the beginning of a line count, nothing inside a document that does not
    parse is tried on its own, and a second document is refused, so a fragment of a
    truncated output is never taken for the whole (and a host for a smaller one).
    Raises ``Unparsable`` when there is no single complete document.
    """
    decoder = json.JSONDecoder()
    broken = False
    resume = 0
    for match in re.finditer(r"^[\[{]", text, re.MULTILINE):
        if match.start() < resume:
            continue  # inside a bracketed block that did not parse
        try:
            first, end = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            broken = True
            close = _block_end(text, match.start())
            if close is None:
                raise Unparsable("output cut short inside a JSON document") from None
            resume = close
            continue
        if not isinstance(first, dict | list):
            continue
        _check_rest(text, decoder, end)
        return first
    if broken:
        raise Unparsable("JSON in the output is malformed")
    raise Unparsable("no JSON document in the output")


def _check_rest(text: str, decoder: json.JSONDecoder, end: int) -> None:
    """Refuse a second document after the first: a tool that printed one per GPU and was
    cut between two would pass for a smaller host. Bracketed log lines are fine."""
    pos = _skip_space(text, end)
    if pos >= len(text) or text[pos] not in "[{":
        return
    try:
        decoder.raw_decode(text, pos)
    except (ValueError, RecursionError):
        if _block_end(text, pos) is None:
            raise Unparsable("output cut short inside a JSON document") from None
        return  # "[WARNING] ..." after the document
    raise Unparsable("more than one JSON document in the output")


def _block_end(text: str, start: int) -> int | None:
    """Where the bracket opened at ``start`` closes (strings respected); None if never."""
    depth = 0
    in_string = escaped = False
    for pos in range(start, len(text)):
        char = text[pos]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return pos + 1
    return None


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos
