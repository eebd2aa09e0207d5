"""Cumulative bucket histograms: what two scrapes say about the requests in between.

A Prometheus histogram ``x`` is exposed as ``x_bucket{le="0.1"}`` (cumulative counts per
upper bound, ``+Inf`` last), ``x_sum`` and ``x_count``. ``from_exposition`` adds the label
sets of one histogram together (vLLM has one per engine), ``delta`` subtracts an earlier
scrape (the observations made in between; a counter reset, i.e. a restarted server, keeps
the later scrape whole), and ``quantile`` interpolates linearly inside the bucket where the
rank falls, as PromQL's ``histogram_quantile`` does. Percentiles are therefore estimates,
exact only to the bucket bounds vLLM chose.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from instinct_serve.observe.prom import Exposition, parse_value


@dataclass(frozen=True)
class Histogram:
    """Cumulative counts per upper bound (ascending, ``inf`` last), sum and count."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    @property
    def empty(self) -> bool:
        return self.count <= 0

    @property
    def mean(self) -> float | None:
        return None if self.empty else self.sum / self.count

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0..1) estimated from the buckets; None without observations.

        In the ``+Inf`` bucket the answer is the largest finite bound (a lower bound of the
        truth), as ``histogram_quantile`` does."""
        if self.empty or not self.bounds:
            return None
        total = self.cumulative[-1] if self.cumulative else self.count
        if total <= 0:
            return None
        rank = min(max(q, 0.0), 1.0) * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in zip(self.bounds, self.cumulative, strict=True):
            if cumulative >= rank and cumulative > lower_count:
                if math.isinf(bound):
                    return lower_bound
                fraction = (rank - lower_count) / (cumulative - lower_count)
                return lower_bound + (bound - lower_bound) * fraction
            if not math.isinf(bound):
                lower_bound = bound
            lower_count = cumulative
        return lower_bound

    def minus(self, earlier: Histogram) -> Histogram:
        """The observations made since ``earlier`` (self whole after a counter reset)."""
        if self.bounds != earlier.bounds or self.count < earlier.count:
            return self
        return Histogram(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.sum - earlier.sum,
            self.count - earlier.count,
        )

    def summary(self, scale: float = 1.0) -> dict[str, float | None]:
        """``{"p50", "p90", "p99", "mean", "count"}``, values times ``scale`` (e.g. 1000 for
        milliseconds), rounded for display."""

        def scaled(value: float | None) -> float | None:
            return None if value is None else round(value * scale, 3)

        return {
            "p50": scaled(self.quantile(0.50)),
            "p90": scaled(self.quantile(0.90)),
            "p99": scaled(self.quantile(0.99)),
            "mean": scaled(self.mean),
            "count": self.count,
        }


def from_exposition(
    exp: Exposition, name: str, where: Mapping[str, str] | None = None
) -> Histogram | None:
    """Histogram ``name`` of a scrape, summed over its label sets; None when absent."""
    buckets: dict[float, float] = {}
    for sample in exp.named(f"{name}_bucket"):
        if where and any(sample.labels.get(k) != v for k, v in where.items()):
            continue
        le = parse_value(sample.labels.get("le", ""))
        if le is None or math.isnan(sample.value):
            continue
        buckets[le] = buckets.get(le, 0.0) + sample.value
    count = exp.total(f"{name}_count", where)
    total = exp.total(f"{name}_sum", where)
    if not buckets and count is None:
        return None
    bounds = tuple(sorted(buckets))
    cumulative = tuple(buckets[b] for b in bounds)
    if count is None or math.isnan(count):
        count = cumulative[-1] if cumulative else 0.0
    if total is None or math.isnan(total):
        total = 0.0
    return Histogram(bounds, cumulative, total, count)
