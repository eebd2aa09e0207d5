"""Read safetensors headers only: 8-byte little-endian length, then a JSON table of tensors.

A model directory or HF cache snapshot tells its exact weight bytes per dtype without
loading a single tensor, and the tensor names tell which parts vLLM may skip (vision
towers, MTP layers, a tied ``lm_head`` duplicate).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from instinct_serve.errors import UsageError
from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.dtypes import DTYPE_BITS

MAX_HEADER_BYTES = 100 * 2**20  # the format's own limit
MAX_DIMS = 16  # tensors of real checkpoints have at most 5 dimensions
MAX_ELEMENTS = 1 << 50  # one tensor, or a checkpoint: ~1.1e15 (1T-parameter models: 1e12)
MAX_BYTES = 1 << 53  # data offsets: 8 PiB, ~4,000x the largest published checkpoint

_VISION = re.compile(
    r"(^|\.)(visual|vision_tower|vision_model|vision_encoder|multi_modal_projector|mm_projector"
    r"|audio_tower|audio_model|audio_encoder|vision_embed_tokens|image_newline)(\.|$)"
)
_MTP = re.compile(r"(^|\.)mtp(\.|_)")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d{1,9})\.")
_TIED_HEAD = {"lm_head.weight", "language_model.lm_head.weight", "model.lm_head.weight"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def elements(self) -> int:
        n = 1
        for dim in self.shape:
            n *= dim
        return n


def _tensor(name: str, entry: object) -> TensorInfo:
    """One header entry, checked: a known dtype, a shape of whole numbers, ordered offsets."""
    if not isinstance(entry, dict):
        raise ValueError(f"tensor {name!r} is not an object")
    dtype = entry.get("dtype")
    if not isinstance(dtype, str) or dtype.upper() not in DTYPE_BITS:
        raise ValueError(f"tensor {name!r} has an unknown dtype {str(dtype)[:40]!r}")
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise ValueError(f"tensor {name!r} has no shape (a list of at most {MAX_DIMS} sizes)")
    elements = 1
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= MAX_ELEMENTS:
            raise ValueError(f"tensor {name!r} has an invalid dimension {str(dim)[:40]}")
        elements *= dim
    if elements > MAX_ELEMENTS:
        raise ValueError(f"tensor {name!r} has more than 2^50 elements")
    offsets = entry.get("data_offsets")
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise ValueError(f"tensor {name!r} has no data_offsets pair")
    start, end = offsets
    for value in (start, end):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"tensor {name!r} has a data offset that is not a whole number")
    if not 0 <= start <= end <= MAX_BYTES:
        raise ValueError(f"tensor {name!r} has data_offsets out of order ({start}, {end})")
    return TensorInfo(name=str(name), dtype=dtype.upper(), shape=tuple(shape), nbytes=end - start)


def read_header(path: Path) -> list[TensorInfo]:
    """The tensor table of one ``.safetensors`` file (reads the header bytes only).

    Every entry is checked (``_tensor``), so the sums made of them stay within the bounds of
    real checkpoints; a file that breaks the format is ``bad_safetensors``.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) != 8:
                raise ValueError("shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES:
                raise ValueError(f"header length {length} exceeds the format's 100 MiB limit")
            raw = fh.read(length)
            if len(raw) != length:
                raise ValueError("file ends inside its header")
        table = json.loads(raw)
        if not isinstance(table, dict):
            raise ValueError("header is not a JSON object")
        return [_tensor(name, entry) for name, entry in table.items() if name != "__metadata__"]
    except (OSError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(
            f"cannot read the safetensors header of {path}: {reason or type(exc).__name__}",
            fix="check that the file is a complete safetensors file (re-download it)",
            id="bad_safetensors",
        ) from exc


@dataclass(frozen=True)
class WeightSummary:
    dtype_counts: dict[str, int]
    dtype_bytes: dict[str, int]
    component_bytes: dict[str, int]
    tensors: int

    @property
    def total_bytes(self) -> int:
        return sum(self.dtype_bytes.values())


def component_of(name: str, config: ModelConfig) -> str:
    """``vision``, ``mtp`` or ``language`` for a checkpoint tensor name."""
    if _VISION.search(name):
        return "vision"
    if _MTP.search(name):
        return "mtp"
    if config.mtp_layers:
        match = _LAYER.search(name)
        try:
            n_layers = config.num_layers
        except KeyError:
            n_layers = None
        if match and n_layers is not None and int(match.group(1)) >= n_layers:
            return "mtp"  # DeepSeek keeps its MTP layers after the last decoder layer
    return "language"


def summarize(tensors: Iterable[TensorInfo], config: ModelConfig) -> WeightSummary:
    counts: dict[str, int] = {}
    sizes: dict[str, int] = {}
    parts: dict[str, int] = {}
    n = 0
    tied = config.tie_word_embeddings
    for t in tensors:
        n += 1
        counts[t.dtype] = counts.get(t.dtype, 0) + t.elements
        sizes[t.dtype] = sizes.get(t.dtype, 0) + t.nbytes
        part = component_of(t.name, config)
        if tied and t.name in _TIED_HEAD:
            part = "tied_lm_head"
        if part != "language":
            parts[part] = parts.get(part, 0) + t.nbytes
    return WeightSummary(dict(sorted(counts.items())), sizes, parts, n)
