"""Where the tool keeps its files on this machine (recipes cache, managed engine, state).

``INSTINCT_CACHE_DIR`` and ``INSTINCT_DATA_DIR`` override the platformdirs defaults, so
tests and shared installations can point them elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "instinct-serve"


def cache_dir() -> Path:
    """Re-creatable data: the synced recipes cache, the recipes git clone."""
    env = os.environ.get("INSTINCT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(APP))


def data_dir() -> Path:
    """Data worth keeping: the managed vLLM environment, native process state."""
    env = os.environ.get("INSTINCT_DATA_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP))


def hf_token_file() -> str:
    """Where ``huggingface-cli login`` keeps the Hub token on this machine (huggingface_hub's
    rule: ``HF_TOKEN_PATH``, else ``$HF_HOME/token``, ``HF_HOME`` defaulting under the XDG
    cache). Read without importing huggingface_hub."""
    explicit = os.environ.get("HF_TOKEN_PATH")
    if explicit:
        return os.path.expanduser(explicit)
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return os.path.join(os.path.expanduser(home), "token")
