"""Shared fixtures. Real daemons (sshd, dockerd) are started by the plugins in tests/infra.

Set INSTINCT_TEST_REQUIRE=docker,ssh (CI does) to turn a skip for a missing daemon into a
failure, so nothing passes silently where the real boundary could have been exercised.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.infra.ssh", "tests.infra.docker", "tests.infra.fakebin"]


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never read or write the developer's real cache or token during tests."""
    monkeypatch.setenv("INSTINCT_CACHE_DIR", str(tmp_path_factory.mktemp("instinct-cache")))
    monkeypatch.setenv("INSTINCT_DATA_DIR", str(tmp_path_factory.mktemp("instinct-data")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("ROCM_SSH_HOST", raising=False)
    monkeypatch.delenv("ROCM_SSH_USER", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
