"""Which ``vllm/vllm-openai-rocm`` tag is the newest release: the pure half of the Docker
Hub lookup (the pages are read by ``gather.docker_hub``).

``pick_tag`` takes the highest ``vX.Y.Z`` by version order (``v0.10.1`` > ``v0.9.2``), never
``latest``, ``nightly*`` or a named build (``qwen38``); a pre-release (``rc``) or
``latest`` only when no release exists at all, and then with a note saying so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ROCM_REPOSITORY = "vllm/vllm-openai-rocm"
PAGE_SIZE = 100


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
