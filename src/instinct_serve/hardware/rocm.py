"""The ROCm version from each place it can be read (pure parsers).

``amd-smi version`` has printed, across releases (fixtures/smi/amd-smi_version_outputs.txt):

- ``AMDSMI Tool: 25.3.0+ede62f2 | AMDSMI Library version: 25.3.0 | ROCm version: 6.4.0 | ...``
- ``AMD System Management Interface | Version: 26.2.1 | ROCm version: 7.2.0 | Platform: ...``
- ``... | ROCm version: N/A | ...`` (the library could not tell: fall through)
- with ``--json``: ``{"tool": .., "version": .., "rocm_version": "6.4.0", ..}``, bare or in a list.

``/opt/rocm/.info/version`` holds ``6.4.0-47`` (build number after the dash);
``hipconfig --rocmpath`` names the install (``/opt/rocm-6.4.0``); ``hipconfig --version``
gives the HIP version (``6.4.43482-0f2d60242``) whose major.minor is the ROCm release.
"""

from __future__ import annotations

import re
from typing import Any

from instinct_serve.hardware.values import Unparsable, clean_str, extract_json, version_in

_ROCM_IN_TEXT = re.compile(r"ROCm version:\s*([^\s|]+)", re.IGNORECASE)


def from_amd_smi_version(text: str) -> str | None:
    """ROCm version from ``amd-smi version [--json]`` output; None when it says N/A."""
    try:
        doc = extract_json(text)
    except Unparsable:
        doc = None
    if doc is not None:
        found = _find_key(doc, "rocm_version")
        if found is not None:
            return version_in(found)
    match = _ROCM_IN_TEXT.search(text)
    return version_in(match.group(1)) if match else None


def _find_key(doc: Any, key: str, depth: int = 0) -> Any:
    if depth > 8:
        return None
    if isinstance(doc, dict):
        if key in doc:
            return doc[key]
        children: list[Any] = list(doc.values())
    elif isinstance(doc, list):
        children = doc
    else:
        return None
    for child in children:
        found = _find_key(child, key, depth + 1)
        if found is not None:
            return found
    return None


def from_info_file(text: str | None) -> str | None:
    """``/opt/rocm/.info/version`` ("6.4.0-47") -> "6.4.0"."""
    if text is None:
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return version_in(first) if re.match(r"\s*\d+\.\d+", first) else None


def from_rocm_path(path: str | None) -> str | None:
    """``/opt/rocm-6.4.0`` -> "6.4.0" (the versioned install directory name)."""
    text = clean_str(path)
    if text is None:
        return None
    match = re.search(r"rocm-(\d+\.\d+(?:\.\d+)?)", text.strip().splitlines()[-1])
    return match.group(1) if match else None


def from_hip_version(text: str | None) -> str | None:
    """``hipconfig --version`` ("6.4.43482-0f2d60242") -> "6.4" (HIP's patch is a build number)."""
    version = version_in(text)
    if version is None:
        return None
    return ".".join(version.split(".")[:2])
