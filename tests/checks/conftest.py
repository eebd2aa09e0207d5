"""Check tests: a temp root for /dev, /proc, /sys, an environment we set, real processes.

``--root`` (``CheckOptions.root``) points the device, proc and sys probes at ``fake_root``;
``target_env`` gives the process (and so LocalHost's commands) a clean environment with a
temp HOME; ``as_nobody`` runs every probe command as the unprivileged ``nobody`` user
through ``setpriv``, so file permissions are enforced for real (root bypasses them).
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from instinct_serve.checks import CHECKS, Check, CheckOptions
from instinct_serve.checks.probe import Probe
from instinct_serve.hosts import DEFAULT_TIMEOUT_S, READ_SCRIPT, Host, LocalHost, Result
from instinct_serve.paths import READ_LIMIT
from tests.infra.fakeroot import FakeRoot, build_gpu_root

CLEARED = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_TOKEN_PATH",
    "XDG_CACHE_HOME",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)


@pytest.fixture
def world_tmp() -> Iterator[Path]:
    """A temp dir every user can traverse (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="instinct-check-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake_root(world_tmp: Path) -> FakeRoot:
    (world_tmp / "root").mkdir()
    (world_tmp / "root").chmod(0o755)
    return build_gpu_root(world_tmp / "root")


@pytest.fixture
def target_env(world_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean target environment: HOME in a temp dir, no HF or *_VISIBLE_DEVICES variables."""
    home = world_tmp / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    return home


@dataclass
class AsUserHost(LocalHost):
    """This machine, with every command run as another user (``setpriv``, no groups)."""

    uid: int = 65534
    gid: int = 65534

    @property
    def name(self) -> str:
        return f"local-as-uid-{self.uid}"

    def run(
        self,
        argv: Sequence[str],
        timeout: float | None = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
    ) -> Result:
        wrapped = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        return super().run([*wrapped, "--", *argv], timeout=timeout, env=env, input=input)

    def read_text(self, path: str, limit: int = READ_LIMIT) -> str | None:
        result = self.run(["sh", "-c", READ_SCRIPT, "sh", path, str(limit)])
        return result.stdout if result.ok else None

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path]).ok

    def which(self, name: str) -> str | None:
        result = self.run(["sh", "-c", 'command -v -- "$1"', "sh", name])
        return result.stdout.strip() or None


@pytest.fixture
def as_nobody() -> AsUserHost:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to run probes as another user")
    nobody = pwd.getpwnam("nobody")
    return AsUserHost(uid=nobody.pw_uid, gid=nobody.pw_gid)


def run_one(check_id: str, host: Host | None = None, **options: object) -> Check:
    """One check, as run_checks runs it, on a fresh Probe."""
    opts = CheckOptions(**options)  # type: ignore[arg-type]
    probe = Probe(host or LocalHost(), opts.root)
    return CHECKS[check_id](probe, opts)
