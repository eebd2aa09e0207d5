"""Fixtures of the fit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer


@pytest.fixture
def hub(
    httpserver: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HTTPServer]:
    """A Hub on 127.0.0.1: online mode, endpoint and caches pointed at test dirs."""
    monkeypatch.setenv("HF_ENDPOINT", httpserver.url_for("/").rstrip("/"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # huggingface_hub reads HF_HUB_OFFLINE at import; the adapter re-syncs it per call
    httpserver.expect_request("/api/agent-harnesses").respond_with_data("", status=404)
    yield httpserver
    httpserver.clear()
