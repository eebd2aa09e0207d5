"""The shapes of the names the tool hands to a shell, docker or vLLM, in one place.

A leaf module (no imports of the package) so that recipe parsing, hosts and options share
one rule without pulling each other in."""

from __future__ import annotations

import re

# Environment variable names: what POSIX shells accept, bounded (names reach a remote
# shell, docker's --env and systemd units).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_ENV_NAME = 128
ENV_NAME_RULE = f"[A-Za-z_][A-Za-z0-9_]*, at most {MAX_ENV_NAME} characters"

# Container names: docker's own rule ([a-zA-Z0-9][a-zA-Z0-9_.-]*), bounded.
CONTAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def is_env_name(name: object) -> bool:
    """Whether ``name`` is an environment variable name the tool will pass on."""
    return isinstance(name, str) and len(name) <= MAX_ENV_NAME and bool(ENV_NAME.fullmatch(name))


# vLLM's platforms as ``fit --platform`` takes them (the rows of ``fit.overhead_table``).
PLATFORMS = ("rocm", "cuda", "cpu")


def normalise_platform(text: str | None) -> str | None:
    """``ROCm``/``CUDA``/``cpu`` as typed: the lower-case spelling, or None if not one."""
    if text is None:
        return None
    low = text.strip().lower()
    return low if low in PLATFORMS else None
