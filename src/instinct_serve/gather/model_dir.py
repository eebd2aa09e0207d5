"""A model's metadata from a directory on this machine: a local model directory, or the
HF cache's snapshot of a Hub id (``config.json`` plus the safetensors headers, else the
index's total size, else the config's shapes).

Everything that can go wrong on a disk is an error with an id (``no_config``,
``bad_config``, ``bad_safetensors_index``, ``model_dir_unreadable``, ...): a FIFO is never
opened, a file is read up to a bound, an index cannot name a shard outside its directory.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from instinct_serve.errors import UsageError
from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.meta import MAX_CHECKPOINT_BYTES, ModelMeta
from instinct_serve.fit.safetensors_header import read_header, summarize


def hf_cache_dir() -> Path:
    """This machine's hub cache, by huggingface_hub's rules (``paths.hf_locations``)."""
    from instinct_serve.paths import local_hf_locations

    return Path(local_hf_locations().hub_cache)


MAX_CONFIG_BYTES = 32 * 2**20  # config.json: real ones are 1-200 KB (with label maps ~2 MB)
MAX_INDEX_BYTES = 64 * 2**20  # model.safetensors.index.json: DeepSeek-V3's is ~9 MB
MAX_SHARDS = 1 << 16  # shards an index may name: the largest checkpoints have a few hundred


def file_kind(path: Path) -> str:
    """``file``, ``dir``, ``missing`` or ``other`` (a FIFO, a device: never opened).

    Raises OSError for what cannot be examined (permission denied, a symbolic link loop).
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL byte
        return "missing"
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return "missing"
        raise
    if stat.S_ISREG(mode):
        return "file"
    return "dir" if stat.S_ISDIR(mode) else "other"


def local_path(text: str | Path) -> Path:
    """``text`` with ``~`` expanded (as written when no such user exists)."""
    return Path(os.path.expanduser(text))


def is_local_dir(text: str) -> bool:
    """Whether ``text`` names a directory here (False for what cannot be examined)."""
    try:
        return file_kind(local_path(text.strip())) == "dir"
    except OSError:
        return False


def why_failed(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def read_json(
    path: Path,
    *,
    error_id: str = "bad_config",
    limit: int = MAX_CONFIG_BYTES,
    fix: str = "check the file is valid JSON (re-download it)",
) -> dict[str, Any]:
    """A JSON object from a regular file of at most ``limit`` bytes, or ``error_id``."""
    try:
        kind = file_kind(path)
        if kind != "file":
            raise ValueError("missing" if kind == "missing" else f"it is not a file ({kind})")
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"larger than {limit // 2**20} MiB")
        doc = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"cannot read {path}: {why_failed(exc)}", fix=fix, id=error_id) from exc
    if not isinstance(doc, dict):
        raise UsageError(
            f"{path} is not a JSON object (it holds {type(doc).__name__})", fix=fix, id=error_id
        )
    return doc


# -- local directory and HF cache snapshot -----------------------------------------------


def _bad_index(path: Path, problem: str) -> UsageError:
    return UsageError(
        f"{path}: {problem}",
        fix="re-download model.safetensors.index.json, or remove it to read the shards' "
        "own headers",
        id="bad_safetensors_index",
    )


def _index_shards(index_path: Path, index: dict[str, Any]) -> tuple[list[str], int | None]:
    """The shard file names an index names (inside its directory), and its total_size."""
    weight_map = index.get("weight_map")
    if weight_map is None:
        weight_map = {}
    if not isinstance(weight_map, dict):
        raise _bad_index(index_path, "weight_map is not an object")
    shards: set[str] = set()
    for value in weight_map.values():
        if not isinstance(value, str) or not value or len(value) > 255 or "\0" in value:
            raise _bad_index(index_path, f"weight_map names a shard {str(value)[:60]!r}")
        rel = PurePosixPath(value)
        if rel.is_absolute() or ".." in rel.parts or "\\" in value:
            raise _bad_index(index_path, f"shard {value[:60]!r} is outside the model directory")
        shards.add(value)
        if len(shards) > MAX_SHARDS:
            raise _bad_index(index_path, f"names more than {MAX_SHARDS} shards")
    metadata = index.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise _bad_index(index_path, "metadata is not an object")
    total = metadata.get("total_size")
    if total is not None:
        if isinstance(total, float) and total.is_integer():
            total = int(total)
        if isinstance(total, bool) or not isinstance(total, int):
            raise _bad_index(index_path, f"metadata.total_size {str(total)[:40]} is not a number")
        if not 0 <= total <= MAX_CHECKPOINT_BYTES:
            raise _bad_index(index_path, f"metadata.total_size {total} is out of bounds")
    return sorted(shards), total or None


def _weights_from_dir(
    directory: Path, config: dict[str, Any]
) -> tuple[dict[str, int] | None, int | None, dict[str, int], str, list[str]]:
    """(dtype_counts, total_bytes, component_bytes, weights_source, notes) of a directory."""
    notes: list[str] = []
    index_path = directory / "model.safetensors.index.json"
    total: int | None = None
    has_index = file_kind(index_path) != "missing"
    if has_index:
        index = read_json(
            index_path,
            error_id="bad_safetensors_index",
            limit=MAX_INDEX_BYTES,
            fix="re-download model.safetensors.index.json, or remove it to read the shards' "
            "own headers",
        )
        shards, total = _index_shards(index_path, index)
        files = [directory / s for s in shards]
    else:
        files = sorted(directory.glob("*.safetensors"))[: MAX_SHARDS + 1]
        if len(files) > MAX_SHARDS:
            raise UsageError(
                f"{directory} holds more than {MAX_SHARDS} safetensors files",
                fix="pass the directory of one checkpoint",
                id="bad_safetensors",
            )
    present = [f for f in files if file_kind(f) == "file"]
    if present and len(present) == len(files):
        tensors = [t for f in present for t in read_header(f)]
        summary = summarize(tensors, ModelConfig(config))
        return (
            summary.dtype_counts,
            None,
            summary.component_bytes,
            "safetensors_headers",
            notes,
        )
    if has_index and present:
        notes.append(f"{len(files) - len(present)} of {len(files)} shards missing locally")
    if total is not None:
        notes.append("weights from the index total_size (no per-dtype split)")
        return None, total, {}, "index_total_size", notes
    return None, None, {}, "", notes


def read_local_dir(
    path: str | Path, *, model_id: str | None = None, source: str = "local_dir"
) -> ModelMeta:
    """A model directory: ``config.json`` plus safetensors headers (or index, or shapes)."""
    directory = local_path(path)
    config_path = directory / "config.json"
    try:
        kind = file_kind(config_path)
    except OSError as exc:
        raise UsageError(
            f"cannot examine {config_path}: {why_failed(exc)}",
            fix="check the permissions of the model directory (and that config.json is not "
            "a link to itself)",
            id="model_dir_unreadable",
        ) from exc
    if kind == "missing":
        raise UsageError(
            f"{directory} has no config.json",
            fix="pass a Hugging Face model directory (config.json + *.safetensors) or a hub id",
            id="no_config",
        )
    config = read_json(config_path)
    try:
        counts, total, parts, wsource, notes = _weights_from_dir(directory, config)
    except OSError as exc:
        raise UsageError(
            f"cannot examine the weight files of {directory}: {why_failed(exc)}",
            fix="check the permissions of the model directory and its files (and that no "
            "link points to itself)",
            id="model_dir_unreadable",
        ) from exc
    name = model_id or str(directory)
    if counts is None and total is None:
        meta = ModelMeta.from_config(name, config, source=source, detail=str(directory))
        return replace(meta, notes=meta.notes + tuple(notes))
    meta = ModelMeta(
        model_id=name,
        config=config,
        dtype_counts=counts,
        total_bytes=total,
        source=source,
        weights_source=wsource,
        source_detail=str(directory),
        component_bytes=parts,
        components_source="safetensors_headers" if counts is not None else "",
        notes=tuple(notes),
    )
    return meta.with_config_components()


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The HF cache snapshot directory of ``repo_id`` holding a config.json, if any (None
    too when the cache cannot be read: the other sources are asked)."""
    try:
        return _cached_snapshot(repo_id, revision)
    except (OSError, ValueError):
        return None


def _cached_snapshot(repo_id: str, revision: str | None) -> Path | None:
    repo_dir = hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / (revision or "main")
    candidates: list[Path] = []
    if ref.is_file():
        candidates.append(snapshots / ref.read_text(encoding="utf-8").strip())
    elif revision:
        candidates.append(snapshots / revision)
    candidates += sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    for snap in candidates:
        if (snap / "config.json").is_file():
            return snap
    return None
