"""Where model metadata comes from, in order: local directory, HF cache, Hub, shipped data.

The Hub is reached through ``huggingface_hub`` with the endpoint (``HF_ENDPOINT``), offline
switch (``HF_HUB_OFFLINE``) and token (``HF_TOKEN``) read when the call is made, never at
import, so tests and long-lived processes see the environment they run in. Only
``config.json`` is downloaded; weight sizes come from the Hub's per-dtype safetensors
counts. A Hub answer is kept in the instinct cache so the next ``fit`` or ``plan`` of that
model works offline. The directories are read by ``gather.model_dir``; the metadata shipped
in the package is ``fit.shipped``'s.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from instinct_serve.credentials import AGENT_TOKEN
from instinct_serve.errors import InstinctError, NotReadyError, UsageError
from instinct_serve.fit.meta import ModelMeta
from instinct_serve.fit.shipped import load_shipped
from instinct_serve.gather.model_dir import (
    cached_snapshot,
    file_kind,
    hf_cache_dir,
    local_path,
    read_json,
    read_local_dir,
    why_failed,
)

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
    """A gated model the token cannot reach: the fix for a person at a terminal, and
    (``agent_fix``) for an MCP caller, who cannot export a variable into its server."""
    url = _license_url(repo_id)
    if has_token:
        return NotReadyError(
            f"{repo_id} is gated and your Hugging Face token has no access to it yet",
            fix=f"open {url}, accept the license with the account of your token, then retry",
            agent_fix=f"ask the user to accept the license at {url} with the account of the "
            "token this server has, then call again",
            id="gated_model",
            details={"license_url": url},
        )
    return NotReadyError(
        f"{repo_id} is gated: its license must be accepted and a token is needed",
        fix=f"accept the license at {url}, then export HF_TOKEN=<a read token of that account>",
        agent_fix=f"ask the user to accept the license at {url}; then {AGENT_TOKEN}; then call "
        "again",
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
    config = read_json(Path(path))
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
    local = _model_dir(text, suggest)
    if local is not None:
        return read_local_dir(local)
    return _hub_id_meta(text, revision, timeout, suggest)


def _model_dir(text: str, suggest: Suggest | None) -> Path | None:
    """The directory ``text`` names; None for a hub id; an error for neither."""
    local = local_path(text)
    try:
        kind = file_kind(local)
    except OSError as exc:
        raise UsageError(
            f"cannot examine {text}: {why_failed(exc)}",
            fix="check the path and its permissions, or pass a hub id such as Qwen/Qwen3.5-9B",
            id="model_dir_unreadable",
        ) from exc
    if kind == "dir":
        return local
    if _looks_like_path(text) or not _REPO_ID.match(text):
        if kind != "missing" or _looks_like_path(text):
            raise UsageError(
                f"{text} is not a model directory",
                fix="pass a directory holding config.json, or a hub id such as Qwen/Qwen3.5-9B",
                id="not_a_model_dir",
            )
        raise not_found_error(text, suggest, why="not a hub id (org/name) nor a directory")
    return None


def _hub_id_meta(
    repo_id: str, revision: str | None, timeout: float, suggest: Suggest | None
) -> ModelMeta:
    """A hub id's metadata: the HF cache's full snapshot, a fresh kept answer, the Hub, then
    whatever stands in (a stale kept answer, shipped metadata, a partial snapshot)."""
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
        meta = _ask_hub(repo_id, revision, timeout, suggest, shipped, notes)
        if meta is not None:
            return meta
    if cached is not None and notes:  # a stale Hub answer beats no answer
        return replace(cached, notes=cached.notes + tuple(notes))
    for standin in (shipped, snap_meta):
        if standin is not None:
            return replace(standin, notes=standin.notes + tuple(notes))
    if offline or notes:
        raise _unavailable(repo_id, offline, notes, suggest)
    raise not_found_error(repo_id, suggest, why="no source has it")


def _ask_hub(
    repo_id: str,
    revision: str | None,
    timeout: float,
    suggest: Suggest | None,
    shipped: ModelMeta | None,
    notes: list[str],
) -> ModelMeta | None:
    """The Hub's answer (kept for next time), or shipped metadata standing in for a gated
    repository; None, with a note, when another source must answer; else the error."""
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
        if shipped is None:
            raise not_found_error(
                repo_id, suggest, why=f"the Hub at {hub_endpoint()} answered 404/401"
            ) from exc
        notes.append("the Hub did not find this id; shipped metadata used")
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
        status = getattr(getattr(exc, "response", None), "status_code", "?")
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
    return None


def _unavailable(
    repo_id: str, offline: bool, notes: list[str], suggest: Suggest | None
) -> InstinctError:
    matches = suggest(repo_id) if suggest else []
    why = "HF_HUB_OFFLINE is set" if offline else notes[-1]
    first = (
        "unset HF_HUB_OFFLINE to ask the Hub"
        if offline
        else f"check the network path to {hub_endpoint()} (HF_ENDPOINT)"
    )
    return NotReadyError(
        f"no metadata for {repo_id} on this machine and the Hub cannot be asked ({why})",
        fix=first
        + ", or pass the model's local directory"
        + (f"; models known offline include: {', '.join(matches[:5])}" if matches else ""),
        id="model_metadata_unavailable",
        details={"close_matches": matches[:5]},
    )
