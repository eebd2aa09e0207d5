"""``ModelMeta``: everything the estimator needs to know about a checkpoint, and where from.

Adapters (local directory, HF cache, Hub, shipped data) each produce one; the estimator
reads only this. ``dtype_counts`` are stored elements per safetensors dtype for the whole
checkpoint; ``component_bytes`` are the stored bytes of parts vLLM may not load (``vision``
towers with ``--language-model-only``, ``mtp`` layers without MTP speculation, a
``tied_lm_head`` duplicate of tied embeddings). Each value says where it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from instinct_serve.errors import UsageError
from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.dtypes import dtype_bytes
from instinct_serve.fit.params import UnsupportedArchitecture, count_parameters

SOURCES = ("local_dir", "hf_cache", "hub", "hub_cache", "shipped", "config")
# How the weight size is known, surest first: read from the checkpoint (safetensors headers,
# index, the Hub's per-dtype counts), computed from config.json's tensor shapes, or
# estimated from a parameter count and a precision (the recipe's).
SIZE_BASES = ("exact", "config", "estimated")
_EXACT_WEIGHTS = ("safetensors_headers", "hub_safetensors", "index_total_size")
SHAPES_TEXT = "computed from the config's tensor shapes"  # shipped files built from shapes
# Weight figures, whatever their source (headers, an index, the Hub, a cache, config
# shapes). The largest published checkpoints hold ~1-2e12 parameters in ~2 TB; these bounds
# are far above (the largest model the config bounds admit, 1,024 layers of 4,096 experts
# 2^17 x 2^20, has ~1.7e18 elements) and keep every sum and float conversion finite.
MAX_CHECKPOINT_ELEMENTS = 1 << 62  # ~4.6e18 stored elements of one dtype
MAX_CHECKPOINT_BYTES = 1 << 63  # ~9.2e18 bytes


def _checked_figure(what: str, value: Any, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise UsageError(
            f"the model's weight metadata has {what} = {str(value)[:40]}, outside [0, {high}]",
            fix="check the model's safetensors files or index (re-download them)",
            id="bad_model_metadata",
        )


@dataclass(frozen=True)
class ModelMeta:
    model_id: str
    config: dict[str, Any]
    dtype_counts: dict[str, int] | None = None
    total_bytes: int | None = None  # only a total is known (index ``metadata.total_size``)
    source: str = "config"
    weights_source: str = "unknown"
    source_detail: str = ""
    component_bytes: dict[str, int] = field(default_factory=dict)
    components_source: str = ""
    revision: str | None = None
    gated: bool = False
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Every figure in bounds and the config's numbers checked (``check_config``), once,
        whatever source built the metadata."""
        for dtype, count in (self.dtype_counts or {}).items():
            _checked_figure(f"a {dtype} count", count, MAX_CHECKPOINT_ELEMENTS)
        if self.total_bytes is not None:
            _checked_figure("total_size", self.total_bytes, MAX_CHECKPOINT_BYTES)
        for part, size in self.component_bytes.items():
            _checked_figure(f"{part} bytes", size, MAX_CHECKPOINT_BYTES)
        ModelConfig(self.config)

    @property
    def size_basis(self) -> str:
        """``exact``, ``config`` or ``estimated`` (``SIZE_BASES``): how sure the weights are."""
        if self.weights_source in _EXACT_WEIGHTS:
            return "exact"
        if self.weights_source == "shipped":
            return "config" if SHAPES_TEXT in self.source_detail else "exact"
        if self.weights_source == "config_shapes":
            return "config"
        return "estimated"

    @property
    def checkpoint_bytes(self) -> int | None:
        """Exact stored weight bytes, or None when nothing says how big the weights are."""
        if self.dtype_counts:
            return dtype_bytes(self.dtype_counts)
        return self.total_bytes

    def with_config_components(self) -> ModelMeta:
        """Fill parts (vision, MTP) from config shapes when the metadata had no tensor names,
        and a stored ``lm_head`` of tied embeddings from the sizes (``tied_head_bytes``)."""
        if self.components_source:
            return self
        try:
            counted = count_parameters(self.config)
        except UnsupportedArchitecture:
            return self
        parts = {k: v for k, v in counted.component_bytes().items() if k != "language"}
        tied = self.tied_head_bytes(counted.total_bytes)
        if tied:
            parts["tied_lm_head"] = tied
        return replace(self, component_bytes=parts, components_source="config_shapes")

    def tied_head_bytes(self, shapes_bytes: int) -> int:
        """The stored ``lm_head`` of tied embeddings, from sizes alone: vLLM never loads it
        (``tie_word_embeddings``), and a checkpoint that stores it anyway (Qwen/Qwen3-0.6B:
        1,503,264,768 bytes for 1,192,099,840 of shapes) holds exactly vocab x hidden x
        dtype bytes more than the config's shapes. 0 unless the difference is exactly that."""
        cfg = ModelConfig(self.config)
        stored = self.checkpoint_bytes
        if not cfg.tie_word_embeddings or stored is None:
            return 0
        try:
            head = (cfg.vocab_size or 0) * cfg.hidden_size * cfg.dtype_bytes
        except (KeyError, TypeError):
            return 0
        return head if head and stored - shapes_bytes == head else 0

    @classmethod
    def from_config(
        cls, model_id: str, config: Mapping[str, Any], *, source: str, detail: str = ""
    ) -> ModelMeta:
        """Weights computed from the config's tensor shapes (known families only)."""
        try:
            counted = count_parameters(config)
        except UnsupportedArchitecture as exc:
            return cls(
                model_id=model_id,
                config=dict(config),
                source=source,
                source_detail=detail,
                notes=(f"weight size unknown: {exc}",),
            )
        parts = {k: v for k, v in counted.component_bytes().items() if k != "language"}
        return cls(
            model_id=model_id,
            config=dict(config),
            dtype_counts=counted.dtype_counts,
            source=source,
            weights_source="config_shapes",
            source_detail=detail,
            component_bytes=parts,
            components_source="config_shapes",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "source": self.source,
            "weights_source": self.weights_source,
            "source_detail": self.source_detail,
            "revision": self.revision,
            "gated": self.gated,
            "dtype_counts": dict(self.dtype_counts) if self.dtype_counts else None,
            "total_bytes": self.total_bytes,
            "checkpoint_bytes": self.checkpoint_bytes,
            "component_bytes": dict(self.component_bytes),
            "components_source": self.components_source,
            "notes": list(self.notes),
            "config": self.config,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ModelMeta:
        counts = doc.get("dtype_counts")
        return cls(
            model_id=str(doc["model_id"]),
            config=dict(doc.get("config") or {}),
            dtype_counts={str(k): int(v) for k, v in counts.items()} if counts else None,
            total_bytes=int(doc["total_bytes"]) if doc.get("total_bytes") else None,
            source=str(doc.get("source", "config")),
            weights_source=str(doc.get("weights_source", "unknown")),
            source_detail=str(doc.get("source_detail", "")),
            component_bytes={str(k): int(v) for k, v in (doc.get("component_bytes") or {}).items()},
            components_source=str(doc.get("components_source", "")),
            revision=doc.get("revision"),
            gated=bool(doc.get("gated", False)),
            notes=tuple(doc.get("notes") or ()),
        )
