"""vLLM's ``/metrics``, whatever the version: one snapshot per scrape, rates between two.

vLLM renamed several metrics (deprecated in X.Y, hidden in X.Y+1 unless
``--show-hidden-metrics-for-version``, removed in X.Y+2). ``NAMES`` maps each concept to
every name it had, newest first, with the versions that expose it by default; a snapshot
takes the first name the scrape has and records which (``names``), so a reader can tell
the generation of the server it looked at. Sources: ``vllm/engine/metrics.py`` (V0, e.g.
v0.4-v0.10), ``vllm/v1/metrics/loggers.py`` (V1: v0.9.2 and v0.11.0 carry the deprecation
comments quoted in ``NOTES``), the "Production Metrics" docs (docs.vllm.ai, v0.4-latest)
and the real vLLM 0.32 capture ``tests/fixtures/logs/real-vllm-cpu/metrics.txt``.

Counters are exposed with ``_total`` (prometheus_client adds it); histograms as
``_bucket``/``_sum``/``_count``. Values are summed over label sets (data-parallel engines
``engine="0"``, ``"1"``...). ``kv_cache_usage_perc`` is a 0..1 fraction despite its name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.observe.histogram import Histogram, from_exposition
from instinct_serve.observe.prom import Exposition, parse


@dataclass(frozen=True)
class Name:
    """One name a concept had, and the vLLM versions that expose it by default."""

    name: str
    versions: str


Names = Mapping[str, tuple["Name", ...]]  # a server's table: concept -> names, newest first

# concept -> names, newest first.
NAMES: dict[str, tuple[Name, ...]] = {
    "running": (Name("vllm:num_requests_running", "all (V0 and V1)"),),
    "waiting": (Name("vllm:num_requests_waiting", "all (V0 and V1)"),),
    "swapped": (Name("vllm:num_requests_swapped", "V0 engine only (<= 0.10); none in V1"),),
    "kv_cache_usage": (
        Name("vllm:kv_cache_usage_perc", ">= 0.9.2"),
        Name("vllm:gpu_cache_usage_perc", "<= 0.10 (deprecated 0.9.2, hidden 0.11, gone 0.12)"),
    ),
    "prefix_cache_queries": (
        Name("vllm:prefix_cache_queries_total", ">= 0.9.2 (V1)"),
        Name("vllm:gpu_prefix_cache_queries_total", "V1 0.8-0.10 (deprecated 0.9.2, gone 0.12)"),
    ),
    "prefix_cache_hits": (
        Name("vllm:prefix_cache_hits_total", ">= 0.9.2 (V1)"),
        Name("vllm:gpu_prefix_cache_hits_total", "V1 0.8-0.10 (deprecated 0.9.2, gone 0.12)"),
    ),
    "prefix_cache_hit_rate": (
        Name("vllm:gpu_prefix_cache_hit_rate", "V0 engine 0.5-0.10 (a 0..1 gauge)"),
    ),
    "preemptions": (Name("vllm:num_preemptions_total", "all (V0 and V1)"),),
    "prompt_tokens": (Name("vllm:prompt_tokens_total", "all (V0 and V1)"),),
    "generation_tokens": (Name("vllm:generation_tokens_total", "all (V0 and V1)"),),
    "requests_finished": (Name("vllm:request_success_total", "all (V0 and V1)"),),
    "avg_prompt_throughput": (
        Name("vllm:avg_prompt_throughput_toks_per_s", "V0 <= 0.6 (a gauge, deprecated)"),
    ),
    "avg_generation_throughput": (
        Name("vllm:avg_generation_throughput_toks_per_s", "V0 <= 0.6 (a gauge, deprecated)"),
    ),
    # histograms (the family name; samples are _bucket/_sum/_count)
    "ttft": (Name("vllm:time_to_first_token_seconds", "all (V0 and V1)"),),
    "itl": (
        Name("vllm:inter_token_latency_seconds", ">= 0.10.2"),
        Name(
            "vllm:time_per_output_token_seconds",
            "<= 0.12 (the same inter-token histogram; deprecated 0.11, hidden 0.12, removed 0.13)",
        ),
    ),
    "e2e": (Name("vllm:e2e_request_latency_seconds", "all (V0 and V1)"),),
}

HISTOGRAMS = ("ttft", "itl", "e2e")

NOTES = (
    "v0.11.0 vllm/v1/metrics/loggers.py: '# Deprecated in 0.9.2 - Renamed as "
    "vllm:kv_cache_usage_perc' (and vllm:prefix_cache_queries/_hits); '# Deprecated in "
    "0.11 - Renamed as vllm:inter_token_latency_seconds'.",
    "vLLM's policy (docs/usage/metrics.md): deprecated in X.Y, hidden in X.Y+1 (re-enabled "
    "with --show-hidden-metrics-for-version=X.Y), removed in X.Y+2.",
)


def _first(
    exp: Exposition, concept: str, histogram: bool = False, names: Names | None = None
) -> str | None:
    for candidate in (NAMES if names is None else names).get(concept, ()):
        probe = f"{candidate.name}_count" if histogram else candidate.name
        if exp.has(probe):
            return candidate.name
    return None


@dataclass
class Snapshot:
    """One scrape of one endpoint, in concepts rather than names."""

    at: float  # seconds (a monotonic clock of the caller)
    gauges: dict[str, float | None]
    counters: dict[str, float | None]
    histograms: dict[str, Histogram | None]
    names: dict[str, str] = field(default_factory=dict)  # concept -> the name found
    vllm_families: int = 0  # families of the server's prefix (``vllm:``, ``sglang:``)
    prefix: str = "vllm:"  # the server's metric prefix

    @property
    def is_vllm(self) -> bool:
        """The scrape has the server's own families (vLLM's, or the plan's server's)."""
        return self.vllm_families > 0


GAUGES = ("running", "waiting", "swapped", "kv_cache_usage", "prefix_cache_hit_rate")
GAUGES_V0 = ("avg_prompt_throughput", "avg_generation_throughput")
COUNTERS = (
    "prefix_cache_queries",
    "prefix_cache_hits",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
)


def snapshot(text: str, at: float, table: Names | None = None) -> Snapshot:
    """A version-agnostic snapshot of one ``/metrics`` text taken at ``at``; ``table``: the
    server's names (``ServerKind.metric_names``; vLLM's ``NAMES`` by default)."""
    table = NAMES if table is None else table
    prefix = next(iter(table.values()))[0].name.split(":", 1)[0] + ":"
    exp = parse(text)
    names: dict[str, str] = {}
    gauges: dict[str, float | None] = {}
    counters: dict[str, float | None] = {}
    histograms: dict[str, Histogram | None] = {}
    for concept in (*GAUGES, *GAUGES_V0):
        name = _first(exp, concept, names=table)
        gauges[concept] = None if name is None else exp.total(name)
        if name:
            names[concept] = name
    for concept in COUNTERS:
        name = _first(exp, concept, names=table)
        counters[concept] = None if name is None else exp.total(name)
        if name:
            names[concept] = name
    for concept in HISTOGRAMS:
        name = _first(exp, concept, histogram=True, names=table)
        histograms[concept] = None if name is None else from_exposition(exp, name)
        if name:
            names[concept] = name
    families = {n for n in exp.families if n.startswith(prefix)}
    families |= {s.name for s in exp.samples if s.name.startswith(prefix)}
    return Snapshot(at, gauges, counters, histograms, names, len(families), prefix)


def _rate(after: float | None, before: float | None, seconds: float) -> float | None:
    if after is None or seconds <= 0:
        return None
    if before is None or after < before:  # first sight, or the server restarted
        return None
    return (after - before) / seconds


def _round(value: float | None, digits: int = 2) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, digits)


@dataclass
class Reading:
    """What ``top`` shows for one endpoint: now, and over the window between two scrapes.

    Without a previous scrape (``window_s`` None) rates are None and the latency
    percentiles cover everything since the server started.
    """

    now: Snapshot
    window_s: float | None
    rates: dict[str, float | None]
    latency: dict[str, Histogram | None]

    def to_dict(self) -> dict[str, Any]:
        g, c = self.now.gauges, self.now.counters
        kv = g.get("kv_cache_usage")
        hit_rate = self.rates.get("prefix_cache_hit_rate")
        gauge = g.get("prefix_cache_hit_rate")  # V0: -1 while prefix caching is off
        if hit_rate is None and gauge is not None and 0.0 <= gauge <= 1.0:
            hit_rate = gauge
        latency: dict[str, Any] = {}
        for concept in HISTOGRAMS:
            hist = self.latency.get(concept)
            latency[f"{concept}_ms"] = None if hist is None else hist.summary(1000.0)
        return {
            "window_s": _round(self.window_s, 3),
            "latency_scope": "window" if self.window_s is not None else "since_start",
            "requests_running": _int(g.get("running")),
            "requests_waiting": _int(g.get("waiting")),
            "requests_swapped": _int(g.get("swapped")),
            "kv_cache_usage_pct": None if kv is None else _round(kv * 100.0, 1),
            "prefix_cache_hit_rate_pct": None if hit_rate is None else _round(hit_rate * 100, 1),
            "preemptions_total": _int(c.get("preemptions")),
            "requests_finished_total": _int(c.get("requests_finished")),
            "prompt_tokens_total": _int(c.get("prompt_tokens")),
            "generation_tokens_total": _int(c.get("generation_tokens")),
            "requests_per_s": _round(self.rates.get("requests_finished")),
            "prompt_tokens_per_s": _round(self.rates.get("prompt_tokens")),
            "generation_tokens_per_s": _round(self.rates.get("generation_tokens")),
            "preemptions_per_s": _round(self.rates.get("preemptions"), 3),
            **latency,
            "metric_names": dict(sorted(self.now.names.items())),
        }


def _int(value: float | None) -> int | None:
    return None if value is None or math.isnan(value) else int(value)


def reading(now: Snapshot, before: Snapshot | None = None) -> Reading:
    """The endpoint now, and what happened since ``before`` (same endpoint, earlier)."""
    latency: dict[str, Histogram | None] = dict(now.histograms)
    rates: dict[str, float | None] = {}
    window = None if before is None else now.at - before.at
    if before is not None and window is not None and window > 0:
        for concept in COUNTERS:
            rates[concept] = _rate(now.counters.get(concept), before.counters.get(concept), window)
        queries = _delta(now, before, "prefix_cache_queries")
        hits = _delta(now, before, "prefix_cache_hits")
        rates["prefix_cache_hit_rate"] = hits / queries if queries and hits is not None else None
        for concept in HISTOGRAMS:
            after, earlier = now.histograms.get(concept), before.histograms.get(concept)
            latency[concept] = (
                after.minus(earlier) if after is not None and earlier is not None else after
            )
    else:
        window = None
        queries = now.counters.get("prefix_cache_queries")
        hits = now.counters.get("prefix_cache_hits")
        rates["prefix_cache_hit_rate"] = hits / queries if queries and hits is not None else None
    if (
        now.gauges.get("avg_generation_throughput") is not None
        and rates.get("generation_tokens") is None
    ):
        rates["generation_tokens"] = now.gauges["avg_generation_throughput"]  # V0 <= 0.6
    if now.gauges.get("avg_prompt_throughput") is not None and rates.get("prompt_tokens") is None:
        rates["prompt_tokens"] = now.gauges["avg_prompt_throughput"]
    return Reading(now, window, rates, latency)


def _delta(now: Snapshot, before: Snapshot, concept: str) -> float | None:
    after, earlier = now.counters.get(concept), before.counters.get(concept)
    if after is None or earlier is None or after < earlier:
        return None
    return after - earlier
