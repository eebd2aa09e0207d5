"""Shared fixtures. Real daemons (sshd, dockerd) are started by the plugins in tests/infra.

Set INSTINCT_TEST_REQUIRE=docker,ssh (CI does) to turn a skip for a missing daemon into a
failure, so nothing passes silently where the real boundary could have been exercised.
"""

from __future__ import annotations

import os
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


@pytest.hookimpl(trylast=True)  # after `-m` has deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Spread the ``heavy`` tests (10-20 s each) over the xdist workers' shares.

    ``--dist worksteal`` (the README's command) first hands each of the N workers one
    contiguous Nth of the collection; a heavy test is placed near the start of each share, so
    the workers run them side by side from the beginning and none is left to start last.
    Without xdist they simply run first. Selection and assertions are unchanged: only order.
    """
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if not heavy:
        return
    light = [item for item in items if not item.get_closest_marker("heavy")]
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    ordered: list[pytest.Item] = []
    for share in range(workers):
        part = light[len(light) * share // workers : len(light) * (share + 1) // workers]
        lead = 2 if workers > 1 else 0  # inside the share even if its edge moves by one
        ordered += part[:lead] + heavy[share::workers] + part[lead:]
    items[:] = ordered
