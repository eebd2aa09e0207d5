"""SGLang's memory model (``fit/sglang.py``) held to real SGLang start-up logs
(``tests/fixtures/sglang/fit_cases.json``, sized by ``bench/fit_accuracy_sglang.py``)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from instinct_serve.fit.config import ModelConfig
from instinct_serve.fit.kv import describe_layers
from instinct_serve.fit.sglang import (
    CONTEXT_BYTES,
    GIB,
    SglangLaunch,
    capacity_defaults,
    default_fraction,
    estimate_sglang,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sglang"
DOC: dict[str, Any] = json.loads((FIXTURES / "fit_cases.json").read_text())


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fit_accuracy_sglang", REPO / "bench" / "fit_accuracy_sglang.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_accuracy_sglang"] = module
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
RESULT = BENCH.run()
ROWS = {row["id"]: row for row in RESULT["cases"]}


def _excerpt(log: str) -> str:
    """A case's text: one ``## X`` block of startup_excerpts.log, or a whole log file."""
    name, _, block = log.partition("#")
    text = (FIXTURES / name).read_text(encoding="utf-8")
    if not block:
        return text
    parts = re.split(r"^## ([A-Z]) ", text, flags=re.MULTILINE)
    found = dict(zip(parts[1::2], parts[2::2], strict=True))
    return found[block]


@pytest.mark.parametrize("case_id", sorted(ROWS))
def test_each_logged_figure_is_quoted_from_its_log(case_id: str) -> None:
    raw = next(c for c in DOC["cases"] if c["id"] == case_id)
    text = _excerpt(raw["log"])
    assert set(raw["logged_quotes"]) == set(raw["logged"]), "a logged figure has no quote"
    for key, quote in raw["logged_quotes"].items():
        assert quote in text, (key, quote)
    for key, quote in raw.get("default_fraction", {}).get("logged_quotes", {}).items():
        assert quote in text, (key, quote)
    assert raw["source"].startswith("https://") or raw["source"].startswith("tests/")
    assert raw["split"] == "held_out" or raw.get("derives"), "a calibration case derives"


@pytest.mark.parametrize("case_id", sorted(ROWS))
def test_the_logged_figures_are_reproduced(case_id: str) -> None:
    """Within the corpus tolerance on GPUs; the CPU start-up's weights are host memory
    (counted apart, its cell is held)."""
    row, tol = ROWS[case_id], DOC["tolerance_pct"]
    assert row["error_pct"], "no figure compared"
    for metric, err in row["error_pct"].items():
        if row["platform"] == "cpu" and metric == "weights":
            continue
        limit = tol["kv_tokens" if metric.startswith("kv_tokens") else metric]
        assert abs(err) <= limit, (metric, err)


def test_the_calibration_cases_are_met_closely() -> None:
    """The two logs CONTEXT_BYTES comes from: their KV pools within 0.5 %."""
    for row in RESULT["cases"]:
        if row["split"] == "calibration":
            assert abs(row["error_pct"]["kv_tokens"]) <= 0.5, row


def test_the_default_fraction_is_sglang_s_own() -> None:
    """The real 0.5.23 CPU start-up logs the fraction, chunk and decode max_bs SGLang chose
    for a 24,105 MiB host: ``default_fraction`` gives them exactly."""
    checks = RESULT["fraction_checks"]
    assert checks and all(c["model"] == c["logged"] for c in checks)
    assert checks[0]["logged"]["mem_fraction_static"] == 0.716


def test_held_out_splits_by_platform() -> None:
    summary = RESULT["summary"]
    assert summary["held_out cuda"]["kv_tokens"]["n"] == 2
    assert summary["held_out rocm"]["weights"]["n"] == 1
    assert summary["held_out cpu"]["kv_k_gib"]["n"] == 1


def test_the_corpus_readme_marks_every_case_s_split() -> None:
    rows = {}
    for line in (FIXTURES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 2:
            rows[cells[0].strip("`")] = cells[1]
    assert rows == {raw["id"]: raw["split"] for raw in DOC["cases"]}


# -- the model's rules, from the source -------------------------------------------------


def test_capacity_bands_follow_device_memory_and_tp() -> None:
    assert capacity_defaults(15 * 1024, 1, "cuda") == (2048, 8)  # T4
    assert capacity_defaults(24 * 1024, 4, "cuda") == (4096, 160)  # 4090 at TP 4
    assert capacity_defaults(79.19 * 1024, 1, "cuda") == (8192, 256)  # H100
    assert capacity_defaults(191.98 * 1024, 8, "rocm") == (16384, 512)  # MI300X


def test_default_fraction_on_an_mi300x_and_an_h100() -> None:
    """512 + 1.5 x chunk + TP/8 GiB + 2 MiB x max_bs: MI300X TP 8 reserves 27,136 MiB."""
    mi300x = default_fraction(191.98 * 1024, 8, SglangLaunch(), mla=False, platform="rocm")
    assert mi300x[:2] == (0.862, 512 + 16384 * 1.5 + 1024 + 512 * 2)
    # H100 TP 1: 13,440 MiB reserved, over the 10 GiB floor
    assert default_fraction(79.19 * 1024, 1, SglangLaunch(), mla=False, platform="cuda")[:2] == (
        0.834,
        13440.0,
    )
    # an L40S-size card (45 GiB) is under the 60 GiB floor rule: 512 + 6144 + 128 + 64
    l40s = default_fraction(45 * 1024, 1, SglangLaunch(), mla=False, platform="cuda")
    assert l40s[1] == 6848.0
    # DP attention pads decode graphs: 3 (+1.5 over 300) x max_bs x DP MiB more
    dp = default_fraction(
        191.98 * 1024, 8, SglangLaunch(dp_attention_size=8), mla=True, platform="rocm"
    )
    assert dp[1] - mi300x[1] == 512 * 8 * 4.5


def _layers(name: str, **changes: Any) -> Any:
    cfg = json.loads((REPO / "tests" / "fixtures" / "configs" / f"{name}.json").read_text())
    cfg.update(changes)
    return describe_layers(ModelConfig(cfg))


def test_mla_cell_is_the_latent_on_every_rank() -> None:
    """DeepSeek-V3: (512 + 64) x 61 layers x 2 bytes, not divided by TP; fp8 halves it."""
    layers = _layers("deepseek-ai__DeepSeek-V3")
    mem = estimate_sglang(
        vram_bytes=int(191.98 * GIB),
        platform="rocm",
        tp=8,
        weights_bytes=int(80 * GIB),
        layers=layers,
        kv_dtype_bytes=2,
        launch=SglangLaunch(mem_fraction_static=0.8),
    )
    assert mem.cell_bytes == 576 * 61 * 2
    pool = int(191.98 * GIB) - CONTEXT_BYTES["rocm"]
    expected = pool - int(80 * GIB) - int(pool * (1 - 0.8))
    assert mem.kv_pool_bytes == expected
    assert mem.max_total_num_tokens == expected // (576 * 61 * 2)


def test_weights_beyond_the_fraction_leave_no_pool() -> None:
    mem = estimate_sglang(
        vram_bytes=int(79.19 * GIB),
        platform="cuda",
        tp=1,
        weights_bytes=int(75 * GIB),
        layers=_layers("meta-llama__Meta-Llama-3.1-8B"),
        kv_dtype_bytes=2,
    )
    assert mem.mem_fraction_static == 0.834
    assert not mem.fits and mem.max_total_num_tokens == 0
    assert any("no memory for the KV cache" in n for n in mem.notes)
