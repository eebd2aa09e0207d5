"""Every logged startup case of ``tests/fixtures/logs/fit_cases.json``, sized as ``instinct fit``
sizes it (``bench/fit_accuracy.py``), within its tolerance of what vLLM logged."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.diagnose.logs import blocks

REPO = Path(__file__).resolve().parents[2]
CASES_FILE = REPO / "tests" / "fixtures" / "logs" / "fit_cases.json"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fit_accuracy", REPO / "bench" / "fit_accuracy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_accuracy"] = module
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
DOC: dict[str, Any] = json.loads(CASES_FILE.read_text())
CASES = {c.id: c for c in BENCH.load_cases()[0]}


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_the_logged_figures_are_reproduced(case_id: str) -> None:
    case = CASES[case_id]
    raw = next(c for c in DOC["cases"] if c["id"] == case_id)
    tolerance = {**DOC["tolerance_pct"], **raw.get("tolerance_pct", {})}
    measured = BENCH.measure(case, BENCH.run_case(case))
    assert measured, f"{case_id}: no logged figure to compare"
    for metric, m in measured.items():
        assert abs(m["error_pct"]) <= tolerance[metric], (case_id, metric, m)


def test_every_case_names_its_log_and_split() -> None:
    logs = REPO / "tests" / "fixtures" / "logs"
    for raw in DOC["cases"]:
        assert raw["split"] in ("calibration", "held_out")
        assert raw["split"] == "held_out" or raw.get("derives"), raw["id"]
        name = raw["log"].split("#")[0]
        if not name.startswith("notes/"):
            assert (logs / name).is_file(), name


QUOTED = sorted(raw["id"] for raw in DOC["cases"] if raw.get("logged_quotes"))


def _as_written(value: float) -> str:
    """A logged figure as a log or table prints it: token counts with thousands commas."""
    return f"{int(value):,}" if float(value).is_integer() and value >= 1000 else str(value)


@pytest.mark.parametrize("case_id", QUOTED)
def test_each_logged_figure_is_quoted_from_its_log(case_id: str) -> None:
    """Cases added with ``logged_quotes`` (issue 28): every figure they compare is held to
    the text of their excerpt: the quote is in the excerpt and carries the figure."""
    raw = next(c for c in DOC["cases"] if c["id"] == case_id)
    name, _, block = raw["log"].partition("#")
    text = blocks(name)[block]
    quotes = raw["logged_quotes"]
    assert set(quotes) == set(raw["logged"]), "a logged figure has no quote"
    for key, quote in quotes.items():
        assert quote in text, (key, quote)
        assert _as_written(raw["logged"][key]) in quote, (key, raw["logged"][key], quote)
    assert raw["source"].startswith("https://") or "/" in raw["source"]


def test_the_quoted_cases_are_parsed_as_the_bench_sizes_them() -> None:
    """The issue 28 additions: held out, vLLM >= 0.20, GPU, and at least 8 of them with the
    earlier GPU case (the CPU cases are counted apart)."""
    recent = [CASES[i] for i in QUOTED]
    assert recent and all(c.split == "held_out" for c in recent)
    assert all(BENCH.version_band(c.version) == ">=0.20" for c in recent)
    assert all(c.hw.platform in ("cuda", "rocm") for c in recent)
    tp4 = CASES["4xrtxpro6000-qwen3-235b-fp8-tp4-v0.27.1"]
    assert (tp4.hw.gpu_count, tp4.logged["kv_cache_tokens"]) == (4, 621392)
    assert tp4.parts == {"activation_peak_gib": 0.76}
    result = BENCH.evaluate()
    gpu = [r for r in result["cases"] if r["split"] == "held_out" and r["band"] == ">=0.20"]
    assert len([r for r in gpu if r["platform"] != "cpu"]) >= 8


def test_all_cases_meet_the_targets() -> None:
    """Issue 17's targets (the bench's ``TARGETS``) over every case held."""
    summary = BENCH.evaluate()["summary"]
    assert all(summary["all"][metric] for metric in BENCH.TARGETS), "a target metric has no case"
    assert BENCH.missed(summary) == []


def test_the_held_out_split_meets_the_median_target() -> None:
    summary = BENCH.evaluate()["summary"]
    assert summary["held_out"]["kv_tokens"]["median"] <= 3.0


def test_the_corpus_readme_marks_every_case_s_split() -> None:
    """tests/fixtures/logs/README.md lists each case of fit_cases.json with its split."""
    rows = {}
    for line in (REPO / "tests" / "fixtures" / "logs" / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 2:
            rows[cells[0].strip("`")] = cells[1]
    assert rows == {raw["id"]: raw["split"] for raw in DOC["cases"]}
