"""Two "nodes" for multi-node tests: two ssh aliases (``node-a``, ``node-b``) of the
loopback sshd, so every docker call crosses a real ssh boundary per node, reaching the one
test daemon (as a user's two aliases of one machine would); their GPUs come from a fake
``amd-smi`` (a captured 8x MI300X output) in a check root's ``opt/rocm/bin`` (``--root``),
where detection looks after PATH; and a docker network of their own for the group.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from instinct_serve.gather.detect import AMD_SMI_STATIC
from tests.infra.fakebin import load_fixture, write_fake
from tests.infra.fakeroot import build_gpu_root
from tests.infra.paths import SMI
from tests.infra.ssh import SshServer
from tests.serve.conftest import docker

NODES = ("node-a", "node-b")
MI300X_X8 = "amd-smi_default_view_8xMI300X_rocm7.0.0_changelog.txt"


@dataclass
class Cluster:
    """Two ssh aliases of the loopback sshd, and a docker network for the group."""

    env: dict[str, str]
    network: str
    root: Path

    @property
    def hosts(self) -> str:
        return ",".join(NODES)


@contextlib.contextmanager
def make_cluster(sshd: SshServer, tmp_path: Path) -> Iterator[Cluster]:
    """The two aliases' ssh config, the GPU root and the group's network (removed after)."""
    root = tmp_path / "gpu-root"
    build_gpu_root(root)
    static = {" ".join(AMD_SMI_STATIC): load_fixture(SMI / MI300X_X8)}
    write_fake(root / "opt" / "rocm" / "bin", "amd-smi", static)
    base = sshd.ssh_config.read_text().split("Host 127.0.0.1")[0]
    body = base.split("\n", 1)[1]  # the options under the fixture's alias
    body = body.replace("  HostName 127.0.0.1\n", "")
    config = tmp_path / "ssh_config.nodes"
    blocks = [f"Host {alias}\n  HostName 127.0.0.1\n{body}" for alias in NODES]
    config.write_text("".join(blocks))
    network = f"instinct-mn-{uuid.uuid4().hex[:8]}"
    made = docker("network", "create", "--label", "instinct-serve.test=1", network)
    assert made.returncode == 0, made.stderr
    env = sshd.env()
    env["INSTINCT_SSH_CONFIG"] = str(config)
    try:
        yield Cluster(env, network, root)
    finally:
        docker("network", "rm", network)
