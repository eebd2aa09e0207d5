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

MAX_HEADER_BYTES = 100 * 2**20  # the format's own limit

_VISION = re.compile(
    r"(^|\.)(visual|vision_tower|vision_model|vision_encoder|multi_modal_projector|mm_projector"
    r"|audio_tower|audio_model|audio_encoder|vision_embed_tokens|image_newline)(\.|$)"
)
_MTP = re.compile(r"(^|\.)mtp(\.|_)")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
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


def read_header(path: Path) -> list[TensorInfo]:
    """The tensor table of one ``.safetensors`` file (reads the header bytes only)."""
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
        out = []
        for name, entry in table.items():
            if name == "__metadata__":
                continue
            start, end = entry["data_offsets"]
            out.append(
                TensorInfo(
                    name=str(name),
                    dtype=str(entry["dtype"]).upper(),
                    shape=tuple(int(d) for d in entry["shape"]),
                    nbytes=int(end) - int(start),
                )
            )
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"cannot read the safetensors header of {path}: {exc}",
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
