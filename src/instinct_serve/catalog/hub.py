"""The newest release of ``vllm/vllm-openai-rocm`` from the Docker Hub tags API.

``GET {hub}/v2/namespaces/vllm/repositories/vllm-openai-rocm/tags?page_size=100`` returns
``{"count", "next", "previous", "results": [{"name", "last_updated", ...}]}``; ``next`` is
followed (same origin only, a bounded number of pages). Choosing is pure (``pick_tag``):
the highest ``vX.Y.Z`` by version order (``v0.10.1`` > ``v0.9.2``), never ``latest``,
``nightly*`` or a named build (``qwen38``); a pre-release (``rc``) or ``latest`` only when
no release exists at all, and then with a note saying so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from instinct_serve.errors import InstinctError

if TYPE_CHECKING:
    import httpx

DEFAULT_HUB_URL = "https://hub.docker.com"
ROCM_REPOSITORY = "vllm/vllm-openai-rocm"
MAX_PAGES = 20
PAGE_SIZE = 100


class HubError(InstinctError):
    """Docker Hub could not tell us the newest image."""

    default_id = "hub_failed"


@dataclass(frozen=True)
class TagChoice:
    tag: str
    kind: str  # release | prerelease | latest
    note: str | None = None


def _version(tag: str) -> Any:
    """A packaging Version for ``vX.Y.Z[.W]``-like tags with 3+ numbers, else None."""
    from packaging.version import InvalidVersion, Version

    text = tag[1:] if tag[:1] in ("v", "V") else tag
    if not text[:1].isdigit():
        return None
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    if len(version.release) < 3 or version.local is not None:
        return None
    return version


def pick_tag(names: Iterable[str]) -> TagChoice | None:
    """The tag to run: highest release, else highest pre-release, else ``latest``."""
    releases: list[tuple[Any, str]] = []
    pre: list[tuple[Any, str]] = []
    has_latest = False
    for name in names:
        if name == "latest":
            has_latest = True
            continue
        version = _version(name)
        if version is None:
            continue
        (pre if version.is_prerelease or version.is_devrelease else releases).append(
            (version, name)
        )
    if releases:
        return TagChoice(max(releases)[1], "release")
    if pre:
        tag = max(pre)[1]
        return TagChoice(tag, "prerelease", f"no release tag found; using pre-release {tag}")
    if has_latest:
        return TagChoice("latest", "latest", "no version tag found; using the moving tag latest")
    return None


def tags_url(hub_url: str, repository: str = ROCM_REPOSITORY) -> str:
    namespace, _, repo = repository.partition("/")
    base = hub_url.rstrip("/")
    return f"{base}/v2/namespaces/{namespace}/repositories/{repo}/tags?page_size={PAGE_SIZE}"


@dataclass(frozen=True)
class ResolvedImage:
    image: str
    tag: str
    kind: str
    pages: int
    tags_seen: int
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "tag": self.tag,
            "kind": self.kind,
            "pages": self.pages,
            "tags_seen": self.tags_seen,
            "note": self.note,
        }


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
    import httpx

    url: str | None = tags_url(hub_url, repository)
    origin = _origin(url or "")
    names: list[str] = []
    pages = 0
    while url and pages < max_pages:
        try:
            resp = client.get(url)
        except httpx.HTTPError as exc:
            raise HubError(
                f"cannot reach Docker Hub at {hub_url} ({type(exc).__name__}: {exc})",
                fix="check the network (or --hub-url), then retry",
                id="hub_unreachable",
            ) from exc
        pages += 1
        if resp.status_code != 200:
            raise HubError(
                f"Docker Hub answered HTTP {resp.status_code} for {url}",
                fix="retry later; check --hub-url",
                id="hub_bad_response",
            )
        try:
            body = resp.json()
        except ValueError as exc:
            raise HubError(
                f"Docker Hub returned invalid JSON for {url}",
                fix="retry later; check --hub-url",
                id="hub_bad_response",
            ) from exc
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
