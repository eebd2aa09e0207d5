"""Where model metadata comes from, in order: local directory, HF cache, Hub, shipped data.

Thin adapters around the pure estimator. The Hub is reached through ``huggingface_hub``
with the endpoint (``HF_ENDPOINT``), offline switch (``HF_HUB_OFFLINE``) and token
(``HF_TOKEN``) read when the call is made, never at import, so tests and long-lived
processes see the environment they run in. Only ``config.json`` is downloaded; weight
sizes come from the Hub's per-dtype safetensors counts. A Hub answer is kept in the
instinct cache so the next ``fit`` or ``plan`` of that model works offline.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.meta import MAX_CHECKPOINT_BYTES, ModelMeta
from instinct_serve.fit.safetensors_header import read_header, summarize

DEFAULT_HUB_TIMEOUT_S = 10.0
HUB_CACHE_TTL_S = 7 * 24 * 3600  # a kept Hub answer is asked again after a week
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,96}$")
_TRUE = {"1", "true", "yes", "on"}

Suggest = Callable[[str], list[str]]


def hub_offline() -> bool:
    return (
        os.environ.get("HF_HUB_OFFLINE", "") or os.environ.get("TRANSFORMERS_OFFLINE", "")
    ).strip().lower() in _TRUE


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_token() -> str | None:
    """The token from the environment or ``hf auth login`` (never printed)."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        return token.strip()
    try:
        from huggingface_hub import get_token

        saved = get_token()
    except Exception:
        return None
    return str(saved) if saved else None


def hf_cache_dir() -> Path:
    """This machine's hub cache, by huggingface_hub's rules (``paths.hf_locations``)."""
    from instinct_serve.paths import local_hf_locations

    return Path(local_hf_locations().hub_cache)


MAX_CONFIG_BYTES = 32 * 2**20  # config.json: real ones are 1-200 KB (with label maps ~2 MB)
MAX_INDEX_BYTES = 64 * 2**20  # model.safetensors.index.json: DeepSeek-V3's is ~9 MB
MAX_SHARDS = 1 << 16  # shards an index may name: the largest checkpoints have a few hundred


def _file_kind(path: Path) -> str:
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
        return _file_kind(local_path(text.strip())) == "dir"
    except OSError:
        return False


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _read_json(
    path: Path,
    *,
    error_id: str = "bad_config",
    limit: int = MAX_CONFIG_BYTES,
    fix: str = "check the file is valid JSON (re-download it)",
) -> dict[str, Any]:
    """A JSON object from a regular file of at most ``limit`` bytes, or ``error_id``."""
    try:
        kind = _file_kind(path)
        if kind != "file":
            raise ValueError("missing" if kind == "missing" else f"it is not a file ({kind})")
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"larger than {limit // 2**20} MiB")
        doc = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"cannot read {path}: {_why(exc)}", fix=fix, id=error_id) from exc
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
    has_index = _file_kind(index_path) != "missing"
    if has_index:
        index = _read_json(
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
    present = [f for f in files if _file_kind(f) == "file"]
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
        kind = _file_kind(config_path)
    except OSError as exc:
        raise UsageError(
            f"cannot examine {config_path}: {_why(exc)}",
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
    config = _read_json(config_path)
    try:
        counts, total, parts, wsource, notes = _weights_from_dir(directory, config)
    except OSError as exc:
        raise UsageError(
            f"cannot examine the weight files of {directory}: {_why(exc)}",
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


# -- the instinct cache of Hub answers ---------------------------------------------------


def _meta_cache_path(repo_id: str) -> Path:
    from instinct_serve.paths import cache_dir

    return cache_dir() / "models" / (repo_id.replace("/", "--") + ".json")


def _load_cached_meta(repo_id: str) -> tuple[ModelMeta, float] | None:
    """A kept Hub answer and its age in seconds."""
    path = _meta_cache_path(repo_id)
    if not path.is_file():
        return None
    try:
        meta = ModelMeta.from_dict(json.loads(path.read_text(encoding="utf-8")))
        age = time.time() - path.stat().st_mtime
    except (OSError, ValueError, KeyError, TypeError, RecursionError, InstinctError):
        return None  # a damaged kept answer is no answer: the Hub is asked again
    return replace(meta, source="hub_cache"), age


def _store_cached_meta(meta: ModelMeta) -> None:
    path = _meta_cache_path(meta.model_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(meta.to_dict(), indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a cache that cannot be written only costs a later Hub call


# A Hub that could not be reached is not asked again for this long when another source
# has the model: on a firewalled host every command would otherwise wait on the network.
HUB_DOWN_TTL_S = 600.0


def _hub_down_path() -> Path:
    from instinct_serve.paths import cache_dir

    return cache_dir() / "hub_unreachable.json"


def hub_down_recently() -> str | None:
    """Why the Hub at ``HF_ENDPOINT`` was unreachable less than ``HUB_DOWN_TTL_S`` ago."""
    path = _hub_down_path()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        age = time.time() - float(doc["at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if doc.get("endpoint") != hub_endpoint() or not 0 <= age < HUB_DOWN_TTL_S:
        return None
    why = doc.get("why") or "no answer"
    return f"{why}; {age:.0f} s ago, not asked again for {HUB_DOWN_TTL_S / 60:.0f} min"


def _remember_hub_down(why: str | None) -> None:
    """Record (why) or forget (None) that the Hub could not be reached."""
    path = _hub_down_path()
    try:
        if why is None:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"endpoint": hub_endpoint(), "at": time.time(), "why": why}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # only costs another attempt


# -- the Hub -----------------------------------------------------------------------------


class HubUnreachable(Exception):
    """Network trouble: fall through to shipped metadata."""


_TRANSPORT_NAMES = {"TransportError", "RequestError", "ConnectionError", "TimeoutException"}


def _is_transport_error(exc: BaseException) -> bool:
    """httpx/httpx2/requests transport failures, without importing the HTTP client."""
    return any(cls.__name__ in _TRANSPORT_NAMES for cls in type(exc).__mro__)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip(": ")


def _license_url(repo_id: str) -> str:
    return f"{hub_endpoint()}/{repo_id}"


def gated_error(repo_id: str, has_token: bool) -> InstinctError:
    url = _license_url(repo_id)
    if has_token:
        return NotReadyError(
            f"{repo_id} is gated and your Hugging Face token has no access to it yet",
            fix=f"open {url}, accept the license with the account of your token, then retry",
            id="gated_model",
            details={"license_url": url},
        )
    return NotReadyError(
        f"{repo_id} is gated: its license must be accepted and a token is needed",
        fix=f"accept the license at {url}, then export HF_TOKEN=<a read token of that account>",
        id="gated_model",
        details={"license_url": url},
    )


def not_found_error(model: str, suggest: Suggest | None, *, why: str) -> InstinctError:
    matches = suggest(model) if suggest else []
    fix = (
        "did you mean: " + ", ".join(matches[:5]) + "?"
        if matches
        else "check the id on huggingface.co (org/name), or pass a local model directory"
    )
    return UsageError(
        f"model {model!r} not found ({why})",
        fix=fix,
        id="model_not_found",
        details={"close_matches": matches[:5]},
    )


def fetch_hub_meta(
    repo_id: str, *, revision: str | None = None, timeout: float = DEFAULT_HUB_TIMEOUT_S
) -> ModelMeta:
    """``model_info`` for the per-dtype counts, ``config.json`` through ``hf_hub_download``.

    Raises the huggingface_hub errors (RepositoryNotFoundError, GatedRepoError, ...) or
    ``HubUnreachable`` for network failures.
    """
    from huggingface_hub import HfApi, constants, hf_hub_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
    )

    # huggingface_hub reads HF_HUB_OFFLINE once at import; honour the value of now.
    constants.HF_HUB_OFFLINE = hub_offline()
    endpoint = hub_endpoint()
    token = hub_token()
    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        info = api.model_info(repo_id, revision=revision, timeout=timeout)
        path = hf_hub_download(
            repo_id,
            "config.json",
            revision=getattr(info, "sha", None) or revision,
            endpoint=endpoint,
            token=token or False,
            cache_dir=hf_cache_dir(),
            etag_timeout=timeout,
        )
    except HfHubHTTPError as exc:
        response = getattr(exc, "response", None)
        status = int(getattr(response, "status_code", 0) or 0)
        if status >= 500 or status == 429:
            raise HubUnreachable(f"the Hub answered {status}") from exc
        raise
    except (OfflineModeIsEnabled, LocalEntryNotFoundError, TimeoutError, ConnectionError) as exc:
        raise HubUnreachable(_short(exc)) from exc
    except Exception as exc:
        if _is_transport_error(exc):
            raise HubUnreachable(_short(exc)) from exc
        raise
    config = _read_json(Path(path))
    st = getattr(info, "safetensors", None)
    counts = dict(st.parameters) if st is not None and getattr(st, "parameters", None) else None
    gated = bool(getattr(info, "gated", False))
    detail = f"{endpoint}/{repo_id}"
    sha = getattr(info, "sha", None)
    if counts:
        meta = ModelMeta(
            model_id=repo_id,
            config=config,
            dtype_counts=_hub_counts(repo_id, counts),
            source="hub",
            weights_source="hub_safetensors",
            source_detail=detail,
            revision=sha,
            gated=gated,
        ).with_config_components()
    else:
        meta = replace(
            ModelMeta.from_config(repo_id, config, source="hub", detail=detail),
            revision=sha,
            gated=gated,
        )
    return meta


def _hub_counts(repo_id: str, counts: Mapping[str, Any]) -> dict[str, int]:
    """The Hub's per-dtype parameter counts, whole numbers (``ModelMeta`` bounds them)."""
    out: dict[str, int] = {}
    for dtype, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int):
            raise UsageError(
                f"the Hub's safetensors metadata of {repo_id} has a {str(dtype)[:20]} count "
                f"{str(count)[:40]!r} that is not a whole number",
                fix="pass the model's local directory, or retry later",
                id="bad_model_metadata",
            )
        out[str(dtype).upper()] = count
    return out


def quantized_siblings(
    repo_id: str, *, limit: int = 6, timeout: float = DEFAULT_HUB_TIMEOUT_S
) -> list[str]:
    """Hub ids of quantized checkpoints of ``repo_id``: its own org's, then AMD's (``amd/``).

    One search request per org (``/api/models?author=...&search=<name>``), without the
    library's retry loop: alternatives are a suggestion, so an unreachable Hub gives an
    empty list at once rather than half a minute of retries.
    """
    if hub_offline() or "/" not in repo_id:
        return []
    from huggingface_hub import get_session

    org, name = repo_id.split("/", 1)
    token = hub_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    marker = re.compile(r"fp8|fp4|awq|gptq|int4|int8|w4a16|w8a8|quantized", re.I)
    found: list[str] = []
    for author in (org, "amd"):
        try:
            response = get_session().get(
                f"{hub_endpoint()}/api/models",
                params={"author": author, "search": name, "limit": 50},
                headers=headers,
                timeout=timeout,
            )
            rows = response.json() if response.status_code == 200 else []
        except Exception:
            break  # unreachable: do not try the next org either
        for row in rows if isinstance(rows, list) else []:
            mid = str(row.get("id") or row.get("modelId") or "") if isinstance(row, dict) else ""
            tail = mid.rsplit("/", 1)[-1]
            if mid != repo_id and tail.lower().startswith(name.lower()) and marker.search(tail):
                found.append(mid)
    return list(dict.fromkeys(found))[:limit]


# -- shipped metadata --------------------------------------------------------------------


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


# -- the chain ---------------------------------------------------------------------------


def _looks_like_path(model: str) -> bool:
    return model.startswith((".", "/", "~")) or os.sep in model.strip("/").replace("/", "", 1)


def load_model_meta(
    model: str,
    *,
    revision: str | None = None,
    timeout: float = DEFAULT_HUB_TIMEOUT_S,
    suggest: Suggest | None = None,
) -> ModelMeta:
    """Metadata for a hub id or a local model directory, from the first source that has it."""
    text = model.strip()
    local = local_path(text)
    try:
        kind = _file_kind(local)
    except OSError as exc:
        raise UsageError(
            f"cannot examine {text}: {_why(exc)}",
            fix="check the path and its permissions, or pass a hub id such as Qwen/Qwen3.5-9B",
            id="model_dir_unreadable",
        ) from exc
    if kind == "dir":
        return read_local_dir(local)
    if _looks_like_path(text) or not _REPO_ID.match(text):
        if kind != "missing" or _looks_like_path(text):
            raise UsageError(
                f"{text} is not a model directory",
                fix="pass a directory holding config.json, or a hub id such as Qwen/Qwen3.5-9B",
                id="not_a_model_dir",
            )
        raise not_found_error(text, suggest, why="not a hub id (org/name) nor a directory")
    repo_id = text
    notes: list[str] = []
    offline = hub_offline()
    snapshot = cached_snapshot(repo_id, revision)
    snap_meta = read_local_dir(snapshot, model_id=repo_id, source="hf_cache") if snapshot else None
    if snap_meta is not None and snap_meta.weights_source == "safetensors_headers":
        return snap_meta
    kept = _load_cached_meta(repo_id) if revision is None else None
    cached = kept[0] if kept else None
    if cached is not None and (offline or (kept is not None and kept[1] < HUB_CACHE_TTL_S)):
        return replace(cached, config=snap_meta.config) if snap_meta else cached
    if snap_meta is not None and snap_meta.checkpoint_bytes is not None and offline:
        return snap_meta
    shipped = load_shipped(repo_id)
    down = hub_down_recently() if not offline else None
    fallback = any(m is not None for m in (shipped, cached, snap_meta))
    if down is not None and fallback:
        notes.append(f"Hub unreachable ({down})")
    elif not offline:
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        try:
            meta = fetch_hub_meta(repo_id, revision=revision, timeout=timeout)
        except GatedRepoError as exc:
            if shipped is not None:
                return replace(
                    shipped,
                    gated=True,
                    notes=(f"gated on the Hub: accept the license at {_license_url(repo_id)}",),
                )
            raise gated_error(repo_id, hub_token() is not None) from exc
        except RevisionNotFoundError as exc:
            raise UsageError(
                f"revision {revision!r} of {repo_id} not found",
                fix="check the branch, tag or commit on the Hub",
                id="revision_not_found",
            ) from exc
        except RepositoryNotFoundError as exc:
            if shipped is not None:
                notes.append("the Hub did not find this id; shipped metadata used")
            else:
                raise not_found_error(
                    repo_id, suggest, why=f"the Hub at {hub_endpoint()} answered 404/401"
                ) from exc
        except EntryNotFoundError as exc:
            if shipped is None:
                raise UsageError(
                    f"{repo_id} has no config.json (a Mistral-format or non-transformers repo)",
                    fix="serve a transformers-format checkpoint of the model, or pass a local "
                    "directory holding config.json",
                    id="no_config",
                ) from exc
            notes.append("no config.json on the Hub; shipped metadata used")
        except HfHubHTTPError as exc:
            response = getattr(exc, "response", None)
            status = getattr(response, "status_code", "?")
            if shipped is None:
                raise NotReadyError(
                    f"the Hub refused the metadata of {repo_id} (HTTP {status})",
                    fix="check HF_TOKEN and the access rights of its account to this repository",
                    id="hub_refused",
                ) from exc
            notes.append(f"the Hub answered HTTP {status}; shipped metadata used")
        except HubUnreachable as exc:
            notes.append(f"Hub unreachable ({exc})")
            _remember_hub_down(str(exc))
        else:
            _remember_hub_down(None)
            _store_cached_meta(meta)
            return meta
    if cached is not None and notes:  # a stale Hub answer beats no answer
        return replace(cached, notes=cached.notes + tuple(notes))
    if shipped is not None:
        return replace(shipped, notes=shipped.notes + tuple(notes))
    if snap_meta is not None:
        return replace(snap_meta, notes=snap_meta.notes + tuple(notes))
    if offline or notes:
        matches = suggest(repo_id) if suggest else []
        why = "HF_HUB_OFFLINE is set" if offline else notes[-1]
        first = (
            "unset HF_HUB_OFFLINE to ask the Hub"
            if offline
            else f"check the network path to {hub_endpoint()} (HF_ENDPOINT)"
        )
        raise NotReadyError(
            f"no metadata for {repo_id} on this machine and the Hub cannot be asked ({why})",
            fix=first
            + ", or pass the model's local directory"
            + (f"; models known offline include: {', '.join(matches[:5])}" if matches else ""),
            id="model_metadata_unavailable",
            details={"close_matches": matches[:5]},
        )
    raise not_found_error(repo_id, suggest, why="no source has it")
