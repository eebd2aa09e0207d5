"""Units every step shares: bytes (GB = 10^9, GiB = 2^30) and context lengths in vLLM's
own notation. Import-light on purpose: option parsing and the CLI read it at start-up."""

from __future__ import annotations

import re

GB = 10**9
GIB = 2**30
MIB = 2**20

# vLLM's ``--kv-cache-dtype`` values -> bytes per element (None: follows the model dtype).
# The one list of KV cache dtypes: option choices and the fit both read it.
KV_CACHE_DTYPE_BYTES: dict[str, int | None] = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
}

_TOKENS = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT]i?)?")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def token_count(text: str) -> int | None:
    """A ``--max-model-len``-style value read as vLLM's ``human_readable_int`` reads it:
    ``32768``; a lower-case suffix is decimal, ``32k``/``25.6k``/``1m`` (10^3, 10^6); an
    upper-case one binary and whole, ``32K``/``1M`` (2^10, 2^20; ``Ki``/``Mi`` alike).

    None for what is not a count: ``auto``/``-1`` (vLLM picks), ``1.5M`` (vLLM refuses a
    fraction with a binary suffix).
    """
    found = _TOKENS.fullmatch(text.strip())
    if found is None:
        return None
    number, suffix = found.groups()
    if len(number) > 12:  # beyond any context length; keeps float() and int() cheap
        return None
    letter = (suffix or "")[:1]
    if letter in _DECIMAL and not suffix.endswith("i"):
        return int(float(number) * _DECIMAL[letter])
    if "." in number or (letter in _DECIMAL):
        return None
    return int(number) * _BINARY.get(letter, 1)


def plural(count: int, noun: str) -> str:
    """``1 recipe``, ``2 recipes``, ``0 recipes``: a count and its noun, in English."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def byte_size(n: int | None) -> str:
    """Bytes as a person reads them: ``512 B``, ``1.5 KiB`` ... ``3.2 GiB`` (``?``: unknown)."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
