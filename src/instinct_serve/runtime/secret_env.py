"""The secrets a plan names (``HF_TOKEN``...), read on this machine for the launch.

They reach the server only through the environment of the launching process (``docker run
--env NAME``, over ssh on stdin): never an argument, a plan or a log line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from instinct_serve.paths import hf_token_file, read_regular

TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def local_secrets(names: Sequence[str]) -> dict[str, str]:
    """Values for the plan's secret names: this process's environment, else (for the Hub
    token) the file ``hf auth login`` writes. Never printed, never in an argv."""
    found: dict[str, str] = {}
    for name in names:
        value = os.environ.get(name, "").strip()
        if not value and name in TOKEN_NAMES:
            try:
                value = read_regular(hf_token_file(), 4096).decode("utf-8", "replace").strip()
            except OSError:
                value = ""
        if value and "\n" not in value:
            found[name] = value
    return found
