"""Write real safetensors files (headers and data) with the ``safetensors`` package."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import TensorSpec, serialize_file

TORCH_NAMES = {
    "BF16": ("bfloat16", 2.0),
    "F16": ("float16", 2.0),
    "F32": ("float32", 4.0),
    "F8_E4M3": ("float8_e4m3fn", 1.0),
    "U8": ("uint8", 1.0),
    "I8": ("int8", 1.0),
    "I32": ("int32", 4.0),
    "F4": ("float4_e2m1fn_x2", 0.5),
}


def write_safetensors(path: Path, tensors: Mapping[str, tuple[str, tuple[int, ...]]]) -> int:
    """Write ``{name: (dtype, logical shape)}``; returns the data bytes written."""
    keep: list[np.ndarray[Any, Any]] = []
    specs: dict[str, TensorSpec] = {}
    total = 0
    for name, (dtype, shape) in tensors.items():
        torch_name, size = TORCH_NAMES[dtype]
        elements = int(np.prod(shape))
        nbytes = int(elements * size)
        buf = np.zeros(max(1, nbytes), dtype=np.uint8)
        keep.append(buf)
        storage = (*shape[:-1], shape[-1] // 2) if dtype == "F4" else shape
        specs[name] = TensorSpec(
            dtype=torch_name, shape=list(storage), data_ptr=buf.ctypes.data, data_len=nbytes
        )
        total += nbytes
    serialize_file(specs, str(path), metadata={"format": "pt"})
    return total


def write_index(directory: Path, weight_map: dict[str, str], total_size: int) -> None:
    doc = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(doc))
