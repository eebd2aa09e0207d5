"""The fake server kind, registered through an entry point in a temp distribution."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra import fake_server
from tests.infra.paths import REPO


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory holding the fake server's distribution, on ``sys.path`` here and on
    ``PYTHONPATH`` for the CLI this test runs (the repository first: ``tests`` imports)."""
    site = fake_server.register(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    path = [str(site), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    yield site
