"""Choosing the vllm/vllm-openai-rocm tag, and reading Docker Hub-shaped pages."""

from __future__ import annotations

import httpx
import pytest
from pytest_httpserver import HTTPServer

from instinct_serve.catalog.hub import pick_tag
from instinct_serve.gather.docker_hub import HubError, list_tags, resolve_rocm_image
from tests.catalog.conftest import HUB_PAGES, TAGS_PATH, serve_tag_pages


@pytest.mark.parametrize(
    ("tags", "tag", "kind"),
    [
        (["latest", "nightly", "v0.9.2", "v0.10.1"], "v0.10.1", "release"),  # not lexical
        (["v0.27.1", "v0.27.10", "v0.27.2"], "v0.27.10", "release"),
        (["v0.10.1", "v0.10.1.1"], "v0.10.1.1", "release"),
        (["v0.28.0rc1", "v0.27.1", "v0.28.0.dev3"], "v0.27.1", "release"),
        (["v0.23.0-patched-v2", "v0.22.0", "qwen38", "nightly-4c62663"], "v0.22.0", "release"),
        (["0.26.0", "v0.25.1"], "0.26.0", "release"),
        (["nightly", "v0.28.0rc1", "v0.28.0rc2", "latest"], "v0.28.0rc2", "prerelease"),
        (["nightly", "latest", "qwen38"], "latest", "latest"),
    ],
)
def test_pick_tag(tags: list[str], tag: str, kind: str) -> None:
    choice = pick_tag(tags)
    assert choice is not None
    assert (choice.tag, choice.kind) == (tag, kind)
    assert (choice.note is None) == (kind == "release")


def test_pick_tag_with_nothing_usable() -> None:
    assert pick_tag(["nightly", "nightly-abc", "kimi-k3", "v1", "v0.2"]) is None
    assert pick_tag([]) is None


def test_resolve_across_pages(hub: HTTPServer) -> None:
    with httpx.Client(timeout=5) as client:
        names, pages = list_tags(client, hub.url_for("/"))
        image = resolve_rocm_image(client, hub.url_for("/"))
    assert pages == 3 and len(names) == sum(len(p) for p in HUB_PAGES)
    assert image.image == "vllm/vllm-openai-rocm:v0.27.1"
    assert (image.tag, image.kind, image.pages) == ("v0.27.1", "release", 3)


def test_page_limit_is_respected(hub: HTTPServer) -> None:
    with httpx.Client(timeout=5) as client:
        names, pages = list_tags(client, hub.url_for("/"), max_pages=1)
    assert pages == 1 and names == HUB_PAGES[0]
    with httpx.Client(timeout=5) as client:
        image = resolve_rocm_image(client, hub.url_for("/"), max_pages=1)
    # page 1 has no version tag at all: only then the moving tag, and said so
    assert (image.tag, image.kind) == ("latest", "latest")
    assert image.note and "latest" in image.note


def test_no_usable_tag(httpserver: HTTPServer) -> None:
    serve_tag_pages(httpserver, [["nightly", "qwen38"]])
    with httpx.Client(timeout=5) as client, pytest.raises(HubError) as info:
        resolve_rocm_image(client, httpserver.url_for("/"))
    assert info.value.id == "hub_no_release"


def test_next_link_to_another_host_is_refused(httpserver: HTTPServer) -> None:
    httpserver.expect_request(TAGS_PATH).respond_with_json(
        {"results": [{"name": "v0.1.0"}], "next": "https://evil.example/v2/x?page=2"}
    )
    with httpx.Client(timeout=5) as client, pytest.raises(HubError, match="another host"):
        list_tags(client, httpserver.url_for("/"))


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        (500, "{}", "HTTP 500"),
        (200, "<html>", "invalid JSON"),
        (200, '{"count": 0}', "no results list"),
    ],
)
def test_bad_answers(httpserver: HTTPServer, status: int, body: str, match: str) -> None:
    httpserver.expect_request(TAGS_PATH).respond_with_data(
        body, status=status, content_type="application/json"
    )
    with httpx.Client(timeout=5) as client, pytest.raises(HubError, match=match):
        resolve_rocm_image(client, httpserver.url_for("/"))


def test_unreachable(dead_url: str) -> None:
    with httpx.Client(timeout=5) as client, pytest.raises(HubError) as info:
        resolve_rocm_image(client, dead_url)
    assert info.value.id == "hub_unreachable" and info.value.fix


def test_relative_next_links_are_followed(httpserver: HTTPServer) -> None:
    httpserver.expect_request(TAGS_PATH, query_string="page_size=100").respond_with_json(
        {"results": [{"name": "nightly"}], "next": f"{TAGS_PATH}?page_size=100&page=2"}
    )
    httpserver.expect_request(TAGS_PATH, query_string="page_size=100&page=2").respond_with_json(
        {"results": [{"name": "v0.3.0"}], "next": None}
    )
    with httpx.Client(timeout=5) as client:
        image = resolve_rocm_image(client, httpserver.url_for("/"))
    assert (image.tag, image.pages) == ("v0.3.0", 2)
