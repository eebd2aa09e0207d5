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
    from instinct_serve.gather.model_meta import hub_endpoint, hub_offline

    if hub_offline():
        return None
    try:
        from huggingface_hub import HfApi

        # the endpoint read now, not huggingface_hub's copy taken at its import
        info = HfApi(endpoint=hub_endpoint()).model_info(model, timeout=timeout)
    except Exception:  # offline, network, unknown or malformed id: unknown, not fatal
        return None
    gated = getattr(info, "gated", None)
    if gated is None:
        return None
    return bool(gated)
