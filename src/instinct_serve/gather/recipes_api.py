"""The recipes project's JSON API (``https://recipes.vllm.ai``) as a second sync source.

Routes (upstream ``scripts/build-recipes-api.mjs``)::

    /models.json                  [{hf_id, title, provider, url, json, derived_from?}]
    /{hf_id}.json                 the recipe (dates normalised, ``recommended_command``
                                  with ``by_hardware: {hw: "/{hf_id}/hw/{hw}.json"}``)
    /{hf_id}/hw/{hw}.json         upstream's own rendering for one GPU: argv, env, image

``hf_id`` there comes from the file path (``Google/gemma-4-31B-it``) and can differ in case
from ``model.model_id``; entries with ``derived_from`` are variants promoted to their own
page and are already in their parent's ``variants``. The per-GPU renderings for MI300X,
MI325X and MI355X are kept in the cache to cross-check our own plans.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from instinct_serve.catalog.parse import ParsedRecipe, ParseResult, RecipeFileError, Skipped
from instinct_serve.errors import InstinctError
from instinct_serve.gather.http import HttpErrors, get, json_body
from instinct_serve.hardware.profiles import UPSTREAM_HARDWARE

if TYPE_CHECKING:
    import httpx

DEFAULT_API_URL = "https://recipes.vllm.ai"
AMD_HARDWARE = UPSTREAM_HARDWARE
_API_ONLY_KEYS = ("hf_id", "recommended_command")
_RENDER_KEYS = ("variant", "strategy", "deploy_type", "node_count", "docker_image")


class ApiError(InstinctError):
    default_id = "recipes_api_failed"


_ERRORS = HttpErrors(
    unreachable=lambda url, exc: ApiError(
        f"cannot reach the recipes API at {url} ({type(exc).__name__}: {exc})",
        fix="check the network (or --api-url), then retry",
        id="recipes_api_unreachable",
    ),
    status=lambda url, resp: ApiError(
        f"the recipes API answered HTTP {resp.status_code} for {url}",
        fix="retry later; check --api-url",
    ),
    bad_json=lambda url: ApiError(
        f"the recipes API returned invalid JSON for {url}", fix="retry later"
    ),
)


@dataclass
class ApiResult:
    parsed: ParseResult
    rendered: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: int = 0
    notes: list[str] = field(default_factory=list)


class _Api:
    def __init__(self, client: httpx.Client, base: str) -> None:
        self.client = client
        self.base = base.rstrip("/") + "/"
        self.origin = urlsplit(self.base)[:2]
        self.requests = 0
        self._lock = threading.Lock()

    def url(self, path: str) -> str:
        url = urljoin(self.base, path.lstrip("/"))
        if urlsplit(url)[:2] != self.origin:
            raise ApiError(
                f"the recipes API linked outside {self.base} ({url})",
                fix="check --api-url",
            )
        return url

    def get(self, path: str, *, missing_ok: bool = False) -> Any:
        url = self.url(path)
        with self._lock:
            self.requests += 1
        resp = get(self.client, url, _ERRORS, also_ok=(404,) if missing_ok else ())
        if resp.status_code == 404:
            return None
        return json_body(resp, url, _ERRORS)


def _render(doc: Any) -> dict[str, Any] | None:
    """The parts of one per-GPU rendering we keep (single node: argv; else the head's)."""
    if not isinstance(doc, dict):
        return None
    argv = doc.get("argv")
    if not isinstance(argv, list):
        argv = doc.get("head_argv")
    env = doc.get("env")
    if not isinstance(argv, list):
        return None
    out: dict[str, Any] = {
        "argv": [str(a) for a in argv],
        "env": {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
    }
    for key in _RENDER_KEYS:
        if key in doc:
            out[key] = doc[key]
    return out


def fetch_api(
    client: httpx.Client,
    api_url: str = DEFAULT_API_URL,
    *,
    hardware: tuple[str, ...] = AMD_HARDWARE,
    workers: int = 16,
) -> ApiResult:
    """Every recipe of the API, validated, plus its AMD renderings; ApiError on I/O trouble."""
    from instinct_serve.catalog.parse import validate_data

    api = _Api(client, api_url)
    index = api.get("/models.json")
    if not isinstance(index, list):
        raise ApiError("the recipes API's models.json is not a list", fix="check --api-url")
    entries = [
        e
        for e in index
        if isinstance(e, dict) and isinstance(e.get("hf_id"), str) and not e.get("derived_from")
    ]

    def one(entry: dict[str, Any]) -> tuple[ParsedRecipe | Skipped, dict[str, Any]]:
        hf_id = entry["hf_id"]
        source_path = f"models/{hf_id}.yaml"
        doc = api.get(str(entry.get("json") or f"/{hf_id}.json"), missing_ok=True)
        if doc is None:
            return Skipped(source_path, "listed in models.json but its JSON is missing (404)"), {}
        if not isinstance(doc, dict):
            return Skipped(source_path, "recipe JSON is not an object"), {}
        by_hw = (doc.get("recommended_command") or {}).get("by_hardware") or {}
        data = {k: v for k, v in doc.items() if k not in _API_ONLY_KEYS}
        try:
            parsed: ParsedRecipe | Skipped = ParsedRecipe(source_path, validate_data(data))
        except RecipeFileError as exc:
            return Skipped(source_path, str(exc)), {}
        renders: dict[str, Any] = {}
        for hw in hardware:
            link = by_hw.get(hw) if isinstance(by_hw, dict) else None
            if not isinstance(link, str):
                continue
            render = _render(api.get(link, missing_ok=True))
            if render is not None:
                renders[hw] = render
        return parsed, renders

    result = ApiResult(ParseResult())
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        outcomes = list(pool.map(one, entries))
    for item, renders in outcomes:
        result.parsed.add(item)
        if isinstance(item, ParsedRecipe) and renders and item.model_id in result.parsed.recipes:
            result.rendered[item.model_id] = renders
    result.requests = api.requests
    return result
