"""Is a model gated on the Hugging Face Hub? (decides whether a missing token is an error)."""

from __future__ import annotations

HUB_TIMEOUT_S = 10.0


def model_is_gated(model: str, timeout: float = HUB_TIMEOUT_S) -> bool | None:
    """True/False from the Hub's model info; None when it cannot be told (offline, unknown).

    A local directory is never gated. The Hub client finds a local token by itself; the
    token is never read or passed here.
    """
    import os

    if os.path.isdir(os.path.expanduser(model)):
        return False
    try:
        from huggingface_hub import HfApi

        info = HfApi().model_info(model, timeout=timeout)
    except Exception:  # offline, network, unknown or malformed id: unknown, not fatal
        return None
    gated = getattr(info, "gated", None)
    if gated is None:
        return None
    return bool(gated)
