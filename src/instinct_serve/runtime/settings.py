"""How patient and how forceful one ``serve`` is: the CLI's flags and the timeouts that
scale with the plan (download and load time grow with the weights)."""

from __future__ import annotations

from dataclasses import dataclass

from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import health

LARGE_MODEL_GB = 100.0  # from here on, serve returns once loading is confirmed
DEFAULT_STALL_S = 300.0  # silence while capturing graphs that counts as a hang
MAX_RELAUNCHES = 2


@dataclass(frozen=True)
class ServeSettings:
    """How patient and how forceful one ``serve`` is (the CLI's flags)."""

    replace: bool = False
    detach: bool | None = None  # None: detach for models of LARGE_MODEL_GB or more
    timeout_s: float | None = None  # None: scaled to the weight size
    stall_timeout_s: float = DEFAULT_STALL_S
    warmup_timeout_s: float = health.DEFAULT_WARMUP_TIMEOUT_S
    probe_timeout_s: float = health.DEFAULT_PROBE_TIMEOUT_S
    poll_s: float = health.DEFAULT_POLL_S
    coherence: bool = True
    fingerprint: bool = True  # checked after the coherence probe (vLLM only)
    fingerprint_s: float = 120.0  # the fingerprint's time bound
    # a proven fingerprint may become its checkpoint's reference (not an upgrade's
    # candidate: it is compared with the running endpoint first)
    fingerprint_reference: bool = True
    max_relaunches: int = MAX_RELAUNCHES
    prefetch: bool = False  # image and weights fetched in parallel before the launch


def startup_timeout_s(plan: LaunchPlan) -> float:
    """Seconds a fresh start may take: download and load scale with the weights."""
    from instinct_serve.plan.model import startup_budget_s

    return float(startup_budget_s(plan))


def detaches(plan: LaunchPlan, settings: ServeSettings) -> bool:
    if settings.detach is not None:
        return settings.detach
    return (plan.weight_memory_gb or 0.0) >= LARGE_MODEL_GB
