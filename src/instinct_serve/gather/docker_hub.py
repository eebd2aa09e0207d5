"""The newest release of ``vllm/vllm-openai-rocm`` from the Docker Hub tags API.

``GET {hub}/v2/namespaces/vllm/repositories/vllm-openai-rocm/tags?page_size=100`` returns
``{"count", "next", "previous", "results": [{"name", "last_updated", ...}]}``; ``next`` is
followed (same origin only, a bounded number of pages). Which tag wins is pure
(``catalog.hub.pick_tag``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from instinct_serve.catalog.hub import ROCM_REPOSITORY, ResolvedImage, pick_tag, tags_url
from instinct_serve.errors import InstinctError
from instinct_serve.gather.http import HttpErrors, get, json_body

if TYPE_CHECKING:
    import httpx

DEFAULT_HUB_URL = "https://hub.docker.com"
MAX_PAGES = 20


class HubError(InstinctError):
    """Docker Hub could not tell us the newest image."""

    default_id = "hub_failed"


def _errors(hub_url: str) -> HttpErrors:
    return HttpErrors(
        unreachable=lambda url, exc: HubError(
            f"cannot reach Docker Hub at {hub_url} ({type(exc).__name__}: {exc})",
            fix="check the network (or --hub-url), then retry",
            id="hub_unreachable",
        ),
        status=lambda url, resp: HubError(
            f"Docker Hub answered HTTP {resp.status_code} for {url}",
            fix="retry later; check --hub-url",
            id="hub_bad_response",
        ),
        bad_json=lambda url: HubError(
            f"Docker Hub returned invalid JSON for {url}",
            fix="retry later; check --hub-url",
            id="hub_bad_response",
        ),
    )


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def list_tags(
    client: httpx.Client,
    hub_url: str,
    *,
    repository: str = ROCM_REPOSITORY,
    max_pages: int = MAX_PAGES,
) -> tuple[list[str], int]:
    """Every tag name over at most ``max_pages`` pages; HubError on any bad answer."""
    url: str | None = tags_url(hub_url, repository)
    origin = _origin(url or "")
    names: list[str] = []
    pages = 0
    errors = _errors(hub_url)
    while url and pages < max_pages:
        body = json_body(get(client, url, errors), url, errors)
        pages += 1
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list):
            raise HubError(
                f"Docker Hub's answer for {url} has no results list",
                fix="retry later; check --hub-url",
                id="hub_bad_response",
            )
        names.extend(
            str(r["name"])
            for r in results
            if isinstance(r, dict) and isinstance(r.get("name"), str)
        )
        nxt = body.get("next")
        if not isinstance(nxt, str) or not nxt:
            break
        nxt = urljoin(url, nxt)
        if _origin(nxt) != origin:
            raise HubError(
                f"Docker Hub's next page points to another host ({nxt})",
                fix="check --hub-url",
                id="hub_bad_response",
            )
        url = nxt
    return names, pages


def resolve_rocm_image(
    client: httpx.Client,
    hub_url: str = DEFAULT_HUB_URL,
    *,
    repository: str = ROCM_REPOSITORY,
    max_pages: int = MAX_PAGES,
) -> ResolvedImage:
    """The image reference to use by default (``vllm/vllm-openai-rocm:vX.Y.Z``)."""
    names, pages = list_tags(client, hub_url, repository=repository, max_pages=max_pages)
    choice = pick_tag(names)
    if choice is None:
        raise HubError(
            f"no usable tag of {repository} among {len(names)} on Docker Hub",
            fix="retry later; pass an image explicitly with --image",
            id="hub_no_release",
        )
    return ResolvedImage(
        f"{repository}:{choice.tag}", choice.tag, choice.kind, pages, len(names), choice.note
    )
