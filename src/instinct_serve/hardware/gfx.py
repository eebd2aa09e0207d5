"""LLVM gfx targets from whatever a source gives: the gfx string, KFD's number, a PCI id, a name.

The gfx target decides the container image, kernels and env of every later step, so it is
derived with care: rocm-smi prints gfx90a as "gfx9010" (the stepping in decimal), older
amd-smi prints market names without "AMD Instinct", and sysfs has only numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from instinct_serve.hardware.values import clean_str


@dataclass(frozen=True)
class Device:
    name: str
    gfx: str


# PCI device id -> product. Ids from the pci.ids database ("Aqua Vanjaram [Instinct
# MI300X]" = 74a1, ...), 75a0 MI350X from amd-smi (fixtures/smi MI350X excerpt), 75a3 MI355X
# from an MI355X host's lspci (1002:75a3). Only ids checked against a public source are here.
DEVICES: dict[int, Device] = {
    0x738C: Device("AMD Instinct MI100", "gfx908"),
    0x738E: Device("AMD Instinct MI100", "gfx908"),
    0x7408: Device("AMD Instinct MI250X", "gfx90a"),
    0x740C: Device("AMD Instinct MI250X/MI250", "gfx90a"),
    0x740F: Device("AMD Instinct MI210", "gfx90a"),
    0x74A0: Device("AMD Instinct MI300A", "gfx942"),
    0x74A1: Device("AMD Instinct MI300X", "gfx942"),
    0x74A2: Device("AMD Instinct MI308X", "gfx942"),
    0x74A5: Device("AMD Instinct MI325X", "gfx942"),
    0x74A9: Device("AMD Instinct MI300X HF", "gfx942"),
    0x74B5: Device("AMD Instinct MI300X VF", "gfx942"),
    0x74B9: Device("AMD Instinct MI325X VF", "gfx942"),
    0x74BD: Device("AMD Instinct MI300X HF", "gfx942"),
    0x75A0: Device("AMD Instinct MI350X", "gfx950"),
    0x75A3: Device("AMD Instinct MI355X", "gfx950"),
}

# Market names to gfx, most specific first. MI300 production parts are all gfx942.
_NAME_GFX = [
    (re.compile(r"MI35\d", re.I), "gfx950"),
    (re.compile(r"MI3[0-2]\d", re.I), "gfx942"),
    (re.compile(r"MI2\d\d", re.I), "gfx90a"),
    (re.compile(r"MI100", re.I), "gfx908"),
    (re.compile(r"MI[56]0\b", re.I), "gfx906"),
]

_CANONICAL = re.compile(r"gfx(9[0-9a-f]{2}|1[0-9][0-9a-f]{2})")


def from_target_version(value: int | None) -> str | None:
    """KFD's ``gfx_target_version`` (90402 -> gfx942, 90010 -> gfx90a, 100300 -> gfx1030)."""
    if value is None or value <= 0:
        return None
    major, minor, stepping = value // 10000, (value // 100) % 100, value % 100
    if minor > 15 or stepping > 15:
        return None
    return f"gfx{major}{minor:x}{stepping:x}"


def normalize(raw: str | None) -> str | None:
    """A well-formed target ("gfx942") from "gfx942:sramecc+:xnack-" and the like; else None."""
    text = clean_str(raw)
    if text is None:
        return None
    text = text.lower().removeprefix("amdgcn-amd-amdhsa--").split(":")[0].strip()
    return text if _CANONICAL.fullmatch(text) else None


def demangle(raw: str | None) -> str | None:
    """Undo rocm-smi's decimal rendering of a hex digit: "gfx9010" is gfx 9, 0, 10 = gfx90a."""
    text = clean_str(raw)
    if text is None:
        return None
    match = re.fullmatch(r"gfx(\d+)", text.lower().split(":")[0].strip())
    if match is None:
        return None
    body = match.group(1)
    if body.startswith("9"):
        major, rest = 9, body[1:]
    elif body[:2] in {"10", "11", "12"}:
        major, rest = int(body[:2]), body[2:]
    else:
        return None
    if len(rest) != 3:
        return None
    for minor_text, stepping_text in ((rest[0], rest[1:]), (rest[:2], rest[2])):
        two_digit = minor_text if len(minor_text) == 2 else stepping_text
        if two_digit.startswith("0"):
            continue  # "010" is not how a number >= 10 prints
        minor, stepping = int(minor_text), int(stepping_text)
        if minor < 16 and stepping < 16:
            return f"gfx{major}{minor:x}{stepping:x}"
    return None


def from_name(name: str | None) -> str | None:
    """gfx from a market name ("AMD Instinct MI300X", "MI308X", "AMD INSTINCT MI200 ...")."""
    text = clean_str(name)
    if text is None:
        return None
    for pattern, gfx in _NAME_GFX:
        if pattern.search(text):
            return gfx
    return None


def resolve(field: str | None, device_id: int | None, name: str | None) -> tuple[str, str | None]:
    """The gfx target and, when the tool's own field was not usable, a note saying why.

    Order: the tool's field if well formed, then the PCI id table, then the demangled field,
    then the market name; "unknown" if nothing fits.
    """
    direct = normalize(field)
    if direct:
        return direct, None
    device = DEVICES.get(device_id) if device_id is not None else None
    shown = clean_str(field)
    if device:
        note = f"gfx field {shown!r} is not a gfx target; used PCI id" if shown else None
        return device.gfx, note
    fixed = demangle(field)
    if fixed:
        return fixed, f"read gfx field {shown!r} as {fixed}"
    by_name = from_name(name)
    if by_name:
        note = f"gfx field {shown!r} is not a gfx target; used the market name" if shown else None
        return by_name, note
    return "unknown", None


def product_name(device_id: int | None, market_name: str | None, gfx: str) -> str:
    """A clean product name: the PCI id table's, else the market name, else "AMD GPU (gfx)"."""
    device = DEVICES.get(device_id) if device_id is not None else None
    if device:
        return device.name
    text = clean_str(market_name)
    if text:
        if re.match(r"(instinct\s+)?MI\d", text, re.I):
            return "AMD Instinct " + re.sub(r"^instinct\s+", "", text, flags=re.I)
        return text
    return f"AMD GPU ({gfx})"
