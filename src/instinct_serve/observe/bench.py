"""``instinct bench``: vLLM's own serving benchmark, one step per concurrency, compared.

Each step is ``vllm bench serve`` (vLLM >= 0.10; ``benchmarks/benchmark_serving.py``
before) with the random dataset, ``--ignore-eos`` (every request generates exactly
``output_len`` tokens), all requests queued at once (``--request-rate inf``) and at most
``concurrency`` in flight (``--max-concurrency``). Its ``--save-result`` JSON is read for
the fields below (the names are stable since vLLM 0.5: ``request_throughput``,
``output_throughput``, ``total_token_throughput``, ``{mean,median,std,pNN}_{ttft,tpot,itl,
e2el}_ms``, ``completed``, ``failed``, ``duration``, ``max_concurrency``).

A run (every step of one invocation) is stored under the endpoint's plan hash, so the
same model under two plans (another image, TP, quantization, flags) compares step by
step: ``compare`` pairs the steps of two runs by concurrency.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from instinct_serve.errors import UsageError

SCHEMA = 1
PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
MAX_CONCURRENCY = 4096
MAX_STEPS = 16
MAX_REQUESTS = 100_000
DEFAULT_CONCURRENCY = (1, 4, 16)
DEFAULT_INPUT_LEN = 512
DEFAULT_OUTPUT_LEN = 128
DEFAULT_STEP_TIMEOUT_S = 600.0

# what ``compare`` and the plot show: (key, label, higher is better)
COMPARED = (
    ("output_throughput", "output tok/s", True),
    ("request_throughput", "req/s", True),
    ("ttft_p50_ms", "TTFT p50 ms", False),
    ("ttft_p99_ms", "TTFT p99 ms", False),
    ("itl_p50_ms", "ITL p50 ms", False),
    ("itl_p99_ms", "ITL p99 ms", False),
)


def parse_concurrency(text: str) -> list[int]:
    """``"1,4,16"`` → ``[1, 4, 16]`` (sorted, unique, each 1..4096, at most 16 steps)."""
    values: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit() or not 0 < int(part) <= MAX_CONCURRENCY:
            raise UsageError(
                f"bad concurrency {part!r}: a comma-separated list of 1..{MAX_CONCURRENCY}",
                fix="e.g. --concurrency 1,4,16",
                id="bad_concurrency",
            )
        values.append(int(part))
    values = sorted(set(values))
    if not values or len(values) > MAX_STEPS:
        raise UsageError(
            f"give 1 to {MAX_STEPS} concurrency levels, not {len(values)}",
            fix="e.g. --concurrency 1,4,16",
            id="bad_concurrency",
        )
    return values


@dataclass(frozen=True)
class Settings:
    """One benchmark invocation's knobs (the same for every step)."""

    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    requests: int | None = None  # per step; None: 4 x concurrency, at least 16
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int = DEFAULT_OUTPUT_LEN
    step_timeout_s: float = DEFAULT_STEP_TIMEOUT_S
    seed: int = 0

    def requests_for(self, concurrency: int) -> int:
        if self.requests is not None:
            return self.requests
        return max(16, 4 * concurrency)

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": list(self.concurrency),
            "requests": self.requests,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "step_timeout_s": self.step_timeout_s,
            "seed": self.seed,
        }


def bench_args(
    *,
    base_url: str,
    model: str,
    served_model_name: str | None,
    tokenizer: str | None,
    concurrency: int,
    settings: Settings,
    result_dir: str,
    result_file: str,
) -> list[str]:
    """What follows the ``vllm`` executable for one step."""
    argv = [
        "bench",
        "serve",
        "--backend",
        "openai",  # /v1/completions, streamed: TTFT and ITL are measured per token
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
    ]
    if served_model_name and served_model_name != model:
        argv += ["--served-model-name", served_model_name]
    if tokenizer:
        argv += ["--tokenizer", tokenizer]
    argv += [
        "--dataset-name",
        "random",
        "--random-input-len",
        str(settings.input_len),
        "--random-output-len",
        str(settings.output_len),
        "--num-prompts",
        str(settings.requests_for(concurrency)),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--percentile-metrics",
        ",".join(LATENCIES),
        "--metric-percentiles",
        ",".join(str(p) for p in PERCENTILES),
        "--seed",
        str(settings.seed),
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        result_dir,
        "--result-filename",
        result_file,
    ]
    return argv


def number(doc: dict[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class Point:
    """One step: the throughput and latency ``vllm bench serve`` measured."""

    concurrency: int
    requests: int | None
    completed: int | None
    failed: int | None
    duration_s: float | None
    request_throughput: float | None
    output_throughput: float | None
    total_token_throughput: float | None
    latency_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def value(self, key: str) -> float | None:
        """A throughput field, or ``ttft_p50_ms``-style latency keys."""
        if key.endswith("_ms") and "_" in key[:-3]:
            metric, stat = key[:-3].split("_", 1)
            return self.latency_ms.get(metric, {}).get(stat)
        found = getattr(self, key, None)
        return float(found) if isinstance(found, int | float) else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "duration_s": self.duration_s,
            "request_throughput": self.request_throughput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "latency_ms": self.latency_ms,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Point:
        latency = doc.get("latency_ms") if isinstance(doc.get("latency_ms"), dict) else {}
        return cls(
            concurrency=int(doc["concurrency"]),
            requests=doc.get("requests"),
            completed=doc.get("completed"),
            failed=doc.get("failed"),
            duration_s=doc.get("duration_s"),
            request_throughput=doc.get("request_throughput"),
            output_throughput=doc.get("output_throughput"),
            total_token_throughput=doc.get("total_token_throughput"),
            latency_ms={str(k): dict(v) for k, v in (latency or {}).items()},
        )


def latencies(doc: dict[str, Any], names: dict[str, str]) -> dict[str, dict[str, float | None]]:
    """Each latency's mean and percentiles (``Point.latency_ms``) from a result's
    ``{mean,median,pNN}_{name}_ms`` fields, ``names`` giving each metric's ``name`` there."""
    latency: dict[str, dict[str, float | None]] = {}
    for metric in LATENCIES:
        name = names[metric]
        stats = {
            "mean": number(doc, f"mean_{name}_ms"),
            "p50": number(doc, f"p50_{name}_ms") or number(doc, f"median_{name}_ms"),
        }
        for p in PERCENTILES[1:]:
            stats[f"p{p}"] = number(doc, f"p{p}_{name}_ms")
        if any(v is not None for v in stats.values()):
            latency[metric] = stats
    return latency


def parse_result(doc: Any, concurrency: int | None = None) -> Point:
    """A step from ``vllm bench serve --save-result`` JSON (``UsageError`` if it is not)."""
    if not isinstance(doc, dict) or "completed" not in doc:
        raise UsageError(
            "not a vllm bench serve result (no 'completed' field)",
            fix="give a file written by `vllm bench serve --save-result`",
            id="bad_bench_result",
        )
    found = doc.get("max_concurrency")
    level = concurrency if concurrency is not None else found
    if not isinstance(level, int):
        level = 0  # a run without --max-concurrency: every request at once
    latency = latencies(doc, {metric: metric for metric in LATENCIES})
    completed = doc.get("completed")
    failed = doc.get("failed")
    requests = doc.get("num_prompts")
    return Point(
        concurrency=level,
        requests=requests if isinstance(requests, int) else None,
        completed=completed if isinstance(completed, int) else None,
        failed=failed if isinstance(failed, int) else None,
        duration_s=number(doc, "duration"),
        request_throughput=number(doc, "request_throughput"),
        output_throughput=number(doc, "output_throughput"),
        total_token_throughput=number(doc, "total_token_throughput"),
        latency_ms=latency,
    )


def parse_vllm_result(text: str, concurrency: int, requests: int) -> Point:
    """One step's ``--save-result`` file, as text (``ValueError`` if it is not JSON)."""
    return parse_result(json.loads(text), concurrency)


@dataclass(frozen=True)
class BenchClient:
    """A serving benchmark client ``bench`` runs one step with, as a ``ServerKind`` names it
    (``bench_client``): ``executable`` then ``argv(...)`` (called as ``bench_args`` is), its
    result written to ``result_dir/c{concurrency}{suffix}``, read back by ``parse`` (the
    file's text, the step's concurrency and the requests it sent; ``ValueError`` or
    ``UsageError`` when it is not a result). ``title`` says which client ran (``BenchRun.client``,
    messages). ``engine``: the managed engine install (``engine.discovery``) provides it, so a
    native endpoint without a recorded command is benched with the engine's executable."""

    title: str
    executable: str
    argv: Callable[..., list[str]]
    suffix: str
    parse: Callable[[str, int, int], Point]
    engine: bool = False

    def result_file(self, concurrency: int) -> str:
        return f"c{concurrency}{self.suffix}"


VLLM_CLIENT = BenchClient(
    "vllm bench serve", "vllm", bench_args, ".json", parse_vllm_result, engine=True
)


@dataclass
class BenchRun:
    """Every step of one ``instinct bench`` invocation against one endpoint."""

    plan_hash: str | None
    endpoint: str | None
    model: str | None
    engine: str | None
    host: str | None
    started_at: str
    settings: Settings
    command: list[str] = field(default_factory=list)  # the benchmark's argv prefix
    client: str | None = None  # which client ran it (``BenchClient.title``)
    points: list[Point] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    image: str | None = None
    path: str | None = None  # where it is stored (set when read back or written)

    @property
    def key(self) -> str:
        return self.plan_hash or "no-plan"

    def point(self, concurrency: int) -> Point | None:
        return next((p for p in self.points if p.concurrency == concurrency), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "plan_hash": self.plan_hash,
            "endpoint": self.endpoint,
            "model": self.model,
            "engine": self.engine,
            "image": self.image,
            "host": self.host,
            "started_at": self.started_at,
            "settings": self.settings.to_dict(),
            "command": list(self.command),
            "client": self.client,
            "points": [p.to_dict() for p in self.points],
            "errors": list(self.errors),
            "path": self.path,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any], path: str | None = None) -> BenchRun:
        if not isinstance(doc, dict) or "points" not in doc:
            raise UsageError(
                "not an instinct bench result",
                fix="give a plan hash, or a file written by `instinct bench`",
                id="bad_bench_result",
            )
        raw = doc.get("settings") if isinstance(doc.get("settings"), dict) else {}
        assert isinstance(raw, dict)
        settings = Settings(
            concurrency=tuple(int(c) for c in raw.get("concurrency") or ()),
            requests=raw.get("requests"),
            input_len=int(raw.get("input_len") or DEFAULT_INPUT_LEN),
            output_len=int(raw.get("output_len") or DEFAULT_OUTPUT_LEN),
            step_timeout_s=float(raw.get("step_timeout_s") or DEFAULT_STEP_TIMEOUT_S),
            seed=int(raw.get("seed") or 0),
        )
        return cls(
            plan_hash=doc.get("plan_hash"),
            endpoint=doc.get("endpoint"),
            model=doc.get("model"),
            engine=doc.get("engine"),
            host=doc.get("host"),
            started_at=str(doc.get("started_at") or ""),
            settings=settings,
            command=[str(a) for a in doc.get("command") or []],
            client=doc.get("client") if isinstance(doc.get("client"), str) else None,
            points=[Point.from_dict(p) for p in doc.get("points") or []],
            errors=list(doc.get("errors") or []),
            image=doc.get("image"),
            path=path,
        )


def from_bench_result(doc: dict[str, Any], path: str | None = None) -> BenchRun:
    """A run of one step from a raw ``vllm bench serve`` result file."""
    point = parse_result(doc)
    return BenchRun(
        plan_hash=None,
        endpoint=None,
        model=doc.get("model_id") if isinstance(doc.get("model_id"), str) else None,
        engine=None,
        host=None,
        started_at=str(doc.get("date") or ""),
        settings=Settings(concurrency=(point.concurrency,), requests=point.requests),
        points=[point],
        path=path,
    )


def step_event(
    step: int, steps: int, level: int, point: Point | None, error: dict[str, Any] | None
) -> dict[str, Any]:
    """One finished step as an event: ``bench --json``'s line and the MCP tool's progress."""
    return {
        "event": "step",
        "step": step,
        "steps": steps,
        "concurrency": level,
        "ok": point is not None,
        "point": point,
        "error": error,
    }


def delta_pct(a: float | None, b: float | None) -> float | None:
    """How much b differs from a, in percent of a."""
    if a is None or b is None or a == 0:
        return None
    return round((b - a) / a * 100.0, 1)


def compare(a: BenchRun, b: BenchRun) -> dict[str, Any]:
    """Both runs step by step (paired by concurrency), with B's change over A in %."""
    levels = sorted({p.concurrency for p in a.points} | {p.concurrency for p in b.points})
    rows = []
    for level in levels:
        pa, pb = a.point(level), b.point(level)
        row: dict[str, Any] = {"concurrency": level}
        for key, _label, _higher in COMPARED:
            va = pa.value(key) if pa else None
            vb = pb.value(key) if pb else None
            row[key] = {"a": va, "b": vb, "delta_pct": delta_pct(va, vb)}
        rows.append(row)
    return {
        "a": _side(a),
        "b": _side(b),
        "steps": rows,
        "compared": [{"key": k, "label": label, "higher_is_better": h} for k, label, h in COMPARED],
    }


def _side(run: BenchRun) -> dict[str, Any]:
    return {
        "plan_hash": run.plan_hash,
        "endpoint": run.endpoint,
        "model": run.model,
        "image": run.image,
        "started_at": run.started_at,
        "settings": run.settings.to_dict(),
        "path": run.path,
    }


BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(value: float | None, maximum: float | None, width: int = 20) -> str:
    """A horizontal bar of ``width`` cells for ``value`` out of ``maximum`` (eighths)."""
    if value is None or maximum is None or maximum <= 0 or value <= 0:
        return ""
    eighths = round(min(value / maximum, 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[part] if part else "")).ljust(width)


def scale_max(values: Sequence[float | None]) -> float | None:
    found = [v for v in values if v is not None and v > 0]
    return max(found) if found else None
