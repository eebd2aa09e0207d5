"""``watch``'s canary: the fingerprint (``observe.fingerprint``) of a serving endpoint,
taken at an interval within a token and time budget, off the request path (three requests
one after the other, each one slot of the server's batch), and judged against what the
endpoint computed when it was proven (its record, ``runtime.fingerprints``), else its
checkpoint's reference. Each check is kept on the record (when it last passed), which
``ps``, ``top`` and the MCP status show.

The long probe is taken at the recorded length (the same tokens: comparable) when that
fits the token budget, else it is left out (the short probe and the greedy run are still
compared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from instinct_serve import servers
from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.observe import fingerprint as fp
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import fingerprints, keys
from instinct_serve.runtime.fingerprint import Budget, take
from instinct_serve.runtime.tunnel import LazyTunnel

SHORT_COST = 80  # tokens of the short probe (its text and one generated token), about
WORDS_COST = 1.5  # tokens a word of the long probe, at most


@dataclass(frozen=True)
class CanaryResult:
    """One check: its verdict, or the error that kept it from being taken."""

    verdict: fp.Check | None
    cost_tokens: int = 0
    cost_s: float = 0.0
    error: InstinctError | None = None
    at: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict is not None and not self.verdict.ok

    def fields(self) -> dict[str, Any]:
        """What the journal and the watch's events say of it."""
        if self.verdict is None:
            return {"error": self.error.message if self.error else None}
        return {
            "failure": self.verdict.failure,
            "reasons": list(self.verdict.reasons),
            "cost_tokens": self.cost_tokens,
            "cost_s": round(self.cost_s, 3),
        }


def budget_for(reference: fp.Fingerprint | None, max_tokens: int, seconds: float) -> Budget:
    """The recorded long length when it fits ``max_tokens``, else no long probe."""
    long = reference.probe("long") if reference is not None else None
    words = long.words if long is not None else 0
    spend = SHORT_COST + fp.GREEDY_TOKENS + int(2 * words * WORDS_COST)
    if words and spend <= max_tokens:
        return Budget(long_tokens=0, seconds=seconds, long_words=words)
    return Budget(long_tokens=0, seconds=seconds)


def reference_of(host: Host, name: str, plan: LaunchPlan) -> fp.Fingerprint | None:
    """What the endpoint computed when proven, else its checkpoint's reference."""
    own = fingerprints.fingerprint_of(fingerprints.load_endpoint(host, name))
    return own or fingerprints.fingerprint_of(fingerprints.load_reference(host, plan))


def check(
    host: Host,
    name: str,
    plan: LaunchPlan,
    *,
    max_tokens: int,
    seconds: float,
    api_key: str | None = None,
) -> CanaryResult:
    """Fingerprint the endpoint ``name`` (serving ``plan``) now and judge it; the result is
    kept on its record. ``api_key``: the key the caller gave it (else its generated one)."""
    reference = reference_of(host, name, plan)
    budget = budget_for(reference, max_tokens, seconds)
    tunnel = LazyTunnel(host)
    try:
        found = keys.endpoint_key(host, plan, create=False)
        key = found[1] if found else api_key
        url, routes = tunnel.url(plan.port), servers.of(plan).routes
        taken = take(url, plan.served_model_name, budget, api_key=key, routes=routes)
    except InstinctError as exc:
        return CanaryResult(None, error=exc)
    finally:
        tunnel.close()
    verdict = fp.check(
        taken, reference, platform=fingerprints.platform_of(plan), need_long=bool(budget.long_words)
    )
    cost = {"cost_tokens": taken.cost_tokens, "cost_s": round(taken.cost_s, 3)}
    at = fingerprints.note_check(host, name, verdict, cost)
    return CanaryResult(verdict, taken.cost_tokens, taken.cost_s, at=at)
