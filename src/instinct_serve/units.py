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

_TOKENS = re.compile(r"(\d+(?:\.\d+)?)(k|K|Ki)?")


def token_count(text: str) -> int | None:
    """A ``--max-model-len``-style value read as every vLLM release reads it: ``32768``,
    ``32k``/``25.6k`` (10^3), ``32K``/``32Ki`` (2^10).

    None for what is not a count or not the same count everywhere: ``auto``/``-1`` (vLLM
    picks), and ``M``/``G``, binary in older releases and decimal in newer ones.
    """
    found = _TOKENS.fullmatch(text.strip())
    if found is None:
        return None
    number, suffix = found.groups()
    if len(number) > 12:  # beyond any context length; keeps float() and int() cheap
        return None
    if suffix == "k":
        return int(float(number) * 1000)
    if "." in number:
        return None
    return int(number) * (1024 if suffix in ("K", "Ki") else 1)


def plural(count: int, noun: str) -> str:
    """``1 recipe``, ``2 recipes``, ``0 recipes``: a count and its noun, in English."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
