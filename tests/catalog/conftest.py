"""Real boundaries for the catalog: a git repository built from the corpus, and HTTP servers
shaped like Docker Hub's tags API and the recipes JSON API (pytest-httpserver on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from tests.infra.paths import RECIPES_CORPUS

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent-home-for-git",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    out = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@dataclass
class CorpusRepo:
    path: Path
    url: str

    def head(self) -> str:
        return git(self.path, "rev-parse", "HEAD")

    def commit_file(self, rel: str, text: str, message: str = "change") -> str:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "-m", message)
        return self.head()


def commit_tree(dest: Path, message: str = "x") -> str:
    """Make the files at ``dest`` a git repository of one commit: its hash."""
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", message)
    return git(dest, "rev-parse", "HEAD")


def make_corpus_repo(dest: Path) -> CorpusRepo:
    """A git repository holding the upstream corpus (models/, taxonomy, ...), one commit."""
    shutil.copytree(RECIPES_CORPUS, dest)
    commit_tree(dest, "corpus")
    return CorpusRepo(dest, dest.resolve().as_uri())


@pytest.fixture
def corpus_repo(tmp_path: Path) -> CorpusRepo:
    return make_corpus_repo(tmp_path / "recipes")


# ------------------------------------------------------------------------ Docker Hub


TAGS_PATH = "/v2/namespaces/vllm/repositories/vllm-openai-rocm/tags"


def serve_tag_pages(server: HTTPServer, pages: list[list[str]]) -> None:
    """Docker Hub-shaped pages: page 1 at the documented URL, ``next`` links after it."""

    def handler(request: Request) -> Response:
        page = int(request.args.get("page", "1"))
        if page < 1 or page > len(pages):
            return Response(json.dumps({"message": "not found"}), status=404)
        nxt = (
            server.url_for(f"{TAGS_PATH}?page_size=100&page={page + 1}")
            if page < len(pages)
            else None
        )
        body = {
            "count": sum(len(p) for p in pages),
            "next": nxt,
            "previous": None,
            "results": [
                {"name": name, "last_updated": "2026-08-01T00:00:00Z", "tag_status": "active"}
                for name in pages[page - 1]
            ],
        }
        return Response(json.dumps(body), content_type="application/json")

    server.expect_request(TAGS_PATH).respond_with_handler(handler)


HUB_PAGES = [
    ["nightly", "latest", "nightly-4c626633159887b0f2c962058c17c78f1434556d", "qwen38", "kimi-k3"],
    ["v0.27.1", "v0.26.0", "v0.23.0-patched-v2", "v0.28.0rc1", "minimax-m3"],
    ["v0.9.2", "v0.10.1.1", "v0.27.0", "nightly-cbe9c40f998f13975b967773ac7e7920e115387f"],
]


@pytest.fixture
def hub(httpserver: HTTPServer) -> HTTPServer:
    serve_tag_pages(httpserver, HUB_PAGES)
    return httpserver


@pytest.fixture
def dead_url() -> str:
    """An address where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ---------------------------------------------------------------------- recipes API


def upstream_pages() -> dict[str, dict[str, dict[str, Any]]]:
    """Upstream's AMD renderings of the corpus (``tests/plan/upstream_render.py``, vendored
    in ``tests/data/upstream_rendered_amd.json``), keyed by model id then GPU."""
    from tests.plan.upstream_render import amd_rendered, load_document

    renderings, _missing = load_document(
        Path(__file__).resolve().parents[1] / "data" / "upstream_rendered_amd.json"
    )
    return amd_rendered(renderings)


def api_documents(limit: int | None = None) -> dict[str, Any]:
    """Path → JSON of a recipes-API-shaped site built from the corpus, with upstream's own
    AMD renderings of it."""
    from instinct_serve.catalog.parse import load_yaml, normalize

    docs: dict[str, Any] = {}
    index: list[dict[str, Any]] = []
    files = sorted((RECIPES_CORPUS / "models").rglob("*.yaml"))[:limit]
    for path in files:
        rel = path.relative_to(RECIPES_CORPUS / "models").as_posix()
        hf_id = rel[: -len(".yaml")]
        recipe = normalize(load_yaml(path.read_text(encoding="utf-8")))
        recipe.pop("guide", None)
        by_hw: dict[str, str] = {}
        model_id = recipe["model"]["model_id"]
        for hw, page in upstream_pages().get(model_id, {}).items():
            if hw not in ("mi300x", "mi355x"):
                continue
            link = f"/{hf_id}/hw/{hw}.json"
            by_hw[hw] = link
            docs[link] = page
        recipe = {
            "hf_id": hf_id,
            "meta": recipe["meta"],
            "recommended_command": {"hardware": "h200", "by_hardware": by_hw},
            **{k: v for k, v in recipe.items() if k != "meta"},
        }
        docs[f"/{hf_id}.json"] = recipe
        index.append(
            {"hf_id": hf_id, "title": recipe["meta"].get("title"), "json": f"/{hf_id}.json"}
        )
        for key, variant in (recipe.get("variants") or {}).items():
            if isinstance(variant, dict) and variant.get("model_id"):
                index.append(
                    {
                        "hf_id": variant["model_id"],
                        "json": f"/{variant['model_id']}.json",
                        "derived_from": hf_id,
                        "variant": key,
                    }
                )
    docs["/models.json"] = index
    return docs


def serve_api(server: HTTPServer, docs: dict[str, Any]) -> None:
    def handler(request: Request) -> Response:
        doc = docs.get(request.path)
        if doc is None:
            return Response("not found", status=404)
        if isinstance(doc, bytes):
            return Response(doc, content_type="application/json")
        return Response(json.dumps(doc), content_type="application/json")

    server.expect_request(re.compile(r"^/.*$")).respond_with_handler(handler)


@pytest.fixture
def api_docs() -> dict[str, Any]:
    return api_documents()


@pytest.fixture
def second_server() -> Iterator[HTTPServer]:
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    try:
        yield server
    finally:
        server.clear()
        if server.is_running():
            server.stop()


def write_yaml(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


CacheBytes = Callable[[], bytes]
