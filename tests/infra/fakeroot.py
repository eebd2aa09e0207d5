"""A temp directory standing in for ``/`` (``--root`` of ``check``/``serve``): /dev, /proc,
/sys and /opt/rocm written file by file, so checks read real files without real GPUs."""

from __future__ import annotations

import shutil
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

    def remove(self, rel: str) -> None:
        target = self.path / rel.lstrip("/")
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()

    def __str__(self) -> str:
        return str(self.path)


def build_gpu_root(path: Path) -> FakeRoot:
    """A root where every GPU check passes (device nodes are plain files here)."""
    root = FakeRoot(path)
    root.write("/dev/kfd", mode=0o666)
    root.write("/dev/dri/card0", mode=0o666)
    root.write("/dev/dri/renderD128", mode=0o666)
    root.write("/dev/dri/renderD129", mode=0o666)
    root.write("/sys/module/amdgpu/initstate", "live\n")
    root.write("/sys/module/amdgpu/version", "6.10.5\n")
    root.write("/proc/sys/kernel/numa_balancing", "0\n")
    root.write("/opt/rocm/.info/version", "6.4.0-47\n")
    return root
