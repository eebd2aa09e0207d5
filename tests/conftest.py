"""Shared fixtures. Real daemons (sshd, dockerd) are started by the plugins in tests/infra.

Set INSTINCT_TEST_REQUIRE=docker,ssh (CI does) to turn a skip for a missing daemon into a
failure, so nothing passes silently where the real boundary could have been exercised.
"""

from __future__ import annotations

import signal

import pytest

pytest_plugins = [
    "tests.infra.shared",
    "tests.infra.ssh",
    "tests.infra.docker",
    "tests.infra.fakebin",
]

# A suite started in the background by a non-interactive shell (`pytest &`, `nohup ... &`)
# inherits SIGINT ignored, and so would every CLI it spawns: a Ctrl-C test would then test
# nothing. Python's own handler here means SIGINT's default disposition in the children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
