"""Storage sizes of safetensors dtypes and of vLLM cache dtypes.

Weight memory is computed from *stored elements per safetensors dtype*, the unit both the
safetensors headers and the Hub's ``safetensors.parameters`` use. Packed formats are exact
this way because their headers count storage elements: MXFP4 (gpt-oss) keeps two FP4 values
per ``U8`` byte plus ``U8`` E8M0 scales, GPTQ/AWQ pack eight int4 values per ``I32``, FP8
checkpoints are ``F8_E4M3`` with ``F32``/``BF16`` scales. Only ``F4`` (the native
``float4_e2m1fn_x2`` dtype) counts logical elements, hence sizes in bits.
"""

from __future__ import annotations

from collections.abc import Mapping

from instinct_serve.errors import UsageError
from instinct_serve.units import KV_CACHE_DTYPE_BYTES

# Bits per stored element, keyed by the dtype names safetensors writes in its headers.
DTYPE_BITS: dict[str, int] = {
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "F32": 32,
    "I32": 32,
    "U32": 32,
    "BF16": 16,
    "F16": 16,
    "I16": 16,
    "U16": 16,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I8": 8,
    "U8": 8,
    "BOOL": 8,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F4": 4,
}

# config.json ``torch_dtype``/``dtype`` names -> bytes per element.
TORCH_DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float64": 8,
}


def dtype_bytes(counts: Mapping[str, int]) -> int:
    """Exact stored bytes of a per-dtype element count (Hub or header form)."""
    total_bits = 0
    for dtype, count in counts.items():
        bits = DTYPE_BITS.get(dtype.upper())
        if bits is None:
            raise UsageError(
                f"unknown safetensors dtype {dtype!r} in the model's weight metadata",
                fix="report the model id; the weight size cannot be computed exactly",
                id="unknown_dtype",
            )
        total_bits += bits * int(count)
    return (total_bits + 7) // 8


def torch_dtype_bytes(name: str | None) -> int:
    """Bytes per element of the model dtype; vLLM serves fp32 checkpoints in 16 bits."""
    if not name:
        return 2
    size = TORCH_DTYPE_BYTES.get(str(name).removeprefix("torch.").lower(), 2)
    return 2 if size > 2 else size


def kv_cache_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per KV element for a ``--kv-cache-dtype`` value."""
    key = kv_cache_dtype.strip().lower()
    if key not in KV_CACHE_DTYPE_BYTES:
        raise UsageError(
            f"unsupported --kv-cache-dtype {kv_cache_dtype!r}",
            fix="use one of: " + ", ".join(KV_CACHE_DTYPE_BYTES),
            id="bad_kv_cache_dtype",
        )
    size = KV_CACHE_DTYPE_BYTES[key]
    return model_dtype_bytes if size is None else size
