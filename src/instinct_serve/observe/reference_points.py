"""A bench run next to AMD's published throughput for the same model, GPU, ISL/OSL and
concurrency (``data/reference_points.json``, each point with its source).

Pure: ``points_from_doc`` reads the data document, ``against`` places each measured step
next to the point that matches it, or says there is none. Only like is compared: the same
GPU model and count, sequence lengths and concurrency; the reference's metric (total or
output tokens/s, per GPU or for the setup) is computed from the measurement the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from instinct_serve.observe.bench import BenchRun, Point

METRICS = {
    "total_tok_s": "total tok/s",
    "tok_s_per_gpu": "tok/s per GPU (total)",
    "output_tok_s": "output tok/s",
}


@dataclass(frozen=True)
class ReferencePoint:
    model: str
    gpu: str
    gpus: int
    isl: int
    osl: int
    concurrency: int
    metric: str
    value: float
    source: str
    tp: int | None = None
    server: str = "vllm"
    itl_ms: float | None = None
    ttft_ms: float | None = None

    @property
    def interactivity(self) -> float | None:
        """Tokens per second per user (1000 / ITL)."""
        return 1000.0 / self.itl_ms if self.itl_ms else None


def points_from_doc(doc: Any) -> list[ReferencePoint]:
    if not isinstance(doc, dict) or doc.get("schema") != 1:
        raise ValueError("not a reference points document (schema 1)")
    return [ReferencePoint(**p) for p in doc.get("points") or []]


def measured(point: Point, metric: str, gpus: int) -> float | None:
    """The measurement in the reference's metric."""
    if metric == "output_tok_s":
        return point.output_throughput
    total = point.total_token_throughput
    if total is None:
        return None
    return total / gpus if metric == "tok_s_per_gpu" else total


def interactivity(point: Point) -> float | None:
    """Measured tokens per second per user: 1000 / the median time per output token."""
    for name in ("tpot", "itl"):
        p50 = point.latency_ms.get(name, {}).get("p50")
        if p50:
            return 1000.0 / p50
    return None


def match(
    points: list[ReferencePoint],
    model: str,
    gpu: str | None,
    gpus: int | None,
    isl: int,
    osl: int,
    concurrency: int,
) -> ReferencePoint | None:
    want = model.lower()
    for ref in points:
        if (ref.model.lower(), ref.gpu, ref.gpus, ref.isl, ref.osl, ref.concurrency) == (
            want,
            gpu,
            gpus,
            isl,
            osl,
            concurrency,
        ):
            return ref
    return None


def _pct(a: float | None, b: float | None) -> float | None:
    return round(100.0 * (a - b) / b, 1) if a is not None and b else None


def against(
    run: BenchRun, gpu: str | None, gpus: int | None, points: list[ReferencePoint]
) -> list[dict[str, Any]]:
    """One row per measured step: the reference point and the measurement in its metric,
    or ``reference: None`` ("no reference")."""
    rows = []
    s = run.settings
    for p in run.points:
        ref = match(points, run.model or "", gpu, gpus, s.input_len, s.output_len, p.concurrency)
        row: dict[str, Any] = {"concurrency": p.concurrency, "reference": None}
        if ref is not None:
            value = measured(p, ref.metric, gpus or 1)
            mine = interactivity(p)
            row |= {
                "reference": {
                    "metric": ref.metric,
                    "unit": METRICS[ref.metric],
                    "value": ref.value,
                    "interactivity_tok_s_user": ref.interactivity,
                    "source": ref.source,
                },
                "measured": value,
                "delta_pct": _pct(value, ref.value),
                "measured_interactivity_tok_s_user": round(mine, 1) if mine else None,
            }
        rows.append(row)
    return rows


def describe(row: dict[str, Any]) -> str:
    """One line per step, for the human view."""
    ref = row["reference"]
    if ref is None:
        return f"concurrency {row['concurrency']}: no reference"
    value = row["measured"]
    delta = row["delta_pct"]
    line = (
        f"concurrency {row['concurrency']}: measured {value:,.1f} {ref['unit']}"
        if value is not None
        else f"concurrency {row['concurrency']}: measured ? {ref['unit']}"
    )
    line += f" vs AMD {ref['value']:,g}" + (f" ({delta:+.1f}%)" if delta is not None else "")
    mine, theirs = row["measured_interactivity_tok_s_user"], ref["interactivity_tok_s_user"]
    if mine is not None or theirs is not None:
        line += f"; interactivity {mine if mine is not None else '?'} tok/s/user"
        if theirs is not None:
            line += f" vs AMD {theirs:.1f}"
    return line + f" [source: {ref['source']}]"
