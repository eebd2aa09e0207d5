"""``serve --gpu mi300x`` on a host whose GPU is a consumer Radeon: refused by the
``gpu_supported`` check before anything is launched, unless ``--force``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hardware import sysfs_tree
from tests.infra.fakeroot import build_gpu_root
from tests.serve.conftest import Serve, docker, inspect

pytestmark = pytest.mark.docker


def test_a_named_profile_does_not_launch_on_a_radeon(serve: Serve, tmp_path: Path) -> None:
    root = tmp_path / "radeon-root"
    build_gpu_root(root)
    sysfs_tree.build(root, [sysfs_tree.radeon_7900xt()])
    radeon = Serve(serve.image, root, serve.hf_cache, serve.names)
    name = radeon.name("radeon")
    refused = radeon(name=name)
    assert refused.returncode == 3, refused.explain()
    assert refused.result["error"]["id"] == "not_ready"
    assert "consumer Radeon" in refused.result["error"]["message"]
    assert inspect(name) is None, "nothing is launched"
    forced = radeon("--force", name=name)
    assert forced.returncode == 0, forced.explain()
    assert inspect(name) is not None
    docker("rm", "-f", name)
