"""The Prometheus text exposition format (0.0.4, and OpenMetrics' text close enough).

    # HELP vllm:num_requests_running Number of requests in model execution batches.
    # TYPE vllm:num_requests_running gauge
    vllm:num_requests_running{engine="0",model_name="m"} 0.0

``parse`` returns every sample (name, labels, value) and the declared families (``TYPE``,
``HELP``). Histograms stay as their ``_bucket``/``_sum``/``_count`` samples; ``family_of``
maps a sample back to its family. Label values are unescaped (``\\\\``, ``\\"``, ``\\n``);
values may be ``NaN``, ``+Inf``, ``-Inf``; a trailing timestamp or OpenMetrics exemplar
(`` # {...} 1.0``) is ignored. A malformed line is skipped and counted, never fatal: a
scrape is read for what it holds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

SUFFIXES = ("_bucket", "_sum", "_count", "_total", "_created", "_gcount", "_gsum")

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True)
class Sample:
    """One line: a sample name, its labels and its value."""

    name: str
    labels: Mapping[str, str]
    value: float

    def label(self, key: str) -> str | None:
        return self.labels.get(key)


@dataclass
class Family:
    """What ``# TYPE`` and ``# HELP`` declared for a metric family."""

    name: str
    type: str = "untyped"
    help: str = ""


@dataclass
class Exposition:
    """A parsed scrape: samples in order, families by name, lines that did not parse."""

    samples: list[Sample] = field(default_factory=list)
    families: dict[str, Family] = field(default_factory=dict)
    skipped: int = 0

    def named(self, name: str) -> list[Sample]:
        """Every sample with exactly this name."""
        return [s for s in self.samples if s.name == name]

    def names(self) -> set[str]:
        return {s.name for s in self.samples}

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.samples)

    def total(self, name: str, where: Mapping[str, str] | None = None) -> float | None:
        """The sum of this sample over every label set (engines, models), or None when the
        scrape has no such sample. ``where`` keeps label sets that match it."""
        found = [s.value for s in self.named(name) if _matches(s, where)]
        if not found:
            return None
        values = [v for v in found if not math.isnan(v)]
        return sum(values) if values else math.nan

    def family_of(self, sample_name: str) -> Family | None:
        """The declared family a sample belongs to (``x_bucket`` → histogram ``x``)."""
        if sample_name in self.families:
            return self.families[sample_name]
        for suffix in SUFFIXES:
            if sample_name.endswith(suffix):
                base = sample_name[: -len(suffix)]
                if base in self.families:
                    return self.families[base]
        return None


def _matches(sample: Sample, where: Mapping[str, str] | None) -> bool:
    return not where or all(sample.labels.get(k) == v for k, v in where.items())


def parse(text: str) -> Exposition:
    """Every sample and family declaration of a Prometheus text exposition."""
    out = Exposition()
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            _comment(out, line)
            continue
        sample = parse_sample(line)
        if sample is None:
            out.skipped += 1
        else:
            out.samples.append(sample)
    return out


def _comment(out: Exposition, line: str) -> None:
    parts = line[1:].strip().split(None, 2)
    if len(parts) < 2 or parts[0] not in ("TYPE", "HELP"):
        return  # a plain comment (or OpenMetrics' "# EOF")
    name = parts[1]
    family = out.families.setdefault(name, Family(name))
    rest = parts[2] if len(parts) > 2 else ""
    if parts[0] == "TYPE":
        family.type = rest.strip().lower() or "untyped"
    else:
        family.help = _unescape(rest)


def parse_sample(line: str) -> Sample | None:
    """``name{labels} value [timestamp]`` (None when the line is not a sample)."""
    match = _NAME.match(line)
    if match is None:
        return None
    name = match.group(0)
    pos = match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        parsed = _labels(line, pos + 1)
        if parsed is None:
            return None
        labels, pos = parsed
    rest = line[pos:].strip()
    if not rest:
        return None
    value = parse_value(rest.split()[0])
    if value is None:
        return None
    return Sample(name, labels, value)


def _labels(line: str, pos: int) -> tuple[dict[str, str], int] | None:
    """Labels from just after ``{`` to just after ``}``."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t,":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        match = _LABEL_NAME.match(line, pos)
        if match is None:
            return None
        key = match.group(0)
        pos = match.end()
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != "=":
            return None
        pos += 1
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos >= n or line[pos] != '"':
            return None
        pos += 1
        chars: list[str] = []
        while pos < n and line[pos] != '"':
            if line[pos] == "\\" and pos + 1 < n:
                chars.append(_ESCAPES.get(line[pos + 1], "\\" + line[pos + 1]))
                pos += 2
            else:
                chars.append(line[pos])
                pos += 1
        if pos >= n:
            return None
        labels[key] = "".join(chars)
        pos += 1


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), text)


def parse_value(text: str) -> float | None:
    """A sample value: a float, ``NaN``, ``+Inf``/``-Inf`` (any case)."""
    low = text.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    try:
        return float(text)
    except ValueError:
        return None
