"""A temp directory standing in for ``/`` (``--root`` of ``check``/``serve``): /dev, /proc,
/sys and /opt/rocm written file by file, so checks read real files without real GPUs."""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass
class FakeRoot:
    """A directory tree standing in for /, built file by file."""

    path: Path

    def write(self, rel: str, text: str = "", mode: int | None = None) -> Path:
        target = self.path / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if mode is not None:
            target.chmod(mode)
        return target

    def device(self, rel: str, mode: int = 0o666) -> Path:
        """A character device (1:3, the null device) as root, else a plain file: docker's
        ``--device ROOT/dev/kfd:/dev/kfd`` needs a real node; the checks need only a path."""
        target = self.path / rel.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.unlink()
        if os.geteuid() == 0:
            os.mknod(target, mode | stat.S_IFCHR, os.makedev(1, 3))
            target.chmod(mode)
            return target
        return self.write(rel, mode=mode)

    def remove(self, rel: str) -> None:
        target = self.path / rel.lstrip("/")
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()

    def __str__(self) -> str:
        return str(self.path)


def build_gpu_root(path: Path) -> FakeRoot:
    """A root where every GPU check passes, with stand-in device nodes that ``serve --root``
    hands to docker (the host's own /dev is never touched)."""
    root = FakeRoot(path)
    root.device("/dev/kfd")
    root.device("/dev/dri/card0")
    root.device("/dev/dri/renderD128")
    root.device("/dev/dri/renderD129")
    root.write("/sys/module/amdgpu/initstate", "live\n")
    root.write("/sys/module/amdgpu/version", "6.10.5\n")
    root.write("/proc/sys/kernel/numa_balancing", "0\n")
    root.write("/opt/rocm/.info/version", "6.4.0-47\n")
    return root
