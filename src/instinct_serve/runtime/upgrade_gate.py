"""Before an upgrade switches: does the proven candidate compute what the running endpoint
computes? (``observe.fingerprint``)

The candidate's fingerprint, taken when it was proven beside the old endpoint (its record,
``runtime.fingerprints``), is compared with the running endpoint's, taken now with the same
probes (the long one at the candidate's length), within the platform's tolerance. A
candidate that differs does not get the port, whatever its health says. When the running
endpoint cannot be fingerprinted now (it needs a key this command does not have, it is
busy), its record from when it was proven stands in. A change of checkpoint or of the
weights' precision (dtype, quantization) is not compared: other numbers are expected.

What is compared is what every server computes, the prompt's log-probabilities, each asked
as its server gives them (``servers.Routes.scoring``): an upgrade from one server to the
other (vLLM to SGLang) is compared as any other. So is a change of the KV cache's dtype
(AMD's SGLang configs run an fp8 cache, vLLM's plans the model's dtype): an fp8 cache moves
the scores by a small fraction of the tolerance (several nats a token is a broken kernel,
``data/fingerprint_tolerances.json``), and a broken fp8 cache kernel is what the gate is for.
"""

from __future__ import annotations

from dataclasses import dataclass

from instinct_serve import servers
from instinct_serve.errors import InstinctError
from instinct_serve.hosts import Host
from instinct_serve.observe import fingerprint as fp
from instinct_serve.plan.model import LaunchPlan
from instinct_serve.runtime import fingerprints, keys
from instinct_serve.runtime.fingerprint import Budget, take
from instinct_serve.runtime.tunnel import LazyTunnel


@dataclass(frozen=True)
class Gate:
    """The comparison: ``verdict`` None when nothing was compared (``why`` says why)."""

    verdict: fp.Check | None
    why: str
    live: bool = False  # the running endpoint was fingerprinted now (else its record)

    @property
    def refused(self) -> bool:
        return self.verdict is not None and not self.verdict.ok


def _running(host: Host, old: LaunchPlan, words: int, seconds: float) -> fp.Fingerprint | None:
    """The running endpoint's fingerprint now, with the candidate's long probe length."""
    tunnel = LazyTunnel(host)
    try:
        found = keys.endpoint_key(host, old, create=False)
        key = found[1] if found else None
        budget = Budget(long_tokens=0, seconds=seconds, long_words=words)
        url, routes = tunnel.url(old.port), servers.of(old).routes
        return take(url, old.served_model_name, budget, api_key=key, routes=routes)
    except InstinctError:
        return None
    finally:
        tunnel.close()


def _across(old: LaunchPlan, cand: LaunchPlan) -> str:
    """What the comparison spans besides a new image or flags: another server, another
    KV cache dtype (`` (vLLM → SGLang, KV cache auto → fp8_e4m3)``), or nothing."""
    spans = []
    if servers.of(old).name != servers.of(cand).name:
        spans.append(f"{servers.of(old).title} → {servers.of(cand).title}")
    kv_old, kv_new = fingerprints.kv_cache_of(old), fingerprints.kv_cache_of(cand)
    if kv_old != kv_new:
        spans.append(f"KV cache {kv_old} → {kv_new}")
    return f" ({', '.join(spans)})" if spans else ""


def compare(host: Host, old: LaunchPlan, cand: LaunchPlan, *, seconds: float) -> Gate:
    """The candidate ``cand`` (proven, its fingerprint recorded) against the running ``old``."""
    if old.model != cand.model or fingerprints.weights_of(old) != fingerprints.weights_of(cand):
        return Gate(None, "not compared: the checkpoint or precision changes")
    candidate = fingerprints.fingerprint_of(fingerprints.load_endpoint(host, cand.container_name))
    if candidate is None:
        return Gate(None, "not compared: the candidate has no fingerprint (--no-fingerprint)")
    long = candidate.probe("long")
    running = _running(host, old, long.words if long else 0, seconds)
    live = running is not None
    if running is None:
        running = fingerprints.fingerprint_of(fingerprints.load_endpoint(host, old.container_name))
    if running is None:
        return Gate(None, "not compared: the running endpoint has no fingerprint")
    verdict = fp.check(candidate, running, platform=fingerprints.platform_of(cand), need_long=False)
    if not verdict.compared:
        return Gate(None, "not compared: other probes", live)
    said = "; ".join(verdict.reasons) if verdict.reasons else _within(verdict)
    return Gate(verdict, said + _across(old, cand), live)


def _within(verdict: fp.Check) -> str:
    """``within tolerance: moved at most 0.012 (segment) / 0.008 (tail) nats a token``."""
    moves = [d for d in verdict.distances.values() if d.comparable]
    if not moves:
        return "within tolerance"
    segment, tail = max(d.segment for d in moves), max(d.tail for d in moves)
    moved = f"{segment:.3f} (segment) / {tail:.3f} (tail)"
    return f"within tolerance: moved at most {moved} nats a token"
