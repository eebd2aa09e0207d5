"""Metadata shipped in the package for the default and the most used models (the schema is
``scripts/build_model_metadata.py``'s): the last source of ``gather.model_meta``, and the
one the tests and the offline catalog read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from instinct_serve.fit.meta import ModelMeta


def _shipped_name(repo_id: str) -> str:
    return repo_id.replace("/", "--") + ".json"


def load_shipped(repo_id: str) -> ModelMeta | None:
    """Metadata shipped in the package for the default and the most used models."""
    try:
        ref = resources.files("instinct_serve.data").joinpath("models", _shipped_name(repo_id))
        if not ref.is_file():
            return None
        doc = json.loads(ref.read_text(encoding="utf-8"))
    except (OSError, ValueError, ModuleNotFoundError):
        return None
    return shipped_meta(doc)


def shipped_meta(doc: Mapping[str, Any]) -> ModelMeta:
    """A ``ModelMeta`` from one shipped JSON document (schema: scripts/build_model_metadata.py)."""
    st = doc.get("safetensors") or {}
    return ModelMeta(
        model_id=str(doc["model_id"]),
        config=dict(doc["config"]),
        dtype_counts={str(k): int(v) for k, v in (st.get("parameters") or {}).items()} or None,
        source="shipped",
        weights_source="shipped",
        source_detail=str(doc.get("source", "")),
        component_bytes={str(k): int(v) for k, v in (doc.get("component_bytes") or {}).items()},
        components_source=str(doc.get("components_source", "")),
        revision=doc.get("revision"),
        gated=bool(doc.get("gated", False)),
    ).with_config_components()


def shipped_model_ids() -> list[str]:
    try:
        folder = resources.files("instinct_serve.data").joinpath("models")
        names = [p.name for p in folder.iterdir() if p.name.endswith(".json")]
    except (OSError, ModuleNotFoundError):
        return []
    return sorted(n[: -len(".json")].replace("--", "/", 1) for n in names)
