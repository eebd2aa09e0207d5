"""Python environments in temp dirs that look like a ROCm, CUDA or CPU vLLM install.

Each is a real executable ``bin/python`` (an ``sh`` wrapper around the test interpreter
with ``-S`` and its own ``PYTHONPATH``, so only the packages unpacked here are visible)
with a ``bin/vllm`` console script beside it, and a ``site-packages`` holding the test
wheels unpacked: the probe script runs for real and imports the stand-in torch.
"""

from __future__ import annotations

import stat
import sys
import zipfile
from pathlib import Path

from tests.engine.wheels import Wheel, plain_wheel, torch_wheel, vllm_wheel


def make_env(
    root: Path,
    *,
    torch: str | None = "2.12.0+rocm10.0.0",
    kind: str = "rocm",
    vllm: str | None = "0.27.1.dev5+rocm10.0.0.gf46a9dfe2.d20260826",
    torch_raises: str | None = None,
    header: str | None = None,
    sglang: str | None = None,
) -> Path:
    """Create the env under ``root``; returns its ``bin/python``. ``sglang``: also an
    ``sglang`` distribution of that version (an SGLang install runs it as a module)."""
    bin_dir, site = root / "bin", root / "lib" / "site-packages"
    bin_dir.mkdir(parents=True)
    site.mkdir(parents=True)
    wheels: list[Wheel] = []
    if torch:
        wheel = torch_wheel(torch, kind=kind)
        if torch_raises:
            wheel.files["torch/__init__.py"] = f"raise ImportError({torch_raises!r})\n"
        wheels.append(wheel)
    if vllm:
        wheels.append(vllm_wheel(vllm, []))
    wheels.append(plain_wheel("amd-torch-device-gfx942", torch or "0"))
    if sglang:
        wheels.append(plain_wheel("sglang", sglang))
    for wheel in wheels:
        with zipfile.ZipFile(wheel.build(root / "wheels")) as zf:
            zf.extractall(site)
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    vllm_script = bin_dir / "vllm"
    vllm_script.write_text(
        (header or f"#!{python}\n") + "import sys\nfrom vllm.cli import main\nsys.exit(main())\n"
    )
    vllm_script.chmod(0o755)
    return python
