"""The detection fixtures (``tools``: every ROCm tool absent, fakes added by the test;
``root``: an empty host root) for planning on detected GPUs."""

from tests.hardware.conftest import root, tools

__all__ = ["root", "tools"]
